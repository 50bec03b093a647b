"""Legalization (front-end pass, ``passes.Pass`` contract): the ONNX ops, or variants of them,
that IREE 3.13 cannot lower or lowers wrongly, rewritten into standard ops it lowers well.

Function expansion (``frontend/expand.py``) handles the ops the standard defines as functions;
this pass handles the rest, one small module per op family, each registered below by op type and
a condition on the node. It runs after constant folding, so the operands a rewrite needs constant
(a CumSum's axis, a Resize's scales) are initializers by then; a node whose operands are not
constant is left as it is. Every rewrite keeps the node's outputs' names, types and shapes.
"""

from __future__ import annotations

from collections import Counter

import onnx

from aot.frontend.expand import Expanded
from aot.frontend.legalize import (affine_grid, bit_shift, col2im, compress, cumulative, deform_conv, dft, exact_mod,
                                   grid_sample, lp_normalization, lp_pool, matmul_vector, narrow_cast, no_op,
                                   pad_wrap, pool_edges, qlinear_matmul, quantize_float8, resize, rnn_direction,
                                   scatter_minmax, small_det, space_to_depth)
from aot.frontend.legalize.base import Context, Legalization
from aot.frontend.passes import PassResult, rewrite_result

LEGALIZATIONS: tuple[Legalization, ...] = (
    *cumulative.LEGALIZATIONS,
    *matmul_vector.LEGALIZATIONS,
    *no_op.LEGALIZATIONS,
    *bit_shift.LEGALIZATIONS,
    *compress.LEGALIZATIONS,
    *pad_wrap.LEGALIZATIONS,
    *space_to_depth.LEGALIZATIONS,
    *resize.LEGALIZATIONS,
    *grid_sample.LEGALIZATIONS,
    *affine_grid.LEGALIZATIONS,
    *dft.LEGALIZATIONS,
    *lp_pool.LEGALIZATIONS,
    *pool_edges.LEGALIZATIONS,
    *qlinear_matmul.LEGALIZATIONS,
    *col2im.LEGALIZATIONS,
    *deform_conv.LEGALIZATIONS,
    *lp_normalization.LEGALIZATIONS,
    *small_det.LEGALIZATIONS,
    *rnn_direction.LEGALIZATIONS,
    *scatter_minmax.LEGALIZATIONS,
    *narrow_cast.LEGALIZATIONS,
    *quantize_float8.LEGALIZATIONS,
    *exact_mod.LEGALIZATIONS,
)

_BY_OP: dict[str, tuple[Legalization, ...]] = {}
for _entry in LEGALIZATIONS:
    _BY_OP[_entry.op_type] = (*_BY_OP.get(_entry.op_type, ()), _entry)


def legalize(model: onnx.ModelProto) -> tuple[PassResult, tuple[Expanded, ...]]:
    """Pass: every node a registered legalization applies to, rewritten (the first that applies
    wins); also the tally by op and reason, for the build record."""
    ctx = Context.of(model)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    tally: Counter[tuple[str, str]] = Counter()
    for node in model.graph.node:
        replacement, entry = None, None
        if node.domain in ("", "ai.onnx"):
            for entry in _BY_OP.get(node.op_type, ()):
                if entry.applies(node, ctx):
                    replacement = entry.rewrite(node, ctx)
                    break
        if replacement is None or entry is None:
            nodes.append(node)
            continue
        nodes += replacement[0]
        inits += replacement[1]
        tally[(node.op_type, entry.reason)] += 1
    result = rewrite_result(model, nodes, inits, sum(tally.values()))
    return result, tuple(Expanded(op, count, reason) for (op, reason), count in sorted(tally.items()))


def legalized_ops() -> frozenset[str]:
    return frozenset(_BY_OP)
