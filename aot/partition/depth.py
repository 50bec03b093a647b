"""The depth-growth policy (``--policy depth``).

Depth is 0 for sources and 1 + the largest depth among a node's inputs. Walking nodes in
topological order, a region grows from an unvisited supported node by absorbing unvisited,
supported neighbours (predecessors and successors) whose depth is adjacent to the region's, or
that depend only on the region; after each absorption the region is contracted into one node and
depths are recomputed. The grow rule alone can close a cycle (c->d, c->x, d->e, x->e with x
unsupported must not give {c,d,e}), so every absorption is also checked for a second path.
Consecutive unsupported nodes then group into host regions with the same cycle check, and
same-label regions are fused wherever that is cycle-free (the step every policy shares).
"""

from __future__ import annotations

from typing import Mapping

from aot.frontend.graph import GraphView
from aot.partition import regions
from aot.partition.support import ACCEL, HOST, Device, Group


class _Quotient:
    """The graph with regions contracted into single vertices."""

    def __init__(self, view: GraphView) -> None:
        self.members = {n.name: [n.name] for n in view.nodes}
        self.succ = {n.name: set(view.successors(n.name)) for n in view.nodes}
        self.pred = {n.name: set(view.predecessors(n.name)) for n in view.nodes}
        self.order = {n.name: i for i, n in enumerate(view.nodes)}

    def depths(self) -> dict[str, int]:
        depth: dict[str, int] = {}
        indeg = {v: len(p) for v, p in self.pred.items()}
        ready = [v for v, d in indeg.items() if d == 0]
        while ready:
            v = ready.pop()
            depth[v] = 1 + max((depth[p] for p in self.pred[v]), default=-1)
            for s in self.succ[v]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    ready.append(s)
        return depth

    def can_contract(self, a: str, b: str) -> bool:
        # Contracting an edge closes a cycle exactly when a second path joins its ends.
        if b in self.succ[a]:
            return not regions.path_exists(self.succ, a, b, skip_direct=True)
        if a in self.succ[b]:
            return not regions.path_exists(self.succ, b, a, skip_direct=True)
        return False

    def contract(self, keep: str, gone: str) -> None:
        self.members[keep] += self.members.pop(gone)
        for s in self.succ.pop(gone):
            self.pred[s].discard(gone)
            if s != keep:
                self.pred[s].add(keep); self.succ[keep].add(s)
        for p in self.pred.pop(gone):
            self.succ[p].discard(gone)
            if p != keep:
                self.succ[p].add(keep); self.pred[keep].add(p)
        self.succ[keep].discard(keep); self.pred[keep].discard(keep)


def merge(view: GraphView, labels: Mapping[str, Device]) -> list[Group]:
    """Same contract as ``regions.merge``: a group (label, nodes in topological order) per region."""
    q = _Quotient(view)
    label = dict(labels)
    visited: set[str] = set()
    for node in view.nodes:
        v = _find(q, node.name)
        if v in visited or label[v] != ACCEL:
            continue
        grown = True
        while grown:
            grown = False
            depth = q.depths()
            for c in sorted(q.succ[v] | q.pred[v], key=q.order.__getitem__):
                if c in visited or label[c] != ACCEL:
                    continue
                adjacent = abs(depth[c] - depth[v]) == 1
                # "uniquely dependent": a successor fed only by the region, or a predecessor
                # that feeds only the region.
                unique = (c in q.succ[v] and q.pred[c] == {v}) or (c in q.pred[v] and q.succ[c] == {v})
                if (adjacent or unique) and q.can_contract(v, c):
                    q.contract(v, c)
                    grown = True
                    break
        visited.add(v)
    _group_host(q, label)
    order = q.order
    out = [Group(label[v], tuple(sorted(m, key=order.__getitem__))) for v, m in q.members.items()]
    # Growth only looks at neighbours; regions it leaves apart that could be one without a
    # cycle (parallel attention branches, say) are fused afterwards.
    return regions.fuse(view, sorted(out, key=lambda group: order[group.nodes[0]]))


def _find(q: _Quotient, node: str) -> str:
    for v, members in q.members.items():
        if node in members:
            return v
    raise KeyError(node)


def _group_host(q: _Quotient, label: dict[str, Device]) -> None:
    changed = True
    while changed:
        changed = False
        for v in sorted(q.members, key=q.order.__getitem__):
            if label[v] != HOST:
                continue
            for s in sorted(q.succ[v], key=q.order.__getitem__):
                if label[s] == HOST and q.can_contract(v, s):
                    q.contract(v, s)
                    changed = True
                    break
            if changed:
                break
