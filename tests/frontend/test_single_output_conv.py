"""A spatial Conv with one output channel becomes a depthwise Conv and a channel sum with the same
values (2-D and 1-D, padded, strided, dilated, SAME padding, with and without a bias); 1x1 kernels,
several output channels, one input channel, grouped and non-constant weights are left alone; and
a host build loads it rewritten and matches onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from aot.frontend.single_output_conv import split_single_output_convs
from conftest import golden, on_host, onnx_model, rewrite_outputs


def _conv(spatial=(20, 12), cin=8, cout=1, kernel=(5, 5), bias=True, const_weights=True, **attrs) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    group = attrs.get("group", 1)
    w = rng.standard_normal((cout, cin // group, *kernel)).astype(np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")] if bias else []
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, cin, *spatial])]
    if const_weights:
        inits.append(numpy_helper.from_array(w, "w"))
    else:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
    node = helper.make_node("Conv", ["x", "w", *(["b"] if bias else [])], ["y"], name="conv",
                            kernel_shape=list(kernel), **attrs)
    model = onnx_model([node], inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("model", [
    _conv(pads=[2, 2, 2, 2]),                                          # Basic Pitch's contour head: 8 channels, 5x5
    _conv(cin=32, kernel=(7, 3), pads=[3, 1, 3, 1], bias=False),       # its note head's 7x3, without the bias
    _conv(cin=3, kernel=(3, 3), strides=[2, 1], dilations=[1, 2], pads=[1, 0, 0, 2]),
    _conv(cin=5, kernel=(3, 2), auto_pad="SAME_UPPER"),
    _conv(spatial=(30,), cin=6, kernel=(4,), pads=[1, 2]),             # 1-D
], ids=["5x5", "7x3-no-bias", "strided-dilated", "same-upper", "1d"])
def test_same_values_as_the_convolution(model):
    result = split_single_output_convs(model)
    assert result.changed == 1
    nodes = result.model.graph.node
    cin = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    depthwise = [n for n in nodes if n.op_type == "Conv"]
    assert len(depthwise) == 1
    assert {a.name: helper.get_attribute_value(a) for a in depthwise[0].attribute}["group"] == cin
    assert "ReduceSum" in {n.op_type for n in nodes}
    got, want = rewrite_outputs(model, result.model)
    assert got.shape == want.shape
    assert_close(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("model", [
    _conv(kernel=(1, 1)),                     # a matrix-vector product, which IREE runs well already
    _conv(cout=2, pads=[2, 2, 2, 2]),
    _conv(cin=1, pads=[2, 2, 2, 2]),          # already depthwise
    _conv(cin=8, cout=1, group=1, const_weights=False),
    _conv(cin=8, cout=2, group=2, pads=[2, 2, 2, 2]),
], ids=["1x1", "two-outputs", "one-input-channel", "weights-an-input", "grouped"])
def test_other_convolutions_are_left_alone(model):
    result = split_single_output_convs(model)
    assert result.changed == 0 and result.model is model


@pytest.mark.device    # compiles with IREE
def test_a_host_build_runs_the_rewritten_convolution_and_matches_onnxruntime(tmp_path):
    path, loaded, bundle = on_host(tmp_path, _conv(cin=32, kernel=(7, 3), pads=[3, 1, 3, 1]))
    assert [n.op_type for n in loaded.graph.node] == ["Conv", "ReduceSum", "Add"]
    golden(bundle, path, seed=1, rtol=1e-4, atol=1e-4, finite=True)
