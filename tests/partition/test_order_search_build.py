"""A plan the order search chose, built for real: it compiles, runs on lavapipe and the CPU with
onnxruntime's answers, its plan.json pins the searched regions and schedule, and a build of that
plan file searches nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot import api, record, runtime
from aot.options import BuildOptions
from aot.partition import search
from aot.partition.order import OrderMode
from aot.partition.plan import GateMode, Plan
from aot.partition.support import Overrides
from conftest import golden

pytestmark = [pytest.mark.device, pytest.mark.slow]   # compiles four regions, runs them on lavapipe


def two_branches(path: Path, size: int = 32) -> Path:
    """in -> x -> h1 (conv, kept on the host) -> j, and x -> h2 -> a (an 11x11 conv) -> j: greedy
    fuses x, h1 and h2, so the accelerator's conv waits for h1; the search issues a beside h1."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((16, 64, 3, 3)) * 0.05).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((16, 64, 11, 11)) * 0.01).astype(np.float32), "w2")
    nodes = [helper.make_node("Relu", ["in"], ["x.out"], name="x"),
             helper.make_node("Conv", ["x.out", "w1"], ["h1.out"], name="h1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["x.out"], ["h2.out"], name="h2"),
             helper.make_node("Conv", ["h2.out", "w2"], ["a.out"], name="a", pads=[5, 5, 5, 5]),
             helper.make_node("Add", ["a.out", "h1.out"], ["y"], name="j")]
    graph = helper.make_graph(nodes, "two_branches",
                              [helper.make_tensor_value_info("in", TensorProto.FLOAT, [1, 64, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, size, size])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_a_searched_plan_builds_matches_onnxruntime_and_replays_without_searching(tmp_path, monkeypatch):
    model = two_branches(tmp_path / "two_branches.onnx")
    options = BuildOptions(order=OrderMode.SEARCH, min_compute=1, gate=GateMode.OFF,
                           overrides=Overrides(host_nodes=("x", "h1", "h2")))
    bundle = api.build(model, tmp_path / "searched", options).bundle.path
    plan = Plan.load(bundle / "plan.json")
    outcome = record.read(bundle).partition.order_search
    assert outcome is not None and outcome.kept is OrderMode.SEARCH
    assert [(r.device, r.nodes) for r in map(plan.region, plan.schedule)] == [
        ("host", ("x", "h2")), ("accel", ("a",)), ("host", ("h1",)), ("accel", ("j",))]
    assert runtime.load(bundle).manifest.schedule == plan.schedule
    golden(bundle, model)

    def no_search(*args, **kwargs):
        raise AssertionError("a plan file must be replayed, not searched")

    monkeypatch.setattr(search, "search", no_search)
    replayed = api.build(model, tmp_path / "replayed", dataclasses.replace(options, plan_file=bundle / "plan.json"))
    assert Plan.load(replayed.bundle.path / "plan.json").digest() == plan.digest()
    golden(replayed.bundle.path, model)


@pytest.mark.full   # builds both plans and the whole model, times all three on lavapipe and the CPU
def test_measure_times_the_searched_plan_against_greedy_and_keeps_the_faster(tmp_path):
    model = two_branches(tmp_path / "two_branches.onnx", size=16)   # the smallest size the search wins at (lavapipe times it)
    options = BuildOptions(order=OrderMode.SEARCH, min_compute=1, gate=GateMode.MEASURED,
                           overrides=Overrides(host_nodes=("x", "h1", "h2")))
    lines: list[str] = []
    bundle = api.build(model, tmp_path / "measured", options, progress=lines.append).bundle.path
    outcome = record.read(bundle).partition.order_search
    assert outcome is not None
    greedy_us, searched_us = outcome.measured_greedy_us, outcome.measured_searched_us
    assert greedy_us is not None and searched_us is not None
    assert np.isfinite([greedy_us, searched_us]).all() and min(greedy_us, searched_us) > 0
    assert outcome.kept is (OrderMode.SEARCH if searched_us < greedy_us else OrderMode.GREEDY)
    assert any(line.startswith("measure  searched order") for line in lines)
    golden(bundle, model)
