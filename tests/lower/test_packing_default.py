"""A conv-free host region's default flags follow the size of its matrix products (data tiling
where they pay for its packing dispatches, im2col's plain module where they do not), and the
graph's reading of a region (the learned model's keys) agrees with its MLIR's (the compile)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from aot.lower.flags import DATA_TILING, IM2COL, Holds
from conftest import onnx_model


def _chain(rows: int, width: int, depth: int = 3):
    """``depth`` x (MatMul by a [width, width] weight, then Tanh) over [1, rows, width]."""
    rng = np.random.default_rng(0)
    weights = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32) for _ in range(depth)]
    nodes, x = [], "x"
    for i in range(depth):
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"tanh{i}")]
        x = f"t{i}"
    nodes[-1].output[0] = "y"
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, rows, width]) for n in ("x", "y")]
    return onnx_model(nodes, io[:1], io[1:], [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)])


def _recurrent(steps_too: bool):
    """A MatMul of [1, 64, 128] by [128, 128] (2.1 MFLOP), then, with ``steps_too``, an ONNX LSTM
    (hidden 32, batch 1) over 64 steps of 16 of its columns: 12 kFLOP per step."""
    rng = np.random.default_rng(0)
    init = {"w": rng.standard_normal((128, 128)) / 12, "W": rng.standard_normal((1, 128, 16)) / 4,
            "R": rng.standard_normal((1, 128, 32)) / 6}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m" if steps_too else "y"], name="mm")]
    out = [1, 64, 128]
    if steps_too:
        nodes += [helper.make_node("Reshape", ["m", "shape"], ["s"], name="steps"),
                  helper.make_node("Slice", ["s", "starts", "ends", "axes"], ["xs"], name="cols"),
                  helper.make_node("LSTM", ["xs", "W", "R"], ["y"], name="lstm", hidden_size=32)]
        init |= {"shape": np.array([64, 1, 128]), "starts": np.array([0]), "ends": np.array([16]), "axes": np.array([2])}
        out = [64, 1, 1, 32]
    inits = [numpy_helper.from_array(v.astype(np.float32) if v.dtype == np.float64 else v, k) for k, v in init.items()]
    return onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 128])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)


def _build_and_read(tmp_path: Path, model: onnx.ModelProto, held: Holds, default: str) -> None:
    """Build ``model`` for the host: its one region compiled with ``default``, the compile's
    reading of its MLIR and the graph's reading of its nodes both ``held``, and its output
    onnxruntime's."""
    from aot import api, runtime
    from aot.checks import reference
    from aot.lower import flags
    from aot.options import BuildOptions
    from aot.partition import cost

    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    options = BuildOptions(accel=None)
    result = api.build(path, tmp_path / "out", options)
    manifest = json.loads((result.bundle.path / "manifest.json").read_text())
    assert [r.get("flags") for r in manifest["regions"]] == [[default]]
    (mlir,) = (tmp_path / "out").glob("build/regions/**/r0.mlir")
    planned = api.plan(path, options)
    (region,) = planned.plan.regions
    assert flags.holds(mlir.read_bytes()) == cost.holds(planned.view, region.nodes) == held
    x = np.random.default_rng(1).standard_normal(manifest["inputs"][0]["shape"]).astype(np.float32)
    want = reference.session(model.SerializeToString()).run(None, {"x": x})[0]
    with runtime.load(result.bundle.path) as session:
        (got,) = session.run({"x": x})
    assert np.isfinite(got).all() and np.isfinite(want).all()     # NaN would match NaN
    assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.device    # compiles with IREE
@pytest.mark.parametrize("rows, width, default", [(64, 128, DATA_TILING), (1, 16, IM2COL)],
                         ids=["2-MFLOP-products", "512-FLOP-products"])
def test_a_built_conv_free_region_gets_the_defaults_its_products_call_for(tmp_path, rows, width, default):
    _build_and_read(tmp_path, _chain(rows, width), Holds(False, 3, 3 * 2 * rows * width * width), default)


@pytest.mark.device    # compiles with IREE
@pytest.mark.parametrize("steps_too, default", [(True, IM2COL), (False, DATA_TILING)], ids=["with-lstm", "matmul-alone"])
def test_an_onnx_recurrences_steps_count_as_small_products(tmp_path, steps_too, default):
    # A host build unrolls the LSTM (frontend/lstm_unroll.py): one product of the 64 steps' inputs,
    # then one recurrent product per step but the first (its state is zero).
    steps = Holds(False, 64, 2 * 64 * 16 * 4 * 32 + 63 * 2 * 32 * 4 * 32) if steps_too else Holds()
    _build_and_read(tmp_path, _recurrent(steps_too), Holds(False, 1, 2 * 64 * 128 * 128) + steps, default)
