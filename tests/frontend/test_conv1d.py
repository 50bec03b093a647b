"""1-D convolutions with few output positions become a matmul over their windows with the same
values; long outputs, 1-tap, grouped, dilated and non-constant ones are left alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from aot.checks import reference
from aot.frontend.conv1d import decompose_short_conv1ds
from conftest import onnx_model


def _conv1d(length=640, cin=1, cout=6, kernel=256, strides=128, pads=(0, 0), bias=True, **attrs) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    group = attrs.get("group", 1)
    w = rng.standard_normal((cout, cin // group, kernel)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")]
                                                 if bias else [])
    node = helper.make_node("Conv", ["x", "w", *(["b"] if bias else [])], ["y"], name="conv", kernel_shape=[kernel],
                            strides=[strides], pads=list(pads), **attrs)
    model = onnx_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, cin, length])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("model", [
    _conv1d(),                                                    # Silero's STFT: 256 taps, hop 128, 4 windows
    _conv1d(length=4, cin=129, cout=5, kernel=3, strides=1, pads=(1, 1)),
    _conv1d(length=4, cin=8, cout=3, kernel=3, strides=2, pads=(1, 0), bias=False),
], ids=["stft", "padded", "strided"])
def test_same_values_as_the_convolution(model):
    result = decompose_short_conv1ds(model)
    assert result.changed == 1 and "Conv" not in {n.op_type for n in result.model.graph.node}
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    want = reference.session(model.SerializeToString()).run(None, {"x": x})[0]
    got = reference.session(result.model.SerializeToString(), optimize=False).run(None, {"x": x})[0]
    assert got.shape == want.shape
    assert_close(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("model", [
    _conv1d(length=64, kernel=3, strides=1),                      # 62 outputs: IREE tiles those well
    _conv1d(length=4, cin=4, kernel=1, strides=1),                # a 1x1 convolution is a matmul already
    _conv1d(length=8, cin=4, cout=4, kernel=3, strides=1, group=2),
    _conv1d(length=8, cin=4, kernel=3, strides=1, dilations=[2]),
], ids=["long", "1-tap", "grouped", "dilated"])
def test_other_convolutions_are_left_alone(model):
    result = decompose_short_conv1ds(model)
    assert result.changed == 0 and result.model is model


def test_a_conv_behind_the_slice_of_an_unread_tail_is_still_rewritten_at_load(tmp_path):
    # openWakeWord's STFT: 512 taps, hop 160, over 1760 samples: 8 windows and 128 samples never
    # read. trim_conv_end_padding slices them off first; the windows pass must see the Slice's
    # shape (it saw none, and kept the Conv: 0.63 ms where onnxruntime took 0.09).
    from aot.frontend import load

    path = tmp_path / "stft.onnx"
    model = _conv1d(length=1760, cout=8, kernel=512, strides=160, bias=False)
    onnx.save(model, str(path))
    source = load.load(path, cpu_conv_rewrites=True)
    ops = [n.op_type for n in source.model.graph.node]
    assert "Conv" not in ops and "Slice" in ops and "MatMul" in ops
    x = np.random.default_rng(2).standard_normal((2, 1, 1760)).astype(np.float32)
    want = reference.session(model.SerializeToString()).run(None, {"x": x})[0]
    got = reference.session(source.model.SerializeToString(), optimize=False).run(None, {"x": x})[0]
    assert_close(got, want, rtol=1e-5, atol=1e-4)
