"""LpPool with dilations or auto_pad SAME as an AveragePool of |x|^p (frontend/legalize/lp_pool.py),
against onnx's reference implementation (where the node tests' outputs come from) and onnxruntime;
the LpPool variants IREE 3.13 lowers are not rewritten."""

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

_F = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(shape, dtype=np.float32, **attributes):
    node = helper.make_node("LpPool", ["x"], ["y"], name="lp", **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", _F[dtype], shape)],
                              [helper.make_tensor_value_info("y", _F[dtype], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)




def _run(model, x):
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("attributes", [
    dict(kernel_shape=[2, 2], p=4, auto_pad="SAME_LOWER"),
    dict(kernel_shape=[2, 2], p=2, auto_pad="SAME_UPPER"),
    dict(kernel_shape=[3, 2], p=3, auto_pad="SAME_UPPER", strides=[2, 3]),
    dict(kernel_shape=[2, 2], p=2, dilations=[2, 2], strides=[1, 1]),
    dict(kernel_shape=[3, 2], p=1, dilations=[2, 3], strides=[2, 1], pads=[1, 0, 2, 1]),
    dict(kernel_shape=[2, 3], p=3, dilations=[2, 1], strides=[2, 2], ceil_mode=1),
])
def test_the_failing_variants_match_the_reference(attributes):
    model = _model((2, 3, 7, 8), **attributes)
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 8)).astype(np.float32)
    got, want = _run(legalized_once(model, "LpPool"), x), _run(model, x)
    assert got.shape == want.shape
    assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attributes", [
    dict(kernel_shape=[2, 2], p=2, auto_pad="SAME_UPPER"),
    dict(kernel_shape=[3, 2], p=3, dilations=[2, 1], strides=[1, 2], pads=[1, 1, 0, 1]),
])
def test_onnxruntime_agrees(attributes):
    model = _model((1, 2, 9, 6), **attributes)
    x = np.random.default_rng(1).standard_normal((1, 2, 9, 6)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert_close(_run(legalized_once(model, "LpPool"), x), want, rtol=1e-5, atol=1e-6)


def test_float64_and_three_dimensions():
    model = _model((1, 2, 5, 4, 6), np.float64, kernel_shape=[2, 2, 3], p=3, auto_pad="SAME_LOWER")
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 4, 6))
    got = _run(legalized_once(model, "LpPool"), x)
    assert got.dtype == np.float64
    assert_close(got, _run(model, x), rtol=1e-12, atol=1e-12)
    assert "Pad" not in {n.op_type for n in legalized_once(model, "LpPool").graph.node}   # IREE fails on a float64 Pad


@pytest.mark.parametrize("attributes", [
    dict(kernel_shape=[2, 2], p=4),
    dict(kernel_shape=[3, 3], p=3, pads=[2, 2, 2, 2]),
    dict(kernel_shape=[5, 5], p=2, strides=[3, 3]),
    dict(kernel_shape=[2, 2], p=2, dilations=[1, 1]),
])
def test_the_variants_iree_lowers_are_left_alone(attributes):
    result, tally = legalize(_model((1, 3, 12, 12), **attributes))
    assert not result.modified and tally == ()
