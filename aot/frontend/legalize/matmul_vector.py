"""MatMul of a vector with a batch of matrices, as a matrix product with a unit axis.

IREE 3.13 fails to legalize ``aten.matmul`` when one operand is 1-D and the other has rank 3 or
more (node tests ``matmul_1d_3d``, ``matmul_4d_1d``); 1-D with 2-D and batched matrices lower.
ONNX (numpy) semantics: a 1-D first operand is a row, ``[K] -> [1, K]``, and the unit axis is
dropped from the result (axis -2); a 1-D second operand is a column, ``[K] -> [K, 1]``, dropped
as axis -1. Unsqueeze, MatMul and Squeeze say exactly that.
"""

from __future__ import annotations

import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement


def _ranks(node: onnx.NodeProto, ctx: Context) -> tuple[int, int] | None:
    a, b = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    return None if a is None or b is None else (len(a), len(b))


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    ranks = _ranks(node, ctx)
    return ctx.opset >= 13 and ranks is not None and min(ranks) == 1 and max(ranks) >= 3


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    ranks = _ranks(node, ctx)
    if ranks is None:
        return None
    e = Emitter(node)
    a, b = node.input[0], node.input[1]
    if ranks[0] == 1:
        product = e.op("MatMul", [e.op("Unsqueeze", [a, e.ints([0])]), b])
        e.op("Squeeze", [product, e.ints([-2])], out=node.output[0])
    else:
        product = e.op("MatMul", [a, e.op("Unsqueeze", [b, e.ints([1])])])
        e.op("Squeeze", [product, e.ints([-1])], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization("MatMul", "IREE 3.13 fails on aten.matmul of a 1-D operand with one of rank >= 3; "
                              "a unit axis makes it a matrix product", _applies, _rewrite),)
