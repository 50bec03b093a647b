"""Pad with ``mode="wrap"`` as Concats of the input's own slices.

IREE 3.13's llvm-cpu compile of a wrap Pad does not finish (node test ``wrap_pad``: iree-compile
still running after 10 minutes on a [1,3,4,5] int32 input). Wrapping is the input repeated
around itself: along each padded axis, the last ``before`` elements go in front and the first
``after`` behind, which a Slice per side and a Concat say exactly, for any dtype.
"""

from __future__ import annotations

import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs, operand


def _pads(node: onnx.NodeProto, ctx: Context) -> list[int] | None:
    """The constant pads when every one is within its axis's length (a single wrap), else None."""
    x, pads = ctx.shape(node.input[0]), ctx.const(operand(node, 1))
    if x is None or pads is None or pads.size != 2 * len(x) or operand(node, 3):
        return None
    values = [int(p) for p in pads.reshape(-1)]
    ok = all(0 <= p <= n for p, n in zip(values, list(x) * 2)) and 0 not in x
    return values if ok else None


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    return attrs(node).get("mode", b"constant") == b"wrap" and _pads(node, ctx) is not None


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    x, pads = ctx.shape(node.input[0]), _pads(node, ctx)
    if x is None or pads is None:
        return None
    rank, e = len(x), Emitter(node)
    current = node.input[0]
    for axis in range(rank):
        before, after, n = pads[axis], pads[rank + axis], x[axis]
        if not before and not after:
            continue
        parts = [current]
        if before:
            parts.insert(0, e.op("Slice", [current, e.ints([n - before]), e.ints([n]), e.ints([axis])]))
        if after:
            parts.append(e.op("Slice", [current, e.ints([0]), e.ints([after]), e.ints([axis])]))
        current = e.op("Concat", parts, axis=axis)
    e.op("Identity", [current], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization("Pad", "IREE 3.13's compile of a wrap Pad does not finish; written out as slices of "
                              "the input concatenated around it", _applies, _rewrite),)
