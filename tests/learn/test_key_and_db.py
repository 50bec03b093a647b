"""The exact key of a measured plan and the append-only cost database (aot/learn)."""

from __future__ import annotations

import dataclasses
import multiprocessing
import sqlite3
import time

import pytest

from aot.frontend.graph import GraphView, Node, Value
from aot.learn import db as costdb
from aot.learn.key import plan_key, region_digest
from aot.lower.flags import DATA_TILED_CONV, DATA_TILING, IM2COL, LEGACY_HOST_DEFAULT


def _view(prefix: str = "", sub_order=("a", "b"), shape=(1, 8), op="Sub") -> GraphView:
    """x -> Relu(a), x -> Exp(b), Sub(a, b) -> y; names carry ``prefix``."""
    p = prefix
    nodes = [Node(f"{p}relu", "Relu", (f"{p}x",), (f"{p}a",)), Node(f"{p}exp", "Exp", (f"{p}x",), (f"{p}b",)),
             Node(f"{p}sub", op, tuple(f"{p}{v}" for v in sub_order), (f"{p}y",))]
    values = {f"{p}{v}": Value(f"{p}{v}", "float32", shape) for v in "xaby"}
    return GraphView.build(nodes, [f"{p}x"], [f"{p}y"], values)


def _key(view: GraphView, p: str = "", sub_device: str = "host", **kw):
    regions = {f"{p}r0": ("accel", (f"{p}relu", f"{p}exp")), f"{p}r1": (sub_device, (f"{p}sub",))}
    return plan_key(view, regions, (f"{p}r0", f"{p}r1"), **kw)


def test_an_isomorphic_graph_with_other_names_hits():
    assert _key(_view()).key == _key(_view("renamed/"), "renamed/").key


@pytest.mark.parametrize("change", ["device", "shape", "operand order", "op", "flags", "fingerprint", "grouping"])
def test_what_changes_a_timing_misses(change):
    base = _key(_view())
    changed = {
        "device": lambda: _key(_view(), sub_device="accel"),
        "shape": lambda: _key(_view(shape=(1, 9))),
        "operand order": lambda: _key(_view(sub_order=("b", "a"))),
        "op": lambda: _key(_view(op="Add")),
        "flags": lambda: _key(_view(), flags={"r0": ("--iree-opt-level=O2",)}),
        "fingerprint": lambda: _key(_view(), fingerprint="vulkan:llvmpipe x86-64-v4 2 cores"),
        # the same devices, but relu and exp in two accelerator regions instead of one
        "grouping": lambda: plan_key(_view(), {"r0": ("accel", ("relu",)), "r2": ("accel", ("exp",)),
                                               "r1": ("host", ("sub",))}, ("r0", "r2", "r1")),
    }[change]()
    assert changed.key != base.key


REGIONS = (costdb.RegionTime("r0", "accel", "dA", 60.0), costdb.RegionTime("r1", "host", "dB", 30.0))


def _m(key: str = "k1", total: float = 100.0, model: str = "m", regions=REGIONS,
       fp: str = "fp") -> costdb.Measurement:
    return costdb.Measurement(key, "g", model, "d", "{}", fp, "{}", total, regions)


def test_rows_are_appended_and_a_lookup_takes_their_median(tmp_path):
    path = tmp_path / "costs.sqlite"
    with costdb.CostDatabase(path) as db:
        ids = [db.add(_m(total=t)) for t in (100.0, 300.0, 110.0)]
        db.add(_m("k2", 50.0))
        hit = db.lookup("k1")
        assert hit is not None and hit.total_us == 110.0 and hit.row_ids == tuple(ids)
        assert db.lookup("nope") is None and db.keys() == {"k1", "k2"}
    with costdb.CostDatabase(path) as again:   # committed: a new process sees every row
        assert again.count() == 4 and again.rows()[3].regions == REGIONS and again.region_count() == 8


def test_region_times_round_trip_and_a_region_is_found_across_rows(tmp_path):
    with costdb.CostDatabase(tmp_path / "c.sqlite") as db:
        first = db.add(_m("k1"))
        # another plan (key) holding the same accelerator region, timed slower; and another device set
        second = db.add(_m("k2", 80.0, regions=(costdb.RegionTime("a", "accel", "dA", 70.0),
                                                 costdb.RegionTime("b", "host", "dC", 5.0))))
        db.add(_m("k3", regions=(costdb.RegionTime("r0", "accel", "dA", 1.0),), fp="other"))
        db.add(_m("k4", regions=()))
        assert [r.regions for r in db.rows()][:2] == [REGIONS, db.rows()[1].regions]
        assert db.rows()[3].regions == () and db.rows()[1].regions[1] == costdb.RegionTime("b", "host", "dC", 5.0)
        hit = db.region_lookup("dA", "accel", "fp")
        assert hit is not None and hit.total_us == 65.0 and hit.row_ids == (first, second)
        assert db.region_lookup("dA", "host", "fp") is None and db.region_lookup("dA", "accel", "nope") is None


@pytest.mark.parametrize("bad", [(costdb.RegionTime("r0", "accel", "d", float("nan")),),
                                 (costdb.RegionTime("r0", "accel", "d", float("inf")),),
                                 (costdb.RegionTime("r0", "accel", "d", 1.0), costdb.RegionTime("r0", "host", "e", 2.0))])
def test_a_row_with_a_bad_region_time_is_refused_whole(tmp_path, bad):
    with costdb.CostDatabase(tmp_path / "c.sqlite") as db:
        with pytest.raises(costdb.CostDatabaseError):
            db.add(_m(regions=bad))
        assert db.count() == 0 and db.region_count() == 0


@pytest.mark.parametrize("bad", [float("nan"), 0.0, -1.0, float("inf") * 0, float("inf")])
def test_a_meaningless_time_is_refused(tmp_path, bad):
    with costdb.CostDatabase(tmp_path / "c.sqlite") as db:
        with pytest.raises(costdb.CostDatabaseError):
            db.add(_m(total=bad))
        assert db.count() == 0


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path):
    path = tmp_path / "costs.sqlite"
    path.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(costdb.CostDatabaseError, match="cannot open cost database"):
        costdb.CostDatabase(path)


def test_another_schema_is_refused(tmp_path):
    path = tmp_path / "costs.sqlite"
    costdb.CostDatabase(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE meta SET value = '99' WHERE name = 'schema'")
    with pytest.raises(costdb.CostDatabaseError, match="schema 99"):
        costdb.CostDatabase(path)


def test_a_schema_1_database_is_refused_with_both_versions_named(tmp_path):
    path = tmp_path / "costs.sqlite"
    with sqlite3.connect(path) as raw:   # what the first aot learn collect wrote
        raw.executescript("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
                          "INSERT INTO meta VALUES ('schema', '1');"
                          "CREATE TABLE measurements (id INTEGER PRIMARY KEY, regions_us TEXT);")
    with pytest.raises(costdb.CostDatabaseError, match="has schema 1; this aot reads 2"):
        costdb.CostDatabase(path)


def test_another_programs_database_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE songs (title TEXT)")
    before = path.read_bytes()
    with pytest.raises(costdb.CostDatabaseError, match="not an aot cost database .*songs"):
        costdb.CostDatabase(path)
    assert path.read_bytes() == before


def test_a_region_digest_names_the_same_region_in_any_plan_and_nothing_else():
    view, renamed = _view(), _view("renamed/")
    both = region_digest(view, ("relu", "exp"), "accel")
    assert both == region_digest(renamed, ("renamed/relu", "renamed/exp"), "accel")
    assert region_digest(view, ("exp", "relu"), "accel") == both          # a set of nodes, not a list
    others = {region_digest(view, ("relu", "exp"), "host"), region_digest(view, ("relu",), "accel"),
              region_digest(view, ("relu", "exp"), "accel", ("--some-flag",)),
              region_digest(_view(shape=(1, 9)), ("relu", "exp"), "accel"),
              region_digest(view, ("sub",), "accel")}
    assert both not in others and len(others) == 5
    # Sub(relu, exp) and Sub(exp, relu) with exp inside: the operand order is in the edge labels. (Sub
    # alone is the same computation either way: its inputs are numbered by first use.)
    swapped = _view(sub_order=("b", "a"))
    assert region_digest(view, ("exp", "sub"), "accel") != region_digest(swapped, ("exp", "sub"), "accel")
    assert region_digest(view, ("sub",), "accel") == region_digest(swapped, ("sub",), "accel")


def _hold(path: str, seconds: float, ready) -> None:
    with costdb.timing_lock(costdb.Path(path)):
        ready.set()
        time.sleep(seconds)


def test_only_one_process_times_at_a_time(tmp_path):
    path = tmp_path / "costs.sqlite"
    ready = multiprocessing.Event()
    other = multiprocessing.Process(target=_hold, args=(str(path), 0.5, ready))
    other.start()
    assert ready.wait(10)
    start = time.monotonic()
    with costdb.timing_lock(path):
        waited = time.monotonic() - start
    other.join(10)
    assert waited >= 0.3   # it waited for the other process's timing to end
    with pytest.raises(costdb.CostDatabaseError, match="timing"):
        ready2 = multiprocessing.Event()
        holder = multiprocessing.Process(target=_hold, args=(str(path), 2.0, ready2))
        holder.start()
        try:
            assert ready2.wait(10)
            with costdb.timing_lock(path, wait_s=0.2):
                pass
        finally:
            holder.join(10)


def _conv_view() -> GraphView:
    """x -> Conv(w) -> Relu -> y."""
    nodes = [Node("conv", "Conv", ("x",), ("c",), const_inputs=("w",)), Node("relu", "Relu", ("c",), ("y",))]
    values = {v: Value(v, "float32", s) for v, s in (("x", (1, 3, 8, 8)), ("w", (4, 3, 3, 3)),
                                                      ("c", (1, 4, 6, 6)), ("y", (1, 4, 6, 6)))}
    return GraphView.build(nodes, ["x"], ["y"], values)


def _matmul_view() -> GraphView:
    """x -> MatMul(w) -> y, 2 * 128 * 384 * 384 FLOPs: a product that pays for data tiling."""
    nodes = [Node("mm", "MatMul", ("x",), ("y",), const_inputs=("w",))]
    values = {v: Value(v, "float32", s) for v, s in (("x", (1, 128, 384)), ("w", (384, 384)), ("y", (1, 128, 384)))}
    return GraphView.build(nodes, ["x"], ["y"], values)


@pytest.mark.parametrize("make_view, default", [(_matmul_view, (DATA_TILING,)), (_view, (IM2COL,)),
                                                (_conv_view, DATA_TILED_CONV)], ids=["big-products", "small", "conv"])
def test_an_untuned_host_region_is_keyed_by_the_defaults_it_compiles_with(make_view, default):
    """A host region left to the defaults and one pinned to them compile the same module: one key.
    Rows measured before the defaults depended on a convolution keyed it ``[]``: a miss."""
    from aot.learn.key import key_of
    from aot.partition.partitioner import single_region_plan

    view = make_view()
    plan = single_region_plan(view)
    pinned = dataclasses.replace(plan, regions=(dataclasses.replace(plan.regions[0], flags=default),))
    assert key_of(view, plan, "fp").key == key_of(view, pinned, "fp").key
    legacy = plan_key(view, {"r0": ("host", plan.regions[0].nodes)}, plan.schedule, fingerprint="fp")
    assert key_of(view, plan, "fp").key != legacy.key


def test_stored_plans_pin_the_flags_their_host_regions_compiled_with():
    """``as_stored`` pins what the manifest says; a stored plan from before that (a host region
    without flags) reads as compiled with im2col alone, as every untuned host region then was."""
    from aot.learn.key import as_measured, as_stored
    from aot.partition.partitioner import plan_from_groups
    from aot.partition.support import ACCEL, HOST, Group

    view = _view()
    plan = plan_from_groups(view, [Group(ACCEL, ("relu", "exp")), Group(HOST, ("sub",))])
    host = next(r.name for r in plan.regions if r.device == HOST)
    stored = as_stored(plan, {host: (DATA_TILING,)})
    assert {r.device: r.flags for r in stored.regions} == {ACCEL: None, HOST: (DATA_TILING,)}
    assert as_measured(stored) == stored
    assert {r.device: r.flags for r in as_measured(plan).regions} == {ACCEL: None, HOST: LEGACY_HOST_DEFAULT}


def test_a_new_packed_conv_lowering_changes_only_the_keys_of_host_regions_compiled_with_it(monkeypatch):
    """lower/packed_conv.py rewrites what a data-tiled-conv region compiles from: a change to it must
    miss the rows measured before it, and leave every other row's key as it was."""
    from aot.lower import packed_conv
    from aot.lower.flags import CONV_DATA_TILING, CONV_UKERNELS, O2

    view = _view()
    tiled_conv = (O2, DATA_TILING, *CONV_DATA_TILING, CONV_UKERNELS)

    def keys():
        return (_key(view, flags={"r1": tiled_conv}).key, _key(view, flags={"r1": (DATA_TILING, IM2COL)}).key,
                _key(view, sub_device="accel", flags={"r1": tiled_conv}).key,
                region_digest(view, ("sub",), "host", tiled_conv), region_digest(view, ("sub",), "host", (DATA_TILING,)))

    before = keys()
    monkeypatch.setattr(packed_conv, "PACKED_CONV_VERSION", packed_conv.PACKED_CONV_VERSION + 1)
    after = keys()
    assert [b == a for b, a in zip(before, after)] == [False, True, True, False, True]
