"""LpPool with dilations or ``auto_pad`` SAME_UPPER / SAME_LOWER, as an average of |x|^p.

IREE 3.13 has no pattern for these two variants (``failed to legalize operation
'torch.operator'``: node tests ``lppool_2d_dilations``, ``lppool_2d_same_lower``,
``lppool_2d_same_upper``); the others (kernel, strides, explicit pads, 1-D to 3-D) lower and pass,
and are left alone.

``LpPool(x) = (sum over the window of |x|^p) ^ (1/p)``, the padding contributing zeros. Written
out: ``|x|^p`` (``x*x`` for p = 2), zero blocks concatenated for the padding (``auto_pad``
resolved from the static shapes, ``pooling.window``) and the input cut to what the windows read
(``pooling.fitted``), an AveragePool without padding (which IREE lowers, dilations included) times
the kernel volume, and the p-th root (Sqrt for p = 2).
With ``ceil_mode``, a last window reaching past the padding is scaled as the standard's reference
does (its average over the taps inside, times the volume): one constant factor per position.
"""

from __future__ import annotations

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs
from aot.frontend.legalize.pooling import fitted, window


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    a = attrs(node)
    failing = (any(int(d) != 1 for d in a.get("dilations", ()))
               or a.get("auto_pad", b"NOTSET") in (b"SAME_UPPER", b"SAME_LOWER"))
    dtype = ctx.numpy_dtype(node.input[0])
    return failing and dtype is not None and dtype.kind == "f" and window(node, ctx) is not None


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    w, x, dtype = window(node, ctx), ctx.shape(node.input[0]), ctx.numpy_dtype(node.input[0])
    if w is None or x is None or dtype is None:
        return None
    p = int(attrs(node).get("p", 2))
    if p < 1:
        return None
    e = Emitter(node)
    v = node.input[0]
    powered = (e.op("Mul", [v, v]) if p == 2 else e.op("Abs", [v]) if p == 1
               else e.op("Pow", [e.op("Abs", [v]), e.const(np.array(p, dtype), hint="p")]))
    padded = fitted(e, powered, x, w, dtype)
    if padded is None:
        return None
    mean = e.op("AveragePool", [padded], kernel_shape=list(w.kernel), strides=list(w.strides),
                dilations=list(w.dilations))
    if any(w.extra):     # the reference's ceil_mode windows: the mean over the taps inside, x volume
        factor = (w.volume * w.volume / w.taps_inside(x[2:])).astype(dtype)
    else:
        factor = np.array(w.volume, dtype)
    total = e.op("Mul", [mean, e.const(factor, hint="volume")])
    if p == 1:
        e.op("Identity", [total], out=node.output[0])
    elif p == 2:
        e.op("Sqrt", [total], out=node.output[0])
    else:
        e.op("Pow", [total, e.const(np.array(1.0 / p, dtype), hint="root")], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization("LpPool", "IREE 3.13 cannot lower LpPool with dilations or auto_pad SAME; an "
                              "AveragePool of |x|^p over zero-padded input instead", _applies, _rewrite),)
