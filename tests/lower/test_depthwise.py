"""Depthwise convolutions of host regions are lowered channels-last (``lower/depthwise.py``):
every stride, dilation, padding and bias variant gives onnxruntime's values, the build record
counts them, and dense, grouped, channel-multiplier and auto-padded convolutions are left alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot import api, runtime
from aot.checks import reference
from aot.checks.compare import assert_close
from aot.lower import depthwise, host_lowering
from aot.lower.importer import import_onnx
from aot.lower.outline import OutlinedRegion
from aot.options import BuildOptions
from conftest import onnx_model

CHANNELS = 8


def _chain() -> onnx.ModelProto:
    """x (1x8x13x15) through four depthwise Convs of different kinds, a dense and a grouped one."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []
    layers = [  # name, group, weight shape, attributes, bias
        ("dw5", CHANNELS, (CHANNELS, 1, 5, 5), dict(pads=[2, 2, 2, 2]), True),
        ("dw3s2", CHANNELS, (CHANNELS, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), False),
        ("dw35", CHANNELS, (CHANNELS, 1, 3, 5), dict(pads=[1, 0, 1, 2], strides=[1, 2]), True),   # asymmetric
        ("dwdil", CHANNELS, (CHANNELS, 1, 3, 3), dict(pads=[2, 2, 2, 2], dilations=[2, 2]), True),
        ("dense", 1, (CHANNELS, CHANNELS, 3, 3), dict(pads=[1, 1, 1, 1]), True),
        ("grouped", 2, (CHANNELS, CHANNELS // 2, 3, 3), dict(pads=[1, 1, 1, 1]), False),
    ]
    x = "x"
    for name, group, shape, attrs, bias in layers:
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), f"{name}.w"))
        operands = [x, f"{name}.w"]
        if bias:
            inits.append(numpy_helper.from_array(rng.standard_normal(CHANNELS).astype(np.float32), f"{name}.b"))
            operands.append(f"{name}.b")
        nodes.append(helper.make_node("Conv", operands, [name], name=name, group=group,
                                      kernel_shape=list(shape[2:]), **attrs))
        x = name
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, 13, 15])],
                       [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


def _single(group: int, w_shape: tuple[int, ...], **attrs) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones(w_shape, np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", group=group, kernel_shape=list(w_shape[2:]), **attrs)
    model = onnx_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return onnx.shape_inference.infer_shapes(model)


def _imported(model: onnx.ModelProto, tmp_path) -> str:
    return import_onnx(model, "m", tmp_path, tmp_path / "w.irpa").mlir


def _convs(mlir: str) -> int:
    return mlir.count('torch.operator "onnx.Conv"')


@pytest.mark.parametrize("model", [
    _single(1, (4, 4, 3, 3)),
    _single(2, (4, 2, 3, 3)),
    _single(4, (8, 1, 3, 3)),           # two filters per channel: not one filter per channel
    _single(4, (4, 1, 3, 3), auto_pad="SAME_UPPER"),
], ids=["dense", "grouped", "multiplier-2", "auto-pad"])
def test_other_convolutions_are_left_alone(model, tmp_path):
    mlir = _imported(model, tmp_path)
    assert depthwise.rewrite_depthwise_convs(mlir) == (mlir, 0)


def test_the_chain_loses_its_four_depthwise_convs_and_keeps_the_others(tmp_path):
    mlir = _imported(_chain(), tmp_path)
    rewritten, count = depthwise.rewrite_depthwise_convs(mlir)
    assert (count, _convs(mlir), _convs(rewritten)) == (4, 6, 2)
    assert rewritten.count("linalg.generic") >= 4 and "util.optimization_barrier" not in rewritten


def test_only_host_regions_are_rewritten(tmp_path):
    mlir = _imported(_chain(), tmp_path)
    regions = (OutlinedRegion("r0", "r0", mlir, ("x",), ("grouped",)),
               OutlinedRegion("r1", "r1", mlir, ("x",), ("grouped",)))
    lowered, rewrites = host_lowering.lower(regions, frozenset({"r1"}))
    count = dict(rewrites)[depthwise.CHANNELS_LAST_REASON]
    assert count == 4 and lowered[0] is regions[0] and _convs(lowered[1].mlir) == 2


@pytest.mark.device
def test_a_host_build_gives_onnxruntimes_values_and_records_the_rewrite(tmp_path):
    path = tmp_path / "chain.onnx"
    onnx.save(_chain(), path)
    built = api.build(path, tmp_path / "b", BuildOptions(accel=None))
    assert ("Conv", 4) in {(r.op, r.count) for r in built.bundle.record.rewrites}
    x = np.random.default_rng(1).standard_normal((1, CHANNELS, 13, 15)).astype(np.float32)
    want = reference.session(path).run(None, {"x": x})[0]
    with runtime.load(built.bundle.path) as session:
        got = session.run({"x": x})[0]
    assert got.shape == want.shape
    assert_close(got, want, rtol=1e-4, atol=1e-4)
