"""The order search scored with measured region times (--order search --measure), without IREE: a
fake measurement table stands in for the devices. The measured durations decide where the
estimates would decide otherwise; the candidates to time are few, distinct, greedy's first and
deterministic; unmeasured regions are scaled per device; the record round-trips and the report
states it."""

from __future__ import annotations

import dataclasses

import pytest

from aot.partition.order import OrderMode
from aot.partition.partitioner import partition
from aot.partition.plan import GateMode, Plan
from aot.partition.search import MeasuredRegion, _Scorer
from aot.partition.support import ACCEL, HOST, Group
from test_order_search import COST, HOST_SIDE, options, two_branches

GREEDY = [(HOST, ("x", "h1", "h2")), (ACCEL, ("a", "j"))]
SEARCHED = [(HOST, ("x", "h2")), (ACCEL, ("a",)), (HOST, ("h1",)), (ACCEL, ("j",))]

# What lavapipe could say: every accelerator call costs ~0.8 ms whatever it does, so the searched
# plan's extra accelerator region (j alone) costs more than the overlap with h1 saves. The cost
# model's call overhead is far smaller: by estimate the searched plan wins.
LAVAPIPE = (MeasuredRegion(HOST, ("x", "h1", "h2"), 300.0), MeasuredRegion(ACCEL, ("a", "j"), 3050.0),
            MeasuredRegion(HOST, ("x", "h2"), 60.0), MeasuredRegion(ACCEL, ("a",), 3000.0),
            MeasuredRegion(HOST, ("h1",), 250.0), MeasuredRegion(ACCEL, ("j",), 800.0))


def measured_options(measured=(), plans=4):
    return dataclasses.replace(options(OrderMode.SEARCH, HOST_SIDE, gate=GateMode.MEASURED),
                               measure_plans=plans, measured=tuple(measured))


def schedule(plan: Plan) -> list:
    return [(r.device, r.nodes) for r in map(plan.region, plan.schedule)]


def test_measured_region_times_change_the_choice_the_estimates_made():
    view = two_branches()
    estimated = partition(view, measured_options())
    assert estimated.order_search is not None and estimated.order_search.kept is OrderMode.SEARCH
    assert schedule(estimated.plan) == SEARCHED and estimated.order_search.measured_scoring is None

    measured = partition(view, measured_options(LAVAPIPE))
    outcome = measured.order_search
    assert outcome is not None and outcome.kept is OrderMode.GREEDY
    assert schedule(measured.plan) == GREEDY and measured.greedy is None
    scoring = outcome.measured_scoring
    assert scoring is not None and scoring.kept is OrderMode.GREEDY
    assert scoring.regions_timed == len(LAVAPIPE)
    assert scoring.scored_measured == len(LAVAPIPE)   # both plans' regions: each looked up by its times
    (seg,) = scoring.segments
    # The segment's greedy lanes: 300 + 3050; the searched: 60, then a (3000) beside h1 (250), then j (800).
    assert seg.greedy_us == 3350.0 and seg.chosen_us == 3350.0
    assert scoring.greedy_us == outcome.greedy_us    # whole plans, transfers included
    assert scoring.searched_us == outcome.searched_us >= scoring.greedy_us


# A device where the overlap pays by lanes: a (the 11x11 conv) long, h1 long, j cheap.
OVERLAPPING = (MeasuredRegion(HOST, ("x", "h1", "h2"), 1000.0), MeasuredRegion(ACCEL, ("a", "j"), 1010.0),
               MeasuredRegion(HOST, ("x", "h2"), 10.0), MeasuredRegion(ACCEL, ("a",), 1000.0),
               MeasuredRegion(HOST, ("h1",), 990.0), MeasuredRegion(ACCEL, ("j",), 10.0))


def test_devices_on_the_host_cores_score_in_one_lane_and_keep_greedy():
    view = two_branches()
    apart = partition(view, measured_options(OVERLAPPING))
    assert apart.order_search is not None and apart.order_search.kept is OrderMode.SEARCH
    assert schedule(apart.plan) == SEARCHED   # 10, then a beside h1 (1000), then j: ~1020 vs 2010

    shared = partition(view, dataclasses.replace(measured_options(OVERLAPPING), measured_one_lane=True))
    outcome = shared.order_search
    assert outcome is not None and outcome.kept is OrderMode.GREEDY and schedule(shared.plan) == GREEDY
    scoring = outcome.measured_scoring
    assert scoring is not None and scoring.one_lane
    (seg,) = scoring.segments
    assert seg.greedy_us == 2010.0 and seg.chosen_us == 2010.0   # the searched plan sums to the same 2010
    # the estimates (a real GPU's) are not measurements: without a table nothing is one lane
    estimated = partition(view, dataclasses.replace(measured_options(), measured_one_lane=True))
    assert estimated.order_search is not None and estimated.order_search.kept is OrderMode.SEARCH


def test_measured_times_that_agree_with_the_estimates_keep_the_estimates_choice():
    view = two_branches()
    scorer = _Scorer(view, COST)
    agreeing = tuple(MeasuredRegion(t.device, t.nodes, scorer.estimate_us(Group(t.device, t.nodes))) for t in LAVAPIPE)
    measured = partition(view, measured_options(agreeing))
    estimated = partition(view, measured_options())
    assert measured.plan.digest() == estimated.plan.digest()
    assert measured.order_search is not None and estimated.order_search is not None
    assert measured.order_search.greedy_us == estimated.order_search.greedy_us
    assert measured.order_search.searched_us == estimated.order_search.searched_us


def test_the_search_with_measurements_is_deterministic():
    view = two_branches()
    runs = [partition(view, measured_options(LAVAPIPE)) for _ in range(3)]
    assert len({r.plan.digest() for r in runs}) == 1
    assert len({r.order_search for r in runs}) == 1


def test_an_unmeasured_region_takes_its_estimate_scaled_by_its_devices_measured_ratio():
    view = two_branches()
    plain = _Scorer(view, COST)
    a, j = Group(ACCEL, ("a",)), Group(ACCEL, ("j",))
    scorer = _Scorer(view, COST, (MeasuredRegion(ACCEL, ("a",), plain.estimate_us(a) * 4),))
    assert scorer.region_us(a) == plain.estimate_us(a) * 4
    assert scorer.region_us(j) == plain.estimate_us(j) * 4     # scaled as its device's measured region
    h1 = Group(HOST, ("h1",))
    assert scorer.region_us(h1) == plain.estimate_us(h1)       # no host region measured: the estimate
    assert len(scorer.hits) == 1 and len(scorer.misses) == 2


def test_candidate_plans_are_greedys_first_distinct_bounded_and_without_measurements_none():
    view = two_branches()
    got = partition(view, measured_options(plans=4))
    assert schedule(got.candidates[0]) == GREEDY
    assert SEARCHED in [schedule(c) for c in got.candidates]
    assert len({c.digest() for c in got.candidates}) == len(got.candidates) <= 4
    assert [c.digest() for c in partition(view, measured_options(plans=4)).candidates] == \
        [c.digest() for c in got.candidates]
    assert len(partition(view, measured_options(plans=2)).candidates) == 2
    # Only a measured build times candidates; a search scored with measurements needs none.
    assert partition(view, options(OrderMode.SEARCH, HOST_SIDE)).candidates == ()
    assert partition(view, measured_options(LAVAPIPE)).candidates == ()


def test_the_record_round_trips_and_the_report_states_the_measured_scoring():
    from conftest import small_record
    from aot import report
    from aot.record import PartitionRecord, SegmentRecord
    from aot.runtime import codec

    view = two_branches()
    estimated = partition(view, measured_options()).order_search
    measured = partition(view, measured_options(LAVAPIPE)).order_search
    assert estimated is not None and measured is not None and measured.measured_scoring is not None
    scoring = dataclasses.replace(measured.measured_scoring, plans_timed=3, changed=True, seconds=1.5, rounds=2)
    outcome = dataclasses.replace(estimated, kept=measured.kept, measured_scoring=scoring)
    rec = small_record()
    part = dataclasses.replace(rec.partition, segments=(SegmentRecord(0, 5, "j", "j"),), order_search=outcome)
    assert codec.decode(PartitionRecord, codec.encode(part)) == part
    text = "\n".join(report.segment_lines(part))
    assert "[measured: greedy 3350.0 us, chosen 3350.0 us]" in text
    assert ("scored with measured region times: 6 distinct region(s) timed on their devices from 3 plan(s), 2 round(s); "
            "the scoring took 6 region(s) measured, 0 estimated") in text
    assert "kept the greedy plan, not the estimates' choice (1.5s)" in text
    # Faster but kept greedy: the partition rules vetoed the searched plan, and the report says so.
    vetoed = dataclasses.replace(scoring, searched_us=scoring.greedy_us - 1)
    assert vetoed.verdict().endswith("kept the greedy plan (the searched plan breaks a partition rule)")
    assert "rule" not in scoring.verdict()



def test_the_stage_times_candidates_scores_again_and_stages_the_measured_winner(monkeypatch, tmp_path):
    """checks/measured_order.rescore with the compiler and the devices faked: the estimates'
    searched plan is staged, greedy's candidate compiled, the table's times choose greedy's bundle
    (already compiled: nothing more), and the staged record carries the measured scoring."""
    from conftest import small_manifest, small_record
    from aot.bundle.write import Staged
    from aot.checks import measured_order

    view = two_branches()
    estimated = partition(view, measured_options())
    record = small_record()
    record = dataclasses.replace(record, partition=dataclasses.replace(record.partition,
                                                                       order_search=estimated.order_search))

    def staged_of(plan: Plan, name: str) -> Staged:
        return Staged(tmp_path / name, small_manifest(), record, plan)

    compiled: list[str] = []

    def compile_(plan: Plan, name: str) -> Staged:
        compiled.append(name)
        return staged_of(plan, name)

    table = {t.key: t for t in LAVAPIPE}

    def fake_times(bundles, done, known=(), repeats=None):
        times = {t.key: t for t in known}
        for b in bundles:
            for r in b.plan.regions:
                times.setdefault((r.device, frozenset(r.nodes)), table[(r.device, frozenset(r.nodes))])
        return tuple(times.values())

    monkeypatch.setattr(measured_order, "time_regions", fake_times)
    lines: list[str] = []
    got = measured_order.rescore(view, measured_options(), estimated.candidates, staged_of(estimated.plan, "built"),
                                 compile_, lambda stage, line: lines.append(f"{stage} {line}"))
    assert compiled == ["order-0"] + [f"order-{i}" for i in range(2, len(estimated.candidates))]
    assert schedule(got.staged.plan) == GREEDY and got.staged.path.name == "order-0" and got.greedy is None
    outcome = got.staged.record.partition.order_search
    assert outcome is not None and outcome.kept is OrderMode.GREEDY
    scoring = outcome.measured_scoring
    assert scoring is not None and scoring.changed and scoring.rounds == 1
    assert scoring.plans_timed == len(estimated.candidates) and scoring.regions_timed == len(got.times)
    assert outcome.segments == estimated.order_search.segments   # the estimates' scores stay beside it
    assert any("kept the greedy plan, not the one the estimates chose" in line for line in lines)


def _plan(groups) -> Plan:
    from aot.partition.plan import Region
    return Plan(tuple(Region(f"r{i}", d, n) for i, (d, n) in enumerate(groups)),
                tuple(f"r{i}" for i in range(len(groups))), {})


def test_a_transfer_cost_fitted_to_whole_runs_prices_every_crossing_of_the_whole_plan_comparison():
    """Whole runs that hold 1 ms per cross-device transfer beyond their regions' lanes (and the
    per-byte estimate): the fit finds that 1 ms, a plan that crosses no device gives nothing to
    fit, and the search's whole-plan comparison prices each crossing at the fitted cost."""
    from aot.partition.cost import plan_cost
    from aot.partition.search import fit_hop_us

    view = two_branches()
    scorer = _Scorer(view, COST, OVERLAPPING)
    runs, lanes = [], {}
    for name, groups in (("greedy", GREEDY), ("searched", SEARCHED)):
        plan = _plan(groups)
        c = plan_cost({r.name: Group(r.device, r.nodes) for r in plan.regions}, view, COST, plan.schedule,
                      region_us=scorer.region_us)
        lanes[name] = (c.total_us - c.hops * COST.hop_us, c.hops)     # lanes + per-byte, and the crossings
        runs.append((plan, lanes[name][0] + c.hops * 1000.0))
    assert fit_hop_us(view, COST, OVERLAPPING, False, runs) == 1000.0
    assert fit_hop_us(view, COST, OVERLAPPING, False, [(_plan([(HOST, ("x", "h1", "h2", "a", "j"))]), 5000.0)]) is None
    for bad in (float("nan"), float("inf")):     # never a free (or infinite) transfer
        with pytest.raises(ValueError, match="whole run"):
            fit_hop_us(view, COST, OVERLAPPING, False, [(runs[0][0], bad)])

    fitted = partition(view, dataclasses.replace(measured_options(OVERLAPPING), measured_hop_us=1000.0))
    outcome = fitted.order_search
    assert outcome is not None and outcome.measured_scoring is not None and outcome.measured_scoring.hop_us == 1000.0
    for name, us in (("greedy", outcome.greedy_us), ("searched", outcome.searched_us)):
        base, hops = lanes[name]
        assert us == pytest.approx(base + hops * 1000.0)
