"""`aot profile`: every region's dispatches timed on its own device by IREE's HAL profiler, beside
onnxruntime's kernel shares."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from conftest import onnx_model, run_aot

from aot.errors import AotError
from aot.tools.profile import (DispatchTime, Profile, RegionProfile, _dispatches, _profiled_span_us, _rows, _run,
                               by_kind, dispatch_kind, profile_bundle, work_flops)


def test_dispatch_kind_drops_number_shapes_and_element_type():
    assert dispatch_kind("r0$async_dispatch_22_conv_12x80x240x5x5_f32") == "conv"
    assert dispatch_kind("r0$async_dispatch_92_softmax_40x6625xf32_dispatch_tensor_store") == "softmax"
    assert dispatch_kind("r1$async_dispatch_0_elementwise_broadcast_10_i64") == "elementwise_broadcast"
    assert dispatch_kind("main$async_dispatch_3_matmul_like_6x80x480x480_f32") == "matmul_like"
    assert dispatch_kind("r0$async_dispatch_7") == "other"


def test_a_contraction_is_rated_on_the_work_its_name_states():
    # a 4x4 convolution over 12 channels to 64 at 112x112: 2 flops per output, channel and tap
    assert work_flops("r0$async_dispatch_2_conv_64x112x112x12x4x4_f32") == 2 * 64 * 112 * 112 * 12 * 16
    assert work_flops("main$async_dispatch_3_matmul_like_6x80x480x480_f32") == 2 * 6 * 80 * 480 * 480
    # the dispatch's own number is not a size, a suffix is not part of the root op, and
    # data movement and elementwise work are not rated
    assert work_flops("r0$async_dispatch_7_matmul_f32") is None
    assert work_flops("r0$async_dispatch_3_elementwise_1x64x56x111_f32") is None
    assert work_flops("r0$_encoding_39_encode_512x196xf32_to_512x196xf32") is None
    conv = DispatchTime("r0$async_dispatch_2_conv_8x4x4x8x3x3_f32", calls=2.0, us=4.0)   # 18,432 flops a call
    assert conv.gflop_per_s == pytest.approx(2 * 18_432 / 4.0 / 1e3)
    assert DispatchTime("r0$async_dispatch_3_elementwise_8_f32", 1.0, 1.0).gflop_per_s is None
    region = RegionProfile("r0", "llvm-cpu:host", "local-task", 1, 10.0,
                           (conv, DispatchTime("r0$async_dispatch_3_elementwise_8_f32", 1.0, 1.0)))
    profile = Profile("m", (region,), 5.0, (("Conv", 4.0),))
    lines = profile.text().splitlines()
    assert next(line for line in lines if "conv_8x4x4x8x3x3" in line).endswith("9 GFLOP/s")
    assert "GFLOP/s" not in next(line for line in lines if "elementwise_8" in line)
    rates = [d["gflop_per_s"] for d in profile.to_json()["regions"][0]["dispatches"]]
    assert rates == [pytest.approx(9.216), None]


def test_statistics_rows_become_per_run_times_slowest_first():
    rows = [{"type": "statistics_summary"},
            {"row_type": "host_execution_function", "function_name": "r0$async_dispatch_1_conv_8x8_f32",
             "sample_count": 10, "total_duration_ns": 50_000},
            {"row_type": "host_execution_command_operation", "function_name": "r0$async_dispatch_1_conv_8x8_f32",
             "sample_count": 10, "total_duration_ns": 50_000},   # the same calls seen per command: not again
            {"row_type": "dispatch_function", "function_name": "r0$async_dispatch_2_matmul_4x4x4_f32",
             "sample_count": 40, "total_duration_ns": 400_000}]
    found = _dispatches(_rows("\n".join(json.dumps(r) for r in rows)), runs=10)
    assert [(d.kind, d.calls, d.us) for d in found] == [("matmul", 4.0, 40.0), ("conv", 1.0, 5.0)]
    assert by_kind(found) == (("matmul", 40.0), ("conv", 5.0))


@pytest.mark.device  # runs the example's Vulkan region on lavapipe and its host region on local-task
def test_profile_times_each_region_on_its_device(vulkan_bundle, example_model, tmp_path):
    out = run_aot("profile", str(vulkan_bundle.bundle.path), "--model", str(example_model), "--runs", "3",
                  "--json", str(tmp_path / "p.json")).stdout
    data = json.loads((tmp_path / "p.json").read_text())
    drivers = {r["region"]: r["driver"] for r in data["regions"]}
    assert set(drivers.values()) == {"vulkan", "local-task"}, drivers
    for r in data["regions"]:
        assert r["dispatches"] and r["wall_us"] > 0 and r["dispatch_us"] > 0
        assert all(d["calls"] >= 1 for d in r["dispatches"])
    vulkan = next(r for r in data["regions"] if r["driver"] == "vulkan")
    assert "conv" in vulkan["by_kind_us"]         # the CNN's convolutions run on the accelerator
    rates = [d["gflop_per_s"] for d in vulkan["dispatches"] if dispatch_kind(d["name"]) == "conv"]
    assert rates and all(math.isfinite(r) and r > 0 for r in rates), rates
    assert "Conv" in data["onnxruntime_kernel_us"] and data["onnxruntime_wall_us"] > 0
    # Conv is in the printed shares; not necessarily first: 3 runs of a tiny CNN on a loaded machine
    # let a preempted Relu outweigh it (seen once in a make test run)
    shares = next(line for line in out.splitlines() if "kernel shares:" in line)
    assert "in dispatches" in out and "Conv " in shares


def test_profile_without_its_source_model_says_what_to_pass(host_bundle, tmp_path):
    with pytest.raises(AotError, match="--model"):
        profile_bundle(host_bundle.bundle.path, tmp_path / "moved.onnx", runs=1)


@pytest.mark.device  # builds a host bundle twice (IREE llvm-cpu) and profiles it
def test_a_region_cut_after_a_front_end_rewrite_is_profiled_on_the_rewritten_tensors(tmp_path):
    """A host region cut after a long filter's banded product (what per-segment tuning keeps on
    CREPE) passes a tensor the source model does not have: the profile computes the regions'
    inputs from the model as the build loaded it."""
    import aot
    from aot.options import BuildOptions

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 1, 1, 64)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="filter", kernel_shape=[1, 64], strides=[1, 2]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 512])
    model = onnx_model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    path = tmp_path / "filter.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(model), str(path))
    whole = aot.build(path, tmp_path / "whole", BuildOptions(accel=None))
    plan = json.loads((whole.bundle.path / "plan.json").read_text())
    (region,) = plan["regions"]
    cut = region["nodes"].index("filter.banded.product") + 1     # the tensor crossing is the rewrite's
    plan["regions"] = [{**region, "name": "first", "nodes": region["nodes"][:cut]},
                       {**region, "name": "rest", "nodes": region["nodes"][cut:]}]
    plan["schedule"] = ["first", "rest"]
    (tmp_path / "cut.json").write_text(json.dumps(plan))
    built = aot.build(path, tmp_path / "cut", BuildOptions(accel=None, plan_file=tmp_path / "cut.json"))
    assert [r.name for r in built.bundle.manifest.regions] == ["first", "rest"]
    assert built.bundle.manifest.regions[1].inputs == ("filter.banded.product",)
    found = profile_bundle(built.bundle.path, runs=2)
    assert [r.region for r in found.regions] == ["first", "rest"]
    for r in found.regions:
        assert r.dispatches and math.isfinite(r.wall_us) and r.wall_us > 0


def test_the_profiled_wall_time_spans_the_profiled_calls_alone():
    """The wall time is the host queue operations' span over the calls, not iree-benchmark-module's
    mean (which counts the first call's set-up before any event); device clocks are not mixed in."""
    def row(kind: str, start: int, end: int, domain: str = "iree_host_time_ns") -> dict:
        return {"type": "statistics_row", "row_type": kind, "time_domain": domain, "sample_count": 4,
                "first_start_time": start, "last_end_time": end}

    rows = [row("host_execution_queue_operation", 2_000_000, 9_000_000),
            row("host_execution_queue_operation", 1_000_000, 10_000_000),
            row("dispatch_queue_operation", 0, 99_000_000, domain="device_tick"),     # another clock
            row("host_execution_function", 0, 50_000_000)]                            # not a queue operation
    assert _profiled_span_us(_rows("\n".join(json.dumps(r) for r in rows))) == 9_000.0
    assert _profiled_span_us(_rows(json.dumps(rows[-1]))) is None


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")
def test_the_profiled_tool_waits_as_a_sessions_caller_does():
    proc = _run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"])
    assert int(proc.stdout) == os.SCHED_BATCH
