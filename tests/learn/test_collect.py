"""`aot learn collect`: distinct candidate plans built and timed into the cost database, resumably."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import aot.runtime
from aot import api
from aot.learn import collect, db as costdb
from aot.learn import generate as gen
from synthetic import FakeSession
from aot.learn.key import device_fingerprint, key_of
from aot.options import BuildOptions
from aot.partition.plan import GateMode, Plan, validate
from aot.pipeline import plan_model
from aot.runtime.target import Target

VULKAN = BuildOptions(accel=Target.parse("vulkan"))


def _mlp(path):
    """MatMul -> Relu -> TopK (host-only on Vulkan) -> Add: small enough to time on lavapipe."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "w")
    k = numpy_helper.from_array(np.array([4], np.int64), "k")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("TopK", ["r", "k"], ["v", "i"], name="topk"),
             helper.make_node("Add", ["v", "v"], ["y"], name="add")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", T.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 4])], [w, k])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.device   # builds every candidate with IREE and times it on lavapipe
def test_collect_measures_each_distinct_plan_once_and_resumes(tmp_path, private_compile_cache):
    model, database = _mlp(tmp_path / "mlp.onnx"), tmp_path / "costs.sqlite"
    options = BuildOptions(accel=Target.parse("vulkan"))
    first = collect.collect(model, database, tmp_path / "work", options, perturbations=2, iterations=2)
    assert first.failed == () and first.measured == first.candidates >= 3
    with costdb.CostDatabase(database) as db:
        rows = db.rows()
        assert len(rows) == first.measured and len({r.key for r in rows}) == len(rows)
        assert all(r.total_us > 0 and np.isfinite(r.total_us) for r in rows)
        plans = [Plan.from_json(json.loads(r.plan)) for r in rows]
        assert {len(p.regions) for p in plans} >= {1, 2}      # all-host and at least one partition
        assert all(r.fingerprint.startswith("vulkan-spirv:") for r in rows)
        assert all(len(r.regions) == len(p.regions) and all(t.median_us > 0 for t in r.regions)
                   for r, p in zip(rows, plans))
    again = collect.collect(model, database, tmp_path / "work", options, perturbations=2, iterations=2)
    assert (again.measured, again.skipped) == (0, first.candidates)   # resumed: nothing measured twice
    # Measured again (--repeats 2): every plan rebuilt from the collection's compile cache.
    cache = tmp_path / "work" / collect.CACHE
    compiled = sorted(p for p in cache.rglob("*") if p.is_file())
    assert any(p.suffix == ".vmfb" for p in compiled)
    twice = collect.collect(model, database, tmp_path / "work", options, perturbations=2, iterations=2, repeats=2)
    assert (twice.measured, twice.failed) == (first.candidates, ())
    assert sorted(p for p in cache.rglob("*") if p.is_file()) == compiled


def test_a_generated_graph_gives_distinct_valid_candidates(tmp_path):
    """No IREE: the enumeration alone, on generated graphs with host-only ops and branches."""
    for path in gen.write(tmp_path, 3, seed=0):
        model, options = api.resolve(path, VULKAN)
        planned = plan_model(model, dataclasses.replace(options, gate=GateMode.OFF), suggest=False)
        cands = list(collect.candidates(planned, options, perturbations=4, seed=0))
        for c in cands:
            validate(c.plan, planned.view)
        keys = {key_of(planned.view, c.plan, device_fingerprint(options)).key for c in cands}
        assert len(keys) >= 4, path.name
        assert 1 in {len(c.plan.regions) for c in cands} and max(len(c.plan.regions) for c in cands) >= 2


def test_the_order_planners_candidates_are_collected_greedys_first(tmp_path):
    """No IREE: the plans ``--order search --measure`` would time are among the candidates, each
    valid, the first of them greedy's own plan."""
    found = 0
    for path in gen.write(tmp_path, 3, seed=0):
        model, options = api.resolve(path, VULKAN)
        planned = plan_model(model, dataclasses.replace(options, gate=GateMode.OFF), suggest=False)
        cands = list(collect.candidates(planned, options, perturbations=0, seed=0))
        ordered = [c for c in cands if c.origin.startswith("order search ")]
        assert ordered and len(ordered) <= collect.ORDER_CANDIDATES, path.name
        for c in ordered:
            validate(c.plan, planned.view)
        assert ordered[0].plan.digest() == planned.plan.digest()          # greedy's plan first
        assert len({c.plan.digest() for c in ordered}) == len(ordered)    # distinct
        found += len(ordered) - 1
    assert found >= 1      # at least one graph has an alternative the order planner ranks


def _fake_builds(monkeypatch):
    """``collect`` with the build and the devices replaced: what it stores, not what IREE does."""
    built: list[Plan] = []

    def build(planned, out, options, cache=None):
        assert cache == out.parent / collect.CACHE   # one compile cache for the whole collection
        built.append(planned.plan)
        regions = tuple(SimpleNamespace(name=r.name, flags=("--f",) if r.device.value == "accel" else ())
                        for r in planned.plan.regions)
        manifest = SimpleNamespace(inputs=(), toolchain={"iree": "test"}, regions=regions)
        return SimpleNamespace(bundle=SimpleNamespace(path=out, manifest=manifest), plan=planned.plan)

    monkeypatch.setattr(collect, "build_planned", build)
    monkeypatch.setattr(collect.reference, "random_inputs", lambda specs, seed: {})
    monkeypatch.setattr(aot.runtime, "load", lambda path: FakeSession(built[-1]))
    monkeypatch.setattr(collect, "CheckSession", lambda path, manifest: FakeSession(built[-1]))
    return built


def test_each_row_keeps_its_region_times_and_a_resumed_collection_adds_nothing(tmp_path, monkeypatch):
    built = _fake_builds(monkeypatch)
    model, database = gen.write(tmp_path / "g", 1, seed=2)[0], tmp_path / "costs.sqlite"
    first = collect.collect(model, database, tmp_path / "work", VULKAN, perturbations=3, iterations=1)
    assert first.failed == () and first.measured == first.candidates == len(built) >= 4
    with costdb.CostDatabase(database) as db:
        rows = db.rows()
        assert len(rows) == first.measured and db.region_count() == sum(len(r.regions) for r in rows)
        for row in rows:
            plan = Plan.from_json(json.loads(row.plan))
            assert [t.region for t in row.regions] == list(plan.schedule)
            assert [t.median_us for t in row.regions] == [10.0 * len(plan.region(t.region).nodes) for t in row.regions]
            assert {t.device for t in row.regions} <= {"accel", "host"}
        # plans share regions: the same digest turns up in several rows
        digests = [t.nodes_digest for r in rows for t in r.regions]
        assert len(set(digests)) < len(digests)
        fp = rows[0].fingerprint
        host = next(r for r in rows if len(r.regions) == 1 and r.regions[0].device == "host").regions[0]
        hit = db.region_lookup(host.nodes_digest, "host", fp)
        assert hit is not None and hit.total_us == host.median_us
    again = collect.collect(model, database, tmp_path / "work", VULKAN, perturbations=3, iterations=1)
    assert (again.measured, again.skipped) == (0, first.candidates) and len(built) == first.measured
    with costdb.CostDatabase(database) as db:
        assert db.count() == first.measured and db.region_count() == sum(len(r.regions) for r in rows)


def test_a_collection_capped_at_some_plans_is_finished_by_the_next(tmp_path, monkeypatch):
    built = _fake_builds(monkeypatch)
    model, database = gen.write(tmp_path / "g", 1, seed=2)[0], tmp_path / "costs.sqlite"
    part = collect.collect(model, database, tmp_path / "work", VULKAN, perturbations=3, iterations=1, max_plans=2)
    assert (part.measured, part.skipped) == (2, 0) and part.candidates > 2
    lines: list[str] = []
    rest = collect.collect(model, database, tmp_path / "work", VULKAN, perturbations=3, iterations=1,
                           max_plans=100, progress=lines.append)
    # the first line says how many it will measure: the rest, not the cap
    assert f"measuring {part.candidates - 2} of {part.candidates - 2} new" in lines[0]
    assert (rest.measured, rest.skipped) == (part.candidates - 2, 2) and len(built) == part.candidates
    with costdb.CostDatabase(database) as db:
        assert len({r.key for r in db.rows()}) == db.count() == part.candidates


def test_rows_whose_plan_no_longer_fits_do_not_count_as_measured(tmp_path, monkeypatch):
    """After a front-end change that only renames nodes, the keys stay (they hash labels) and the
    stored plans stop fitting: the next collection measures those plans again."""
    from test_retime import _renamed

    built = _fake_builds(monkeypatch)
    model, database = gen.write(tmp_path / "g", 1, seed=2)[0], tmp_path / "costs.sqlite"
    first = collect.collect(model, database, tmp_path / "work", VULKAN, perturbations=3, iterations=1)
    stale = tmp_path / "stale.sqlite"
    with costdb.CostDatabase(database) as db:
        rows = db.rows()
    with costdb.CostDatabase(stale) as db:
        for r in rows[1:]:
            db.add(dataclasses.replace(r, plan=_renamed(r.plan)))
        db.add(rows[0])                  # this one still fits
    again = collect.collect(model, stale, tmp_path / "work", VULKAN, perturbations=3, iterations=1)
    assert (again.measured, again.skipped) == (first.candidates - 1, 1)
    assert len(built) == first.measured + first.candidates - 1
