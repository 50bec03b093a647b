"""Det of 2x2 and 3x3 matrices by cofactor expansion.

IREE 3.13 computes Det by elimination without row exchanges, so a matrix whose leading entry is 0
comes out NaN (node test ``det_2d``: [[0, 1], [2, 3]] gave NaN where the determinant is -2). For
the small matrices geometry code takes determinants of, the cofactor expansion has no pivots:
``ad - bc`` for 2x2, the rule of Sarrus for 3x3, each a sum of products of Gathered entries over
any batch dimensions. Larger matrices are left to IREE.
"""

from __future__ import annotations

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement

# (sign, ((row, col), ...)) terms of the determinant
_TERMS = {2: ((1, ((0, 0), (1, 1))), (-1, ((0, 1), (1, 0)))),
          3: ((1, ((0, 0), (1, 1), (2, 2))), (1, ((0, 1), (1, 2), (2, 0))), (1, ((0, 2), (1, 0), (2, 1))),
              (-1, ((0, 2), (1, 1), (2, 0))), (-1, ((0, 0), (1, 2), (2, 1))), (-1, ((0, 1), (1, 0), (2, 2))))}


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    shape = ctx.shape(node.input[0])
    return (shape is not None and len(shape) >= 2 and shape[-1] == shape[-2] in _TERMS
            and ctx.numpy_dtype(node.input[0]) is not None)


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    shape = ctx.shape(node.input[0])
    if shape is None or not _applies(node, ctx):
        return None
    n, batch = shape[-1], list(shape[:-2])
    e = Emitter(node)
    flat = e.op("Reshape", [node.input[0], e.ints([*batch, n * n])])
    entry: dict[tuple[int, int], str] = {}
    for r in range(n):
        for c in range(n):
            entry[(r, c)] = e.op("Gather", [flat, e.const(np.array(r * n + c, np.int64))], axis=len(batch))
    total = None
    for sign, cells in _TERMS[n]:
        product = entry[cells[0]]
        for cell in cells[1:]:
            product = e.op("Mul", [product, entry[cell]])
        if total is None:
            total = product if sign > 0 else e.op("Neg", [product])
        else:
            total = e.op("Add" if sign > 0 else "Sub", [total, product])
    assert total is not None
    e.op("Identity", [total], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization("Det", "IREE 3.13 eliminates without row exchanges (NaN for a zero leading entry); "
                              "2x2 and 3x3 by cofactor expansion", _applies, _rewrite),)
