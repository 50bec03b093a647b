"""The one region-forming pipeline: label -> merge -> demote small regions -> order."""

from __future__ import annotations

from dataclasses import dataclass

from aot.graph import GraphView
from aot.partition import order, regions
from aot.partition.plan import Plan, Region, region_edges, validate
from aot.partition.support import ACCEL, HOST, Label, Overrides, SupportTable, label


@dataclass(frozen=True, slots=True)
class PartitionOptions:
    accel_target: str | None          # "vulkan-spirv", "cuda" or None for host only
    min_compute: int = 2              # accelerator regions with fewer compute nodes go to the host
    overrides: Overrides = Overrides()


def make_plan(view: GraphView, options: PartitionOptions) -> Plan:
    """Partition ``view``; the returned plan is validated."""
    table = SupportTable.for_target(options.accel_target) if options.accel_target else None
    labels = label(view, table, options.overrides)
    while True:
        groups = regions.merge(view, {n: l.device for n, l in labels.items()})
        demoted = 0
        for dev, nodes in groups:
            k = sum(view.node(n).is_compute for n in nodes)
            if dev != ACCEL or k >= options.min_compute:
                continue
            for n in nodes:
                # A node the user forced onto the accelerator stays there whatever its region's size.
                if options.overrides.decide(view.node(n)) is None:
                    labels[n] = Label(HOST, f"its accelerator region had {k} compute node(s), fewer than "
                                            f"--min-compute {options.min_compute}: not worth the transfers")
                    demoted += 1
        if not demoted:  # demotion only moves nodes to the host, so this loop ends
            break
    plan = plan_from_groups(view, groups, {n: l.reason for n, l in labels.items() if l.device == HOST})
    validate(plan, view)
    return plan


def plan_from_groups(view: GraphView, groups: list[tuple[str, tuple[str, ...]]],
                     reasons: dict[str, str] | None = None) -> Plan:
    """Name regions r0, r1, ... and schedule them."""
    regs = tuple(Region(f"r{i}", dev, nodes) for i, (dev, nodes) in enumerate(groups))
    draft = Plan(regs, tuple(r.name for r in regs))
    first = {n.name: i for i, n in enumerate(view.nodes)}
    sched = order.schedule({r.name: r.device for r in regs}, region_edges(draft, view),
                           {r.name: first[r.nodes[0]] for r in regs})
    return Plan(regs, sched, tuple(sorted((reasons or {}).items())))


def single_region_plan(view: GraphView, device: str = HOST) -> Plan:
    return plan_from_groups(view, [(device, tuple(n.name for n in view.nodes))])
