"""Key-node segments grouped by FLOP share: the pieces a host region is cut into so that each can
get its own compile flags (per-segment tuning, ``tune/segments.py``).

Segments (``segments.py``) are runs of a topological order between key nodes: every edge goes from
a segment to itself or to a later one. A segment is split further where one tensor or none of the
region's own crosses (``narrow_cuts``: parallel stacks that meet only at the end have no key node
between them). A group is a run of consecutive pieces of that order, so a region cut into groups is
a chain of regions each of which only reads what earlier ones (or other regions) made: the plan
stays acyclic and the groups run in order.

Grouping walks the segments in order and closes a group after the segment at which the FLOPs so
far reach the next multiple of a fair share (total / count): the j-th group ends where the first j
shares are done. Closing each group once it alone holds a share overshoots and leaves fewer groups
(ten equal segments asked for four gave three); counting shares from the start keeps the groups near
one share each, and a group never holds more than a share plus its own largest segment. A segment
heavier than a share spans several shares and the grouping has fewer groups; a tail under half a
share is never a group of its own (element-wise tail work is not worth a flag search and a call).

Pure Python over a GraphView.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aot.frontend.graph import GraphView
from aot.partition.cost import node_flops
from aot.partition.segments import Segment

# --tune-segments takes a target group count in this range (issue 25: "group into 4-8 segments"):
# fewer leaves little to mix; more multiplies the flag search and adds a call per boundary.
MIN_GROUPS = 4
MAX_GROUPS = 8
# A region with fewer nodes than this is tuned as a whole: too small for boundaries to pay.
MIN_REGION_NODES = 8


@dataclass(frozen=True, slots=True)
class Group:
    """Consecutive segments of one region, tuned together."""

    index: int
    segments: tuple[int, ...]    # indices of the (whole-model) segments it draws from, consecutive
    nodes: tuple[str, ...]       # the region's nodes in them, in the region's order
    flops: int


def cut_by_share(flops: Sequence[int], count: int) -> tuple[tuple[int, ...], ...]:
    """Positions ``0..len(flops)-1`` grouped into runs: a run ends at the position where the running
    total first reaches the next multiple of ``sum(flops) / count`` not yet reached, unless what
    follows holds less than half a share. At most ``count`` runs; one when there is nothing to share out."""
    if count < 1:
        raise ValueError(f"group count must be at least 1, not {count}")
    if any(f < 0 for f in flops):
        raise ValueError("FLOP counts cannot be negative")
    if not flops:
        return ()
    total = sum(flops)
    if total == 0 or count == 1:
        return (tuple(range(len(flops))),)
    runs: list[list[int]] = [[]]
    done = 0          # shares reached so far
    running = 0
    for i, f in enumerate(flops):
        runs[-1].append(i)
        running += f
        reached = min(running * count // total, count)   # exact in integers: no float rounding at the cuts
        # A tail under half a share is no group of its own: it rounds to no share at all, and a
        # group of softmax-and-top-k tail work is not worth a flag search and a call boundary.
        if reached > done and (total - running) * count * 2 >= total:
            done = reached
            runs.append([])
    if not runs[-1]:
        runs.pop()
    return tuple(tuple(r) for r in runs)


def narrow_cuts(nodes: tuple[str, ...], view: GraphView) -> frozenset[int]:
    """Positions ``k`` of ``nodes`` (a region, in topological order) where cutting before
    ``nodes[k]`` crosses at most one tensor the region makes itself. Key nodes are such cuts; so is
    the end of a branch that meets the others only later, as where a model's inputs start separate
    stacks (ICLabel's scalp map, spectrum and autocorrelation) and the region's inputs, which every
    group may read, cross no cut of the region's own."""
    position = {n: i for i, n in enumerate(nodes)}
    live = [0] * (len(nodes) + 1)     # +1 after a value's producer, -1 after its last reader
    span: dict[str, tuple[int, int]] = {}   # value -> (its producer's position, its last reader's)
    for i, n in enumerate(nodes):
        for v in view.node(n).inputs:
            p = view.producer(v)
            if p in position and position[p] < i:
                span[v] = (position[p], i)
    for made, end in span.values():
        live[made + 1] += 1
        live[end + 1] -= 1
    crossing, cuts = 0, set()
    for k in range(1, len(nodes)):
        crossing += live[k]
        if crossing <= 1:
            cuts.add(k)
    return frozenset(cuts)


def region_groups(nodes: tuple[str, ...], segs: tuple[Segment, ...], view: GraphView, count: int) -> tuple[Group, ...]:
    """``nodes`` (one region, in topological order) cut at segment bounds, and inside a segment at
    ``narrow_cuts``, into at most ``count`` groups by FLOP share. Segments that hold none of the
    region's nodes are skipped; a group splits a segment only where one tensor or none crosses."""
    mine = set(nodes)
    position = {n: i for i, n in enumerate(nodes)}
    narrow = narrow_cuts(nodes, view)
    pieces = []
    for s in segs:
        inside = sorted((n for n in s.nodes if n in mine), key=position.__getitem__)
        start = 0
        for j in range(1, len(inside) + 1):
            if j == len(inside) or position[inside[j]] in narrow:
                pieces.append((s.index, tuple(inside[start:j])))
                start = j
    if sum(len(ns) for _, ns in pieces) != len(nodes):
        raise ValueError("the segments do not cover the region's nodes")
    flops = [sum(node_flops(view.node(n), view) for n in ns) for _, ns in pieces]
    groups = []
    for g, run in enumerate(cut_by_share(flops, count)):
        held = tuple(n for k in run for n in pieces[k][1])
        segments = tuple(dict.fromkeys(pieces[k][0] for k in run))   # a split segment may be in two groups
        groups.append(Group(g, segments, held, sum(flops[k] for k in run)))
    return tuple(groups)
