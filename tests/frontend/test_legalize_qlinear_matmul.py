"""QLinearMatMul of rank > 2 as an int32 MatMul and an explicit requantization
(frontend/legalize/qlinear_matmul.py), against onnx's reference implementation (where the node
tests' outputs come from) and onnxruntime; 2-D ones, which IREE 3.13 computes right, stay."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from aot.checks.compare import assert_close
from aot.frontend.legalize import legalize
from conftest import legalized_once

_T = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.float32: TensorProto.FLOAT,
      np.float16: TensorProto.FLOAT16}
_NAMES = ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point")


def _case(a_shape, b_shape, qtype=np.uint8, ftype=np.float32, a_row=(1,), b_col=(1,), seed=0):
    """A model and its feeds: scales and zero points as runtime inputs, as in the node tests."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(qtype)
    y_shape = np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1])
    feeds = {
        "a": rng.integers(info.min, info.max + 1, a_shape).astype(qtype),
        "a_scale": rng.uniform(0.005, 0.02, a_row).astype(ftype),
        "a_zero_point": rng.integers(info.min // 2, info.max // 2, a_row).astype(qtype),
        "b": rng.integers(info.min, info.max + 1, b_shape).astype(qtype),
        "b_scale": rng.uniform(0.005, 0.02, b_col).astype(ftype),
        "b_zero_point": rng.integers(info.min // 2, info.max // 2, b_col).astype(qtype),
        "y_scale": np.array([0.05], ftype),
        "y_zero_point": np.array([info.min // 2 + info.max // 2 + 1], qtype),
    }
    node = helper.make_node("QLinearMatMul", list(_NAMES), ["y"], name="qmm")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, _T[v.dtype.type], v.shape)
                                            for n, v in feeds.items()],
                              [helper.make_tensor_value_info("y", _T[qtype], y_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), feeds




def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("qtype", [np.int8, np.uint8])
@pytest.mark.parametrize("ftype", [np.float32, np.float16])
@pytest.mark.parametrize("a_shape,b_shape", [((2, 2, 4), (2, 4, 3)), ((3, 5, 16), (16, 7)), ((6, 8), (2, 3, 8, 4))])
def test_batched_matches_the_reference_exactly(qtype, ftype, a_shape, b_shape):
    model, feeds = _case(a_shape, b_shape, qtype, ftype)
    got = ReferenceEvaluator(legalized_once(model, "QLinearMatMul")).run(None, feeds)[0]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert_close(got, want)
    assert {int(v) for v in np.unique(got)} - {np.iinfo(qtype).min, np.iinfo(qtype).max}   # not all saturated


def test_onnxruntime_agrees():
    model, feeds = _case((4, 3, 32), (4, 32, 5), np.uint8, np.float32, seed=3)
    assert_close(_ort(legalized_once(model, "QLinearMatMul"), feeds), _ort(model, feeds))


def test_per_row_and_per_column_scales():
    model, feeds = _case((2, 3, 6), (2, 6, 4), np.int8, np.float32, a_row=(2, 3, 1), b_col=(2, 1, 4), seed=1)
    got = ReferenceEvaluator(legalized_once(model, "QLinearMatMul")).run(None, feeds)[0]
    assert_close(got, ReferenceEvaluator(model).run(None, feeds)[0])


def test_two_dimensional_is_left_alone():
    model, _ = _case((2, 4), (4, 3))
    result, tally = legalize(model)
    assert not result.modified and tally == ()
