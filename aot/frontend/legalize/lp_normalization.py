"""LpNormalization with a zero norm: 0, not NaN.

IREE 3.13 lowers ``x / norm`` as it is, so a slice whose values are all zero comes out NaN (0/0);
the standard's reference (and onnxruntime) give 0 there (node test ``l2normalization_axis_0``:
NaN where the reference has 0). Rewritten as ``Where(norm == 0, 0, x / norm)`` with the norm a
ReduceL1 or ReduceL2 over the axis, kept for broadcasting: the same quotient everywhere else.
"""

from __future__ import annotations

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    shape = ctx.shape(node.input[0])
    return (shape is not None and ctx.numpy_dtype(node.input[0]) is not None
            and int(attrs(node).get("p", 2)) in (1, 2))


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    shape, dtype = ctx.shape(node.input[0]), ctx.numpy_dtype(node.input[0])
    if shape is None or dtype is None:
        return None
    a = attrs(node)
    axis = int(a.get("axis", -1)) % max(len(shape), 1)
    e = Emitter(node)
    reduce = "ReduceL1" if int(a.get("p", 2)) == 1 else "ReduceL2"
    norm = (e.op(reduce, [node.input[0], e.ints([axis])], keepdims=1) if ctx.opset >= 18   # axes: an input
            else e.op(reduce, [node.input[0]], axes=[axis], keepdims=1))
    zero = e.const(np.zeros((), dtype))
    e.op("Where", [e.op("Equal", [norm, zero]), zero, e.op("Div", [node.input[0], norm])], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization("LpNormalization", "IREE 3.13 divides by a zero norm (NaN where the standard's "
                              "reference gives 0); Where(norm == 0, 0, x / norm)", _applies, _rewrite),)
