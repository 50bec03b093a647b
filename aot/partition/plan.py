"""Plan and Region value objects, their boundaries, validation and the JSON form users can edit."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aot.errors import PartitionError
from aot.frontend.graph import GraphView
from aot.frontend.split import Split
from aot.partition.support import ACCEL, Device
from aot.runtime import codec
from aot.runtime.codec import field
from aot.runtime.manifest import HostRuntime

PLAN_VERSION = 1


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    device: Device
    nodes: tuple[str, ...]      # node names in topological order
    # Optimisation flags pinned by a search (tuning): a build of this plan compiles the region with
    # exactly these instead of its target's defaults, and searches nothing. None: the defaults.
    flags: tuple[str, ...] | None = field(default=None, omit_default=True)


class GateMode(enum.Enum):
    """How a build decides whether a partition is worth shipping (``--gate``)."""

    OFF = "off"                # always ship it
    ROOFLINE = "roofline"      # when the cost model estimates it beats one device
    MEASURED = "measured"      # when timing on the real devices says it beats the host
    LEARNED = "learned"        # when the cost database (a measured plan) or the learned model says it
                               # beats the host by --gate-margin (aot/learn/decide.py; the roofline without one)


class CostSource(enum.Enum):
    """Where a learned gate's numbers came from, best first."""

    DATABASE = "database"      # the plan was measured before: the cost database's median (row ids kept)
    REGIONS = "database regions"   # every region measured in other plans: their medians through the lanes
    LEARNED = "learned"        # the learned cost model's prediction (with any region measured before in place)
    ROOFLINE = "roofline"      # the hand-set roofline: no model, or one trained on other devices


@dataclass(frozen=True, slots=True)
class Gate:
    """The gate's decision: was the partition worth shipping, and the numbers behind it
    (estimated by the cost model, or measured on the devices). The one form the plan file, the
    build record and the report share."""

    accepted: bool
    partitioned_us: float
    all_host_us: float
    all_accel_us: float | None
    detail: str
    measured: bool = field(default=False, omit_default=True)
    # --gate learned: where partitioned_us came from (all_host_us's source is in the detail), the
    # database rows behind it, why a learned model was not used, and with --measure-prediction the
    # shipped plan's measured time beside the prediction.
    source: CostSource | None = field(default=None, omit_default=True)
    rows: tuple[int, ...] = field(default=(), omit_default=True)
    fallback: str = field(default="", omit_default=True)
    measured_us: float | None = field(default=None, omit_default=True)
    whole_accel: bool = field(default=False, omit_default=True)   # the plan judged was one accelerator region

    def verdict(self) -> str:
        """What the report says the gate decided: "partition accepted", "whole model on the
        accelerator rejected", ..."""
        judged = "whole model on the accelerator" if self.whole_accel else "partition"
        return f"{judged} {'accepted' if self.accepted else 'rejected'}"

    def predicted_us(self) -> float:
        """The estimate for the plan the gate shipped: the partition's, or the whole model's on the host."""
        return self.partitioned_us if self.accepted else self.all_host_us

    def prediction_line(self) -> str | None:
        """A learned gate's predicted vs measured line for the report, or None for other gates."""
        if self.source is None:
            return None
        line = f"cost source: {self.source.value}; predicted {self.predicted_us():.1f} us for the shipped plan"
        if self.measured_us is not None:
            line += (f", measured {self.measured_us:.1f} us "
                     f"({self.measured_us / self.predicted_us():.2f}x the prediction)" if self.predicted_us() > 0
                     else f", measured {self.measured_us:.1f} us")
        else:
            line += ", not measured (--measure-prediction times it)"
        return line + (f"; database rows {', '.join(map(str, self.rows))}" if self.rows else "")


@dataclass(frozen=True, slots=True)
class Plan:
    """Every decision a build makes about a model: regions and their devices, the order, the
    gate, the operator splits, and what searches and measurements chose (pinned flags, the host runtime). A build of
    a plan file replays it with no search and no timing."""

    regions: tuple[Region, ...]
    schedule: tuple[str, ...]                 # region names in execution order
    reasons: tuple[tuple[str, str], ...] = field(default=(), key="host_reasons", as_map=True)  # (node, why host)
    gate: Gate | None = None
    host_runtime: HostRuntime | None = field(default=None, omit_default=True)   # chosen by timing whole runs
    # Nodes split to fit a device's memory limit (--memory-limit): the nodes above name the pieces,
    # so a build of this plan makes exactly these splits again before it checks the regions.
    splits: tuple[Split, ...] = field(default=(), omit_default=True)

    def region(self, name: str) -> Region:
        return next(r for r in self.regions if r.name == name)

    @property
    def uses_accel(self) -> bool:
        """Some region runs on the accelerator: the plans a gate judges."""
        return any(r.device == ACCEL for r in self.regions)

    @property
    def pinned_flags(self) -> dict[str, tuple[str, ...]]:
        """region -> the optimisation flags a search pinned for it."""
        return {r.name: r.flags for r in self.regions if r.flags is not None}

    def unpinned(self) -> "Plan":
        """The same partition with the searches' choices forgotten (a new search makes them again)."""
        return replace(self, regions=tuple(replace(r, flags=None) for r in self.regions), host_runtime=None)

    def to_json(self) -> dict[str, Any]:
        return {"plan_version": PLAN_VERSION, **codec.encode_fields(self)}

    def digest(self) -> str:
        """sha256 of the plan as its file holds it: equal digests, equal decisions."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Plan":
        try:
            if isinstance(data, dict) and not data.get("schedule") and isinstance(data.get("regions"), list):
                data = {**data, "schedule": [r.get("name") for r in data["regions"] if isinstance(r, dict)]}
            for r in data.get("regions") or ():
                if isinstance(r, dict) and "device" in r and r["device"] not in {d.value for d in Device}:
                    raise PartitionError(f"region {r.get('name')!r} has unknown device {r['device']!r}",
                                         hint="use 'accel' or 'host'")
            return codec.decode_fields(cls, {**data, "host_reasons": data.get("host_reasons") or {}})
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise PartitionError(f"plan file is malformed: missing or wrong field {e}",
                                 hint="a plan holds regions: [{name, device, nodes}] and schedule") from e

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
        if r.device not in tuple(Device):      # a plan built in Python: a plan file's is read as one
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
