"""The exact key of a measured plan and the append-only cost database (aot/learn)."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time

import pytest

from aot.frontend.graph import GraphView, Node, Value
from aot.learn import db as costdb
from aot.learn.key import plan_key


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


def _m(key: str = "k1", total: float = 100.0, model: str = "m") -> costdb.Measurement:
    return costdb.Measurement(key, "g", model, "d", "{}", "fp", "{}", total, (("r0", 60.0), ("r1", 30.0)))


def test_rows_are_appended_and_a_lookup_takes_their_median(tmp_path):
    path = tmp_path / "costs.sqlite"
    with costdb.CostDatabase(path) as db:
        ids = [db.add(_m(total=t)) for t in (100.0, 300.0, 110.0)]
        db.add(_m("k2", 50.0))
        hit = db.lookup("k1")
        assert hit is not None and hit.total_us == 110.0 and hit.row_ids == tuple(ids)
        assert db.lookup("nope") is None and db.keys() == {"k1", "k2"}
    with costdb.CostDatabase(path) as again:   # committed: a new process sees every row
        assert again.count() == 4 and again.rows()[3].regions_us == (("r0", 60.0), ("r1", 30.0))


@pytest.mark.parametrize("bad", [float("nan"), 0.0, -1.0, float("inf") * 0])
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
