"""Plan and Region value objects, their boundaries, validation and the JSON form users can edit."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aot.errors import PartitionError
from aot.frontend.graph import GraphView
from aot.partition.support import ACCEL, HOST

PLAN_VERSION = 1


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    device: str                 # ACCEL or HOST
    nodes: tuple[str, ...]      # node names in topological order


@dataclass(frozen=True, slots=True)
class Gate:
    """The global gate's decision: was the partition worth shipping, and the numbers behind it."""

    accepted: bool
    partitioned_us: float
    all_host_us: float
    all_accel_us: float | None
    detail: str


@dataclass(frozen=True, slots=True)
class Plan:
    regions: tuple[Region, ...]
    schedule: tuple[str, ...]                 # region names in execution order
    reasons: tuple[tuple[str, str], ...] = ()  # (node, why it is on the host)
    gate: Gate | None = None

    def region(self, name: str) -> Region:
        return next(r for r in self.regions if r.name == name)

    def to_json(self) -> dict[str, Any]:
        return {"plan_version": PLAN_VERSION,
                "regions": [{"name": r.name, "device": r.device, "nodes": list(r.nodes)} for r in self.regions],
                "schedule": list(self.schedule),
                "host_reasons": dict(self.reasons),
                "gate": None if self.gate is None else {
                    "accepted": self.gate.accepted, "partitioned_us": self.gate.partitioned_us,
                    "all_host_us": self.gate.all_host_us, "all_accel_us": self.gate.all_accel_us,
                    "detail": self.gate.detail}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Plan":
        try:
            regions = tuple(Region(str(r["name"]), str(r["device"]), tuple(map(str, r["nodes"])))
                            for r in data["regions"])
            schedule = tuple(map(str, data.get("schedule") or [r.name for r in regions]))
            reasons = tuple((str(k), str(v)) for k, v in (data.get("host_reasons") or {}).items())
            g = data.get("gate")
            gate = None if not g else Gate(bool(g["accepted"]), float(g["partitioned_us"]), float(g["all_host_us"]),
                                           None if g["all_accel_us"] is None else float(g["all_accel_us"]),
                                           str(g["detail"]))
        except (KeyError, TypeError, ValueError) as e:
            raise PartitionError(f"plan file is malformed: missing or wrong field {e}",
                                 hint="a plan holds regions: [{name, device, nodes}] and schedule") from e
        return cls(regions, schedule, reasons, gate)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> "Plan":
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as e:
            raise PartitionError(f"cannot read plan {str(path)!r}: {e}") from e


@dataclass(frozen=True, slots=True)
class Boundary:
    """What a region reads from outside and what it hands on (graph outputs included)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def boundary(nodes: tuple[str, ...], view: GraphView) -> Boundary:
    """What a set of nodes reads from outside (in first-use order) and what it hands on: a
    value read outside the set, or a graph output. The one definition of a region boundary:
    plans, selection, outlining and reports all use it."""
    inside = set(nodes)
    graph_outputs = set(view.outputs)
    ins: dict[str, None] = {}
    outs: dict[str, None] = {}
    for n in nodes:
        node = view.node(n)
        for v in node.inputs:
            if view.producer(v) not in inside:
                ins[v] = None
        for v in node.outputs:
            if v in graph_outputs or any(c not in inside for c in view.consumers(v)):
                outs[v] = None
    return Boundary(tuple(ins), tuple(outs))


def boundaries(plan: Plan, view: GraphView) -> dict[str, Boundary]:
    return {r.name: boundary(r.nodes, view) for r in plan.regions}


def region_edges(plan: Plan, view: GraphView) -> dict[str, set[str]]:
    """Region -> the regions that read one of its outputs."""
    owner = {n: r.name for r in plan.regions for n in r.nodes}
    edges: dict[str, set[str]] = {r.name: set() for r in plan.regions}
    for node in view.nodes:
        for p in view.predecessors(node.name):
            if owner.get(p) and owner.get(node.name) and owner[p] != owner[node.name]:
                edges[owner[p]].add(owner[node.name])
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle in the region graph as a list of region names, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(r: str) -> list[str] | None:
        state[r] = 1; stack.append(r)
        for s in sorted(edges[r]):
            if state.get(s) == 1:
                return stack[stack.index(s):] + [s]
            if s not in state and (found := visit(s)):
                return found
        state[r] = 2; stack.pop()
        return None

    for r in sorted(edges):
        if r not in state and (found := visit(r)):
            return found
    return None


def validate(plan: Plan, view: GraphView) -> None:
    """Raise PartitionError unless every node is in exactly one region, devices are known, the
    region graph is acyclic and the schedule is a topological order of it."""
    seen: dict[str, str] = {}
    names = [r.name for r in plan.regions]
    if len(set(names)) != len(names):
        raise PartitionError("plan has two regions with the same name")
    for r in plan.regions:
        if r.device not in (ACCEL, HOST):
            raise PartitionError(f"region {r.name!r} has unknown device {r.device!r}", hint="use 'accel' or 'host'")
        if not r.nodes:
            raise PartitionError(f"region {r.name!r} is empty")
        for n in r.nodes:
            if n in seen:
                raise PartitionError(f"node {n!r} is in regions {seen[n]!r} and {r.name!r}",
                                     hint="each node belongs to exactly one region")
            seen[n] = r.name
    known = {n.name for n in view.nodes}
    if missing := known - seen.keys():
        raise PartitionError(f"{len(missing)} node(s) are in no region, e.g. {sorted(missing)[:3]}")
    if extra := seen.keys() - known:
        raise PartitionError(f"plan names node(s) the model does not have, e.g. {sorted(extra)[:3]}")
    edges = region_edges(plan, view)
    if cycle := find_cycle(edges):
        raise PartitionError("region graph has a cycle: " + " -> ".join(cycle),
                             hint="move nodes so that no region both feeds and depends on another")
    pos = {r: i for i, r in enumerate(plan.schedule)}
    if sorted(pos) != sorted(names):
        raise PartitionError("schedule must list every region exactly once")
    for a, succs in edges.items():
        for b in succs:
            if pos[a] > pos[b]:
                raise PartitionError(f"schedule runs {b!r} before {a!r}, which it depends on")
