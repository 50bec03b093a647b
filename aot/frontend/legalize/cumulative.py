"""CumSum and CumProd as a log-depth scan of shifted copies.

IREE 3.13 lowers neither: ``onnx.CumSum`` becomes ``aten.cumsum``, which fails to legalize, and
``onnx.CumProd`` has no pattern at all (all 18 node tests failed to compile). A scan along an
axis of static length n is ceil(log2 n) steps of ``y = y (+|*) shift(y, d)`` for d = 1, 2, 4, ...
(Hillis-Steele), where ``shift`` moves the values d places along the axis and fills with the
operation's identity (0 or 1): a Slice and a Concat with a constant block, which every target
lowers (a Pad with the identity as its value would need no block, but IREE 3.13 fails on a float64
Pad: ``'stream.yield' op used resource not listed in explicit captures``). The blocks hold fewer
elements than the input, summed over all steps. Integer results are
exact; float sums add in a different order than a sequential loop, within float rounding.
``exclusive`` shifts once by 1 first; ``reverse`` shifts the other way.
"""

from __future__ import annotations

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs, operand

_COMBINE = {"CumSum": ("Add", 0), "CumProd": ("Mul", 1)}   # op -> (step op, identity)


def _axis(node: onnx.NodeProto, ctx: Context) -> int | None:
    x, axis = ctx.shape(node.input[0]), ctx.const(operand(node, 1))
    if x is None or axis is None or axis.size != 1 or ctx.numpy_dtype(node.input[0]) is None:
        return None
    a = int(axis.reshape(-1)[0])
    return a + len(x) if -len(x) <= a < 0 else a if 0 <= a < len(x) else None


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    return _axis(node, ctx) is not None


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    axis = _axis(node, ctx)
    shape, dtype = ctx.shape(node.input[0]), ctx.numpy_dtype(node.input[0])
    if axis is None or shape is None or dtype is None:
        return None
    step_op, identity = _COMBINE[node.op_type]
    a = attrs(node)
    reverse, n = bool(a.get("reverse", 0)), shape[axis]
    e = Emitter(node)

    def shift(value: str, d: int) -> str:
        """`value` moved d places along the axis (towards the end, or the start when reversed)."""
        if d >= n:
            return e.const(np.full(shape, identity, dtype), hint="identities")
        keep = (d, n) if reverse else (0, n - d)
        kept = e.op("Slice", [value, e.ints([keep[0]]), e.ints([keep[1]]), e.ints([axis])])
        block = list(shape)
        block[axis] = d
        filler = e.const(np.full(block, identity, dtype), hint="identities")
        return e.op("Concat", [kept, filler] if reverse else [filler, kept], axis=axis)

    y = shift(node.input[0], 1) if a.get("exclusive", 0) else node.input[0]
    d = 1
    while d < n:
        y = e.op(step_op, [y, shift(y, d)])
        d *= 2
    e.op("Identity", [y], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = tuple(
    Legalization(op, f"IREE 3.13 cannot lower onnx.{op} (0 of 9 node tests compiled); a log-depth scan of "
                     "shifted copies instead", _applies, _rewrite)
    for op in _COMBINE)
