"""``--policy learned`` and ``--gate learned``: the build-time side of the learned policy. Numpy
only: the model is JSON trees (``trees.py``), the database SQLite from the standard library.

A plan's cost comes from the best source at hand: the cost database when this exact plan was
measured on these devices (its key, ``key.plan_key``: a hit is never predicted again), else the
learned model's prediction, else the hand-set roofline (no model, or a model trained on other
devices: ``LearnedModel.mismatch``; the gate's record says which and why). A region-time model
(``Mode.REGIONS``) takes each region the database measured in another plan (the same subgraph,
device and flags: ``key.region_digest``, by this compiler) at its measured median instead of its
prediction; where every region was measured, the plan's cost is theirs through the lanes.

The proposer: the model's per-node probability of "accelerator" is swept at a few thresholds;
each threshold's host labels go through the one partitioning pipeline (merge, judgment,
selection, overlap, order, ``plan.validate``) as pre-decided labels, so every candidate is
repaired and checked as any plan is; with the greedy plan beside them, the cheapest wins. The
gate compares the chosen plan with the whole model on the host. Both decisions end in the plan,
so ``--plan`` replays them with no model and no database.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aot.errors import AotError
from aot.frontend.graph import GraphView
from aot.learn import db as costdb
from aot.learn.features import GraphCodes, encode, node_features, shape_of
from aot.learn.key import compiled_flags, compiler_version, device_fingerprint, key_of, region_digest
from aot.learn.model import LearnedModel, Mode, shipped_model
from aot.partition import policies
from aot.partition.cost import CostModel, plan_cost
from aot.partition.partitioner import Partitioned, PartitionOptions, gate, partition, single_region_plan
from aot.partition.plan import CostSource, Gate, GateMode, Plan
from aot.partition.support import HOST, Group, Label
from aot.runtime.target import Target

if TYPE_CHECKING:
    from aot.options import BuildOptions

THRESHOLDS = (0.3, 0.5, 0.7)


@dataclass(frozen=True, slots=True)
class Costed:
    us: float
    source: CostSource
    rows: tuple[int, ...] = ()     # database rows behind a DATABASE cost


@dataclass(frozen=True, slots=True)
class Estimator:
    """Costs plans of one graph: database hit, learned prediction, or roofline."""

    view: GraphView
    codes: GraphCodes
    model: LearnedModel | None     # None: not given, not shipped, or for other devices (see ``fallback``)
    fallback: str                  # why the model is not used ("" when it is)
    database: Path | None
    fingerprint: str
    roofline: CostModel
    host: Target = Target.host()   # the targets whose defaults an unpinned region compiles with
    accel: Target | None = None

    def cost(self, plan: Plan) -> Costed:
        measured: dict[int, float] = {}
        rows: tuple[int, ...] = ()
        if self.database is not None:
            with costdb.CostDatabase(self.database) as db:
                hit = db.lookup(key_of(self.view, plan, self.fingerprint).key)
                if hit is not None:
                    return Costed(hit.total_us, CostSource.DATABASE, hit.row_ids)
                if self.model is not None and self.model.mode is Mode.REGIONS:
                    measured, rows = self._measured_regions(plan, db)
        if self.model is not None:
            us = self.model.plan_us(shape_of(plan, self.view, self.codes), measured)
            whole = len(measured) == len(plan.schedule)
            return Costed(us, CostSource.REGIONS if whole else CostSource.LEARNED, rows)
        groups = {r.name: Group(r.device, r.nodes) for r in plan.regions}
        return Costed(plan_cost(groups, self.view, self.roofline, plan.schedule).total_us, CostSource.ROOFLINE)

    def rank(self, plan: Plan, cost: Costed) -> float:
        """What the choice among plans compares: a predicted cost weighed by the plan's flag risk
        and what similar graphs measured for its flags (``LearnedModel.ranking_us``); a measured
        or roofline cost as it is."""
        if self.model is None or cost.source in (CostSource.DATABASE, CostSource.ROOFLINE):
            return cost.us
        return float(self.model.ranking_us([plan], [cost.us], self.codes)[0])

    def _measured_regions(self, plan: Plan, db: costdb.CostDatabase) -> tuple[dict[int, float], tuple[int, ...]]:
        """Schedule position -> the database's median for that region, and the rows behind them."""
        compiler = compiler_version()
        measured: dict[int, float] = {}
        rows: list[int] = []
        for i, name in enumerate(plan.schedule):
            r = plan.region(name)
            target = self.host if r.device == HOST else self.accel
            flags = (r.flags or ()) if target is None else compiled_flags(self.view, r, target)
            hit = db.region_lookup(region_digest(self.view, r.nodes, r.device.value, flags), r.device.value,
                                   self.fingerprint, compiler)
            if hit is not None:
                measured[i] = hit.total_us
                rows += hit.row_ids
        return measured, tuple(dict.fromkeys(rows))


def estimator(view: GraphView, popts: PartitionOptions, options: "BuildOptions") -> Estimator:
    """The model (``--cost-model``, else the shipped default), checked against this build's
    devices, and the database (``--cost-db``), which must exist: a typo would silently
    predict what was measured."""
    fingerprint = device_fingerprint(options)
    model, fallback = None, ""
    path = options.cost_model or shipped_model(fingerprint)
    if path is None:
        fallback = f"no learned model: none given (--cost-model) and none shipped for {fingerprint!r}"
    else:
        model = LearnedModel.load(path)
        if (why := model.mismatch(fingerprint)) is not None:
            model, fallback = None, f"learned model {str(path)!r} not used: {why}"
    if options.cost_db is not None and not Path(options.cost_db).is_file():
        raise costdb.CostDatabaseError(f"no cost database at {str(options.cost_db)!r}",
                                       hint="give the file `aot learn collect --db` wrote, or leave --cost-db out")
    return Estimator(view, encode(view, popts.accel_target), model, fallback, options.cost_db, fingerprint,
                     CostModel.load(popts.accel_target, popts.cost_params), options.host, options.accel)


def candidates(est: Estimator, popts: PartitionOptions) -> list[tuple[str, Plan]]:
    """The greedy plan, then one plan per threshold of the proposer's probabilities (distinct,
    each validated by the partitioner)."""
    base = dataclasses.replace(popts, policy="greedy", gate=GateMode.OFF)
    out = [("greedy", partition(est.view, base).plan)]
    if est.model is None or est.model.policy is None:
        return out
    p = est.model.accel_probability(node_features(est.view, est.codes))
    seen = {_partition_of(out[0][1])}
    for t in THRESHOLDS:
        host = tuple((n, Label(HOST, f"learned proposer: P(accelerator) {p[i]:.2f} < {t}"))
                     for i, n in enumerate(est.codes.names) if p[i] < t)
        try:
            plan = partition(est.view, dataclasses.replace(base, node_labels=base.node_labels + host)).plan
        except AotError:
            continue
        if (k := _partition_of(plan)) not in seen:
            seen.add(k)
            out.append((f"threshold {t}", plan))
    return out


def _partition_of(plan: Plan) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(sorted((r.device.value, r.nodes) for r in plan.regions))


def decide(view: GraphView, popts: PartitionOptions, options: "BuildOptions") -> Partitioned:
    """The plan ``--policy``/``--gate learned`` choose (with the gate's record in ``plan.gate``)."""
    est = estimator(view, popts, options)
    if popts.policy == policies.LEARNED:
        costed = [(name, plan, est.cost(plan)) for name, plan in candidates(est, popts)]
        # Sources may differ between candidates (one measured, another predicted): the database's
        # median is the better estimate of that plan, so it is compared as it is.
        name, plan, cost = min(costed, key=lambda c: est.rank(c[1], c[2]))
        detail = f"learned policy chose {name} of: " + "; ".join(f"{n} {c.us:.1f} us ({c.source.value})"
                                                                 for n, _, c in costed)
        detail += f" ({est.fallback}: the proposer needs one)" if est.fallback else ""
    else:
        plan = partition(view, dataclasses.replace(popts, gate=GateMode.OFF)).plan
        cost, detail = est.cost(plan), ""
    if popts.gate is GateMode.LEARNED:
        plan = learned_gate(plan, view, est, cost, options.gate_margin, detail)
    elif popts.gate is GateMode.ROOFLINE and plan.uses_accel:
        plan = gate(plan, view, est.roofline, all_accel_ok=False)
        if detail and plan.gate is not None:   # the record says how the learned policy chose, beside the gate
            plan = dataclasses.replace(plan, gate=dataclasses.replace(plan.gate, detail=f"{plan.gate.detail}; {detail}"))
    return Partitioned(plan, None)


def learned_gate(plan: Plan, view: GraphView, est: Estimator, cost: Costed, margin: float, chose: str = "") -> Plan:
    """Keep ``plan`` only if its cost is below the whole model on the host by ``margin``."""
    host_plan = single_region_plan(view, HOST)
    host = est.cost(host_plan)
    partitioned = len(plan.regions) > 1 or plan.uses_accel
    accepted = partitioned and cost.us < host.us * (1.0 - margin)
    rows = tuple(dict.fromkeys(cost.rows + host.rows))
    detail = (("" if partitioned else "the chosen plan runs wholly on the host; ")
              + f"{cost.source.value} partitioned {cost.us:.1f} us vs {host.source.value} all-host {host.us:.1f} us, "
              f"margin {margin:.0%}" + (f"; database rows {', '.join(map(str, rows))}" if rows else "")
              + (f"; {est.fallback}, so the roofline decided" if est.fallback else "")
              + (f"; {chose}" if chose else ""))
    g = Gate(accepted, cost.us, host.us, None, detail, source=cost.source, rows=rows,
             fallback=est.fallback)
    if accepted:
        return dataclasses.replace(plan, gate=g)
    why = f"the learned gate kept the whole model on the host: {detail}"
    return Plan(host_plan.regions, host_plan.schedule, tuple((n.name, why) for n in view.nodes), g,
                splits=plan.splits)
