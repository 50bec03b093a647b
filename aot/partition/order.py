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
