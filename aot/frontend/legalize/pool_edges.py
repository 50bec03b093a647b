"""MaxPool with ``auto_pad`` SAME, and AveragePool's ``ceil_mode`` edge windows, with the padding
written out from the static shapes (``pooling.window``).

What IREE 3.13 does with them:
- MaxPool with ``auto_pad`` SAME_UPPER / SAME_LOWER fails to compile (``failed to legalize
  operation 'arith.truncf'``, node tests ``maxpool_2d_same_lower``, ``maxpool_2d_same_upper``).
  The same MaxPool with the resolved ``pads`` is the same operation (padding reads as -inf) and
  lowers: only the attribute changes.
- AveragePool with ``ceil_mode`` gets the edge windows wrong in two ways: where the standard drops
  a last window that would start in the end padding it keeps it (a compile error, the output
  shape disagrees: ``averagepool_2d_ceil_last_window_starts_on_pad``), and with
  ``count_include_pad=1`` it divides a window reaching past the padding by the whole kernel volume
  instead of the taps inside (a wrong result, max abs diff 0.064:
  ``averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True``). Written out:
  zero blocks concatenated for the padding and the ceil overhang, the input cut to what the windows
  read (``pooling.fitted``), an AveragePool without padding or ceil_mode, and one constant
  factor per output position, volume / taps counted (the input's, and the padding's where
  ``count_include_pad``), where that is not 1. Without ceil_mode, or with count_include_pad=0 and
  no dropped window, IREE is right (the other 17 averagepool node tests pass) and the node is kept.
"""

from __future__ import annotations

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs
from aot.frontend.legalize.pooling import fitted, window


def _max_applies(node: onnx.NodeProto, ctx: Context) -> bool:
    return (len([o for o in node.output if o]) == 1
            and attrs(node).get("auto_pad", b"NOTSET") in (b"SAME_UPPER", b"SAME_LOWER")
            and window(node, ctx) is not None)


def _max_rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    w = window(node, ctx)
    if w is None:
        return None
    a = {k: v for k, v in attrs(node).items() if k != "auto_pad"}
    e = Emitter(node)
    e.op("MaxPool", [node.input[0]], out=node.output[0], **{**a, "pads": [*w.begin, *w.end]})
    return e.replacement()


def _average_applies(node: onnx.NodeProto, ctx: Context) -> bool:
    a, w, dtype = attrs(node), window(node, ctx), ctx.numpy_dtype(node.input[0])
    if w is None or dtype is None or dtype.kind != "f" or not a.get("ceil_mode", 0):
        return False
    return w.ceil_trimmed or (bool(a.get("count_include_pad", 0)) and any(w.extra))


def _average_rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    w, x, dtype = window(node, ctx), ctx.shape(node.input[0]), ctx.numpy_dtype(node.input[0])
    if w is None or x is None or dtype is None:
        return None
    e = Emitter(node)
    padded = fitted(e, node.input[0], x, w, dtype)
    if padded is None:
        return None
    counted = w.taps_inside(x[2:], count_pads=bool(attrs(node).get("count_include_pad", 0)))
    exact = bool(np.all(counted == w.volume))      # every window counts its whole kernel
    mean = e.op("AveragePool", [padded], out=node.output[0] if exact else None, kernel_shape=list(w.kernel),
                strides=list(w.strides), dilations=list(w.dilations))
    if not exact:
        e.op("Mul", [mean, e.const((w.volume / counted).astype(dtype), hint="divisor")], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (
    Legalization("MaxPool", "IREE 3.13 fails on MaxPool auto_pad SAME (arith.truncf); the same MaxPool with "
                 "the pads resolved from the static shapes", _max_applies, _max_rewrite),
    Legalization("AveragePool", "IREE 3.13 gets AveragePool ceil_mode edge windows wrong (a dropped last window "
                 "kept, count_include_pad dividing by the whole kernel); zero-padded input, an AveragePool "
                 "without padding and a constant divisor", _average_applies, _average_rewrite),
)
