"""Convolutions with few output channels over wide kernels are kept out of im2col
(``lower/direct_conv.py``): which ones are matched, and that every stride, dilation, padding and
bias variant gives onnxruntime's values in a host build that records the rewrite."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot import api, runtime
from aot.checks import reference
from aot.checks.compare import assert_close
from aot.lower import depthwise, direct_conv
from aot.lower.importer import import_onnx
from aot.options import BuildOptions
from conftest import onnx_model


def _single(w_shape: tuple[int, ...], x_shape: tuple[int, ...] = (1, 8, 12, 40), group: int = 1,
            **attrs) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones(w_shape, np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", group=group, kernel_shape=list(w_shape[2:]),
                            **attrs)
    model = onnx_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return onnx.shape_inference.infer_shapes(model)


def _rewritten(model: onnx.ModelProto, tmp_path) -> int:
    mlir = import_onnx(model, "m", tmp_path, tmp_path / "w.irpa").mlir
    return depthwise.rewrite_ops(mlir, direct_conv.direct_body)[1][0]


@pytest.mark.parametrize(("model", "count"), [
    (_single((8, 8, 3, 39), pads=[1, 19, 1, 19]), 1),        # K / Cout = 117 (Basic Pitch's)
    (_single((1, 8, 3, 3)), 1),                              # 72 values copied per output value
    (_single((2, 8, 3, 3)), 0),                              # 36: im2col's matmul has enough rows
    (_single((64, 8, 3, 3)), 0),
    (_single((1, 8, 1, 1)), 0),                              # 1x1: nothing for im2col to copy
    (_single((2, 4, 5, 5), group=2), 0),                     # grouped
    (_single((1, 8, 3, 3), auto_pad="SAME_UPPER"), 0),       # implicit padding: not handled
], ids=["basic-pitch", "ratio-72", "ratio-36", "many-outputs", "pointwise", "grouped", "auto-pad"])
def test_only_a_copy_of_many_values_per_output_value_is_kept_out_of_im2col(model, count, tmp_path):
    assert _rewritten(model, tmp_path) == count


def _chain() -> onnx.ModelProto:
    """x (1x8x13x41) through few-output Convs of every kind, and an ordinary one between them."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []
    layers = [  # name, weight shape, attributes, bias
        ("wide", (8, 8, 3, 39), dict(pads=[1, 19, 1, 19]), True),
        ("ordinary", (8, 8, 3, 3), dict(pads=[1, 1, 1, 1]), True),
        ("strided", (2, 8, 5, 5), dict(pads=[2, 1, 2, 3], strides=[2, 3]), False),   # asymmetric
        # not depthwise: 2 in, 2 out (one out would be the front end's: frontend/single_output_conv.py)
        ("dilated", (2, 2, 9, 9), dict(pads=[8, 8, 8, 8], dilations=[2, 2]), True),
    ]
    x = "x"
    for name, shape, attrs, bias in layers:
        # Scaled by the fan-in, so values stay near 1 through the chain and float32 rounding near atol.
        w = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"{name}.w"))
        operands = [x, f"{name}.w"]
        if bias:
            inits.append(numpy_helper.from_array(rng.standard_normal(shape[0]).astype(np.float32), f"{name}.b"))
            operands.append(f"{name}.b")
        nodes.append(helper.make_node("Conv", operands, [name], name=name, kernel_shape=list(shape[2:]), **attrs))
        x = name
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 13, 41])],
                       [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


def test_the_chain_keeps_its_ordinary_conv(tmp_path):
    mlir = import_onnx(_chain(), "m", tmp_path, tmp_path / "w.irpa").mlir
    rewritten, (count,) = depthwise.rewrite_ops(mlir, direct_conv.direct_body)
    assert count == 3 and rewritten.count('torch.operator "onnx.Conv"') == 1


@pytest.mark.device
def test_a_host_build_gives_onnxruntimes_values_and_records_the_rewrite(tmp_path):
    path = tmp_path / "chain.onnx"
    onnx.save(_chain(), path)
    built = api.build(path, tmp_path / "b", BuildOptions(accel=None))
    assert ("Conv", 3, direct_conv.DIRECT_REASON) in {(r.op, r.count, r.reason) for r in built.bundle.record.rewrites}
    x = np.random.default_rng(1).standard_normal((1, 8, 13, 41)).astype(np.float32)
    want = reference.session(path).run(None, {"x": x})[0]
    with runtime.load(built.bundle.path) as session:
        got = session.run({"x": x})[0]
    assert got.shape == want.shape
    assert_close(got, want, rtol=1e-4, atol=1e-4)
