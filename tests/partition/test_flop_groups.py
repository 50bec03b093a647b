"""Key-node segments grouped by FLOP share (per-segment tuning's cuts): pure, no IREE. Known chains
give the expected cuts; every grouping keeps whole consecutive segments, at most the asked count,
each group but a lone one holding a fair share."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from aot.frontend.graph import GraphView, Node, Value
from aot.partition import flop_groups as fg
from aot.partition.segments import segments



@pytest.mark.parametrize(("flops", "count", "cuts"), [
    ([4] * 8, 4, ((0, 1), (2, 3), (4, 5), (6, 7))),
    ([1] * 16, 8, tuple((i, i + 1) for i in range(0, 16, 2))),
    ([1] * 10, 4, ((0, 1, 2), (3, 4), (5, 6, 7), (8, 9))),     # shares end at 2.5, 5, 7.5
    # share 6: 8 passes the first share, 10 does not reach 12, 16 passes it, 18 reaches 18, 24 is the end
    ([8, 1, 1, 6, 0, 2, 2, 4, 0, 0], 4, ((0,), (1, 2, 3), (4, 5), (6, 7, 8, 9))),
    # share 4: the heavy segment takes the running total from 2 to 12, past three shares at once
    ([1, 1, 10, 1, 1, 1, 1], 4, ((0, 1, 2), (3, 4, 5, 6))),
    ([10, 10, 10, 1], 4, ((0,), (1,), (2, 3))),   # a tail under half a share is no group of its own
    ([5, 0, 0], 4, ((0, 1, 2),)),
    ([0, 0, 0], 4, ((0, 1, 2),)),   # nothing to share out: one group
    ([5, 5], 4, ((0,), (1,))),      # fewer segments than groups: one each
])
def test_known_chains_cut_where_the_running_total_reaches_each_share(flops, count, cuts):
    assert fg.cut_by_share(flops, count) == cuts


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 10**9), min_size=1, max_size=60), st.integers(fg.MIN_GROUPS, fg.MAX_GROUPS))
def test_groups_are_whole_consecutive_segments_near_a_fair_share_each(flops, count):
    runs = fg.cut_by_share(flops, count)
    assert [i for run in runs for i in run] == list(range(len(flops)))   # every segment once, in order
    assert 1 <= len(runs) <= count
    total = sum(flops)
    held = [sum(flops[i] for i in run) for run in runs]
    for run, h in zip(runs[:-1], held):   # never more than a share plus the segment that crossed it
        assert h * count < total + max(flops[i] for i in run) * count
    assert len(runs) == 1 or held[-1] * count * 2 >= total     # the last holds at least half a share
    if total and len(flops) >= count and max(flops) * count <= total:
        assert len(runs) >= count - 1 or held.count(0) > 0   # even work: (nearly) the count asked


def test_a_region_cut_at_segment_bounds_never_splits_a_segment_where_two_tensors_cross():
    """A chain with a diamond: x -> {b, c} -> d is one segment (d is the key node); the diamond's
    branches never land in two groups."""
    sizes = {"a": 100, "x": 100, "b": 50, "c": 50, "d": 100, "e": 300, "f": 100, "g": 100, "h": 300, "i": 100}
    chain = ["a", "x", "b", "c", "d", "e", "f", "g", "h", "i"]
    reads = {"a": ["in"], "x": ["a.out"], "b": ["x.out"], "c": ["x.out"], "d": ["b.out", "c.out"],
             "e": ["d.out"], "f": ["e.out"], "g": ["f.out"], "h": ["g.out"], "i": ["h.out"]}
    nodes = [Node(n, "Relu" if n != "d" else "Add", tuple(reads[n]), (f"{n}.out",)) for n in chain]
    values = {"in": Value("in", "float32", (100,)), **{f"{n}.out": Value(f"{n}.out", "float32", (sizes[n],))
                                                      for n in chain}}
    view = GraphView.build(nodes, ["in"], ["i.out"], values)
    segs = segments(view, 1)
    assert ("b", "c", "d") in [s.nodes for s in segs]
    groups = fg.region_groups(tuple(chain), segs, view, 4)   # 1300 FLOPs; shares end at 325, 650, 975
    # i's 100 FLOPs are under half a share: they join the group before
    assert [g.nodes for g in groups] == [("a", "x", "b", "c", "d"), ("e",), ("f", "g", "h", "i")]
    assert [g.flops for g in groups] == [400, 300, 600]
    for g in groups:
        assert all(set(s.nodes) <= set(g.nodes) or not set(s.nodes) & set(g.nodes) for s in segs)


def test_stacks_that_meet_only_at_the_end_are_cut_between_them():
    """Two inputs, each through its own chain, concatenated at the end (ICLabel's three stacks):
    no node is on every path, so it is all one segment, but between the stacks only the first
    stack's output crosses, and between its heavy layers only the current one; a cut never falls
    where two of the region's tensors cross (the first stack's output and the second's running value)."""
    flops = {"a1": 400, "a2": 400, "a3": 400, "b1": 300, "b2": 100, "cat": 1}
    reads = {"a1": ["x"], "a2": ["a1.out"], "a3": ["a2.out"], "b1": ["y"], "b2": ["b1.out"], "cat": ["a3.out", "b2.out"]}
    order = ("a1", "a2", "a3", "b1", "b2", "cat")
    nodes = [Node(n, "Concat" if n == "cat" else "Relu", tuple(reads[n]), (f"{n}.out",)) for n in order]
    values = {"x": Value("x", "float32", (400,)), "y": Value("y", "float32", (300,)),
              **{f"{n}.out": Value(f"{n}.out", "float32", (flops[n],)) for n in order}}
    view = GraphView.build(nodes, ["x", "y"], ["cat.out"], values)
    segs = segments(view, 1)
    assert len([s for s in segs if {"a3", "b1"} <= set(s.nodes)]) == 1     # one segment holds both stacks
    # before a2, a3, b1 one tensor crosses (a1's, a2's, a3's); before b2 and cat two (a3's and b1's / b2's)
    assert fg.narrow_cuts(order, view) == frozenset({1, 2, 3})
    groups = fg.region_groups(order, segs, view, 4)
    assert [g.nodes for g in groups] == [("a1",), ("a2",), ("a3",), ("b1", "b2", "cat")]   # shares of ~400
    assert all(len(g.segments) == 1 for g in groups) and groups[0].segments == groups[2].segments
