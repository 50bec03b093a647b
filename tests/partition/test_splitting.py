"""--memory-limit through the planner (no IREE): splits between the first labelling and merging,
pieces on their original's device, unsplittable nodes on the host with the reason, the splits
pinned in plan.json and replayed by --plan, and the flag's errors."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from aot import api, pipeline
from aot.errors import UsageError
from aot.models import examples
from aot.option_flags import add_arguments, from_arguments
from aot.options import BuildOptions
from aot.partition.plan import GateMode
from aot.partition.support import ACCEL, HOST
from aot.runtime.target import Target

VULKAN = Target.parse("vulkan")
KIB = 1024


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return examples.write(tmp_path_factory.mktemp("tiny") / "tiny.onnx")


def _options(**kw) -> BuildOptions:
    return BuildOptions(accel=VULKAN, **kw)


def test_no_limit_no_split(tiny):
    planned = pipeline.plan_model(tiny, _options(), suggest=False)
    assert planned.plan.splits == () and planned.record.memory is None
    assert "splits" not in planned.plan.to_json()     # plans without splits keep their digest


def test_nodes_over_the_limit_split_and_their_pieces_keep_the_device(tiny):
    planned = pipeline.plan_model(tiny, _options(memory_limits=(("vulkan", 300 * KIB),)), suggest=False)
    split = {s.node: s for s in planned.plan.splits}
    assert {"conv1", "bn1", "relu1", "pool1", "residual"} <= set(split)
    assert all(s.bytes_before > 300 * KIB >= s.bytes_after for s in split.values())
    names = {n.name for n in planned.view.nodes}
    device = {n: r.device for r in planned.plan.regions for n in r.nodes}
    for node in split:
        assert node not in names          # replaced by its pieces and their concat
        pieces = [n for n in names if n.startswith(f"{node}.split")]
        assert len([p for p in pieces if ".slice" not in p]) == len(split[node].pieces)
        joins = [f"{node}.concat"] if f"{node}.concat" in names else []   # gone where pieces feed pieces
        assert {device[p] for p in [*pieces, *joins]} == {ACCEL}
    assert "bn1.concat" not in names and "relu1.split0" in names   # conv1 -> bn1 -> relu1 -> pool1 piece by piece
    memory = planned.record.memory
    assert memory is not None and memory.splits == planned.plan.splits and memory.hosted == ()
    from aot import report

    shown = report.plan_summary(planned)
    assert "memory splits: 6 node(s)" in shown and "conv1 (Conv): 2 x channel axis 1 [8+8]" in shown
    assert memory.limits == (("vulkan", 300 * KIB),)


def test_a_node_that_no_split_fits_goes_to_the_host_with_the_reason(tiny):
    # 1 KiB: less than conv1's weights (16 x 3 x 3 x 3 floats), which every piece reads whole
    planned = pipeline.plan_model(tiny, _options(memory_limits=(("vulkan", 1 * KIB),), gate=GateMode.OFF), suggest=False)
    reasons = dict(planned.plan.reasons)
    device = {n: r.device for r in planned.plan.regions for n in r.nodes}
    assert device["conv1"] == HOST and "over the vulkan memory limit" in reasons["conv1"]
    assert "conv1" in dict(planned.record.memory.hosted)
    assert all(s.bytes_after <= 1 * KIB for s in planned.plan.splits)


def test_the_host_limit_splits_host_nodes(tiny):
    planned = pipeline.plan_model(tiny, BuildOptions(accel=None, memory_limits=(("local-task", 300 * KIB),)),
                                  suggest=False)
    assert {s.driver for s in planned.plan.splits} == {"local-task"} and len(planned.plan.splits) >= 5


def test_the_plan_pins_the_splits_and_plan_replays_them(tiny, tmp_path):
    planned = pipeline.plan_model(tiny, _options(memory_limits=(("vulkan", 300 * KIB),)), suggest=False)
    planned.plan.save(tmp_path / "plan.json")
    replayed = pipeline.plan_model(tiny, _options(plan_file=tmp_path / "plan.json"), suggest=False)
    assert replayed.plan.digest() == planned.plan.digest()
    assert [n.name for n in replayed.view.nodes] == [n.name for n in planned.view.nodes]


def test_memory_limit_flag_parses_like_device_memory_and_refuses_nonsense():
    p = argparse.ArgumentParser()
    add_arguments(p, BuildOptions)
    got = from_arguments(BuildOptions, p.parse_args(["--memory-limit", "vulkan=64MiB,local-task=1GiB"]))
    assert got.memory_limits == (("vulkan", 64 << 20), ("local-task", 1 << 30))
    for bad in ("vulkan", "vulkan=lots", "tpu=1GiB", "vulkan=0", ","):
        with pytest.raises(UsageError):
            from_arguments(BuildOptions, p.parse_args(["--memory-limit", bad]))


def test_a_limit_for_a_device_the_build_does_not_use_is_a_usage_error(tiny):
    with pytest.raises(UsageError, match="cuda"):
        pipeline.plan_model(tiny, _options(memory_limits=(("cuda", 1 << 20),)), suggest=False)


def test_a_pytorch_model_with_a_memory_limit_is_a_usage_error_before_export():
    with pytest.raises(UsageError, match="PyTorch"):
        api.plan("tests.torch_models:resnet_like", _options(memory_limits=(("vulkan", 1 << 20),),
                                                            example_inputs=(("x", (1, 3, 32, 32), "float32"),)))


def test_the_cli_says_so_without_a_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "aot.cli", "build", "tests.torch_models:resnet_like", "-o",
                           str(tmp_path / "out"), "--example-input", "x=1x3x32x32", "--memory-limit", "vulkan=1MiB"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.startswith("ERROR:") and "PyTorch" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_moving_a_region_to_the_host_keeps_the_splits(tiny):
    from aot.checks.verify import move_to_host
    from aot.record import RegionCheck

    planned = pipeline.plan_model(tiny, _options(memory_limits=(("vulkan", 300 * KIB),)), suggest=False)
    accel = next(r for r in planned.plan.regions if r.device == ACCEL)
    moved = move_to_host(planned.plan, (RegionCheck(accel.name, False, None, "boom"),))
    assert moved.splits == planned.plan.splits and moved.region(accel.name).device == HOST
    assert pipeline.whole_model(planned).plan.splits == planned.plan.splits


def test_a_chain_is_cut_along_its_consumers_axis_so_pieces_connect(tmp_path):
    """Alone, the Relu would cut by channels and the stem by rows at 1 MiB: aligned to the 1x1
    convolution's rows, each piece reads its producer's piece with no Concat and Slice between."""
    from test_splitting_build import _stem_model

    model = _stem_model(tmp_path / "stem.onnx")
    planned = pipeline.plan_model(model, _options(memory_limits=(("vulkan", 1024 * KIB),)), suggest=False)
    splits = {s.node: s for s in planned.plan.splits}
    assert set(splits) == {"stem", "relu", "pw"}
    assert {(s.axis, s.pieces) for s in splits.values()} == {(2, (64, 64, 64, 64))}
    assert all(s.bytes_after <= 1024 * KIB for s in splits.values())
    nodes = planned.view.nodes
    # Slices only of the graph input (the stem's rows with their halo), one Concat: the output's.
    assert all(n.inputs[0] == "x" for n in nodes if n.op_type == "Slice")
    assert [n.outputs[0] for n in nodes if n.op_type == "Concat"] == ["y"]
    assert sum(n.op_type == "Relu" for n in nodes) == 4
