"""A plan the order search chose, built for real: it compiles, runs on lavapipe and the CPU with
onnxruntime's answers, its plan.json pins the searched regions and schedule, and a build of that
plan file searches nothing."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot import api, record, report, runtime
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
    assert outcome is not None and outcome.measured_scoring is not None
    if outcome.measured_scoring.kept is OrderMode.GREEDY:   # timed region by region, greedy won: nothing to compare
        assert outcome.kept is OrderMode.GREEDY and outcome.measured_greedy_us is None
        golden(bundle, model)
        return
    greedy_us, searched_us = outcome.measured_greedy_us, outcome.measured_searched_us
    assert greedy_us is not None and searched_us is not None
    assert np.isfinite([greedy_us, searched_us]).all() and min(greedy_us, searched_us) > 0
    assert outcome.kept is (OrderMode.SEARCH if searched_us < greedy_us else OrderMode.GREEDY)
    assert any(line.startswith("measure  searched order") for line in lines)
    golden(bundle, model)


def test_measure_scores_the_search_with_timed_regions_and_a_replay_times_nothing(tmp_path, monkeypatch):
    """--order search --measure: candidate plans compiled and each distinct region timed once on
    lavapipe or the CPU, the search scored again with those times, recorded; the bundle matches
    onnxruntime, and a build of its plan.json times nothing."""
    from aot.checks import measure, measured_order
    from aot.checks.session import CheckSession

    # Few timed calls: lavapipe takes a good fraction of a second per call of the 11x11 conv.
    monkeypatch.setattr(measured_order, "REPEATS", 3)
    monkeypatch.setattr(measure, "side_by_side", functools.partial(measure.side_by_side, repeats=3, warmup=1))
    model = two_branches(tmp_path / "two_branches.onnx", size=8)
    options = BuildOptions(order=OrderMode.SEARCH, min_compute=1, gate=GateMode.MEASURED, measure_plans=3,
                           overrides=Overrides(host_nodes=("x", "h1", "h2")))
    lines: list[str] = []
    bundle = api.build(model, tmp_path / "measured", options, progress=lines.append).bundle.path
    outcome = record.read(bundle).partition.order_search
    assert outcome is not None and outcome.measured_scoring is not None
    scoring = outcome.measured_scoring
    # greedy's two regions and the searched plan's four, each timed once: six distinct regions
    assert scoring.plans_timed >= 2 and scoring.regions_timed >= 6
    assert scoring.scored_measured >= 6 and scoring.seconds > 0
    assert [s.index for s in scoring.segments] == [s.index for s in outcome.segments]
    assert all(s.greedy_us > 0 and s.chosen_us > 0 for s in scoring.segments)
    assert outcome.kept is scoring.kept or outcome.measured_greedy_us is not None   # the whole runs may overrule it
    assert any(line.startswith("order    scored") and "by measurement" in line for line in lines)
    assert "scored with measured region times" in report.text(runtime.load(bundle).manifest, record.read(bundle))
    golden(bundle, model)

    def no_timing(*args, **kwargs):
        raise AssertionError("a plan file is replayed: nothing is timed")

    monkeypatch.setattr(CheckSession, "region_times", no_timing)
    monkeypatch.setattr(measure, "side_by_side", no_timing)
    monkeypatch.setattr(measured_order, "rescore", no_timing)
    replayed = api.build(model, tmp_path / "replayed", dataclasses.replace(options, plan_file=bundle / "plan.json"))
    assert Plan.load(replayed.bundle.path / "plan.json").digest() == Plan.load(bundle / "plan.json").digest()
    golden(replayed.bundle.path, model)
