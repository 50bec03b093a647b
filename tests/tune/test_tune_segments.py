"""Per-segment flag choice without IREE: the pipeline's compile and flag search are faked; which
candidates a group tries, the cuts and flags the chosen plan pins, the 3% rule and the record are
``aot/tune/segments.py``'s."""

from __future__ import annotations

import dataclasses

import pytest

from aot.bundle.write import Staged
from aot.frontend.graph import GraphView, Node, Value
from aot.partition.plan import Plan, Region, validate
from aot.partition.segments import segments
from aot.record import FlagPlan, RegionRecord, TuneCandidate, Tuning
from aot.runtime.manifest import HostRuntime, RegionEntry
from aot.runtime.target import Target
from aot.tune import segments as tseg
from aot.tune.candidates import FlagSet
from aot.tune.search import MIN_GAIN, TuneSettings
from conftest import small_manifest, small_record


def test_a_group_tries_the_regions_winner_first_then_its_ranking_within_the_bound():
    tuning = Tuning("O3", 50.0, 100.0, "cpu", (
        TuneCandidate("default", (), 100.0, 0.0, None), TuneCandidate("O2", ("-a",), 60.0, 0.0, None),
        TuneCandidate("O3", ("-b",), 50.0, 0.0, None), TuneCandidate("dt", ("-c",), None, None, "compile failed"),
        TuneCandidate("slow", ("-d",), 200.0, 0.0, None)))
    assert tseg.ranking(tuning) == ("O3", "O2", "default", "slow", "dt")
    offered = tuple(FlagSet(n, (n,)) for n in ("default", "O2", "O3", "dt", "slow", "new"))
    chosen = tseg.narrowed(tuning.winner, tseg.ranking(tuning), offered, 4)
    assert [s.name for s in chosen] == ["O3", "O2", "default", "slow"]
    assert [s.name for s in tseg.narrowed("gone", (), offered, 3)] == ["default", "O2", "O3"]
    # a winner compiled split finer (IREE refused it at its own split) is offered as the set it was
    split = Tuning("dt+split=64", 40.0, 100.0, "cpu", (
        TuneCandidate("default", (), 100.0, 0.0, None), TuneCandidate("O2", ("-a",), 60.0, 0.0, None),
        TuneCandidate("dt+split=64", ("-c", "-split"), 40.0, 0.0, None)))
    assert [s.name for s in tseg.narrowed(split.winner, tseg.ranking(split), offered, 3)] == ["dt", "O2", "default"]


def _chain_view() -> GraphView:
    names = [f"n{i}" for i in range(10)]
    nodes = [Node(n, "Relu", (names[i - 1] + ".out" if i else "in",), (f"{n}.out",)) for i, n in enumerate(names)]
    values = {"in": Value("in", "float32", (100,)), **{f"{n}.out": Value(f"{n}.out", "float32", (100,)) for n in names}}
    return GraphView.build(nodes, ["in"], [names[-1] + ".out"], values)


def test_a_large_host_region_is_replaced_by_its_groups_in_order_and_the_plan_stays_valid():
    view = _chain_view()
    plan = Plan((Region("r0", "host", tuple(n.name for n in view.nodes), flags=("-b",)),), ("r0",))
    split, cuts = tseg.split(plan, view, segments(view, 1), 4, lambda r: True)
    validate(split, view)
    assert split.schedule == ("r0s0", "r0s1", "r0s2", "r0s3") and cuts[0].names == split.schedule
    assert [len(r.nodes) for r in split.regions] == [3, 2, 3, 2] and all(r.flags is None for r in split.regions)
    assert tseg.split(plan, view, segments(view, 1), 4, lambda r: False)[1] == ()      # accelerator regions stay


def _staged(plan: Plan, tmp_path):
    """A staged candidate of ``plan`` as the pipeline's compile step returns it (nothing compiled)."""
    entries = tuple(RegionEntry(r.name, Target.host(), f"modules/{r.name}.vmfb", "main", ("x",), ("y",), "0" * 64,
                                flags=r.flags or ()) for r in plan.regions)
    manifest = dataclasses.replace(small_manifest(), regions=entries, schedule=plan.schedule,
                                   host_runtime=plan.host_runtime)
    record = dataclasses.replace(small_record(), regions=tuple(
        RegionRecord(r.name, "host", r.nodes, len(r.nodes), 100 * len(r.nodes), 1.0, None) for r in plan.regions))
    return Staged(tmp_path, manifest, record, plan, tmp_path)


@pytest.mark.parametrize(("mixed_us", "kept"), [(90.0, "mixed"), (98.0, "single")])
def test_the_mixed_plan_is_kept_only_when_it_beats_one_flag_set_by_the_margin(mixed_us, kept, tmp_path, monkeypatch):
    """Without IREE: the compile and the search are the pipeline's, faked; the decision, the pinned
    cuts and flags, and the record are this module's."""
    view = _chain_view()
    runtime = HostRuntime("local-sync", ())
    plan = Plan((Region("r0", "host", tuple(n.name for n in view.nodes), flags=("-b",)),), ("r0",), host_runtime=runtime)
    single = _staged(plan, tmp_path)
    whole = Tuning("O3", 50.0, 100.0, "cpu", (TuneCandidate("default", (), 100.0, 0.0, None),
                                               TuneCandidate("O3", ("-b",), 50.0, 0.0, None),
                                               TuneCandidate("O2", ("-a",), 70.0, 0.0, None)))
    compiled: list[tuple[str, Plan]] = []
    tried: dict[str, list[str]] = {}

    def compile_(p: Plan, candidate: str):
        compiled.append((candidate, p))
        return _staged(p, tmp_path)

    def search(staged, choose):
        out = {}
        for r in staged.plan.regions:
            sets = choose(r.name, (FlagSet("default", ()), FlagSet("O2", ("-a",)), FlagSet("O3", ("-b",))))
            if sets is None:
                continue
            tried[r.name] = [s.name for s in sets]
            # the first group runs best with O2, the others keep the region's winner
            fast = "O2" if r.name.endswith("s0") else "O3"
            table = tuple(TuneCandidate(s.name, s.flags, 40.0 if s.name == fast else 60.0, 0.0, None) for s in sets)
            out[r.name] = Tuning(fast, 40.0, 60.0, "cpu", table)
        return out

    monkeypatch.setattr(tseg, "compare", lambda a, b, rt, s: (100.0, mixed_us))
    monkeypatch.setattr(tseg, "device_identity", lambda driver: "test cpu")
    chosen, outcome = tseg.tune_segments(single, view, segments(view, 1), {"r0": whole}, compile_, search,
                                         TuneSettings(5, 1.0, 4), tmp_path / "cache", lambda s: None)
    names = ("r0s0", "r0s1", "r0s2", "r0s3")
    assert [c for c, _ in compiled] == ["segments", "mixed"]
    assert compiled[0][1].schedule == names and all(r.flags is None for r in compiled[0][1].regions)
    assert compiled[0][1].host_runtime == runtime      # groups are timed on the driver that ships
    assert all(t[0] == "O3" for t in tried.values()) and set(tried) == set(names)   # the region's winner first
    assert [g.region for g in outcome.groups] == list(names) and [g.tuning.winner for g in outcome.groups] == \
        ["O2", "O3", "O3", "O3"]
    assert (outcome.single_us, outcome.mixed_us, outcome.margin) == (100.0, mixed_us, MIN_GAIN)
    assert outcome.kept is FlagPlan(kept)
    if kept == "mixed":
        assert chosen.plan.schedule == names and chosen.plan.host_runtime == runtime
        assert [r.flags for r in chosen.plan.regions] == [("-a",), ("-b",), ("-b",), ("-b",)]
        assert chosen.manifest.host_runtime == runtime
        assert [chosen.record.region(n).tuning.winner for n in names] == ["O2", "O3", "O3", "O3"]
    else:
        assert dataclasses.replace(chosen, record=single.record) == single
    assert chosen.record.segment_tuning == outcome
    assert any("mixed" in line for line in outcome.lines())

    def forbidden(*args):
        raise AssertionError("an unchanged comparison was timed again")

    monkeypatch.setattr(tseg, "compare", forbidden)      # the same modules again: the cached times
    _, again = tseg.tune_segments(single, view, segments(view, 1), {"r0": whole}, compile_, search,
                                  TuneSettings(5, 1.0, 4), tmp_path / "cache", lambda s: None)
    assert again == outcome
