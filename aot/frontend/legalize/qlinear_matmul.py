"""QLinearMatMul of rank > 2 as an int32 MatMul and an explicit requantization.

IREE 3.13 computes a batched (3-D) QLinearMatMul wrongly, without an error: max abs diff 27
(int8) and 134 (uint8) in the node tests ``qlinearmatmul_3D_*``; the 2-D ones pass and are left
alone.

The standard (and its reference implementation, where the tests' outputs come from) computes
``C = (a - a_zero_point) @ (b - b_zero_point)`` in int32, exactly, then
``y = saturate(round_half_even(C * (a_scale * b_scale / y_scale)) + y_zero_point)``. Written out
the same way: Casts to int32, Subs, an int32 MatMul (exact), the multiplier in the scales' own
dtype (float16 scales multiply in float16, as the reference does), and the requantization in
float32: Mul, Add the zero point, Round (ties to even), Clip to the output type's range, Cast
through int32 (IREE 3.13 casts float32 to uint8 as if to int8: 168 became 127).
Scales and zero points are runtime values here; per-row / per-column ones broadcast as they do in
the standard when their rank is the operands' ([..., M, 1], [..., 1, N]), or have one element.
The float32 product C * m differs from the reference's float64 one by one float32 rounding, which
only matters where it lands within that rounding of a half (onnxruntime requantizes in float32 too).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement

_INTS: dict[int, type[np.integer]] = {TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8}


def _fits(ctx: Context, value: str, rank: int) -> bool:
    """A scale or zero point that broadcasts against its operand as the standard means it to."""
    shape = ctx.shape(value)
    return shape is not None and (int(np.prod(shape, dtype=np.int64)) == 1 or len(shape) == rank)


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    if len(node.input) != 8 or not all(node.input):
        return False
    a, b, y = ctx.shape(node.input[0]), ctx.shape(node.input[3]), ctx.shape(node.output[0])
    if a is None or b is None or y is None or max(len(a), len(b)) <= 2 or min(len(a), len(b)) < 2:
        return False
    types = [ctx.dtypes.get(node.input[i]) for i in (0, 2, 3, 5, 7)]
    scales = [ctx.dtypes.get(node.input[i]) for i in (1, 4, 6)]
    return (all(t in _INTS for t in types) and scales[0] in (TensorProto.FLOAT, TensorProto.FLOAT16)
            and len(set(scales)) == 1
            and all(_fits(ctx, node.input[i], len(a)) for i in (1, 2))
            and all(_fits(ctx, node.input[i], len(b)) for i in (4, 5))
            and all(_fits(ctx, node.input[i], len(y)) for i in (6, 7)))


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    if not _applies(node, ctx):
        return None
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = node.input
    out_type = ctx.dtypes[y_zero]
    info = np.iinfo(_INTS[out_type])
    e = Emitter(node)

    def centred(q: str, zero: str) -> str:
        return e.op("Sub", [e.op("Cast", [q], to=TensorProto.INT32), e.op("Cast", [zero], to=TensorProto.INT32)])

    product = e.op("MatMul", [centred(a, a_zero), centred(b, b_zero)])          # exact in int32
    multiplier = e.op("Div", [e.op("Mul", [a_scale, b_scale]), y_scale])        # in the scales' dtype
    if ctx.dtypes[a_scale] != TensorProto.FLOAT:
        multiplier = e.op("Cast", [multiplier], to=TensorProto.FLOAT)
    scaled = e.op("Mul", [e.op("Cast", [product], to=TensorProto.FLOAT), multiplier])
    shifted = e.op("Add", [scaled, e.op("Cast", [y_zero], to=TensorProto.FLOAT)])
    clipped = e.op("Clip", [e.op("Round", [shifted]), e.const(np.float32(info.min), hint="qmin"),
                            e.const(np.float32(info.max), hint="qmax")])
    # through int32: IREE 3.13 casts float to uint8 as to int8, saturating 168 to 127
    e.op("Cast", [e.op("Cast", [clipped], to=TensorProto.INT32)], out=node.output[0], to=out_type)
    return e.replacement()


LEGALIZATIONS = (Legalization("QLinearMatMul", "IREE 3.13 computes a QLinearMatMul of rank > 2 wrongly; an int32 "
                              "MatMul and an explicit round-half-even requantization instead", _applies, _rewrite),)
