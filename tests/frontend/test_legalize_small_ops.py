"""LpNormalization with a zero norm and Det of small matrices (frontend/legalize/lp_normalization.py,
small_det.py) against onnx's reference, and an LSTM with peepholes refused at load with the node
named (legalize/unlowerable.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aot.checks.compare import assert_close
from aot.errors import ModelError
from aot.frontend import load
from conftest import legalized_once


def _one(op, shape, out_shape, **attributes):
    node = helper.make_node(op, ["x"], ["y"], name="n", **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("axis, p", [(0, 2), (1, 2), (-1, 1)])
def test_lp_normalization_gives_zero_for_a_zero_slice(axis, p):
    model = _one("LpNormalization", (2, 3, 4), (2, 3, 4), axis=axis, p=p)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    x[:, 1, 2] = 0.0
    x[1, :, 3] = 0.0
    x[0, 2, :] = 0.0
    got = ReferenceEvaluator(legalized_once(model, "LpNormalization")).run(None, {"x": x})[0]
    norm = np.linalg.norm(x, ord=p, axis=axis, keepdims=True)
    want = np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm))
    assert not np.isnan(got).any()
    assert_close(got, want.astype(np.float32), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (4, 2, 2), (2, 5, 3, 3)])
def test_small_determinants_need_no_pivot(shape):
    model = _one("Det", shape, shape[:-2])
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    x[..., 0, 0] = 0.0                                  # a zero leading entry: elimination would divide by it
    got = ReferenceEvaluator(legalized_once(model, "Det")).run(None, {"x": x})[0]
    assert got.shape == shape[:-2]
    assert_close(got, np.linalg.det(x.astype(np.float64)).astype(np.float32), rtol=1e-5, atol=1e-5)


def test_a_larger_determinant_is_left_to_iree():
    from aot.frontend.legalize import legalize

    result, tally = legalize(_one("Det", (4, 4), ()))
    assert not result.modified and tally == ()


def test_an_lstm_with_peepholes_is_refused_with_its_node_named(tmp_path):
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("W", (1, 12, 4)), ("R", (1, 12, 3)), ("B", (1, 24)), ("P", (1, 9)))]
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "", "", "", "P"], ["y"], name="lstm_with_p", hidden_size=3)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 1, 2, 3))], inits)
    path = tmp_path / "lstm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(ModelError, match=r"node 'lstm_with_p' \(LSTM\): no target can compile it correctly: its peephole"):
        load.load(path)


@pytest.mark.parametrize("float8", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_to_float8_saturates_as_the_reference_does(float8, per_axis):
    """Out-of-range values saturate (NaN stays NaN); a float8 zero point is not added (the
    reference never adds one: the standard fixes it at 0)."""
    x = np.array([[0.0, 1.3, -2.7, 1000.0, -1e6, np.nan], [3e-3, 250.0, -460.0, 7e4, 1e-9, -0.0]], np.float32)
    scale = np.array([0.5, 2.0], np.float32) if per_axis else np.array(0.5, np.float32)
    zero = helper.make_tensor("zp", float8, scale.shape, [1.0] * scale.size)
    node = helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["y"], name="q", axis=0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", float8, x.shape)],
                              [numpy_helper.from_array(scale, "scale"), zero])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = ReferenceEvaluator(legalized_once(model, "QuantizeLinear")).run(None, {"x": x})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
