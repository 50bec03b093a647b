"""Nodes that compute nothing, as the Identity they are.

A Clip with neither bound, and a Reduce* whose ``axes`` are empty with ``noop_with_empty_axes=1``,
return their input unchanged. IREE 3.13's Vulkan runtime crashes (SIGSEGV) on both (node tests
``clip_default_inbounds``, ``clip_default_int8_inbounds``, ``reduce_sum_empty_axes_input_noop``;
llvm-cpu computes them), so they become an Identity, which every target handles, before the
partitioner sees them.
"""

from __future__ import annotations

import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs, operand

_REDUCTIONS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


def _unbounded_clip(node: onnx.NodeProto, ctx: Context) -> bool:
    return ctx.opset >= 11 and not operand(node, 1) and not operand(node, 2)


def _empty_reduction(node: onnx.NodeProto, ctx: Context) -> bool:
    if not attrs(node).get("noop_with_empty_axes", 0):
        return False
    if not operand(node, 1):
        return True
    axes = ctx.const(node.input[1])
    return axes is not None and axes.size == 0


def _identity(node: onnx.NodeProto, ctx: Context) -> Replacement:
    e = Emitter(node)
    e.op("Identity", [node.input[0]], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (
    Legalization("Clip", "IREE 3.13's Vulkan runtime crashes on a Clip with neither bound; it is an Identity",
                 _unbounded_clip, _identity),
    *(Legalization(op, f"IREE 3.13's Vulkan runtime crashes on a {op} over no axes with noop_with_empty_axes=1; "
                       "it is an Identity", _empty_reduction, _identity) for op in _REDUCTIONS),
)
