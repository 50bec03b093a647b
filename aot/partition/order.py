"""Execution order of regions: a topological order that keeps runs on one device together."""

from __future__ import annotations

from typing import Mapping


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
