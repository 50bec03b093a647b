"""Sub-byte and exponent-only types carried in a wider type: int4, uint4, int2, uint2, float4e2m1,
float8e8m0.

IREE 3.13 cannot take these types through: its ONNX importer knows no int2, uint2, float4e2m1 or
float8e8m0 ("Unknown ONNX tensor element type"), and an int4 tensor of an odd element count fails
``stream.tensor.sizeof`` ("does not have integral number of total bytes"), while a Cast to int4 has
no lowering pattern (76 of the 172 ``cast*``/``castlike*`` node tests). Every value of these types
holds a number that a wider type holds exactly, so the model is rewritten to carry each such value
in its carrier (int8, uint8, float32): initializers and Constant values converted, value types
changed, and each conversion *into* a narrow type written out as the arithmetic that gives the
standard's result in the carrier (the reference implementation converts with ml_dtypes):
- to an integer of b bits: floats truncate toward zero (NaN and infinities give 0), then the value
  wraps modulo 2^b into the type's range, as a C cast to the narrow type does;
- to float4e2m1: round to nearest, ties to even, over its values 0, 0.5, 1, 1.5, 2, 3, 4, 6 (steps
  of 0.5 below 2, of 1 below 4, of 2 above), saturating at +-6, the sign kept (-0.2 gives -0);
  NaN gives -0, as ml_dtypes does.
Conversions *from* a narrow type are the carrier's own exact conversions and stay as they are.
A QuantizeLinear to a narrow integer type quantizes to the carrier and clips to the narrow range
(saturation, as the standard asks). Other conversions into these types (to float8e8m0, a
QuantizeLinear to float4) are not written out: a model that needs one is left as it is.

The model's own inputs and outputs keep their declared type in the deploy contract, with the
carrier beside it (``TensorSpec.carrier``): the runtime converts at the boundary.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from aot.frontend.legalize.base import Emitter, Replacement, attrs, operand
from aot.frontend.passes import PassResult

CARRIER: Mapping[int, int] = {T.INT4: T.INT8, T.INT2: T.INT8, T.UINT4: T.UINT8, T.UINT2: T.UINT8,
                              T.FLOAT4E2M1: T.FLOAT, T.FLOAT8E8M0: T.FLOAT}
_BITS: Mapping[int, tuple[int, bool]] = {T.INT4: (4, True), T.INT2: (2, True), T.UINT4: (4, False),
                                         T.UINT2: (2, False)}
_FLOATS = frozenset({T.FLOAT, T.FLOAT16, T.BFLOAT16, T.DOUBLE})


def carry_narrow_types(model: onnx.ModelProto) -> tuple[PassResult, dict[str, int]]:
    """Pass (on a shape-inferred model): narrow values carried in their carriers; also each graph
    input's and output's declared narrow type, by name. Unchanged where nothing is narrow or a
    conversion into a narrow type cannot be written out."""
    g = model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.value_info, *g.output)
             if v.type.HasField("tensor_type")}
    types.update({t.name: t.data_type for t in g.initializer})
    if not any(t in CARRIER for t in types.values()) and not any(_target(n, types) in CARRIER for n in g.node):
        return PassResult(model, 0), {}
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    for node in g.node:
        replacement = _convert(node, types)
        if replacement is None:
            return PassResult(model, 0), {}       # a conversion this pass cannot write: leave the model
        nodes += replacement[0]
        inits += replacement[1]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    for t in out.graph.initializer:
        if t.data_type in CARRIER:
            t.CopyFrom(_carried(t))
    out.graph.initializer.extend(inits)
    for v in (*out.graph.input, *out.graph.value_info, *out.graph.output):
        if v.type.tensor_type.elem_type in CARRIER:
            v.type.tensor_type.elem_type = CARRIER[v.type.tensor_type.elem_type]
    boundary = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.output)
                if v.type.tensor_type.elem_type in CARRIER}
    retyped = sum(v.type.tensor_type.elem_type in CARRIER for v in (*g.input, *g.value_info, *g.output))
    return PassResult(out, max(1, retyped)), boundary


def _carried(t: onnx.TensorProto) -> onnx.TensorProto:
    value = numpy_helper.to_array(t)
    carrier = helper.tensor_dtype_to_np_dtype(CARRIER[t.data_type])
    return numpy_helper.from_array(value.astype(carrier), t.name)


def _target(node: onnx.NodeProto, types: Mapping[str, int]) -> int:
    """The element type a Cast or CastLike converts to (0 for other nodes)."""
    if node.op_type == "Cast":
        return int(attrs(node).get("to", 0))
    if node.op_type == "CastLike":
        return types.get(operand(node, 1), 0)
    return 0


def _convert(node: onnx.NodeProto, types: Mapping[str, int]) -> Replacement | None:
    """The node's replacement over carriers (itself, where it needs none); None: cannot."""
    if node.domain not in ("", "ai.onnx"):
        return [node], []
    if node.op_type == "Constant":
        return _constant(node)
    target = _target(node, types)
    if target in CARRIER:
        return _cast_into(node, types.get(node.input[0], 0), target)
    if node.op_type == "QuantizeLinear":
        narrow = types.get(operand(node, 2), 0) or int(attrs(node).get("output_dtype", 0))
        if narrow in _BITS:
            return _quantize(node, narrow)
        if narrow in CARRIER:
            return None
    if node.op_type == "DequantizeLinear" and CARRIER.get(types.get(node.input[0], 0)) == T.FLOAT:
        return None                       # no DequantizeLinear reads a float32 carrier
    return [node], []


def _constant(node: onnx.NodeProto) -> Replacement:
    value = next((a for a in node.attribute if a.name == "value"), None)
    if value is None or value.t.data_type not in CARRIER:
        return [node], []
    return [helper.make_node("Constant", [], list(node.output), name=node.name,
                             value=_carried(value.t))], []


def _cast_into(node: onnx.NodeProto, source: int, target: int) -> Replacement | None:
    """``node`` (a Cast or CastLike into a narrow type) as arithmetic on the carriers."""
    e = Emitter(node)
    x, out = node.input[0], node.output[0]
    if source in CARRIER:
        source = CARRIER[source]          # the carrier holds the narrow value exactly
    if target in _BITS:
        _wrap_integer(e, x, source, target, out)
    elif target == T.FLOAT4E2M1 and source not in (T.STRING, 0):
        _round_float4(e, x if source == T.FLOAT else e.op("Cast", [x], to=T.FLOAT), out)
    else:
        return None
    return e.replacement()


def _wrap_integer(e: Emitter, x: str, source: int, target: int, out: str) -> None:
    bits, signed = _BITS[target]
    if source in _FLOATS:
        bad = e.op("Or", [e.op("IsNaN", [x]), e.op("IsInf", [x])])
        x = e.op("Where", [bad, e.const(np.zeros((), helper.tensor_dtype_to_np_dtype(source))), x])
    whole = e.op("Cast", [x], to=T.INT64)                      # floats truncate toward zero
    low = -(1 << (bits - 1)) if signed else 0
    shifted = e.op("Sub", [whole, e.const(np.array(low, np.int64))])
    wrapped = e.op("Mod", [shifted, e.const(np.array(1 << bits, np.int64))], fmod=0)   # in [0, 2^b)
    e.op("Cast", [e.op("Add", [wrapped, e.const(np.array(low, np.int64))])], to=CARRIER[target], out=out)


def _round_float4(e: Emitter, x: str, out: str) -> None:
    f = lambda v: e.const(np.array(v, np.float32))   # noqa: E731
    a = e.op("Abs", [x])
    halves = e.op("Div", [e.op("Round", [e.op("Mul", [a, f(2)])]), f(2)])      # below 2: steps of 0.5
    ones = e.op("Round", [a])                                                   # below 4: steps of 1
    twos = e.op("Mul", [e.op("Round", [e.op("Div", [a, f(2)])]), f(2)])         # above: steps of 2
    q = e.op("Where", [e.op("Less", [a, f(2)]), halves, e.op("Where", [e.op("Less", [a, f(4)]), ones, twos])])
    q = e.op("Min", [q, f(6)])
    # negative, -0 included (1 / -0 is -inf): its sign stays, as in ml_dtypes' -0.2 -> -0
    negative = e.op("Or", [e.op("Less", [x, f(0)]), e.op("Less", [e.op("Div", [f(1), x]), f(0)])])
    signed = e.op("Where", [negative, e.op("Mul", [q, f(-1)]), q])   # Mul: onnxruntime's Neg(0) is +0
    e.op("Where", [e.op("IsNaN", [x]), f(-0.0), signed], out=out)


def _quantize(node: onnx.NodeProto, narrow: int) -> Replacement:
    """QuantizeLinear into the carrier, then clipped to the narrow type's range (saturation)."""
    bits, signed = _BITS[narrow]
    carrier = CARRIER[narrow]
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    e = Emitter(node)
    kept = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "output_dtype"}
    if "output_dtype" in attrs(node):
        kept["output_dtype"] = carrier
    quantized = e.op("QuantizeLinear", list(node.input), **kept)
    np_carrier = helper.tensor_dtype_to_np_dtype(carrier)
    e.op("Clip", [quantized, e.const(np.array(low, np_carrier)), e.const(np.array(high, np_carrier))],
         out=node.output[0])
    return e.replacement()
