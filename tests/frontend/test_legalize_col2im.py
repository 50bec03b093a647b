"""Col2Im as a Gather and a ReduceSum per spatial axis (frontend/legalize/col2im.py), against onnx's
reference implementation (where the node tests' outputs come from) and onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aot.checks.compare import assert_close
from aot.frontend.legalize import legalize
from conftest import legalized_once

_F = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _blocks(image, block, strides, dilations, pads):
    n = len(image)
    return [(i + pads[j] + pads[n + j] - (k - 1) * d - 1) // s + 1
            for j, (i, k, s, d) in enumerate(zip(image, block, strides, dilations))]


def _model(batch, channels, image, block, dtype=np.float32, **attributes):
    n = len(image)
    blocks = _blocks(image, block, attributes.get("strides", [1] * n), attributes.get("dilations", [1] * n),
                     attributes.get("pads", [0] * 2 * n))
    shape = (batch, channels * int(np.prod(block)), int(np.prod(blocks)))
    node = helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"], name="col2im", **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", _F[dtype], shape)],
                              [helper.make_tensor_value_info("y", _F[dtype], None)],
                              [numpy_helper.from_array(np.array(image, np.int64), "image_shape"),
                               numpy_helper.from_array(np.array(block, np.int64), "block_shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), shape




def _ref(model, x):
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("image,block,attributes", [
    ([5, 5], [1, 5], {}),                                          # the node tests' cases
    ([6, 6], [2, 2], dict(dilations=[1, 5])),
    ([5, 5], [1, 5], dict(pads=[0, 1, 0, 1])),
    ([5, 5], [3, 3], dict(strides=[2, 2])),
    ([7, 9], [3, 2], dict(strides=[2, 3], dilations=[2, 1], pads=[1, 0, 2, 2])),
    ([8, 8], [4, 4], dict(strides=[4, 4])),                        # non-overlapping: no ReduceSum
])
def test_two_dimensional_matches_the_reference(image, block, attributes):
    model, shape = _model(2, 3, image, block, **attributes)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got, want = _ref(legalized_once(model, "Col2Im"), x), _ref(model, x)
    assert got.shape == want.shape == (2, 3, *image)
    assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_onnxruntime_agrees_and_three_axes():
    model, shape = _model(1, 2, [3, 4, 5], [1, 2, 3], strides=[1, 2, 1], pads=[0, 1, 1, 0, 1, 1])
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = _ref(legalized_once(model, "Col2Im"), x)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(got, session.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)


def test_float64_and_infinities_stay_where_they_land():
    model, shape = _model(1, 1, [6, 6], [3, 3], np.float64, strides=[1, 1])
    x = np.random.default_rng(2).standard_normal(shape)
    x[0, 4, 7] = np.inf          # a MatMul with a 0/1 matrix would make a whole row NaN
    got, want = _ref(legalized_once(model, "Col2Im"), x), _ref(model, x)
    assert got.dtype == np.float64 and np.isinf(want).sum() == 1
    assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_a_runtime_image_shape_is_left_alone():
    node = helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4, 9)),
                                            helper.make_tensor_value_info("image_shape", TensorProto.INT64, (2,))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([2, 2], np.int64), "block_shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    result, tally = legalize(onnx.shape_inference.infer_shapes(model))
    assert not result.modified and tally == ()
