"""`aot learn retime`: a model's stored plans timed again side by side into another database."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

import synthetic
from aot import runtime
from aot.checks import host_state
from aot.learn import collect, db as costdb, retime


def test_groups_keep_the_anchor_first_in_each_and_fit_the_limit():
    assert retime.groups_around_anchor([]) == []
    assert retime.groups_around_anchor([10, 10, 10], limit=100) == [[0, 1, 2]]
    groups = retime.groups_around_anchor([30, 40, 40, 40, 10], limit=100)
    assert groups == [[0, 1], [0, 2], [0, 3, 4]]
    # A plan too big to share a group with the anchor still gets one of its own with it.
    assert retime.groups_around_anchor([10, 500, 10], limit=100) == [[0, 1], [0, 2]]


def test_each_group_is_scaled_by_its_anchor_to_the_first_groups_time():
    # The second group ran 2x slower throughout (a busier machine): its ratios to the anchor stay.
    assert retime.scaled_to_anchor([{0: 100.0, 1: 150.0}, {0: 200.0, 2: 100.0}]) == {0: 100.0, 1: 150.0, 2: 50.0}


def _fake_devices(monkeypatch, us_per_region: float):
    """Builds and timing replaced: each plan "runs" in ``us_per_region`` x its region count, so
    the side-by-side times differ from the source's rule-made ones."""
    built: list = []

    def build(planned, out, options, cache=None):
        assert cache == out.parent / collect.CACHE   # the collection's compile cache
        out.mkdir(parents=True, exist_ok=True)   # a second retime builds into the same folders
        (out / "weights.irpa").write_bytes(b"0" * 10)
        built.append(planned.plan)
        return SimpleNamespace(bundle=SimpleNamespace(path=out), plan=planned.plan)

    def interleaved(calls, schedule, max_turns):
        calls = list(calls)
        assert len(calls) == len(built)   # every plan in one round, interleaved
        assert max_turns == int(retime.MAX_TURNS_FACTOR * schedule.iterations)
        times = {name: [1e-6 * us_per_region * len(built[int(name)].regions)] * schedule.iterations for name, _ in calls}
        return host_state.ByState(times, {name: [] for name in times}, (1.6,) * schedule.iterations)

    monkeypatch.setattr("aot.pipeline.build_planned", build)
    monkeypatch.setattr(retime.host_state, "interleaved_with_turn_yardstick", interleaved)
    monkeypatch.setattr(runtime, "load", lambda path: SimpleNamespace(__enter__=lambda s: s, __exit__=lambda s, *e: None))
    monkeypatch.setattr(retime.contextlib.ExitStack, "enter_context", lambda self, cm: cm)
    monkeypatch.setattr(runtime.manifest, "read", lambda path: SimpleNamespace(inputs=()))
    monkeypatch.setattr(retime.reference, "random_inputs", lambda specs, seed: {})
    return built


def test_every_stored_plan_is_timed_together_into_the_target_and_a_rerun_adds_nothing(tmp_path, monkeypatch):
    source, target = tmp_path / "costs.sqlite", tmp_path / "side.sqlite"
    (path,) = synthetic.models(tmp_path, real=1, generated=0)
    stored = synthetic.fill(source, [path], perturbations=3)
    built = _fake_devices(monkeypatch, 7.0)
    lines: list[str] = []
    done = retime.retime(str(path), source, target, tmp_path / "work", synthetic.VULKAN, iterations=5,
                         progress=lines.append)
    assert (done.plans, done.timed, done.skipped, done.groups, done.failed) == (stored, stored, 0, 1, ())
    assert f"{stored} plan(s), 0 already retimed" in lines[0]
    with costdb.CostDatabase(source) as db:
        before = {r.key: r for r in db.rows()}
    with costdb.CostDatabase(target) as db:
        rows = db.rows()
        assert db.region_count() == 0
    assert sorted(r.key for r in rows) == sorted(before)
    for r in rows:   # the same key, plan, model and devices; the side-by-side time; no region times
        src = before[r.key]
        assert (r.plan, r.model, r.graph, r.fingerprint) == (src.plan, src.model, src.graph, src.fingerprint)
        assert r.total_us == pytest.approx(7.0 * len(json.loads(r.plan)["regions"])) and r.total_us != src.total_us
    again = retime.retime(str(path), source, target, tmp_path / "work", synthetic.VULKAN, iterations=5)
    assert (again.timed, again.skipped) == (0, done.plans) and len(built) == done.timed


def test_rounds_time_every_plan_again_together_and_the_label_is_the_median_of_its_rows(tmp_path, monkeypatch):
    """``--rounds 3``: two more side-by-side timings of every plan (the first round's rows kept),
    each round all plans together; the dataset labels a plan by the median of its three rows."""
    from aot.learn import dataset

    source, target = tmp_path / "costs.sqlite", tmp_path / "side.sqlite"
    (path,) = synthetic.models(tmp_path, real=1, generated=0)
    stored = synthetic.fill(source, [path], perturbations=3)
    built = _fake_devices(monkeypatch, 7.0)
    assert retime.retime(str(path), source, target, tmp_path / "work", synthetic.VULKAN, iterations=5).timed == stored
    speeds = iter([0.5, 3.0])   # the machine 2x faster, then 3x slower: the medians are the first round's
    fake = retime.host_state.interleaved_with_turn_yardstick

    def slower(calls, schedule, max_turns):
        factor = next(speeds)
        split = fake(calls, schedule, max_turns)
        return dataclasses.replace(split, uncontended={n: [t * factor for t in ts] for n, ts in split.uncontended.items()})

    monkeypatch.setattr(retime.host_state, "interleaved_with_turn_yardstick", slower)
    built.clear()
    lines: list[str] = []
    done = retime.retime(str(path), source, target, tmp_path / "work", synthetic.VULKAN, iterations=5,
                         progress=lines.append, rounds=3)
    assert (done.timed, done.skipped, done.failed) == (2 * stored, 0, ())
    assert [line.split(": ", 1)[1] for line in lines if ": round " in line] == [
        f"round 1 of 2, {stored} plan(s)", f"round 2 of 2, {stored} plan(s)"]
    with costdb.CostDatabase(target) as db:
        rows = db.rows()
    times: dict[str, list[float]] = {}
    for r in rows:
        times.setdefault(r.key, []).append(r.total_us)
    assert len(times) == stored and all(len(t) == 3 for t in times.values())
    labels = dataset.load_dataset(target, synthetic.VULKAN).graphs[0].plans
    assert {p.key: p.total_us for p in labels} == {k: pytest.approx(sorted(t)[1]) for k, t in times.items()}
    assert all(min(t) < sorted(t)[1] < max(t) for t in times.values())
    again = retime.retime(str(path), source, target, tmp_path / "work", synthetic.VULKAN, iterations=5, rounds=3)
    assert (again.timed, again.skipped) == (0, stored)


@pytest.mark.parametrize("answering, factor", [(2, 1.0), (1, 3.0)])
def test_a_rounds_label_is_its_uncontended_turns_median_or_every_turns_where_too_few_answered(
        tmp_path, monkeypatch, answering, factor):
    """Five turns: ``answering`` of them uncontended at 1x, the rest contended at 3x. With two (as
    many as the benchmark asks of five), the label is the uncontended median, where every turn's
    would be the contended time; with one, too few, every turn's median."""
    source, target = tmp_path / "costs.sqlite", tmp_path / "side.sqlite"
    (path,) = synthetic.models(tmp_path, real=1, generated=0)
    synthetic.fill(source, [path], perturbations=0)
    built = _fake_devices(monkeypatch, 7.0)

    def by_state(calls, schedule, max_turns):
        times = {name: [7e-6 * len(built[int(name)].regions)] * schedule.iterations for name, _ in calls}
        return host_state.ByState({n: ts[:answering] for n, ts in times.items()},
                                  {n: [3 * t for t in ts[answering:]] for n, ts in times.items()},
                                  (1.6,) * answering + (1.1,) * (schedule.iterations - answering))

    monkeypatch.setattr(retime.host_state, "interleaved_with_turn_yardstick", by_state)
    lines: list[str] = []
    retime.retime(str(path), source, target, tmp_path / "work", synthetic.VULKAN, iterations=5, progress=lines.append)
    with costdb.CostDatabase(target) as db:
        rows = db.rows()
    regions = {r.key: len(json.loads(r.plan)["regions"]) for r in rows}
    assert rows and all(r.total_us == pytest.approx(factor * 7.0 * regions[r.key]) for r in rows)
    assert any(f"{answering} of 5 turns uncontended" in line for line in lines)


def test_a_retime_killed_in_a_round_keeps_the_rounds_it_finished_whole(tmp_path, monkeypatch):
    source, target = tmp_path / "costs.sqlite", tmp_path / "side.sqlite"
    (path,) = synthetic.models(tmp_path, real=1, generated=0)
    stored = synthetic.fill(source, [path], perturbations=3)
    _fake_devices(monkeypatch, 7.0)
    fake, rounds_run = retime.host_state.interleaved_with_turn_yardstick, []

    def killed_in_the_second(calls, schedule, max_turns):
        rounds_run.append(1)
        if len(rounds_run) == 2:
            raise KeyboardInterrupt   # Ctrl-C (or a kill) while the second round times
        return fake(calls, schedule, max_turns)

    monkeypatch.setattr(retime.host_state, "interleaved_with_turn_yardstick", killed_in_the_second)
    with pytest.raises(KeyboardInterrupt):
        retime.retime(str(path), source, target, tmp_path / "work", synthetic.VULKAN, iterations=5, rounds=3)
    with costdb.CostDatabase(target) as db:
        rows = db.rows()
    assert len(rows) == stored and len({r.key for r in rows}) == stored   # the first round, every plan once
    assert all(np.isfinite(r.total_us) and r.total_us > 0 for r in rows)


def test_the_cli_refuses_a_missing_source_and_the_source_as_target(tmp_path, capsys):
    from aot import cli

    assert cli.main(["learn", "retime", "zoo:x", "--db", str(tmp_path / "none.sqlite"), "--into", "t.sqlite"]) != 0
    assert "no cost database at" in capsys.readouterr().err
    (tmp_path / "c.sqlite").write_bytes(b"")
    assert cli.main(["learn", "retime", "zoo:x", "--db", str(tmp_path / "c.sqlite"),
                     "--into", str(tmp_path / "c.sqlite")]) != 0
    assert "--into names the source database" in capsys.readouterr().err


@pytest.mark.device   # builds with IREE and times on lavapipe
def test_a_real_collection_is_retimed_side_by_side_from_its_compile_cache(tmp_path, private_compile_cache):
    from test_collect import _mlp

    model, source, target = _mlp(tmp_path / "mlp.onnx"), tmp_path / "costs.sqlite", tmp_path / "side.sqlite"
    stored = collect.collect(model, source, tmp_path / "work", synthetic.VULKAN, perturbations=2, iterations=2)
    compiled = sorted(p for p in (tmp_path / "work" / collect.CACHE).rglob("*") if p.is_file())
    done = retime.retime(str(model), source, target, tmp_path / "work", synthetic.VULKAN, iterations=5)
    assert (done.plans, done.timed, done.groups, done.failed) == (stored.measured, stored.measured, 1, ())
    assert sorted(p for p in (tmp_path / "work" / collect.CACHE).rglob("*") if p.is_file()) == compiled
    with costdb.CostDatabase(source) as db:
        keys = {r.key for r in db.rows()}
    with costdb.CostDatabase(target) as db:
        rows = db.rows()
    assert {r.key for r in rows} == keys and all(r.total_us > 0 and r.total_us < float("inf") for r in rows)


def _renamed(plan_json: str) -> str:
    """A stored plan whose nodes carry the names an older front end gave them."""
    plan = json.loads(plan_json)
    for region in plan["regions"]:
        region["nodes"] = [f"old/{n}" for n in region["nodes"]]
    return json.dumps(plan)


def test_rows_whose_plan_no_longer_fits_are_measured_again_and_not_used(tmp_path, monkeypatch):
    """The key hashes labels, not node names: after a rename the keys stay and the stored plans stop
    fitting. Such rows do not count as measured (``collect``), are not retimed, and do not train;
    a row of the same key stored since, which fits, is what they use."""
    from aot.learn import dataset
    from aot.learn.key import stored_plan

    source, target = tmp_path / "costs.sqlite", tmp_path / "side.sqlite"
    (path,) = synthetic.models(tmp_path, real=1, generated=0)
    stored = synthetic.fill(source, [path], perturbations=3)
    with costdb.CostDatabase(source) as db:
        rows = db.rows()
    stale = tmp_path / "stale.sqlite"
    with costdb.CostDatabase(stale) as db:   # the same rows, every plan under the old names
        for r in rows:
            db.add(dataclasses.replace(r, plan=_renamed(r.plan)))
        db.add(rows[0])                      # one key measured again since, under today's names
    view = retime.measuring(str(path), synthetic.VULKAN).planned.view
    assert isinstance(stored_plan(_renamed(rows[0].plan), view), str) and "no longer fits" in stored_plan(
        _renamed(rows[0].plan), view)
    assert not isinstance(stored_plan(rows[0].plan, view), str)

    _fake_devices(monkeypatch, 7.0)
    done = retime.retime(str(path), stale, target, tmp_path / "work", synthetic.VULKAN, iterations=5)
    assert done.timed == 1 and len(done.left_out) == stored - 1 and done.failed == ()   # not "failed": stale
    assert all("no longer fits" in why for _, why in done.left_out)
    data = dataset.load_dataset(stale, synthetic.VULKAN)
    assert [len(g.plans) for g in data.graphs] == [1]
    assert len(data.skipped) == stored - 1
