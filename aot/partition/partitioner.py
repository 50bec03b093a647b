"""The one region-forming pipeline: label -> merge (policy) -> judge -> select -> split for
overlap -> order (greedy, or searched per key-node segment) -> gate.

Policies and support tables are data plugged into it; every step only moves nodes to the host,
so the loop ends, and every plan it returns is validated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from aot.frontend.graph import GraphView
from aot.partition import order, policies, search, select
from aot.partition.order import OrderMode
from aot.partition.search import OrderSearch, MeasuredRegion
from aot.partition.segments import segments
from aot.partition.cost import CostModel, plan_cost
from aot.partition.overlap import split_for_overlap
from aot.partition.plan import Gate, GateMode, Plan, Region, region_edges, validate
from aot.partition.support import ACCEL, HOST, Device, Group, Groups, Label, Overrides, SupportTable, label

@dataclass(frozen=True, slots=True)
class PartitionOptions:
    """The partitioner's view of ``BuildOptions`` (``BuildOptions.partition_options``); the
    defaults are the build options', not its own."""

    accel_target: str | None          # "vulkan-spirv", "cuda" or None for host only
    min_compute: int                  # accelerator regions with fewer compute nodes go to the host
    overrides: Overrides
    policy: str
    select: str
    threshold: int
    gate: GateMode                    # ROOFLINE: the cost model's gate; MEASURED is the pipeline's
    cost_params: Path | None
    min_segment_nodes: int            # key-node segments with fewer nodes fuse into a neighbour
    order: OrderMode
    order_budget: int                 # --order search: node orders and scored plans per segment
    # Labels decided before partitioning (memory splitting, partition/splitting.py): a split's pieces
    # keep their original's device, a node no split fits goes to the host. Not a user setting.
    node_labels: tuple[tuple[str, Label], ...]
    # --order search --measure: plans the build times region by region (greedy's included), then
    # the durations it measured, for the search to score with (checks/measured_order.py).
    measure_plans: int
    measured: tuple[MeasuredRegion, ...]
    measured_one_lane: bool           # ... timed on an accelerator that computes on the host's cores
    # ... and the fixed cost of one cross-device transfer fitted to the candidates' whole runs
    # (search.fit_hop_us), in place of the cost model's hand-set one; None: not measured.
    measured_hop_us: float | None


@dataclass(frozen=True, slots=True)
class Partitioned:
    """A validated plan and, under ``--order search``, what the order search did."""

    plan: Plan
    order_search: OrderSearch | None
    greedy: Plan | None = None    # the greedy plan, when the search replaced it (--measure times both)
    candidates: tuple[Plan, ...] = ()   # --order search --measure: plans to time, greedy's first


def make_plan(view: GraphView, options: PartitionOptions) -> Plan:
    """Partition ``view``; the returned plan is validated."""
    return partition(view, options).plan


def partition(view: GraphView, options: PartitionOptions) -> Partitioned:
    """Partition ``view``: the validated plan and what the order search did, if it ran."""
    table = SupportTable.for_target(options.accel_target) if options.accel_target else None
    cost = CostModel.load(options.accel_target, options.cost_params)
    labels = {**label(view, table, options.overrides), **dict(options.node_labels)}
    merge = policies.get(options.policy)

    def moves_of(groups: Groups) -> dict[str, str]:
        """Nodes the judgment or the selection sends to the host, and why."""
        moves = judge(groups, view, table) if table else {}
        if not moves:
            for i, why in select.rejected(groups, view, options.select, options.min_compute,
                                          options.threshold, cost).items():
                moves.update({n: why for n in groups[i].nodes})
        # A node the user forced onto the accelerator stays there whatever happens to its region.
        return {n: why for n, why in moves.items()
                if labels[n].device == ACCEL and options.overrides.decide(view.node(n)) is None}

    while True:
        groups = merge(view, {n: lab.device for n, lab in labels.items()})
        moves = moves_of(groups)
        if not moves:
            break
        labels.update({n: Label(HOST, why) for n, why in moves.items()})
    groups, moved = split_for_overlap(groups, view, cost, lambda split: not moves_of(split))
    reasons = {**{n: lab.reason for n, lab in labels.items() if lab.device == HOST}, **moved}
    plan = plan_from_groups(view, groups, reasons)
    searched, greedy = None, None
    candidates: tuple[Plan, ...] = ()
    if options.order is OrderMode.SEARCH:
        greedy, segs = plan, segments(view, options.min_segment_nodes)
        plan, searched = search.search(view, plan, segs, cost, options.order_budget, moves_of, options.measured,
                                      options.measured_one_lane, options.measured_hop_us)
        if options.gate is GateMode.MEASURED and options.measure_plans and not options.measured:
            candidates = search.candidate_plans(view, greedy, segs, cost, options.order_budget, moves_of,
                                                options.measure_plans)
        greedy = greedy if searched.kept is OrderMode.SEARCH else None
    if options.gate is GateMode.ROOFLINE and plan.uses_accel:
        plan = gate(plan, view, cost, all_accel_ok=all(lab.device == ACCEL for lab in labels.values()))
    validate(plan, view)
    return Partitioned(plan, searched, greedy, candidates)


def judge(groups: Groups, view: GraphView, table: SupportTable) -> dict[str, str]:
    """Merge judgment for "specific" results: a region that would hand one on to another region
    (or out of the model from the accelerator) is merged with its consumer and the union goes to
    the host. Returns node -> reason for every node that must move."""
    owner = {n: i for i, group in enumerate(groups) for n in group.nodes}
    moves: dict[str, str] = {}
    for i, group in enumerate(groups):
        for n in group.nodes:
            node = view.node(n)
            for v in node.outputs:
                consumers = {owner[c] for c in view.consumers(v)} - {i}
                leaves = bool(consumers) or (v in view.outputs and group.device == ACCEL)
                if not leaves:
                    continue
                d = table.may_cross(node, v, view)
                if d.supported:
                    continue
                for j in {i} | consumers:
                    if groups[j].device == ACCEL:
                        for m in groups[j].nodes:
                            moves.setdefault(m, f"merged to the host with a region that reads {n!r}: {d.reason}")
    return moves


def gate(plan: Plan, view: GraphView, cost: CostModel, *, all_accel_ok: bool) -> Plan:
    """Ship a plan that uses the accelerator only if it beats the best single-device plan. A plan
    that is one accelerator region is judged too: against the whole model on the host, since a
    small model can cost less on the host than one call and its transfers (Silero VAD on an H100:
    0.96 ms on CUDA, 0.16 ms on the host CPU)."""
    nodes = tuple(n.name for n in view.nodes)
    whole_accel = len(plan.regions) == 1 and plan.regions[0].device == ACCEL
    partitioned = plan_cost({r.name: Group(r.device, r.nodes) for r in plan.regions}, view, cost,
                            plan.schedule).total_us
    host = plan_cost({"all": Group(HOST, nodes)}, view, cost).total_us
    accel = (partitioned if whole_accel
             else plan_cost({"all": Group(ACCEL, nodes)}, view, cost).total_us if all_accel_ok else None)
    singles = [(host, HOST)] + ([(accel, ACCEL)] if accel is not None and not whole_accel else [])
    best_single, best_device = min(singles)
    numbers = (("estimated" if whole_accel else f"estimated partitioned {partitioned:.1f} us vs")
               + f" all-host {host:.1f} us" + (f" vs all-accelerator {accel:.1f} us" if accel is not None else "")
               + f" (cost model: {cost.source})")
    if partitioned < best_single:
        return Plan(plan.regions, plan.schedule, plan.reasons,
                    Gate(True, partitioned, host, accel, numbers, whole_accel=whole_accel))
    single = single_region_plan(view, best_device)
    why = (f"the gate kept the whole model on the host: the accelerator does not beat it; {numbers}" if whole_accel
           else f"the gate kept one {best_device} region: the partition does not beat it; {numbers}")
    reasons = tuple((n, why) for n in nodes) if best_device == HOST else ()
    return Plan(single.regions, single.schedule, reasons,
                Gate(False, partitioned, host, accel, numbers, whole_accel=whole_accel))


def plan_from_groups(view: GraphView, groups: Groups, reasons: dict[str, str] | None = None) -> Plan:
    """Name regions r0, r1, ... and schedule them."""
    regs = tuple(Region(f"r{i}", group.device, group.nodes) for i, group in enumerate(groups))
    draft = Plan(regs, tuple(r.name for r in regs))
    first = {n.name: i for i, n in enumerate(view.nodes)}
    sched = order.schedule({r.name: r.device for r in regs}, region_edges(draft, view),
                           {r.name: first[r.nodes[0]] for r in regs})
    return Plan(regs, sched, tuple(sorted((reasons or {}).items())))


def single_region_plan(view: GraphView, device: Device = HOST) -> Plan:
    return plan_from_groups(view, [Group(device, tuple(n.name for n in view.nodes))])


def suggestions(view: GraphView, options: PartitionOptions, plan: Plan) -> tuple[str, ...]:
    """Settings that would clearly cut the region count (as Torch-TensorRT's dryrun recommends a
    min block size): a larger --min-compute, or letting the op type that splits the graph most
    run on the accelerator."""
    if options.accel_target is None or len(plan.regions) <= 2:
        return ()
    out = []
    base = len(plan.regions)
    for k in range(options.min_compute + 1, options.min_compute + 9):
        n = len(make_plan(view, replace(options, min_compute=k)).regions)
        if n <= base * 0.6:
            out.append(f"--min-compute {k} gives {n} regions instead of {base}")
            break
    table = SupportTable.for_target(options.accel_target)
    host_ops: dict[str, int] = {}
    for node in view.nodes:
        if node.op_type in table.host_only:
            host_ops[node.op_type] = host_ops.get(node.op_type, 0) + 1
    for op in sorted(host_ops, key=lambda o: -host_ops[o])[:3]:
        forced = replace(options, overrides=replace(options.overrides, accel_ops=options.overrides.accel_ops | {op}))
        n = len(make_plan(view, forced).regions)
        if n <= base * 0.6:
            out.append(f"--accel-ops {op} ({host_ops[op]} node(s)) gives {n} regions instead of {base}, "
                       "if your device runs it well")
    return tuple(out)
