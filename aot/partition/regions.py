"""Cycle-free merging of same-label nodes into regions.

Nodes are placed in topological order; a node joins a region of one of its same-label predecessors
only when that region cannot reach the node's other predecessors (that path would come back into
the region: a cycle between regions). Then same-label regions are fused while no third region lies
on a path between them. Every step keeps the region graph acyclic, so the result is valid on any DAG.
"""

from __future__ import annotations

from typing import Hashable, Iterable, Mapping, Protocol, TypeVar

from aot.frontend.graph import GraphView
from aot.partition.support import Device, Group

V = TypeVar("V", bound=Hashable)


class Successors(Protocol[V]):
    """vertex -> its successors: a dict of them, or a list indexed by vertex number."""

    def __getitem__(self, vertex: V, /) -> Iterable[V]: ...


def path_exists(succ: Successors[V], src: V, dst: V, *, skip_direct: bool = False) -> bool:
    """Is there a path src -> ... -> dst in the graph ``succ`` (vertex -> successors)? With
    ``skip_direct``, only a path through some other vertex counts."""
    stack = [s for s in succ[src] if not (skip_direct and s == dst)]
    seen = set(stack)
    while stack:
        v = stack.pop()
        if v == dst:
            return True
        for s in succ[v]:
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return False


class _RegionGraph:
    def __init__(self) -> None:
        self.members: list[list[str]] = []
        self.label: list[Device] = []
        self.succ: list[set[int]] = []
        self.pred: list[set[int]] = []
        self.alive: list[bool] = []

    def new(self, label: Device) -> int:
        self.members.append([]); self.label.append(label)
        self.succ.append(set()); self.pred.append(set()); self.alive.append(True)
        return len(self.members) - 1

    def edge(self, a: int, b: int) -> None:
        if a != b:
            self.succ[a].add(b); self.pred[b].add(a)

    def reaches(self, src: int, dst: int, *, skip_direct: bool = False) -> bool:
        return path_exists(self.succ, src, dst, skip_direct=skip_direct)

    def fuse(self, keep: int, gone: int) -> None:
        self.members[keep].extend(self.members[gone])
        for s in self.succ[gone]:
            self.pred[s].discard(gone); self.edge(keep, s)
        for p in self.pred[gone]:
            self.succ[p].discard(gone); self.edge(p, keep)
        self.succ[keep].discard(keep); self.pred[keep].discard(keep)
        self.succ[gone] = set(); self.pred[gone] = set()
        self.alive[gone] = False; self.members[gone] = []


def merge(view: GraphView, labels: Mapping[str, Device]) -> list[Group]:
    """Group nodes into label-homogeneous regions with an acyclic region graph.

    ``labels`` maps node name -> label. Returns a group (label, node names in topological order)
    per region, regions in order of their first node.
    """
    g = _RegionGraph()
    region_of: dict[str, int] = {}
    for node in view.nodes:
        want = labels[node.name]
        pred_regions = {region_of[p] for p in view.predecessors(node.name)}
        candidates = sorted((r for r in pred_regions if g.label[r] == want), key=lambda r: -len(g.members[r]))
        home = next((r for r in candidates
                     if not any(g.reaches(r, o) for o in pred_regions - {r})), None)
        if home is None:
            home = g.new(want)
        g.members[home].append(node.name)
        region_of[node.name] = home
        for r in pred_regions:
            g.edge(r, home)
    return _finish(view, g)


def fuse(view: GraphView, groups: list[Group]) -> list[Group]:
    """Fuse same-label regions of any grouping wherever no cycle can form (used after other
    policies, so every policy gets the same cycle-safe fusion)."""
    g = _RegionGraph()
    region_of: dict[str, int] = {}
    for group in groups:
        r = g.new(group.device)
        g.members[r].extend(group.nodes)
        region_of.update({n: r for n in group.nodes})
    for node in view.nodes:
        for p in view.predecessors(node.name):
            g.edge(region_of[p], region_of[node.name])
    return _finish(view, g)


def _finish(view: GraphView, g: _RegionGraph) -> list[Group]:
    _fuse_regions(g)
    order = {n.name: i for i, n in enumerate(view.nodes)}
    out = [Group(g.label[r], tuple(sorted(g.members[r], key=order.__getitem__)))
           for r in range(len(g.members)) if g.alive[r]]
    return sorted(out, key=lambda group: order[group.nodes[0]])


def _fuse_regions(g: _RegionGraph) -> None:
    changed = True
    while changed:
        changed = False
        live = [r for r in range(len(g.members)) if g.alive[r]]
        for a in live:
            for b in live:
                if a == b or not g.alive[a] or not g.alive[b] or g.label[a] != g.label[b]:
                    continue
                if b in g.succ[a]:
                    ok = not g.reaches(a, b, skip_direct=True)   # the edge is the only path
                elif a < b:
                    ok = not g.reaches(a, b) and not g.reaches(b, a)  # independent siblings
                else:
                    continue
                if ok:
                    g.fuse(a, b)
                    changed = True
