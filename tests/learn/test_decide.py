"""--policy learned and --gate learned at plan time (no IREE): the cost source ladder (database
hit, learned model, roofline with the reason), the margin, the proposer's validated candidates,
and a pinned choice that `--plan` replays with no model and no database."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import synthetic
from synthetic import synthetic_db, trained_model  # noqa: F401 - fixtures
from aot import api
from aot.errors import AotError, UsageError
from aot.learn import decide
from aot.learn.db import CostDatabase
from aot.learn.model import LearnedModel
from aot.learn.trees import ModelFileError
from aot.option_flags import UsageError as FlagUsageError
from aot.partition.partitioner import plan_from_groups, single_region_plan
from aot.partition.plan import CostSource, GateMode, Plan, validate
from aot.partition.support import ACCEL, HOST, Group
from aot.pipeline import plan_model


def _options(**kw):
    return dataclasses.replace(synthetic.VULKAN, **kw)


def _plan(path, **kw):
    model, options = api.resolve(path, _options(**kw))
    return plan_model(model, options, suggest=False)


@pytest.fixture(autouse=True)
def _no_shipped_model(monkeypatch):
    # Whether a default model ships must not change what these tests see.
    monkeypatch.setattr(decide, "shipped_model", lambda fingerprint: None)


def test_without_a_model_the_learned_gate_uses_the_roofline_and_says_why(synthetic_db):
    planned = _plan(synthetic_db[1][0], gate=GateMode.LEARNED)
    g = planned.plan.gate
    assert g is not None and g.source is CostSource.ROOFLINE and "no learned model" in g.fallback
    assert np.isfinite(g.partitioned_us) and np.isfinite(g.all_host_us) and g.partitioned_us > 0
    assert "roofline decided" in g.detail and planned.record.gate == g
    validate(planned.plan, planned.view)


def test_a_model_for_other_devices_is_not_used_and_the_record_says_so(synthetic_db, trained_model, tmp_path):
    data = json.loads(trained_model.read_text())
    data["fingerprint"] = "cuda:sm_80 host=x86-64-v4 cores=64"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    g = _plan(synthetic_db[1][0], gate=GateMode.LEARNED, cost_model=other).plan.gate
    assert g.source is CostSource.ROOFLINE and "cuda:sm_80" in g.fallback and str(other) in g.fallback


def test_a_measured_plan_is_taken_from_the_database_with_its_rows(synthetic_db, trained_model):
    database, paths = synthetic_db
    planned = _plan(paths[0], gate=GateMode.LEARNED, cost_db=database, cost_model=trained_model)
    g = planned.plan.gate
    # Every candidate of this model was "measured": the gate's numbers are database medians.
    assert g.source is CostSource.DATABASE and g.rows and g.fallback == ""
    with CostDatabase(database) as db:
        totals = {r.total_us for r in db.rows() if r.model == str(paths[0])}
    assert g.partitioned_us in totals and g.all_host_us in totals
    assert g.accepted == (g.partitioned_us < g.all_host_us * (1 - 0.05))


def test_the_model_predicts_an_unmeasured_plan(synthetic_db, trained_model, tmp_path):
    planned = _plan(synthetic_db[1][0], gate=GateMode.LEARNED, cost_model=trained_model,
                    cost_db=CostDatabase(tmp_path / "empty.sqlite").path)
    g = planned.plan.gate
    assert g.source is CostSource.LEARNED and not g.rows and np.isfinite(g.partitioned_us) and g.partitioned_us > 0


class _Fixed:
    """An estimator whose host plan costs 100 us."""

    fallback = ""

    def cost(self, plan):
        return decide.Costed(100.0, CostSource.LEARNED)


@pytest.mark.parametrize(("partitioned", "margin", "accepted"),
                         [(90.0, 0.05, True), (96.0, 0.05, False), (96.0, 0.0, True), (50.0, 0.6, False)])
def test_the_gate_partitions_only_below_the_host_by_the_margin(partitioned, margin, accepted):
    from synthetic import graph

    view = graph([("A", "B"), ("B", "C")])
    plan = plan_from_groups(view, [Group(ACCEL, ("A", "B")), Group(HOST, ("C",))])
    out = decide.learned_gate(plan, view, _Fixed(), decide.Costed(partitioned, CostSource.LEARNED), margin)
    assert out.gate.accepted is accepted and out.gate.partitioned_us == partitioned
    assert (len(out.regions) == 2) is accepted
    if not accepted:
        assert out.regions[0].device == HOST and all("learned gate" in why for _, why in out.reasons)
    validate(out, view)


def test_the_learned_policy_ranks_validated_candidates_and_its_plan_replays_without_model_or_db(
        synthetic_db, trained_model, tmp_path):
    database, paths = synthetic_db
    planned = _plan(paths[1], policy="learned", gate=GateMode.LEARNED, cost_model=trained_model)
    assert planned.record.policy == "learned"
    g = planned.plan.gate
    assert g.source is CostSource.LEARNED and "learned policy chose" in g.detail
    model = LearnedModel.load(trained_model)
    est = decide.estimator(planned.view, planned.options, _options(cost_model=trained_model))
    cands = decide.candidates(est, planned.options)
    assert cands[0][0] == "greedy" and len({decide._partition_of(p) for _, p in cands}) == len(cands)
    for _, plan in cands:
        validate(plan, planned.view)
    chosen = min(cands, key=lambda c: est.cost(c[1]).us)[1]
    if g.accepted:
        assert decide._partition_of(planned.plan) == decide._partition_of(chosen)
    assert model.accel_probability(np.zeros((1, model.policy.features))).shape == (1,)
    pinned = tmp_path / "plan.json"
    planned.plan.save(pinned)
    replay = _plan(paths[1], plan_file=pinned, policy="learned", gate=GateMode.LEARNED,
                   cost_model=tmp_path / "gone.json", cost_db=tmp_path / "gone.sqlite")
    assert replay.plan == Plan.load(pinned) and replay.plan.gate == g


def test_missing_model_or_database_files_are_named(synthetic_db, tmp_path):
    with pytest.raises(ModelFileError, match="nope.json"):
        _plan(synthetic_db[1][0], gate=GateMode.LEARNED, cost_model=tmp_path / "nope.json")
    with pytest.raises(AotError, match="nope.sqlite") as e:
        _plan(synthetic_db[1][0], gate=GateMode.LEARNED, cost_db=tmp_path / "nope.sqlite")
    assert "aot learn collect" in e.value.hint


def test_the_command_line_takes_the_learned_settings_and_refuses_a_bad_margin():
    import argparse

    from aot import cli_args

    p = argparse.ArgumentParser()
    cli_args.add_options(p)
    args = p.parse_args(["--policy", "learned", "--gate", "learned", "--gate-margin", "0.1", "--measure-prediction"])
    options = cli_args.build_options(args)
    assert (options.policy, options.gate, options.gate_margin, options.measure_prediction) == \
        ("learned", GateMode.LEARNED, 0.1, True)
    with pytest.raises((UsageError, FlagUsageError, SystemExit)):
        cli_args.build_options(p.parse_args(["--gate-margin", "1.5"]))


def test_each_threshold_of_the_proposer_gives_a_repaired_validated_candidate(synthetic_db, trained_model,
                                                                            monkeypatch):
    # Probabilities spread from 0 to 1 over the nodes: each threshold sends a different set to the host.
    monkeypatch.setattr(LearnedModel, "accel_probability", lambda self, x: np.linspace(0.0, 1.0, len(x)))
    planned = _plan(synthetic_db[1][0], gate=GateMode.OFF)
    est = decide.estimator(planned.view, planned.options, _options(cost_model=trained_model))
    cands = decide.candidates(est, planned.options)
    assert [name for name, _ in cands][:1] == ["greedy"] and len(cands) >= 3
    for name, plan in cands[1:]:
        validate(plan, planned.view)
        t = float(name.split()[-1])
        low = {n for i, n in enumerate(est.codes.names) if i / (len(est.codes.names) - 1) < t}
        on_host = {n for r in plan.regions if r.device == HOST for n in r.nodes}
        assert low <= on_host, name       # every node under the threshold went to the host
        assert any("learned proposer" in why for _, why in plan.reasons)


def test_a_learned_gate_round_trips_through_the_plan_and_record_and_the_report_shows_it():
    from conftest import small_manifest, small_record

    from aot import report
    from aot.record import BuildRecord

    gate = decide.Gate(False, 90.0, 100.0, None, "detail", source=CostSource.DATABASE, rows=(3, 7),
                       measured_us=120.0)
    plan = dataclasses.replace(single_region_plan(synthetic.graph([("A", "B")])), gate=gate)
    assert Plan.from_json(json.loads(json.dumps(plan.to_json()))).gate == gate
    old = plan.to_json()
    for k in ("source", "rows", "measured_us"):
        del old["gate"][k]
    assert Plan.from_json(old).gate.source is None          # a plan file from before keeps loading
    line = gate.prediction_line()
    assert "cost source: database" in line and "predicted 100.0 us" in line and "measured 120.0 us" in line
    assert "1.20x" in line and "database rows 3, 7" in line
    assert decide.Gate(True, 1.0, 2.0, None, "roofline gate").prediction_line() is None
    rec = small_record()
    rec = dataclasses.replace(rec, partition=dataclasses.replace(rec.partition, gate=gate))
    rec = BuildRecord.from_json(json.loads(json.dumps(rec.to_json())))     # as record.json keeps it
    assert rec.partition.gate == gate
    from aot.runtime.manifest import BoundaryTensor

    manifest = dataclasses.replace(small_manifest(), boundary_tensors=(   # the report sizes every boundary
        ("x", BoundaryTensor("float32", (1, 2), 8)), ("y", BoundaryTensor("float32", (1, 2), 8))))
    text = report.text(manifest, rec)
    assert "cost source: database; predicted 100.0 us for the shipped plan, measured 120.0 us" in text


def test_the_learned_policy_without_a_model_keeps_the_greedy_plan_and_says_why(synthetic_db):
    planned = _plan(synthetic_db[1][0], policy="learned", gate=GateMode.LEARNED)
    g = planned.plan.gate
    assert "learned policy chose greedy" in g.detail and "the proposer needs one" in g.detail
    assert g.source is CostSource.ROOFLINE and "no learned model" in g.fallback


def _region_rows(database, planned, options, times: dict[str, float], compiler: str):
    """One row of another plan whose regions are ``times``' regions of ``planned.plan``, under
    the digests a build computes for them (its device's default flags), by ``compiler``."""
    from aot.learn.db import Measurement, RegionTime
    from aot.learn.key import device_fingerprint, region_digest
    from aot.lower.flags import default_opt_flags
    from aot.partition.cost import holds

    def flags(r):
        target = options.host if r.device == HOST else options.accel
        return default_opt_flags(target, holds(planned.view, r.nodes))

    regions = tuple(RegionTime(name, r.device.value, region_digest(planned.view, r.nodes, r.device.value, flags(r)), us)
                    for name, us in times.items() for r in [planned.plan.region(name)])
    with CostDatabase(database) as db:
        return db.add(Measurement("another plan", "g", "m", "d", "{}", device_fingerprint(options),
                                  json.dumps({"iree-base-compiler": compiler}), 1.0, regions))


def test_regions_measured_in_other_plans_replace_their_predictions(synthetic_db, trained_model, tmp_path):
    from aot.learn.key import compiler_version

    planned = _plan(synthetic_db[1][0], gate=GateMode.OFF)
    model, options = api.resolve(synthetic_db[1][0], _options(cost_model=trained_model))
    plan = planned.plan
    assert len(plan.schedule) >= 2
    first, *rest = plan.schedule

    def cost(database):
        est = decide.estimator(planned.view, options.partition_options(),
                               dataclasses.replace(options, cost_db=database))
        return est.cost(plan)

    predicted = cost(CostDatabase(tmp_path / "empty.sqlite").path)
    assert predicted.source is CostSource.LEARNED and not predicted.rows
    # One region measured (slower than anything predicted): the plan's cost moves, still "learned".
    one = tmp_path / "one.sqlite"
    row = _region_rows(one, planned, options, {first: 5e6}, compiler_version())
    partly = cost(one)
    assert partly.source is CostSource.LEARNED and partly.rows == (row,) and partly.us >= 5e6 > predicted.us
    # Every region measured: their medians through the lanes.
    every = tmp_path / "every.sqlite"
    row = _region_rows(every, planned, options, {name: 7e6 for name in plan.schedule}, compiler_version())
    whole = cost(every)
    assert whole.source is CostSource.REGIONS and whole.rows == (row,) and whole.us >= 7e6
    # Another compiler's code is another region: predicted again.
    old = tmp_path / "old.sqlite"
    _region_rows(old, planned, options, {name: 7e6 for name in plan.schedule}, "0.0.1")
    again = cost(old)
    assert again.source is CostSource.LEARNED and not again.rows and again.us == pytest.approx(predicted.us)


def test_an_unpinned_cuda_convolution_region_is_looked_up_under_the_flags_it_compiles_with(tmp_path):
    """CUDA gives a region with a convolution tile-and-fuse by default: a database row for that
    region is found under those flags, and a row under IREE's plain defaults is not."""
    from aot.frontend.graph import GraphView, Node, Value
    from aot.learn.db import Measurement, RegionTime
    from aot.learn.features import encode
    from aot.learn.key import compiler_version, region_digest
    from aot.lower.flags import TILE_AND_FUSE
    from aot.partition.cost import CostModel
    from aot.runtime.target import Target

    nodes = [Node("conv", "Conv", ("x",), ("c",), const_inputs=("w",)), Node("relu", "Relu", ("c",), ("y",))]
    values = {v: Value(v, "float32", s) for v, s in (("x", (1, 3, 8, 8)), ("w", (4, 3, 3, 3)),
                                                      ("c", (1, 4, 6, 6)), ("y", (1, 4, 6, 6)))}
    view = GraphView.build(nodes, ["x"], ["y"], values)
    plan = plan_from_groups(view, [Group(ACCEL, ("conv", "relu"))])
    (region,) = plan.regions
    database = tmp_path / "cost.sqlite"

    def est():
        return decide.Estimator(view, encode(view, "cuda"), None, "", database, "fp", CostModel.load("cuda"),
                                Target.host(), Target.parse("cuda"))

    def row(flags, us):
        with CostDatabase(database) as db:
            db.add(Measurement(f"k{us}", "g", "m", "d", "{}", "fp", json.dumps({"iree-base-compiler": compiler_version()}),
                               us, (RegionTime(region.name, ACCEL.value,
                                               region_digest(view, region.nodes, ACCEL.value, flags), us),)))

    row((), 5.0)
    with CostDatabase(database) as db:
        assert est()._measured_regions(plan, db)[0] == {}
    row((TILE_AND_FUSE,), 7.0)
    with CostDatabase(database) as db:
        assert est()._measured_regions(plan, db)[0] == {0: 7.0}
