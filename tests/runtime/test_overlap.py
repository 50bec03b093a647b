"""Overlap: the manifest names the regions on different devices that may run at the same time,
and a session runs them at the same time (a lane per device) with the answers of a serial run."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from conftest import golden, run_aot

from aot import runtime
from aot.checks import reference
from aot.errors import AotError
from aot.runtime import lanes
from aot.runtime.manifest import Manifest
from aot.tools import overlap

# The two-branch example's region graph: r0 (accel) and r1 (host) both read the input, r2 joins them.
DIAMOND_IN = {"r0": ("image",), "r1": ("image",), "r2": ("a", "b")}
DIAMOND_OUT = {"r0": ("a",), "r1": ("b",), "r2": ("probs",)}
DEVICE = {"r0": "vulkan", "r1": "local-task", "r2": "local-task"}


def test_independent_regions_on_different_devices_overlap():
    waits = lanes.waits(DIAMOND_IN, DIAMOND_OUT)
    assert waits == {"r0": (), "r1": (), "r2": ("r0", "r1")}
    assert lanes.overlapping(("r0", "r1", "r2"), waits, DEVICE) == (("r0", "r1"),)
    assert lanes.lanes(("r0", "r1", "r2"), DEVICE) == (("r0",), ("r1", "r2"))
    # The same regions all on one device: nothing to overlap.
    assert lanes.overlapping(("r0", "r1", "r2"), waits, dict.fromkeys(DEVICE, "vulkan")) == ()


def test_a_chain_across_devices_never_overlaps_even_through_another_region():
    waits = lanes.waits({"r0": ("x",), "r1": ("a",), "r2": ("b",)}, {"r0": ("a",), "r1": ("b",), "r2": ("y",)})
    device = {"r0": "vulkan", "r1": "local-task", "r2": "vulkan"}
    # r2 depends on r0 only through r1: still ordered.
    assert lanes.overlapping(("r0", "r1", "r2"), waits, device) == ()


def test_finish_time_replays_the_lanes():
    waits = lanes.waits(DIAMOND_IN, DIAMOND_OUT)
    durations = {"r0": 30.0, "r1": 20.0, "r2": 1.0}
    assert lanes.finish_time(("r0", "r1", "r2"), DEVICE, waits, durations) == 31.0
    assert lanes.finish_time(("r0", "r1", "r2"), dict.fromkeys(DEVICE, "vulkan"), waits, durations) == 51.0
    # Devices on the same cores (lavapipe beside the CPU): nothing overlaps, as if one device.
    assert lanes.finish_time(("r0", "r1", "r2"), DEVICE, waits, durations, one_lane=True) == 51.0


def _runner() -> lanes.LaneRunner:
    return lanes.LaneRunner(lanes.lanes(("r0", "r1", "r2"), DEVICE), lanes.waits(DIAMOND_IN, DIAMOND_OUT))


def test_the_runner_runs_both_lanes_at_once_and_the_join_after_both():
    barrier = threading.Barrier(2, timeout=30)   # breaks unless r0 and r1 are in flight together
    finished: list[str] = []

    def run_region(name: str) -> None:
        if name in ("r0", "r1"):
            barrier.wait()
            time.sleep(0.05 if name == "r0" else 0.0)   # r0 finishes last: r2 must still wait for it
        finished.append(name)

    runner = _runner()
    try:
        for _ in range(3):   # the runner serves call after call
            finished.clear()
            runner.run(run_region)
            assert finished[-1] == "r2" and sorted(finished) == ["r0", "r1", "r2"]
    finally:
        runner.close()


def test_a_failing_region_stops_the_other_lanes_and_its_error_is_raised():
    ran: list[str] = []

    def run_region(name: str) -> None:
        if name == "r0":
            time.sleep(0.05)
            raise RuntimeError("r0 failed on its device")
        ran.append(name)

    runner = _runner()
    try:
        with pytest.raises(RuntimeError, match="r0 failed"):
            runner.run(run_region)
    finally:
        runner.close()
    assert ran == ["r1"]   # the join never ran on a half-computed input


def test_a_manifest_whose_overlap_names_an_unknown_region_is_refused(vulkan_bundle):
    d = vulkan_bundle.bundle.manifest.to_json()
    d["overlap"] = [["r0", "nope"]]
    with pytest.raises(ValueError, match="overlap names a region"):
        Manifest.from_json(d)


@pytest.fixture(scope="module")
def two_branch(tmp_path_factory):
    """The two-branch example built with its plan: branch a on lavapipe, branch b and the join on the CPU."""
    out = tmp_path_factory.mktemp("overlap")
    bundle = overlap.build_example(out)
    return bundle, out / "model" / f"{overlap.NAME}.onnx"


@pytest.mark.device  # builds with IREE and runs on lavapipe
def test_the_two_branch_example_records_its_overlap_and_matches_onnxruntime(two_branch):
    bundle, model = two_branch
    m = runtime.load(bundle).manifest
    assert m.overlap == (("r0", "r1"),)
    assert [m.driver(m.region(r)) for r in m.schedule] == ["vulkan", "local-task", "local-task"]
    golden(bundle, model)
    assert "overlap: r0 || r1" in run_aot("report", str(bundle)).stdout


def _watch(session, barrier: threading.Barrier | None) -> list[int]:
    """Wrap the two branches' real module calls: count how many are in flight at once, and with
    a barrier make each wait for the other to start (it breaks if they never run together)."""
    in_flight, most = [0], [0]
    lock = threading.Lock()
    for name in ("r0", "r1"):
        def call(*args, invoke=session._invokers[name]):
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
            if barrier is not None:
                barrier.wait()
            try:
                return invoke(*args)
            finally:
                with lock:
                    in_flight[0] -= 1
        session._invokers[name] = call
    return most


@pytest.mark.device
def test_a_session_runs_the_two_branches_at_the_same_time_and_a_serial_one_does_not(two_branch):
    bundle, _ = two_branch
    inputs = reference.random_inputs(runtime.load(bundle).manifest.inputs, seed=1)
    with runtime.load(bundle) as overlapped, runtime.load(bundle, overlap=False) as serial:
        both = _watch(overlapped, threading.Barrier(2, timeout=30))
        one = _watch(serial, None)
        a, b = overlapped.run(inputs), serial.run(inputs)
    assert both == [2] and one == [1]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.device
def test_bench_overlap_times_both_modes_and_refuses_a_bundle_without_overlap(two_branch, vulkan_bundle):
    bundle, _ = two_branch
    result = overlap.bench(bundle, iterations=2, warmup=1)
    assert result.overlap == (("r0", "r1"),) and result.max_abs_diff == 0.0
    assert result.serial_ms > 0 and result.overlapped_ms > 0
    times = dict(result.region_ms)
    assert result.bound_ms == pytest.approx(max(times["r0"], times["r1"]) + times["r2"])
    assert "ratio serial/overlapped:" in result.text()
    with pytest.raises(AotError, match="no regions on different devices that may overlap") as e:
        overlap.bench(vulkan_bundle.bundle.path)
    assert "two-branch example" in e.value.hint
