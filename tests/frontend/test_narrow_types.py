"""Sub-byte and exponent-only types carried in a wider type (frontend/narrow_types.py): every
conversion into them gives ml_dtypes' values (what onnx's reference converts with), the model's
own narrow inputs and outputs keep their declared type at the bundle's boundary, and a model
needing a conversion the pass cannot write is left as it was."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aot import api, runtime
from aot.errors import RuntimeInputError
from aot.frontend.narrow_types import carry_narrow_types
from aot.options import BuildOptions
from conftest import onnx_model

NARROW = {T.INT4: ml_dtypes.int4, T.UINT4: ml_dtypes.uint4, T.INT2: ml_dtypes.int2, T.UINT2: ml_dtypes.uint2,
          T.FLOAT4E2M1: ml_dtypes.float4_e2m1fn}
FLOATS = np.array([0, -0.0, 0.2, -0.2, 0.25, 0.3, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6, 7, 100, -2.5, -7.9, -9, 16,
                   np.nan, np.inf, -np.inf, 0.49, 1.51], np.float32)


def _cast_model(source: int, target: int, n: int) -> onnx.ModelProto:
    node = helper.make_node("Cast", ["x"], ["y"], name="cast", to=target)
    model = onnx_model([node], [helper.make_tensor_value_info("x", source, [n])],
                       [helper.make_tensor_value_info("y", target, [n])], opset=23)
    return onnx.shape_inference.infer_shapes(model)


def _run_carried(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    result, _ = carry_narrow_types(model)
    assert result.modified
    onnx.checker.check_model(result.model, full_check=True)
    # onnx's reference runs it: onnxruntime makes -0 * -1 (and Neg(-0)) +0 inside a Where
    return ReferenceEvaluator(result.model).run(None, {"x": x})[0]


@pytest.mark.parametrize("target", list(NARROW), ids=lambda t: T.DataType.Name(t))
@pytest.mark.parametrize("source", [np.float32, np.float16, np.int32, np.int64])
def test_casts_into_a_narrow_type_give_ml_dtypes_values(source, target):
    x = FLOATS.astype(source) if np.dtype(source).kind == "f" else np.arange(-40, 40, 3).astype(source)
    got = _run_carried(_cast_model(helper.np_dtype_to_tensor_dtype(np.dtype(source)), target, x.size), x)
    with np.errstate(invalid="ignore"):
        want = np.where(np.isfinite(x), x, 0).astype(NARROW[target]) if target != T.FLOAT4E2M1 else x.astype(NARROW[target])
    if target != T.FLOAT4E2M1:   # ml_dtypes makes NaN and infinities 0 on the way to an integer
        want = np.where(np.isfinite(x.astype(np.float64)), want.astype(np.float64), 0)
    np.testing.assert_array_equal(got.astype(np.float64), np.asarray(want).astype(np.float64))
    assert np.signbit(got.astype(np.float64)).tolist() == np.signbit(np.asarray(want).astype(np.float64)).tolist()


def test_a_quantize_to_int4_saturates_and_a_dequantize_reads_the_carrier():
    x = np.linspace(-20, 20, 41, dtype=np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], name="dq")]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "scale"),
             helper.make_tensor("zp", T.INT4, [], [1])]
    model = onnx.shape_inference.infer_shapes(onnx_model(
        nodes, [helper.make_tensor_value_info("x", T.FLOAT, [41])],
        [helper.make_tensor_value_info("y", T.FLOAT, [41]), helper.make_tensor_value_info("q", T.INT4, [41])],
        inits, opset=21))
    want_y, want_q = ReferenceEvaluator(model).run(None, {"x": x})
    result, boundary = carry_narrow_types(model)
    assert boundary == {"q": T.INT4}
    got_y, got_q = ReferenceEvaluator(result.model).run(None, {"x": x})
    assert got_q.dtype == np.int8 and got_q.min() == -8 and got_q.max() == 7
    np.testing.assert_array_equal(got_q, want_q.astype(np.int8))
    np.testing.assert_array_equal(got_y, want_y)


def test_a_conversion_it_cannot_write_leaves_the_model_as_it_was():
    model = _cast_model(T.FLOAT, T.FLOAT8E8M0, 4)
    result, boundary = carry_narrow_types(model)
    assert not result.modified and result.model is model and boundary == {}


def test_a_model_of_standard_types_is_untouched():
    model = _cast_model(T.FLOAT, T.INT8, 4)
    assert carry_narrow_types(model)[0].model is model


@pytest.fixture(scope="module")
def int4_bundle(tmp_path_factory):
    """y = int4(x * 3) and z = float4e2m1(x * -0.3) for an int4 input x: both ends are narrow."""
    nodes = [helper.make_node("Cast", ["x"], ["xf"], name="widen", to=T.FLOAT),
             helper.make_node("Mul", ["xf", "three"], ["m"], name="mul"),
             helper.make_node("Cast", ["m"], ["y"], name="narrow", to=T.INT4),
             helper.make_node("Mul", ["xf", "tenth"], ["s"], name="scale"),
             helper.make_node("Cast", ["s"], ["z"], name="to_float4", to=T.FLOAT4E2M1)]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", T.INT4, [7])],
                       [helper.make_tensor_value_info("y", T.INT4, [7]), helper.make_tensor_value_info("z", T.FLOAT4E2M1, [7])],
                       [numpy_helper.from_array(np.array(3, np.float32), "three"),
                        numpy_helper.from_array(np.array(-0.3, np.float32), "tenth")], opset=23)
    path = tmp_path_factory.mktemp("int4") / "int4.onnx"
    onnx.save(model, path)
    return api.build(path, path.parent / "b", BuildOptions(accel=None)).bundle


@pytest.mark.device
def test_an_int4_bundle_takes_and_returns_int4(int4_bundle):
    sig_in, sig_out = int4_bundle.manifest.inputs[0], int4_bundle.manifest.outputs[0]
    assert (sig_in.dtype, sig_in.carrier, sig_out.dtype, sig_out.carrier) == ("int4", "int8", "int4", "int8")
    assert "ml_dtypes (for its narrow-typed tensors)" in int4_bundle.stub.read_text()   # what a deployment needs
    x = np.array([-8, -3, -1, 0, 1, 2, 7], ml_dtypes.int4)
    with runtime.load(int4_bundle.path) as session:
        y, z = session.run({"x": x})
        assert y.dtype == np.dtype(ml_dtypes.int4) and z.dtype == np.dtype(ml_dtypes.float4_e2m1fn)
        np.testing.assert_array_equal(y.astype(np.int8), (x.astype(np.float32) * 3).astype(ml_dtypes.int4).astype(np.int8))
        want_z = (x.astype(np.float32) * np.float32(-0.3)).astype(ml_dtypes.float4_e2m1fn)
        assert z.view(np.uint8).tolist() == want_z.view(np.uint8).tolist()    # bit for bit: -0 stays -0
        with pytest.raises(RuntimeInputError, match="expected dtype int4, got int8"):
            session.run({"x": x.astype(np.int8)})
