"""Region-forming policies, registered by name: the one partitioning pipeline plugs one in.

A policy turns per-node labels (a ``Device``) into groups of same-label nodes (``Group``: the
device and its nodes in topological order), in an order the partitioner can schedule, and never
forms a cycle between groups. Register a new one with
``register("name", merge)``; ``aot build --policy name`` then selects it.
"""

from __future__ import annotations

from typing import Callable, Mapping

from aot.errors import PartitionError
from aot.frontend.graph import GraphView
from aot.partition import depth, regions
from aot.partition.support import Device, Groups

# Not a merge: --policy learned labels nodes with a trained classifier (aot/learn/decide.py) and the
# greedy merge forms its regions; kept out of the registry so every registered name is a merge.
LEARNED = "learned"

MergePolicy = Callable[[GraphView, Mapping[str, Device]], Groups]

_REGISTRY: dict[str, MergePolicy] = {}


def register(name: str, merge: MergePolicy) -> None:
    if name in _REGISTRY:
        raise PartitionError(f"partition policy {name!r} is already registered")
    _REGISTRY[name] = merge


def get(name: str) -> MergePolicy:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise PartitionError(f"unknown partition policy {name!r}",
                             hint=f"known policies: {', '.join(names())}") from None


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


register("greedy", regions.merge)   # cycle-free greedy merging of adjacent same-label nodes
register("depth", depth.merge)      # depth-growth: grow regions level by level from the inputs
