"""QuantizeLinear to float8 with the saturation the standard asks for.

A QuantizeLinear whose zero point (or ``output_dtype``) is a float8 type computes
``saturate(x / scale)`` rounded to nearest even (a float8 zero point is 0 by the standard: its
reference implementation never adds it); IREE 3.13 ignores ``saturate`` there, as it does on a
CastLike to float8 (node test ``quantizelinear_e4m3fn``: NaN where the reference saturates to 448).
Written out in float32 (``x / scale``, a per-axis scale broadcast along ``axis``) and converted as
``narrow_cast.to_float8`` converts a Cast: Clip to the type's largest finite value where
``saturate`` is 1, then the rounding IREE gets right. Blocked quantization (``block_size``) is left
as it is.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto as T

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs, operand
from aot.frontend.legalize.narrow_cast import FLOAT8_MAX, to_float8


def _target(node: onnx.NodeProto, ctx: Context) -> int:
    return ctx.dtypes.get(operand(node, 2), 0) or int(attrs(node).get("output_dtype", 0))


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    x, scale = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    return (_target(node, ctx) in FLOAT8_MAX and not int(attrs(node).get("block_size", 0))
            and x is not None and scale is not None and len(scale) <= 1
            and ctx.dtypes.get(node.input[0]) in (T.FLOAT, T.FLOAT16, T.BFLOAT16))


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    if not _applies(node, ctx):
        return None
    x, scale = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    assert x is not None and scale is not None
    a = attrs(node)
    e = Emitter(node)
    wide = lambda v: v if ctx.dtypes.get(v) == T.FLOAT else e.op("Cast", [v], to=T.FLOAT)   # noqa: E731
    s = wide(node.input[1])
    if len(scale) == 1 and len(x) > 1:          # per axis: along ``axis``, broadcast over the rest
        axis = int(a.get("axis", 1)) % len(x)
        s = e.op("Reshape", [s, e.ints([scale[0] if d == axis else 1 for d in range(len(x))])])
    value = e.op("Div", [wide(node.input[0]), s])
    to_float8(e, value, _target(node, ctx), bool(int(a.get("saturate", 1))), node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization("QuantizeLinear", "IREE 3.13 ignores saturate on a QuantizeLinear to float8 (NaN "
                              "where the standard saturates); x / scale in float32, then the float8 conversion "
                              "narrow_cast.py writes", _applies, _rewrite),)
