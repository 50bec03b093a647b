"""Transposed convolutions whose kernel equals their stride become a matmul and a pixel shuffle
with the same values; overlapping, padded, grouped or non-constant ones are left alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from aot.checks import reference
from aot.frontend.conv_transpose import decompose_strided_conv_transposes
from conftest import onnx_model

SIZE = (7, 9)


def _conv_transpose(cin=5, cout=3, kernel=(2, 2), strides=None, bias=True, group=1, **attrs) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((cin, cout // group, *kernel)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")]
                                                 if bias else [])
    node = helper.make_node("ConvTranspose", ["x", "w", *(["b"] if bias else [])], ["y"], name="up",
                            kernel_shape=list(kernel), strides=list(strides or kernel), group=group, **attrs)
    model = onnx_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, cin, *SIZE])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("cout, kernel, bias", [
    (3, (2, 2), True),
    (1, (2, 2), False),         # PP-OCR-det's last upsampling: one output channel, no bias
    (4, (3, 2), True),          # a rectangular kernel
])
def test_same_values_as_the_transposed_convolution(cout, kernel, bias):
    model = _conv_transpose(cout=cout, kernel=kernel, bias=bias)
    result = decompose_strided_conv_transposes(model)
    assert result.changed == 1 and "ConvTranspose" not in {n.op_type for n in result.model.graph.node}
    x = np.random.default_rng(1).standard_normal((2, 5, *SIZE)).astype(np.float32)
    want = reference.session(model.SerializeToString()).run(None, {"x": x})[0]
    got = reference.session(result.model.SerializeToString(), optimize=False).run(None, {"x": x})[0]
    assert got.shape == want.shape == (2, cout, SIZE[0] * kernel[0], SIZE[1] * kernel[1])
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", [
    _conv_transpose(kernel=(3, 3), strides=(2, 2)),          # taps overlap
    _conv_transpose(pads=[1, 1, 1, 1], kernel=(4, 4)),       # cropped
    _conv_transpose(output_padding=[1, 1], kernel=(2, 2), strides=(3, 3)),
    _conv_transpose(cin=4, cout=4, group=2),
    _conv_transpose(kernel=(1, 1)),                          # already a plain 1x1 convolution
], ids=["overlapping", "padded", "output-padding", "grouped", "1x1"])
def test_other_transposed_convolutions_are_left_alone(model):
    result = decompose_strided_conv_transposes(model)
    assert result.changed == 0 and result.model is model


def test_weights_computed_in_the_graph_are_left_alone():
    model = _conv_transpose()
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [5, 3, 2, 2]))
    del model.graph.initializer[0]
    assert decompose_strided_conv_transposes(model).changed == 0
