"""`aot learn eval --end-to-end`: a real model held out, built with --policy learned --gate learned
and with the defaults on lavapipe, both timed; beside the best plan the database measured."""

from __future__ import annotations

import math

import pytest

from synthetic import VULKAN, FakeSession, graph, synthetic_db  # noqa: F401 - fixture
from aot.learn import end_to_end
from aot.learn.dataset import load_dataset
from aot.partition.partitioner import plan_from_groups, single_region_plan
from aot.partition.support import ACCEL, HOST, Group


@pytest.mark.device
@pytest.mark.slow     # trains, then builds one model twice for lavapipe and the CPU, and times both
def test_a_held_out_model_is_built_both_ways_and_timed(synthetic_db, tmp_path):
    pytest.importorskip("sklearn", reason="the [learn] extra (scikit-learn) is not installed")
    database, paths = synthetic_db
    data = load_dataset(database, VULKAN)
    held = str(paths[0])
    lines: list[str] = []
    (row,) = end_to_end.run(data, VULKAN, tmp_path, iterations=3, only=(held,), progress=lines.append)
    graph_data = next(g for g in data.graphs if g.model == held)
    assert row.model == held and row.plans == len(graph_data.plans)
    assert row.best_us == pytest.approx(min(p.total_us for p in graph_data.plans), abs=0.1)
    for shipped in (row.learned, row.default):
        assert math.isfinite(shipped.median_us) and shipped.median_us > 0
    # the default build ships greedy's plan or, gated, the whole model on the host: both collected
    assert row.default.database_us is not None and math.isfinite(row.default.database_us)
    assert row.gate.endswith("(learned)"), row.gate            # the held-out model's own cost model decided
    assert [p.name for p in tmp_path.iterdir()] == [end_to_end._folder(held)]
    assert (tmp_path / end_to_end._folder(held) / "model.json").is_file()
    table = end_to_end.render((row,))
    assert held in table and f"{row.learned.median_us:.0f}" in table
    assert any("learned" in s and "best measured" in s for s in lines)


def test_plans_are_described_by_where_their_regions_run():
    view = graph([("A", "B"), ("B", "C")])
    assert end_to_end.describe(single_region_plan(view, HOST)) == "all-host"
    assert end_to_end.describe(single_region_plan(view, ACCEL)) == "all-accel"
    mixed = plan_from_groups(view, [Group(HOST, ("A",)), Group(ACCEL, ("B",)), Group(HOST, ("C",))], {})
    assert end_to_end.describe(mixed) == "3 regions, 1 on the accelerator"


def test_the_table_compares_with_the_database_time_where_the_plan_was_collected():
    row = end_to_end.EndToEnd(
        "zoo:m", 7, end_to_end.Shipped("all-host", 300.0, 200.0), end_to_end.Shipped("all-accel", 90_000.0, None),
        200.0, "all-host", "all-host (learned)")
    line = end_to_end.render((row,)).splitlines()[-1]
    assert "300 (database 200)" in line and "| 1.00 |" in line       # the collected plan: its database time
    assert "| 450.00* |" in line                                      # not collected: timed now, marked


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_bundle_time_that_is_not_finite_is_an_error(bad, monkeypatch):
    from aot.checks import timing
    from aot.errors import AotError

    monkeypatch.setattr(timing, "medians_ms", lambda times: {"run": bad})
    with pytest.raises(AotError, match="median time"):
        end_to_end._alone_ms(FakeSession(None), {}, 1)   # runs instantly
