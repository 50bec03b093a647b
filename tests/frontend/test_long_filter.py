"""A Conv along one axis with a long kernel, or any kernel over a batch, becomes a banded matmul
with the same values (Basic Pitch's, PESTO's, CREPE's and ICLabel's, down the rows as well as along
them, and seeded random geometries: channels, strides, padding, bias, 3-D and 4-D); the block weighs
the input's copies against the multiply-adds; short kernels over one image, dilated, SAME-padded
and two-dimensional kernels, and ones whose band would be too large, are left alone; and a host
build matches onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from dataclasses import replace

from aot.frontend.long_filter import MAX_BAND, MIN_TAPS, Band, block_choices, cheapest_block, long_filters_as_matmuls
from conftest import golden, on_host, onnx_model, rewrite_outputs


def _filter(length=1000, taps=256, stride=2, pads=(0, 0), bias=True, batch=1, rank=4, cin=1, cout=1,
            kernel_rows=1, **attrs) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    lead = [1] * (rank - 3)
    w = rng.standard_normal((cout, cin, *([kernel_rows] if rank == 4 else []), taps)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b"))
    zeros = [0] * (rank - 3)
    if "auto_pad" not in attrs:
        attrs["pads"] = [*zeros, pads[0], *zeros, pads[1]]
    node = helper.make_node("Conv", ["x", "w", *(["b"] if bias else [])], ["y"], name="filter",
                            kernel_shape=list(w.shape[2:]), strides=[*([1] * (rank - 3)), stride], **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, cin, *[kernel_rows * d for d in lead], length])
    model = onnx_model([node], [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


def _along_rows(length=128, taps=64, stride=1, pads=(31, 32), batch=3, cin=16, cout=16) -> onnx.ModelProto:
    """CREPE's layers: a (taps x 1) kernel down the rows of a one-column input."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((cout, cin, taps, 1)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="filter", kernel_shape=[taps, 1],
                            strides=[stride, 1], pads=[pads[0], 0, pads[1], 0])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, cin, length, 1])
    model = onnx_model([node], [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


def _random_geometries(count: int) -> list[onnx.ModelProto]:
    rng = np.random.default_rng(7)
    models = []
    for _ in range(count):
        taps = int(rng.integers(MIN_TAPS, 300))
        length = taps + int(rng.integers(1, 3000))
        pads = (int(rng.integers(0, taps)), int(rng.integers(0, taps)))
        models.append(_filter(length, taps, stride=int(rng.integers(1, 6)), pads=pads, bias=bool(rng.integers(2)),
                              batch=int(rng.integers(1, 4)), rank=int(rng.integers(3, 5)),
                              cin=int(rng.choice([1, 1, 3, 8])), cout=int(rng.choice([1, 1, 2, 5]))))
    return models


@pytest.mark.parametrize("model", [
    _filter(length=43844),                                       # Basic Pitch's first low-pass: 256 taps, stride 2
    _filter(length=216, taps=343, stride=1, pads=(127, 127), bias=False, batch=5, rank=3),   # PESTO's pitch head
    _filter(length=216, taps=39, stride=3, rank=3, batch=2),     # PESTO's voicing filter
    _filter(length=219, taps=39, stride=1, pads=(19, 19), rank=3, batch=6, cin=40, cout=40),   # PESTO's prefilters
    _filter(length=219, taps=39, stride=1, pads=(19, 19), rank=3, batch=3, cin=1, cout=40),    # its first
    _filter(length=81, taps=42, stride=2, rank=3),               # a sample past the last window: cut off
    _along_rows(),                                               # CREPE's 64-tap layers, down the rows
    _along_rows(length=1024, taps=512, stride=4, pads=(254, 254), cin=1, cout=32),   # and its first
    # Short filters over a batch: the product folds the batch (ICLabel's 1 x 3 over 100 bins).
    _filter(length=100, taps=3, stride=1, pads=(1, 1), batch=6, cin=16, cout=24),
    _filter(length=100, taps=3, stride=1, pads=(1, 1), batch=4, cin=1, cout=8),
    _filter(length=219, taps=2, stride=1, batch=5, rank=3, cin=40, cout=30),
    _filter(length=219, taps=1, stride=1, batch=5, rank=3, cin=40, cout=30),     # PESTO's 1 x 1
    *_random_geometries(24),
])
def test_same_values_as_the_convolution(model):
    result = long_filters_as_matmuls(model)
    assert result.changed == 1
    assert "Conv" not in {n.op_type for n in result.model.graph.node}
    assert "MatMul" in {n.op_type for n in result.model.graph.node}
    got, want = rewrite_outputs(model, result.model)
    assert got.shape == want.shape
    assert_close(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("model", [
    _filter(taps=MIN_TAPS - 1),                 # short, over one image: IREE's own convolution
    _filter(length=64, taps=64, cin=512, cout=512, rank=3),      # W would be 16M elements at any block
    _filter(kernel_rows=2),                     # a 2-D kernel: not one filter along one axis
    _filter(dilations=[1, 2]),
    _filter(length=300, auto_pad="SAME_UPPER"),
    _filter(length=256, taps=256),              # one output: nothing to block
], ids=["short", "band-too-large", "2-d-kernel", "dilated", "same-upper", "one-output"])
def test_other_convolutions_are_left_alone(model):
    result = long_filters_as_matmuls(model)
    assert result.changed == 0 and result.model is model


def test_the_block_weighs_the_input_copies_against_the_multiply_adds():
    # CREPE's second layer: 128 -> 16 channels, 64 taps over 128 outputs of 100 frames. Capped by
    # W's size alone (stop 55) its block was 4, which copies the input 17 times.
    band = Band(batch=100, channels=128, length=128, begin=31, end=32, taps=64, stride=1, filters=16)
    chosen = cheapest_block(band)
    assert chosen is not None and chosen.elements <= MAX_BAND
    assert chosen.cost == min(b.cost for b in block_choices(band))
    direct_flops = 2 * band.batch * band.outputs * band.taps * band.channels * band.filters
    def copies(b: Band) -> float:
        return b.x_elements / (b.batch * b.channels * (b.length + b.begin + b.end))

    assert copies(chosen) < 6 < copies(replace(band, block_limit=4))
    assert 2 * chosen.x_elements * chosen.block * chosen.filters < 1.3 * direct_flops
    # One channel in and out (Basic Pitch's low-pass): copies are cheap, the widest block is kept.
    lowpass = Band(batch=1, channels=1, length=43844, begin=127, end=128, taps=256, stride=2, filters=1)
    assert cheapest_block(lowpass) == lowpass
    # A short filter over a batch: one row per output, the windows side by side (im2col, channels
    # last), so that the product's rows run over the whole batch.
    short = Band(batch=80, channels=128, length=100, begin=1, end=1, taps=3, stride=1, filters=256)
    assert cheapest_block(short).block == 1 and short.block > 1
    # No block fits the cap: left to IREE's convolution.
    assert cheapest_block(Band(batch=1, channels=512, length=64, begin=0, end=0, taps=64, stride=1,
                               filters=512)) is None


@pytest.mark.device    # compiles with IREE
def test_a_host_build_runs_the_banded_product_and_matches_onnxruntime(tmp_path):
    path, loaded, bundle = on_host(tmp_path, _filter(length=4000, pads=(3, 5)))
    assert "MatMul" in {n.op_type for n in loaded.graph.node}
    golden(bundle, path, seed=1, rtol=1e-4, atol=1e-3, finite=True)
