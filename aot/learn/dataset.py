"""The cost database read back as training data: each graph with its measured plans' features.

A graph's rows are rebuilt against the model they were measured on (loaded with the same build
options, so the nodes match the stored plans); a row whose plan no longer fits its model (the
front end changed) is skipped and counted, never guessed at. Rows of one key are one plan: its
time is their median (the database's own rule, ``CostDatabase.lookup``). A plan measured again
under a new key (a lowering's version in the key changed: the module it compiles is another) is
the new key's rows alone: the older ones timed a module no build makes any more.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from aot.errors import AotError
from aot.learn import db as costdb
from aot.learn.key import stored_plan
from aot.learn.features import GraphCodes, PlanShape, digest, encode, node_features, shape_of
from aot.partition.plan import GateMode, Plan
from aot.frontend.graph import GraphView

if TYPE_CHECKING:
    from aot.options import BuildOptions

GENERATOR = "aot.learn.generate"     # generate.py's producer_name: generated graphs train, never evaluate


@dataclass(frozen=True, slots=True)
class MeasuredPlan:
    key: str
    plan: Plan
    shape: PlanShape
    total_us: float                        # median over the key's rows
    region_us: tuple[float, ...] | None    # per region in schedule order (median over rows); None if missing
    samples_us: tuple[float, ...]          # each row's time, in the order the database appended them

    @property
    def rows(self) -> int:
        return len(self.samples_us)


@dataclass(frozen=True, slots=True)
class GraphData:
    model: str                 # as the database names it (zoo:NAME, a path)
    generated: bool
    view: GraphView
    codes: GraphCodes
    nodes: np.ndarray          # node_features(view, codes)
    plans: tuple[MeasuredPlan, ...]

    def best(self) -> MeasuredPlan:
        return min(self.plans, key=lambda p: p.total_us)


@dataclass(frozen=True, slots=True)
class Dataset:
    graphs: tuple[GraphData, ...]
    fingerprint: str
    skipped: tuple[tuple[str, str], ...]    # (model, why) for rows left out
    # (model, why) for models that could not be loaded at all: each takes a whole graph out of the
    # training set and the evaluation's means, so train and eval refuse them unless told to go on
    unloadable: tuple[tuple[str, str], ...] = ()

    def digest(self) -> str:
        """Of the (model, key, time) triples it holds: equal digests, equal training sets."""
        return digest(sorted((g.model, p.key, round(p.total_us, 3)) for g in self.graphs for p in g.plans))[:32]

    def rows(self) -> int:
        return sum(p.rows for g in self.graphs for p in g.plans)

    def left_out(self) -> tuple[tuple[str, str], ...]:
        """(model, why) for everything not in ``graphs``: stale plans, then unloadable models."""
        return self.skipped + self.unloadable

    def real_only(self) -> "Dataset":
        """Without the generated graphs (``aot learn train`` and ``eval`` unless --with-generated)."""
        return dataclasses.replace(self, graphs=tuple(g for g in self.graphs if not g.generated))

    def without(self, model: str) -> "Dataset":
        return dataclasses.replace(self, graphs=tuple(g for g in self.graphs if g.model != model))


def load_dataset(database: Path, options: "BuildOptions", fingerprint: str | None = None,
                 progress: Callable[[str], None] = lambda s: None) -> Dataset:
    """Every graph of ``database`` measured on ``fingerprint`` (default: the one most rows have)."""
    from aot import api
    from aot.pipeline import plan_model

    if not Path(database).is_file():
        raise costdb.CostDatabaseError(f"no cost database at {str(database)!r}",
                                       hint="collect one with `aot learn collect MODEL --db FILE`")
    with costdb.CostDatabase(database) as db:
        rows = db.rows()
    if not rows:
        raise costdb.CostDatabaseError(f"cost database {str(database)!r} holds no measurements",
                                       hint="collect some with `aot learn collect`")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.fingerprint] = counts.get(r.fingerprint, 0) + 1
    fingerprint = fingerprint or max(counts, key=lambda f: counts[f])
    by_model: dict[str, list[costdb.Measurement]] = {}
    for r in rows:
        if r.fingerprint == fingerprint:
            by_model.setdefault(r.model, []).append(r)
    graphs, skipped, unloadable = [], [], []
    for model, measured in by_model.items():
        try:
            path, opts = api.resolve(model, options)
            planned = plan_model(path, dataclasses.replace(opts, gate=GateMode.OFF, policy="greedy",
                                                           plan_file=None), suggest=False)
        except AotError as e:
            unloadable.append((model, f"cannot load it: {e.message[:160]}"))
            continue
        view = planned.view
        codes = encode(view, opts.accel.backend if opts.accel else None)
        plans = []
        for key, rows in _by_key(_latest_key_per_plan(measured)).items():
            stored = [(r, stored_plan(r.plan, view)) for r in rows]
            fitting = [(r, p) for r, p in stored if not isinstance(p, str)]
            if not fitting:
                skipped.append((model, str(stored[0][1])[:160]))
                continue
            plan, group = fitting[0][1], [r for r, _ in fitting]
            plans.append(MeasuredPlan(key, plan, shape_of(plan, view, codes),
                                      statistics.median(m.total_us for m in group),
                                      _region_medians(plan, group), tuple(m.total_us for m in group)))
        if plans:
            producer = getattr(getattr(planned.source, "model", None), "producer_name", "")   # ONNX only
            graphs.append(GraphData(model, producer == GENERATOR, view, codes,
                                    node_features(view, codes), tuple(plans)))
            progress(f"learn  {model}: {len(plans)} plan(s), {sum(p.rows for p in plans)} row(s)")
    return Dataset(tuple(graphs), fingerprint, tuple(skipped), tuple(unloadable))


def _latest_key_per_plan(rows: list[costdb.Measurement]) -> list[costdb.Measurement]:
    """The rows of each stored plan under the key it was last measured with (``rows`` in the
    order the database appended them)."""
    last = {r.plan: r.key for r in rows}
    return [r for r in rows if last[r.plan] == r.key]


def _by_key(rows: list[costdb.Measurement]) -> dict[str, list[costdb.Measurement]]:
    out: dict[str, list[costdb.Measurement]] = {}
    for r in rows:
        out.setdefault(r.key, []).append(r)
    return out


def _region_medians(plan: Plan, rows: list[costdb.Measurement]) -> tuple[float, ...] | None:
    per: dict[str, list[float]] = {}
    for r in rows:
        for t in r.regions:
            per.setdefault(t.region, []).append(t.median_us)
    if any(name not in per for name in plan.schedule):
        return None
    return tuple(statistics.median(per[name]) for name in plan.schedule)

