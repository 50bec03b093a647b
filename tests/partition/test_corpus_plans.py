"""Partitions of the real-model corpus stay small: no region explosion (plan only, no compile)."""

from __future__ import annotations

import pytest

import aot
from aot.frontend.graph import GraphView
from aot.options import BuildOptions
from aot.partition.plan import boundaries
from aot.partition.support import Overrides, SupportTable, label
from aot.partition.plan import GateMode
from aot.models import zoo

pytestmark = pytest.mark.network   # plans the zoo models (fetched once, then cached)

CORPUS = [m.name for m in zoo.MODELS]


def host_islands(view: GraphView, hosts: set[str]) -> int:
    """Connected groups of host-labelled nodes (edges taken both ways)."""
    seen: set[str] = set()
    islands = 0
    for n in hosts:
        if n in seen:
            continue
        islands += 1
        stack = [n]
        seen.add(n)
        while stack:
            v = stack.pop()
            for w in (*view.predecessors(v), *view.successors(v)):
                if w in hosts and w not in seen:
                    seen.add(w)
                    stack.append(w)
    return islands


# Forcing common op types to the host makes many islands: the stress case for region counts.
STRESS = Overrides(host_ops=frozenset({"Softmax", "MaxPool", "Flatten", "LayerNormalization", "Sigmoid"}))


@pytest.mark.parametrize("name", CORPUS)
@pytest.mark.parametrize("policy", ["greedy", "depth"])
@pytest.mark.parametrize("overrides", [Overrides(), STRESS], ids=["table", "stress"])
def test_region_count_is_bounded_by_host_islands(name, policy, overrides):
    options = BuildOptions(policy=policy, overrides=overrides, gate=GateMode.OFF, min_compute=1)
    planned = aot.plan(f"zoo:{name}", options, suggest=False)
    view, plan = planned.view, planned.plan
    labels = label(view, SupportTable.for_target("vulkan-spirv"), overrides)
    islands = host_islands(view, {n for n, lab in labels.items() if lab.device == "host"})
    crossing = sum(view.values[v].nbytes or 0 for b in boundaries(plan, view).values()
                   for v in b.inputs if v not in view.inputs)
    accel = sum(r.device == "accel" for r in plan.regions)
    print(f"{name:12s} {policy:6s} {'stress' if overrides.host_ops else 'table':6s} nodes={len(view.nodes):4d} "
          f"host_islands={islands:3d} regions={len(plan.regions):3d} accel_regions={accel:3d} boundary_bytes={crossing}")
    # Each host island can split the accelerator work at most once more: accelerator regions
    # never exceed islands + 1 (host regions are the islands themselves, or unions of them).
    assert accel <= islands + 1
