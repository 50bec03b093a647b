"""Depthwise convolutions become sums of shifted slices with the same values; other convolutions
and weights that are not constants are left alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from aot.checks import reference
from aot.frontend.depthwise import decompose_depthwise_convs
from aot.frontend.fold import fold_constants
from conftest import onnx_model


def _conv(channels=6, size=(9, 11), kernel=(5, 5), group=None, strides=(1, 1), pads=(2, 2, 2, 2), bias=True,
          seed=0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    group = channels if group is None else group
    w = rng.standard_normal((channels, channels // group, *kernel)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b")]
                                                 if bias else [])
    node = helper.make_node("Conv", ["x", "w", *(["b"] if bias else [])], ["y"], name="conv", group=group,
                            kernel_shape=list(kernel), strides=list(strides), pads=list(pads))
    model = onnx_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, *size])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("kernel, strides, pads, bias", [
    ((5, 5), (1, 1), (2, 2, 2, 2), True),
    ((3, 3), (2, 2), (1, 1, 1, 1), False),
    ((5, 5), (2, 1), (2, 2, 2, 2), True),      # PP-OCR-rec's height-only stride
    ((3, 3), (1, 1), (0, 0, 0, 0), True),
    ((3, 5), (1, 2), (1, 0, 1, 2), True),      # asymmetric padding
])
def test_same_values_as_the_convolution(kernel, strides, pads, bias):
    model = _conv(kernel=kernel, strides=strides, pads=pads, bias=bias)
    result = decompose_depthwise_convs(model)
    assert result.changed == 1 and "Conv" not in {n.op_type for n in result.model.graph.node}
    x = np.random.default_rng(1).standard_normal((1, 6, 9, 11)).astype(np.float32)
    want = reference.session(model.SerializeToString()).run(None, {"x": x})[0]
    got = reference.session(result.model.SerializeToString(), optimize=False).run(None, {"x": x})[0]
    assert got.shape == want.shape
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", [_conv(group=1), _conv(group=2), _conv(kernel=(1, 1), pads=(0, 0, 0, 0))],
                         ids=["dense", "grouped", "1x1"])
def test_other_convolutions_are_left_alone(model):
    result = decompose_depthwise_convs(model)
    assert result.changed == 0 and result.model is model


def test_large_constants_fold_unless_they_decompress():
    """A Constant node's value is folded at any size (it is stored already); a large result that
    widens its element type (a dequantized weight) stays computed; one that does not is folded."""
    big = np.arange(6000, dtype=np.float32)
    q = np.zeros(6000, np.int8)
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(big)),
             helper.make_node("Mul", ["c", "two"], ["scaled"]),
             helper.make_node("Cast", ["q"], ["dq"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["scaled", "x"], ["y1"]),
             helper.make_node("Add", ["dq", "x"], ["y2"])]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6000])],
                       [helper.make_tensor_value_info(n, TensorProto.FLOAT, [6000]) for n in ("y1", "y2")],
                       [numpy_helper.from_array(np.array(2, np.float32), "two"), numpy_helper.from_array(q, "q")])
    folded = fold_constants(onnx.shape_inference.infer_shapes(model)).model
    left = [n.op_type for n in folded.graph.node]
    assert left == ["Cast", "Add", "Add"]            # Constant and Mul folded, the int8 -> f32 Cast kept
    assert "scaled" in {t.name for t in folded.graph.initializer}
