"""MaxPool auto_pad SAME with resolved pads, AveragePool ceil_mode edge windows written out
(frontend/legalize/pool_edges.py, pooling.py), against onnxruntime and onnx's reference; the
variants IREE 3.13 lowers correctly are not rewritten."""

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

_T = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.uint8: TensorProto.UINT8}


def _model(op, shape, dtype=np.float32, **attributes):
    node = helper.make_node(op, ["x"], ["y"], name="pool", **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", _T[dtype], shape)],
                              [helper.make_tensor_value_info("y", _T[dtype], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)




def _ort(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _ref(model, x):
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("attributes", [
    dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[3, 2], auto_pad="SAME_UPPER", strides=[2, 3]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_maxpool_same_becomes_explicit_pads(attributes, dtype):
    model = _model("MaxPool", (1, 2, 7, 8), dtype, **attributes)
    x = np.random.default_rng(0).integers(0, 255, (1, 2, 7, 8)).astype(dtype)
    legal = legalized_once(model, "MaxPool", replaced=False)
    pool = [n for n in legal.graph.node if n.op_type == "MaxPool"]
    assert len(pool) == 1 and all(a.name != "auto_pad" for a in pool[0].attribute)
    assert_close(_ort(legal, x), _ort(model, x))


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("attributes", [
    dict(kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1]),                  # last window dropped
    dict(kernel_shape=[5, 5, 5], strides=[3, 3, 3], dilations=[2, 2, 2]),          # overhang
    dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1]),
])
def test_averagepool_ceil_matches_onnxruntime(attributes, count_include_pad):
    shape = (1, 1, 32, 32, 32) if len(attributes["kernel_shape"]) == 3 else (1, 3, 2, 2) if attributes[
        "strides"] == [3, 3] else (2, 2, 8, 7)
    model = _model("AveragePool", shape, ceil_mode=1, count_include_pad=count_include_pad, **attributes)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    result, tally = legalize(model)
    if not result.modified:      # count_include_pad=0 without a dropped window: IREE is right
        assert count_include_pad == 0
        return
    got = _ort(result.model, x)
    assert_close(got, _ort(model, x), rtol=1e-5, atol=1e-6)
    assert_close(got, _ref(model, x), rtol=1e-5, atol=1e-6)


def test_the_node_tests_failing_cases_are_rewritten():
    dropped = _model("AveragePool", (1, 3, 2, 2), ceil_mode=1, count_include_pad=1, kernel_shape=[3, 3],
                     strides=[3, 3], pads=[1, 1, 1, 1])
    overhang = _model("AveragePool", (1, 1, 32, 32, 32), ceil_mode=1, count_include_pad=1,
                      kernel_shape=[5, 5, 5], strides=[3, 3, 3], dilations=[2, 2, 2])
    for model in (dropped, overhang):
        legal = legalized_once(model, "AveragePool", replaced=False)
        pool = [n for n in legal.graph.node if n.op_type == "AveragePool"]
        assert len(pool) == 1 and {a.name for a in pool[0].attribute} == {"kernel_shape", "strides", "dilations"}


def test_float64_uses_no_pad():
    model = _model("AveragePool", (1, 2, 9, 9), np.float64, ceil_mode=1, count_include_pad=1,
                   kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0])
    legal = legalized_once(model, "AveragePool", replaced=False)
    assert "Pad" not in {n.op_type for n in legal.graph.node}
    x = np.random.default_rng(2).standard_normal((1, 2, 9, 9))
    assert_close(_ref(legal, x), _ref(model, x), rtol=1e-12, atol=1e-12)   # onnxruntime: no float64 AveragePool


@pytest.mark.parametrize("op,attributes", [
    ("MaxPool", dict(kernel_shape=[2, 2], pads=[1, 1, 0, 0])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3, 3], auto_pad="SAME_LOWER", dilations=[2, 1])),   # ambiguous, see pooling.py
    ("AveragePool", dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER")),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),               # count_include_pad=0
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, count_include_pad=1)),  # fits
])
def test_the_variants_iree_lowers_are_left_alone(op, attributes):
    result, tally = legalize(_model(op, (1, 3, 8, 8), **attributes))
    assert not result.modified and tally == ()
