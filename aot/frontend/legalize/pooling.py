"""The geometry of a pooling window, resolved from the static shapes, that the pooling
legalizations (``lp_pool.py``, ``pool_edges.py``) share: ``auto_pad`` turned into explicit pads,
``ceil_mode`` into extra end padding, and how many taps of each window fall inside the padded
input (the divisor an average that counts the padding uses).

The rules are the standard's (and the reference implementation's the node tests were made with):
- SAME_UPPER / SAME_LOWER: ``out = ceil(in / stride)``, total padding
  ``(out - 1) * stride + (kernel - 1) * dilation + 1 - in`` (never negative), the odd one at the
  end (UPPER) or the start (LOWER); VALID: no padding.
- explicit pads with ``ceil_mode``: ``out = ceil((in + pads - window) / stride) + 1``, less one
  when that last window would start past the input and its start padding; the windows reaching
  past the end padding read nothing there (an average does not count those taps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, attrs


@dataclass(frozen=True)
class Window:
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]      # the padding the standard defines, auto_pad resolved
    end: tuple[int, ...]
    out: tuple[int, ...]        # output spatial shape
    extra: tuple[int, ...]      # end padding beyond `end` that ceil_mode's last windows reach
    ceil_trimmed: bool          # ceil_mode dropped a last window that would start in the end padding

    @property
    def volume(self) -> int:
        return math.prod(self.kernel)

    def taps_inside(self, spatial: tuple[int, ...]) -> np.ndarray:
        """Per output position, the window's taps inside the input and its (standard) padding."""
        counts = np.ones((), np.int64)
        for n, k, s, d, b, e, o in zip(spatial, self.kernel, self.strides, self.dilations, self.begin,
                                       self.end, self.out):
            taps = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d     # in padded coordinates
            count = np.count_nonzero(taps < b + n + e, axis=1)
            counts = np.multiply.outer(counts, count)
        return counts


def window(node: onnx.NodeProto, ctx: Context) -> Window | None:
    """The node's window over its input's static spatial shape, or None where it is not static."""
    x = ctx.shape(node.input[0])
    a = attrs(node)
    if x is None or len(x) < 3 or "kernel_shape" not in a:
        return None
    spatial, rank = x[2:], len(x) - 2
    kernel = tuple(int(k) for k in a["kernel_shape"])
    strides = tuple(int(s) for s in a.get("strides", [1] * rank))
    dilations = tuple(int(d) for d in a.get("dilations", [1] * rank))
    pads = [int(p) for p in a.get("pads", [0] * 2 * rank)]
    if not len(kernel) == len(strides) == len(dilations) == rank or len(pads) != 2 * rank:
        return None
    auto_pad = a.get("auto_pad", b"NOTSET")
    ceil = bool(a.get("ceil_mode", 0))
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    begin, end, out, extra, trimmed = [], [], [], [], False
    for i, (n, s, span) in enumerate(zip(spatial, strides, spans)):
        if auto_pad in (b"SAME_UPPER", b"SAME_LOWER"):
            o = -(-n // s)
            total = max(0, (o - 1) * s + span - n)
            small, large = total // 2, total - total // 2
            b, e = (small, large) if auto_pad == b"SAME_UPPER" else (large, small)
        elif auto_pad == b"VALID":
            b, e, o = 0, 0, (n - span) // s + 1
        elif auto_pad == b"NOTSET":
            b, e = pads[i], pads[rank + i]
            o = (n + b + e - span) // s + 1
            if ceil:
                o = -(-(n + b + e - span) // s) + 1
                if (o - 1) * s >= n + b:     # that last window would start in the end padding
                    o, trimmed = o - 1, True
        else:
            return None
        if o < 1:
            return None
        begin.append(b)
        end.append(e)
        out.append(o)
        extra.append(max(0, (o - 1) * s + span - (n + b + e)))
    return Window(kernel, strides, dilations, tuple(begin), tuple(end), tuple(out), tuple(extra), trimmed)


def zero_padded(e: Emitter, x: str, shape: tuple[int, ...], begin: tuple[int, ...], end: tuple[int, ...],
                dtype: np.dtype) -> str:
    """``x`` with zero blocks before and after each spatial axis: a Concat per padded axis (IREE 3.13
    fails on a float64 Pad: ``'stream.yield' op used resource not listed in explicit captures``)."""
    current = list(shape)
    for axis, (b, after) in enumerate(zip(begin, end), start=2):
        if not b and not after:
            continue
        parts = []
        for size in (b, after):
            block = list(current)
            block[axis] = size
            parts.append(e.const(np.zeros(block, dtype), hint="zeros") if size else "")
        x = e.op("Concat", [p for p in (parts[0], x, parts[1]) if p], axis=axis)
        current[axis] += b + after
    return x
