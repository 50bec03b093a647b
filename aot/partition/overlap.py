"""Split a region where its tail waits for another device and its head need not.

Region formation fuses same-device nodes wherever no cycle forms. A host region that takes in both
a host branch and the join after an accelerator branch makes the whole host branch wait for the
accelerator, although the runtime could run the two branches at the same time (a lane per device,
runtime/lanes.py). Splitting such a region into the nodes that do not depend on the other device's
region (the head) and those that do (the tail) restores that overlap, at the price of one more
region call: the lane-aware cost model decides, so small branches stay fused. The tail of an
accelerator region may also go to the host: a join after a host branch often costs the
accelerator less than waiting for that branch does.

A split never forms a cycle: a head node cannot depend on a tail node, which depends on the other
region, or it would be a tail node itself.
"""

from __future__ import annotations

from typing import Callable

from aot.frontend.graph import GraphView
from aot.partition.cost import CostModel, plan_cost
from aot.partition.support import ACCEL, HOST, Group, Groups

# The least estimated saving, as a share of the plan's time, that pays for a split. The cost model
# treats devices as independent; lavapipe shares the host's cores (the two-branch example overlaps
# 1.2x where independent devices would reach 1.48x, docs/buckets.md), so small gains would not survive.
MIN_GAIN = 0.10


def split_for_overlap(groups: Groups, view: GraphView, cost: CostModel,
                      acceptable: Callable[[Groups], bool] = lambda g: True) -> tuple[Groups, dict[str, str]]:
    """Apply the best estimated split while one saves at least ``MIN_GAIN`` of the plan's time;
    ``acceptable`` vetoes a split the other partition rules would undo (an accelerator part too
    small, a crossing value the accelerator cannot hand on). Returns the groups and, for every
    accelerator node a split moved to the host, why."""
    moved: dict[str, str] = {}
    for _ in range(len(view.nodes)):   # each split adds a region: bounded by the node count
        current = _cost(groups, view, cost)
        candidates = [c for c in _splits(groups, view) if acceptable(c[0])]
        best = min(candidates, key=lambda c: _cost(c[0], view, cost), default=None)
        if best is None or _cost(best[0], view, cost) > current * (1 - MIN_GAIN):
            return groups, moved
        why = (f"split from an accelerator region that waited for the host: on the host it saves the plan an "
               f"estimated {current:.0f} us -> {_cost(best[0], view, cost):.0f} us (overlap, fewer transfers)")
        groups = best[0]
        moved.update(dict.fromkeys(best[1], why))
    return groups, moved


def _cost(groups: Groups, view: GraphView, cost: CostModel) -> float:
    return plan_cost({f"r{i}": g for i, g in enumerate(groups)}, view, cost).total_us


def _splits(groups: Groups, view: GraphView) -> list[tuple[Groups, tuple[str, ...]]]:
    """Every (region, other-device region) split: the region's nodes reached from the other region
    (the tail) go to a new region right after it, on the same device or, for an accelerator
    region, on the host. Each with the accelerator nodes it moves to the host."""
    out: list[tuple[Groups, tuple[str, ...]]] = []
    for other in groups:
        reached = _descendants(other.nodes, view)
        for i, group in enumerate(groups):
            if group.device == other.device:
                continue
            tail = tuple(n for n in group.nodes if n in reached)
            head = tuple(n for n in group.nodes if n not in reached)
            if not (head and tail):
                continue
            first = Group(group.device, head)
            out.append(([*groups[:i], first, Group(group.device, tail), *groups[i + 1:]], ()))
            if group.device == ACCEL:
                out.append(([*groups[:i], first, Group(HOST, tail), *groups[i + 1:]], tail))
    return out


def _descendants(nodes: tuple[str, ...], view: GraphView) -> set[str]:
    seen: set[str] = set()
    stack = [c for n in nodes for v in view.node(n).outputs for c in view.consumers(v)]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack += [c for v in view.node(n).outputs for c in view.consumers(v)]
    return seen
