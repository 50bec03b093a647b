"""Key nodes and the segments between them.

A key node lies on every path from the model's inputs to its outputs: everything before it in any
topological order is its ancestor and everything after it its descendant, so the graph can be cut
there and the pieces planned one after another. Key nodes are the dominators of a virtual sink,
seen from a virtual source: the source feeds every node that reads a graph input or reads no other
node's output, the sink is fed by every node that writes a graph output or has no consumers.
Dominators of one vertex form a chain, so key nodes come in dependency order. They are computed
with Cooper, Harvey and Kennedy's iterative algorithm ("A Simple, Fast Dominance Algorithm"): on a
DAG visited in reverse postorder one pass settles it. networkx has it too (``immediate_dominators``)
but is only a test dependency here; the tests check this against it and against brute force.

A segment is a run of a topological order that ends at a key node (the last segment may end
without one, when the model fans out to several outputs after its last key node). Every node is in
exactly one segment, and every edge goes from a segment to itself or to a later one. Segments with
fewer than ``min_nodes`` nodes are fused into their neighbour: a one-node segment leaves nothing to
order or group.

Pure Python over a GraphView.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from aot.errors import PartitionError
from aot.frontend.graph import GraphView

# Vertex numbers of the virtual ends; node i of the view is vertex i (model names cannot clash).
SOURCE = -1
SINK = -2


@dataclass(frozen=True, slots=True)
class Segment:
    """One run of the model between key nodes."""

    index: int
    nodes: tuple[str, ...]       # in the view's topological order
    keys: tuple[str, ...]        # the key nodes among them, in order (empty: no node cuts the run)

    @property
    def span(self) -> str:
        """``first..last`` key node, as `aot plan` and the report print it."""
        if not self.keys:
            return "-"
        return self.keys[0] if len(self.keys) == 1 else f"{self.keys[0]}..{self.keys[-1]}"


def flow_predecessors(view: GraphView) -> dict[int, tuple[int, ...]]:
    """Vertex -> its predecessors in the graph closed by the virtual source and sink; node ``i``
    of the view is vertex ``i``, the source ``SOURCE`` and the sink ``SINK``."""
    index = {n.name: i for i, n in enumerate(view.nodes)}
    graph_inputs = set(view.inputs)
    graph_outputs = set(view.outputs)
    preds: dict[int, tuple[int, ...]] = {SOURCE: ()}
    into_sink: list[int] = []
    for i, node in enumerate(view.nodes):
        mine = tuple(index[p] for p in view.predecessors(node.name))
        preds[i] = (SOURCE, *mine) if not mine or graph_inputs.intersection(node.inputs) else mine
        if not view.successors(node.name) or graph_outputs.intersection(node.outputs):
            into_sink.append(i)
    preds[SINK] = tuple(into_sink)
    return preds


def immediate_dominators(preds: Mapping[int, tuple[int, ...]]) -> dict[int, int]:
    """Cooper-Harvey-Kennedy over vertices numbered in a topological order (source first, sink
    last): each vertex's immediate dominator is the nearest common dominator of its
    predecessors. The source maps to itself."""
    order = [SOURCE, *(v for v in preds if v not in (SOURCE, SINK)), SINK]
    rank = {v: r for r, v in enumerate(order)}
    idom = {SOURCE: SOURCE}

    def meet(a: int, b: int) -> int:
        while a != b:
            while rank[a] > rank[b]:
                a = idom[a]
            while rank[b] > rank[a]:
                b = idom[b]
        return a

    for v in order[1:]:
        # A topological order visits every predecessor first: one pass settles a DAG.
        ps = preds[v]
        common = ps[0]
        for p in ps[1:]:
            common = meet(common, p)
        idom[v] = common
    return idom


def key_nodes(view: GraphView) -> tuple[str, ...]:
    """The nodes on every input-to-output path, in dependency order."""
    if not view.nodes:
        return ()
    idom = immediate_dominators(flow_predecessors(view))
    chain: list[int] = []
    v = idom[SINK]
    while v != SOURCE:
        chain.append(v)
        v = idom[v]
    return tuple(view.nodes[i].name for i in reversed(chain))


def segments(view: GraphView, min_nodes: int = 1) -> tuple[Segment, ...]:
    """The view cut after each key node, then segments with fewer than ``min_nodes`` nodes fused
    into the previous one (the first into the next)."""
    if min_nodes < 1:
        raise PartitionError(f"min_segment_nodes must be at least 1, not {min_nodes}")
    keys = key_nodes(view)
    is_key = set(keys)
    runs: list[list[str]] = [[]]
    for node in view.nodes:
        runs[-1].append(node.name)
        if node.name in is_key:
            runs.append([])
    if not runs[-1]:
        runs.pop()
    fused: list[list[str]] = []
    for run in runs:
        if fused and len(run) < min_nodes:
            fused[-1] += run
        else:
            fused.append(run)
    if len(fused) > 1 and len(fused[0]) < min_nodes:
        fused[1] = fused[0] + fused[1]
        fused.pop(0)
    return tuple(Segment(i, tuple(run), tuple(n for n in run if n in is_key)) for i, run in enumerate(fused))


def segment_of(segs: tuple[Segment, ...]) -> dict[str, int]:
    """node -> the index of its segment."""
    return {n: s.index for s in segs for n in s.nodes}
