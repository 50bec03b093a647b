"""Key nodes (dominators of a virtual sink) against brute force on random DAGs, and the segments
between them: every node in exactly one, in dependency order, small ones fused."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

from aot.errors import PartitionError
from aot.frontend.graph import GraphView, Node
from aot.partition import segments as seg
from conftest import graph
from test_partition import labelled_dags

SOURCE, SINK = "<source>", "<sink>"


def flow_edges(view: GraphView) -> dict[str, set[str]]:
    """The source/sink-closed graph, written again from the definition (not segments.py's code)."""
    succ: dict[str, set[str]] = {SOURCE: set(), SINK: set()}
    for node in view.nodes:
        succ.setdefault(node.name, set())
        preds = {view.producer(v) for v in node.inputs} - {None}
        if not preds or any(v in view.inputs for v in node.inputs):
            succ[SOURCE].add(node.name)
        for p in preds:
            succ.setdefault(p, set()).add(node.name)
        consumed = any(view.consumers(v) for v in node.outputs)
        if not consumed or any(v in view.outputs for v in node.outputs):
            succ[node.name].add(SINK)
    return succ


def count_paths(succ: dict[str, set[str]]) -> int:
    memo: dict[str, int] = {}

    def walk(v: str) -> int:
        if v == SINK:
            return 1
        if v not in memo:
            memo[v] = sum(walk(s) for s in succ[v])
        return memo[v]

    return walk(SOURCE)


def keys_by_path_intersection(succ: dict[str, set[str]]) -> set[str]:
    """The nodes every source -> sink path visits: the intersection over all paths."""
    common: set[str] | None = None
    stack: list[tuple[str, tuple[str, ...]]] = [(SOURCE, ())]
    while stack:
        v, path = stack.pop()
        if v == SINK:
            common = set(path) if common is None else common & set(path)
            continue
        stack += [(s, path + ((s,) if s != SINK else ())) for s in succ[v]]
    return common or set()


def keys_by_removal(succ: dict[str, set[str]]) -> set[str]:
    """The nodes without which the sink cannot be reached from the source."""
    def reaches(without: str) -> bool:
        seen, stack = {SOURCE}, [SOURCE]
        while stack:
            for s in succ[stack.pop()]:
                if s == SINK:
                    return True
                if s != without and s not in seen:
                    seen.add(s)
                    stack.append(s)
        return False

    return {v for v in succ if v not in (SOURCE, SINK) and not reaches(v)}


def chain_of_diamonds(k: int) -> GraphView:
    """f1 -> {a1, b1} -> j1 -> m1 -> f2 -> ... -> mk."""
    edges = []
    for i in range(1, k + 1):
        edges += [(f"f{i}", f"a{i}"), (f"f{i}", f"b{i}"), (f"a{i}", f"j{i}"), (f"b{i}", f"j{i}"), (f"j{i}", f"m{i}")]
        if i < k:
            edges.append((f"m{i}", f"f{i + 1}"))
    return graph(edges)


def test_chain_of_diamonds_keys_are_its_forks_joins_and_chain_nodes():
    view = chain_of_diamonds(3)
    expected = tuple(n for i in (1, 2, 3) for n in (f"f{i}", f"j{i}", f"m{i}"))
    assert seg.key_nodes(view) == expected
    succ = flow_edges(view)
    assert keys_by_path_intersection(succ) == set(expected) == keys_by_removal(succ)


def test_chain_of_diamonds_segments_hold_one_diamond_each():
    view = chain_of_diamonds(3)
    raw = seg.segments(view, min_nodes=1)
    assert [s.nodes for s in raw][:3] == [("f1",), ("a1", "b1", "j1"), ("m1",)]
    fused = seg.segments(view, min_nodes=2)
    assert [s.nodes for s in fused] == [("f1", "a1", "b1", "j1", "m1", "f2"), ("a2", "b2", "j2", "m2", "f3"),
                                        ("a3", "b3", "j3", "m3")]
    assert [s.span for s in fused] == ["f1..f2", "j2..f3", "j3..m3"]


def test_a_graph_input_read_twice_makes_the_nodes_between_no_key_nodes():
    # x -> conv -> relu -> add(x, .): the residual input skips conv and relu; only add cuts.
    nodes = [Node("conv", "Conv", ("x",), ("c",)), Node("relu", "Relu", ("c",), ("r",)),
             Node("add", "Add", ("x", "r"), ("y",))]
    view = GraphView.build(nodes, ["x"], ["y"])
    assert seg.key_nodes(view) == ("add",)
    assert keys_by_removal(flow_edges(view)) == {"add"}


def test_two_independent_chains_have_no_key_node_and_one_segment():
    view = graph([("a", "b"), ("x", "y")])
    assert seg.key_nodes(view) == ()
    assert [s.nodes for s in seg.segments(view, 1)] == [("a", "b", "x", "y")]


def networkx_idoms(preds: dict[int, tuple[int, ...]]) -> dict[int, int]:
    """networkx's immediate dominators of the same graph; before 3.5 it maps the start to itself,
    from 3.5 it leaves the start out: both read the same here."""
    g = nx.DiGraph((p, v) for v, ps in preds.items() for p in ps)
    return {v: d for v, d in nx.immediate_dominators(g, seg.SOURCE).items() if v != seg.SOURCE}


def test_dominators_agree_with_networkx_on_the_diamonds():
    preds = seg.flow_predecessors(chain_of_diamonds(2))
    ours = seg.immediate_dominators(preds)
    assert ours.pop(seg.SOURCE) == seg.SOURCE
    assert ours == networkx_idoms(preds)


def test_min_segment_nodes_below_one_is_refused():
    with pytest.raises(PartitionError, match="at least 1"):
        seg.segments(chain_of_diamonds(1), 0)


@st.composite
def dags_with_inputs(draw):
    """The partition tests' random DAGs, some of whose nodes also read a graph input."""
    view, _ = draw(labelled_dags())
    readers = draw(st.sets(st.sampled_from([n.name for n in view.nodes]), max_size=4))
    nodes = [Node(n.name, n.op_type, n.inputs + (("x",) if n.name in readers else ()), n.outputs)
             for n in view.nodes]
    return GraphView.build(nodes, ["x"] if readers else [], view.outputs, view.values)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(dags_with_inputs(), st.integers(1, 5))
def test_keys_match_brute_force_and_segments_cover_the_dag_in_order(view, min_nodes):
    keys = seg.key_nodes(view)
    preds = seg.flow_predecessors(view)
    ours = seg.immediate_dominators(preds)
    del ours[seg.SOURCE]
    assert ours == networkx_idoms(preds)
    succ = flow_edges(view)
    assert set(keys) == keys_by_removal(succ)
    if count_paths(succ) <= 4000:
        assert set(keys) == keys_by_path_intersection(succ)
    position = {n.name: i for i, n in enumerate(view.nodes)}
    assert list(keys) == sorted(keys, key=position.__getitem__)     # dependency order
    segs = seg.segments(view, min_nodes)
    placed = [n for s in segs for n in s.nodes]
    assert sorted(placed) == sorted(position)                        # every node exactly once
    where = seg.segment_of(segs)
    assert all(where[p] <= where[n.name] for n in view.nodes for p in view.predecessors(n.name))
    assert [s.index for s in segs] == list(range(len(segs)))
    assert len(segs) == 1 or all(len(s.nodes) >= min_nodes for s in segs)
    assert [k for s in segs for k in s.keys] == list(keys)
    # a cut after a key node: everything before it is its ancestor
    g = nx.DiGraph((p, n.name) for n in view.nodes for p in view.predecessors(n.name))
    g.add_nodes_from(position)
    for k in keys:
        assert {n for n in position if position[n] < position[k]} == nx.ancestors(g, k)
