"""Execution order of regions: a topological order that keeps runs on one device together."""

from __future__ import annotations

import enum
import random
from typing import Mapping

from aot.frontend.graph import GraphView


class OrderMode(enum.Enum):
    """How regions are grouped and ordered (``--order``)."""

    GREEDY = "greedy"    # the merge's regions, issued by ``schedule`` below
    SEARCH = "search"    # per key-node segment, candidate groupings and orders scored by the lane model


def schedule(devices: Mapping[str, str], edges: Mapping[str, set[str]], first_seen: Mapping[str, int]) -> tuple[str, ...]:
    """Kahn's algorithm; among ready regions prefer the device that ran last (fewer hops), then
    the region whose first node comes first in the model."""
    indeg = {r: 0 for r in devices}
    for succs in edges.values():
        for s in succs:
            indeg[s] += 1
    ready = [r for r, d in indeg.items() if d == 0]
    order: list[str] = []
    last = None
    while ready:
        ready.sort(key=lambda r: (devices[r] != last, first_seen[r]))
        r = ready.pop(0)
        order.append(r)
        last = devices[r]
        for s in edges.get(r, ()):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return tuple(order)


def enumerate_orders(regions: list[str], edges: Mapping[str, set[str]], limit: int = 10_000) -> list[tuple[str, ...]]:
    """Every valid execution order of the region graph (up to ``limit``), for cost search and tests."""
    indeg = {r: 0 for r in regions}
    for succs in edges.values():
        for s in succs:
            indeg[s] += 1
    out: list[tuple[str, ...]] = []
    prefix: list[str] = []

    def walk() -> None:
        if len(out) >= limit:
            return
        if len(prefix) == len(regions):
            out.append(tuple(prefix))
            return
        for r in regions:
            if indeg[r] == 0 and r not in prefix:
                prefix.append(r)
                for s in edges.get(r, ()):
                    indeg[s] -= 1
                walk()
                for s in edges.get(r, ()):
                    indeg[s] += 1
                prefix.pop()

    walk()
    return out


def enumerate_node_orders(view: GraphView, limit: int) -> list[tuple[str, ...]]:
    """Topological orders of the view's nodes (edges among them only), up to ``limit``, each
    choice point trying ready nodes in view order."""
    names = [n.name for n in view.nodes]
    indeg = {n: len(view.predecessors(n)) for n in names}
    succ = {n: view.successors(n) for n in names}
    out: list[tuple[str, ...]] = []
    prefix: list[str] = []
    ready = [n for n in names if indeg[n] == 0]
    position = {n: i for i, n in enumerate(names)}

    def walk() -> None:
        if len(out) >= limit:
            return
        if len(prefix) == len(names):
            out.append(tuple(prefix))
            return
        for n in sorted(ready, key=position.__getitem__):
            ready.remove(n)
            prefix.append(n)
            freed = []
            for s in succ[n]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    freed.append(s)
            ready.extend(freed)
            walk()
            for s in freed:
                ready.remove(s)
            for s in succ[n]:
                indeg[s] += 1
            prefix.pop()
            ready.append(n)
            if len(out) >= limit:
                return

    walk()
    return out


def kahn_order(view: GraphView, *, lifo: bool = False, rng: random.Random | None = None) -> tuple[str, ...]:
    """One topological order: ready nodes taken in view order (a list schedule), newest first
    (depth-first: a node's consumers follow it when they can), or at random from ``rng``."""
    names = [n.name for n in view.nodes]
    position = {n: i for i, n in enumerate(names)}
    indeg = {n: len(view.predecessors(n)) for n in names}
    ready = [n for n in names if indeg[n] == 0]
    out: list[str] = []
    while ready:
        if rng is not None:
            n = ready.pop(rng.randrange(len(ready)))
        elif lifo:
            n = ready.pop()
        else:
            ready.sort(key=position.__getitem__)
            n = ready.pop(0)
        out.append(n)
        freed = [s for s in view.successors(n) if _release(indeg, s)]
        ready += sorted(freed, key=position.__getitem__, reverse=lifo)
    return tuple(out)


def _release(indeg: dict[str, int], node: str) -> bool:
    indeg[node] -= 1
    return indeg[node] == 0


def post_order(view: GraphView) -> tuple[str, ...]:
    """The order a depth-first walk from the outputs emits nodes in: every node right after the
    last of its operands (XLA's post-order schedule)."""
    names = [n.name for n in view.nodes]
    done: set[str] = set()
    out: list[str] = []
    for root in (n for n in names if not view.successors(n)):
        stack: list[tuple[str, bool]] = [(root, False)]
        while stack:
            n, expanded = stack.pop()
            if n in done:
                continue
            if expanded:
                done.add(n)
                out.append(n)
                continue
            stack.append((n, True))
            stack += [(p, False) for p in reversed(view.predecessors(n)) if p not in done]
    return tuple(out)
