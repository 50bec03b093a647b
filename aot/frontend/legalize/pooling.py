"""The geometry of a pooling window, resolved from the static shapes, that the pooling
legalizations (``lp_pool.py``, ``pool_edges.py``) share: ``auto_pad`` turned into explicit pads,
``ceil_mode`` into extra end padding, and how many taps of each window fall inside the padded
input (the divisor an average that counts the padding uses).

The rules are the standard's (and the reference implementation's the node tests were made with):
- SAME_UPPER / SAME_LOWER: ``out = ceil(in / stride)``, total padding
  ``(out - 1) * stride + kernel - in`` (never negative), the odd one at the end (UPPER) or the
  start (LOWER); VALID: no padding. SAME with dilations is left alone: onnxruntime's output shape
  differs from onnx's shape inference there (7 rows, kernel 3, dilation 2, stride 2: 3 and 4).
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

    def taps_inside(self, spatial: tuple[int, ...], count_pads: bool = True) -> np.ndarray:
        """Per output position, how many of the window's taps fall inside the input and its
        (standard) padding, or inside the input alone (``count_pads=False``)."""
        counts = np.ones((), np.int64)
        for n, k, s, d, b, e, o in zip(spatial, self.kernel, self.strides, self.dilations, self.begin,
                                       self.end, self.out):
            taps = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d     # in padded coordinates
            inside = (taps < b + n + e) if count_pads else (taps >= b) & (taps < b + n)
            counts = np.multiply.outer(counts, np.count_nonzero(inside, axis=1))
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
            if any(d != 1 for d in dilations):     # onnxruntime and onnx's shape inference disagree
                return None
            o = -(-n // s)
            total = max(0, (o - 1) * s + span - n)      # span == kernel: no dilations
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


def fitted(e: Emitter, x: str, shape: tuple[int, ...], w: Window, dtype: np.dtype) -> str | None:
    """``x`` padded with zeros (``w.begin`` before, as much as the last window reads after) and cut
    to exactly what the windows read, so that an AveragePool without padding reads all of it (IREE
    3.13 fails to compile an AveragePool whose last rows go unread, e.g. 4 rows, kernel 3, stride 3:
    ``'linalg.generic' op inferred input/output operand #1 has shape's dimension #0 to be 4, but
    found 3``). Zero blocks are concatenated, not padded: IREE fails on a float64 Pad (``'stream.yield'
    op used resource not listed in explicit captures``). None where the windows skip a whole side."""
    spans = [(k - 1) * d + 1 for k, d in zip(w.kernel, w.dilations)]
    ends = [(o - 1) * s + span - b - n for o, s, span, b, n in zip(w.out, w.strides, spans, w.begin, shape[2:])]
    if any(n + end <= 0 for n, end in zip(shape[2:], ends)):
        return None
    cut = [n + min(0, end) for n, end in zip(shape[2:], ends)]
    if cut != list(shape[2:]):
        axes = list(range(2, len(shape)))
        x = e.op("Slice", [x, e.ints([0] * len(cut)), e.ints(cut), e.ints(axes)])
    current = [*shape[:2], *cut]
    for axis, (b, end) in enumerate(zip(w.begin, ends), start=2):
        parts = []
        for size in (b, max(0, end)):
            block = list(current)
            block[axis] = size
            parts.append(e.const(np.zeros(block, dtype), hint="zeros") if size else "")
        if any(parts):
            x = e.op("Concat", [p for p in (parts[0], x, parts[1]) if p], axis=axis)
            current[axis] += b + max(0, end)
    return x
