"""Casts to and from float8 written through float32, the one wider type IREE 3.13 converts them from.

What IREE 3.13 does with a float8 cast (node tests ``cast*``, ``castlike*``, measured on llvm-cpu):
- ``Cast(to=FLOAT8*)`` does not import at all (``failed to legalize ... onnx.Cast torch.onnx.to =
  17..20``: the importer's Cast pattern has no float8 types), while ``CastLike`` against a float8
  tensor does;
- ``CastLike`` float32 -> float8 rounds to nearest even but ignores ``saturate``: it computes the
  saturate=0 result (NaN or inf out of range) even when the default saturate=1 asks for the largest
  finite value (448, 240, 57344);
- float16 -> float8 (``arith.truncf``) and float8 -> float16 (``arith.extf``) do not lower; float32
  <-> float8 do, wrongly for a few values (below), which this rewrite also corrects.

So every such cast goes through float32: widening to float32 is exact from float16 and bfloat16
(and from float8), and every float8 value is exact in float16, bfloat16 and float64, so the one
rounding left is the final float32 -> float8 one, which is the rounding the standard asks for.
Saturation is a Clip to the target's largest finite value first: it maps every finite value beyond
it and every infinity to +-max, which is what saturate=1 means, and changes nothing within the
range (NaN is selected around it: IREE's Clip makes NaN the lower bound). The narrowing itself is
``CastLike`` against a float8 constant with saturate=0, the form IREE lowers; a model's own such
CastLike is rewritten too, for the fixes below (rewriting it twice changes no value).

IREE's float32 <-> float8 conversions, compared bit for bit with onnx's reference on every float16
value and every float8 value, are right except in two places, each fixed by a select:
- to float8, the values that round up from below the smallest normal to it come out 0;
- from E4M3FN, the negative NaN (0xFF) comes out -480.

Left as they are: casts from float64 to float8 (float64 -> float32 -> float8 rounds twice, which
can differ from one rounding at ties), and from integers (IREE's own conversion is not measured).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs

# float8 type -> its largest finite value (the saturation bound)
FLOAT8_MAX: dict[int, float] = {T.FLOAT8E4M3FN: 448.0, T.FLOAT8E4M3FNUZ: 240.0,
                                 T.FLOAT8E5M2: 57344.0, T.FLOAT8E5M2FNUZ: 57344.0}
# sources whose widening to float32 is exact
_TO_FLOAT32_EXACTLY: frozenset[int] = frozenset({T.FLOAT16, T.BFLOAT16, T.FLOAT, *FLOAT8_MAX})
# destinations that hold every float8 value exactly (float32 itself needs nothing)
_HOLD_FLOAT8: frozenset[int] = frozenset({T.FLOAT16, T.BFLOAT16, T.DOUBLE})


def _types(node: onnx.NodeProto, ctx: Context) -> tuple[int, int] | None:
    src = ctx.dtypes.get(node.input[0])
    if node.op_type == "Cast":
        dst = int(attrs(node).get("to", 0))
    else:   # CastLike: the type of its second operand
        dst = ctx.dtypes.get(node.input[1] if len(node.input) > 1 else "", 0)
    return (src, dst) if src and dst else None


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    types = _types(node, ctx)
    if types is None:
        return False
    src, dst = types
    if dst in FLOAT8_MAX:
        return src in _TO_FLOAT32_EXACTLY
    return src in FLOAT8_MAX and (dst in _HOLD_FLOAT8 or (src == T.FLOAT8E4M3FN and dst == T.FLOAT))


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    if not _applies(node, ctx):
        return None
    src, dst = _types(node, ctx)   # type: ignore[misc]  # _applies checked it
    e = Emitter(node)
    wide = _widen(e, node.input[0], src, out=node.output[0] if dst == T.FLOAT else None)
    if dst == T.FLOAT:
        return e.replacement()
    if dst not in FLOAT8_MAX:          # float8 -> float32 -> a type that holds it exactly
        e.op("Cast", [wide], out=node.output[0], to=dst)
        return e.replacement()
    to_float8(e, wide, dst, bool(int(attrs(node).get("saturate", 1))), node.output[0])
    return e.replacement()


def to_float8(e: Emitter, wide: str, dst: int, saturate: bool, out: str) -> None:
    """The float32 value ``wide`` converted to the float8 type ``dst`` as the standard rounds and
    saturates, into ``out`` (also what a QuantizeLinear to float8 ends with: quantize_float8.py)."""
    if saturate:
        bound = FLOAT8_MAX[dst]
        lowest, highest = e.const(np.float32(-bound), hint="lowest"), e.const(np.float32(bound), hint="max")
        clipped = e.op("Clip", [wide, lowest, highest])
        # IREE's Clip turns NaN into the lower bound (measured: -448); NaN must stay NaN
        wide = e.op("Where", [e.op("IsNaN", [wide]), wide, clipped])
    wide = _round_up_to_the_smallest_normal(e, wide, dst)
    like = e.const(np.zeros((), helper.tensor_dtype_to_np_dtype(dst)), hint="like")   # only its type is read
    e.op("CastLike", [wide, like], out=out, saturate=0)


def _widen(e: Emitter, x: str, src: int, out: str | None) -> str:
    """``x`` as float32 (exact); E4M3FN's negative NaN (0xFF) made NaN again: IREE 3.13 converts it
    to -480 (measured on all 256 values of each float8 type; only that one is wrong), a value beyond
    the type's largest finite 448, so anything beyond it is that NaN."""
    if src == T.FLOAT:
        return x
    if src != T.FLOAT8E4M3FN:
        return e.op("Cast", [x], out=out, to=T.FLOAT)
    wide = e.op("Cast", [x], to=T.FLOAT)
    beyond = e.op("Greater", [e.op("Abs", [wide]), e.const(np.float32(FLOAT8_MAX[src]), hint="max")])
    return e.op("Where", [beyond, e.const(np.float32(np.nan), hint="nan"), wide], out=out)


def _round_up_to_the_smallest_normal(e: Emitter, x: str, dst: int) -> str:
    """IREE 3.13's float32 -> float8 conversion returns 0 for the values that round up from below
    the smallest normal to it (measured on every float16 value: 256 per type, e.g. [0.0146, 0.0156)
    for E4M3FN, whose smallest normal is 2**-6); every other value rounds right. Those values are
    given the smallest normal (with their sign) before the conversion, which then is exact."""
    info = ml_dtypes.finfo(helper.tensor_dtype_to_np_dtype(dst))
    tiny = np.float32(info.tiny)
    # the midpoint between the largest subnormal and `tiny`: a tie there rounds to `tiny` (even)
    mid = np.float32(tiny - np.float32(info.smallest_subnormal) / 2)
    magnitude = e.op("Abs", [x])
    up = e.op("And", [e.op("GreaterOrEqual", [magnitude, e.const(mid, hint="midpoint")]),
                      e.op("Less", [magnitude, e.const(tiny, hint="tiny")])])
    signed = e.op("Where", [e.op("Less", [x, e.const(np.float32(0), hint="zero")]),
                            e.const(-tiny, hint="minus_tiny"), e.const(tiny, hint="tiny")])
    return e.op("Where", [up, signed, x])


_WHY = ("IREE 3.13 imports no Cast to float8, ignores saturate on CastLike to float8, and converts float8 only "
        "from and to float32; the cast goes through float32 (exact), with a Clip where it saturates")

LEGALIZATIONS = (Legalization("Cast", _WHY, _applies, _rewrite), Legalization("CastLike", _WHY, _applies, _rewrite))
