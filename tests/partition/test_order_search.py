"""The order search (--order search): never worse than greedy by the lane model, strictly better
where the grouping matters, valid, deterministic, within its budget, pinned by plan.json (a
replay searches nothing), and reported per segment."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from aot import api
from aot.frontend.graph import GraphView, Node, Value
from aot.options import BuildOptions
from aot.partition import search
from aot.partition.cost import CostModel, plan_cost
from aot.partition.order import OrderMode
from aot.partition.partitioner import partition
from aot.partition.plan import GateMode, Plan, validate
from aot.partition.segments import segments
from aot.partition.support import ACCEL, HOST, Group, Overrides
from aot import report
from test_partition import labelled_dags

COST = CostModel.load("vulkan-spirv")


def options(order: OrderMode, host: tuple[str, ...] = (), **settings):
    return BuildOptions(**{"min_compute": 1, "gate": GateMode.OFF, **settings}, order=order,
                        overrides=Overrides(host_nodes=host)).partition_options()


def estimate(plan: Plan, view: GraphView) -> float:
    return plan_cost({r.name: Group(r.device, r.nodes) for r in plan.regions}, view, COST, plan.schedule).total_us


def two_branches() -> GraphView:
    """x -> h1 (a host convolution, slow there) -> j, and x -> h2 -> a (a large accelerator
    convolution) -> j: greedy fuses x, h1 and h2 into one host region, so the accelerator waits for
    h1 although only h2 feeds it."""
    f = "float32"
    nodes = [Node("x", "Relu", ("in",), ("x.out",)),
             Node("h1", "Conv", ("x.out",), ("h1.out",), const_inputs=("w1",)),
             Node("h2", "Relu", ("x.out",), ("h2.out",)),
             Node("a", "Conv", ("h2.out",), ("a.out",), const_inputs=("w2",)),
             Node("j", "Add", ("a.out", "h1.out"), ("y",))]
    values = {"in": Value("in", f, (1, 64, 32, 32)), "x.out": Value("x.out", f, (1, 64, 32, 32)),
              "h2.out": Value("h2.out", f, (1, 64, 32, 32)), "w1": Value("w1", f, (16, 64, 3, 3)),
              "w2": Value("w2", f, (16, 2048, 3, 3)), "h1.out": Value("h1.out", f, (1, 16, 32, 32)),
              "a.out": Value("a.out", f, (1, 16, 32, 32)), "y": Value("y", f, (1, 16, 32, 32))}
    return GraphView.build(nodes, ["in"], ["y"], values, constants=("w1", "w2"))


HOST_SIDE = ("x", "h1", "h2")


def test_search_beats_greedy_on_two_branches_joined_across_devices():
    view = two_branches()
    greedy = partition(view, options(OrderMode.GREEDY, HOST_SIDE))
    searched = partition(view, options(OrderMode.SEARCH, HOST_SIDE))
    assert greedy.order_search is None
    assert [set(r.nodes) for r in greedy.plan.regions] == [{"x", "h1", "h2"}, {"a", "j"}]
    validate(searched.plan, view)
    # h1 gets a region of its own, issued after the accelerator's input: the two devices overlap
    regions = {r.nodes: r.device for r in searched.plan.regions}
    assert regions[("h1",)] == HOST and regions[("a",)] == ACCEL
    assert estimate(searched.plan, view) < estimate(greedy.plan, view) * 0.8
    outcome = searched.order_search
    assert outcome is not None and outcome.kept is OrderMode.SEARCH
    assert outcome.greedy_us == pytest.approx(estimate(greedy.plan, view))
    assert outcome.searched_us == pytest.approx(estimate(searched.plan, view))
    assert all(s.chosen_us <= s.greedy_us for s in outcome.segments)
    assert any(s.chosen_us < s.greedy_us for s in outcome.segments)


def test_the_fork_and_join_example_enumerates_its_two_node_orders():
    # DESIGN §5: conv -> {matmul, mean} -> softmax has exactly 2 orders (region orders in test_policies)
    from conftest import graph
    from aot.partition import order

    view = graph([("conv", "matmul"), ("conv", "mean"), ("matmul", "softmax"), ("mean", "softmax")])
    assert sorted(order.enumerate_node_orders(view, 100)) == [("conv", "matmul", "mean", "softmax"),
                                                             ("conv", "mean", "matmul", "softmax")]


def wide(branches: int) -> GraphView:
    """src -> b0..bN (alternating devices by name) -> join: N! node orders, more than a budget."""
    from conftest import graph

    return graph([("src", f"b{i}") for i in range(branches)] + [(f"b{i}", "join") for i in range(branches)],
                 shape=(1, 32, 32, 32))


def test_the_same_search_twice_gives_the_same_plan_digest():
    view = wide(6)   # 720 orders: the seeded sample path
    host = tuple(f"b{i}" for i in range(0, 6, 2))
    first = partition(view, options(OrderMode.SEARCH, host, order_budget=16))
    second = partition(view, options(OrderMode.SEARCH, host, order_budget=16))
    assert first.plan.digest() == second.plan.digest()
    assert first.order_search == second.order_search
    assert all(s.plans_scored <= 16 for s in first.order_search.segments)
    assert max(s.plans_scored for s in first.order_search.segments) == 16   # the budget was reached


def test_segments_start_with_every_lane_idle_so_their_times_add_up():
    # The premise of searching segment by segment: a plan cut at segment bounds costs the sum of its segments.
    from conftest import graph

    view = graph([("s", "a"), ("s", "b"), ("a", "j"), ("b", "j"), ("j", "c"), ("j", "d"), ("c", "k"), ("d", "k")],
                 shape=(1, 64, 64))
    device = {"s": HOST, "a": ACCEL, "b": HOST, "j": ACCEL, "c": HOST, "d": ACCEL, "k": HOST}
    segs = segments(view, 2)
    assert len(segs) == 2
    scorer = search._Scorer(view, COST)
    per_segment = [tuple(Group(device[n], (n,)) for n in s.nodes) for s in segs]
    whole = sum(per_segment, ())
    assert scorer.makespan(whole) == pytest.approx(sum(scorer.makespan(p) for p in per_segment))


@settings(max_examples=120, deadline=None, derandomize=True)
@given(labelled_dags(), st.integers(1, 3))
def test_search_is_valid_never_worse_and_keeps_every_device(case, min_segment_nodes):
    view, host = case
    forced = tuple(sorted(host))
    greedy = partition(view, options(OrderMode.GREEDY, forced)).plan
    result = partition(view, options(OrderMode.SEARCH, forced, order_budget=8, min_segment_nodes=min_segment_nodes))
    validate(result.plan, view)
    device = {n: r.device for r in greedy.regions for n in r.nodes}
    assert {n: r.device for r in result.plan.regions for n in r.nodes} == device
    assert estimate(result.plan, view) <= estimate(greedy, view) + 1e-9
    outcome = result.order_search
    assert len(outcome.segments) == len(segments(view, min_segment_nodes))
    assert all(1 <= s.plans_scored <= 8 and s.chosen_us <= s.greedy_us for s in outcome.segments)
    assert (result.plan == greedy) == (outcome.kept is OrderMode.GREEDY)


def test_a_plan_file_replays_without_searching(example_model, tmp_path, monkeypatch):
    searched = api.plan(example_model, BuildOptions(order=OrderMode.SEARCH), suggest=False)
    assert searched.record.order_search is not None
    path = tmp_path / "plan.json"
    searched.plan.save(path)

    def no_search(*args, **kwargs):
        raise AssertionError("a plan file must be replayed, not searched")

    monkeypatch.setattr(search, "search", no_search)
    with pytest.raises(AssertionError, match="replayed"):   # the search would run without the file
        api.plan(example_model, BuildOptions(order=OrderMode.SEARCH), suggest=False)
    replayed = api.plan(example_model, BuildOptions(order=OrderMode.SEARCH, plan_file=path), suggest=False)
    assert replayed.plan.digest() == searched.plan.digest()
    assert replayed.record.order_search is None
    assert replayed.record.segments == searched.record.segments


def test_plan_summary_and_record_state_the_segments_and_the_search(example_model):
    planned = api.plan(example_model, BuildOptions(order=OrderMode.SEARCH), suggest=False)
    segs = planned.record.segments
    assert sum(s.nodes for s in segs) == len(planned.view.nodes)
    text = report.plan_summary(planned)
    for s in segs:
        assert f"segment {s.index:3d} {s.nodes:5d} node(s)" in text
    assert "order search (budget 64 per segment)" in text and "plan(s) scored" in text
    from aot.record import PartitionRecord
    from aot.runtime import codec
    encoded = codec.encode(planned.record)
    assert codec.decode(PartitionRecord, encoded) == planned.record    # the record round-trips
    greedy = api.plan(example_model, BuildOptions(), suggest=False)
    assert greedy.record.order_search is None and "order search" not in report.plan_summary(greedy)
    assert "segment   0" in report.plan_summary(greedy)


def test_the_bundle_report_prints_each_segment_and_the_search_from_the_record():
    import dataclasses

    from conftest import small_manifest, small_record
    from aot.record import SegmentRecord
    from aot.runtime.manifest import BoundaryTensor

    outcome = partition(two_branches(), options(OrderMode.SEARCH, HOST_SIDE)).order_search
    rec = small_record()
    rec = dataclasses.replace(rec, partition=dataclasses.replace(
        rec.partition, segments=(SegmentRecord(0, 5, "j", "j"),), order_search=outcome))
    manifest = dataclasses.replace(small_manifest(), boundary_tensors=(
        ("x", BoundaryTensor("float32", (1, 2), 8)), ("y", BoundaryTensor("float32", (1, 2), 8))))
    text = report.text(manifest, rec)
    seg = outcome.segments[0]
    assert (f"segment   0     5 node(s)  j  [{seg.plans_scored} plan(s) scored: greedy {seg.greedy_us:.1f} us, "
            f"chosen {seg.chosen_us:.1f} us]") in text
    assert f"greedy plan {outcome.greedy_us:.1f} us, searched plan {outcome.searched_us:.1f} us" in text
    assert "kept the search plan" in text
    assert "segment" not in report.text(manifest, small_record())   # a record from before segments


@st.composite
def chained_blocks(draw):
    """Random DAG blocks in series (each block's sink feeds the next block's nodes without other
    producers), tensors of mixed sizes, random host nodes: several segments per model."""
    nodes: list[Node] = []
    values: dict[str, Value] = {}
    host: set[str] = set()
    previous: str | None = None
    for b in range(draw(st.integers(2, 5))):
        names = [f"b{b}n{i}" for i in range(draw(st.integers(2, 6)))]
        for i, name in enumerate(names):
            preds = draw(st.lists(st.sampled_from(names[:i]), max_size=2, unique=True)) if i else []
            ins = tuple(f"{p}.out" for p in preds) or ((f"{previous}.out",) if previous else ("x",))
            nodes.append(Node(name, "Relu", ins, (f"{name}.out",)))
            values[f"{name}.out"] = Value(f"{name}.out", "float32", (draw(st.sampled_from([4, 4096, 262144])),))
            if draw(st.booleans()):
                host.add(name)
        sinks = [n for n in names if not any(f"{n}.out" in m.inputs for m in nodes)]
        join = f"b{b}join"
        nodes.append(Node(join, "Add", tuple(f"{n}.out" for n in sinks), (f"{join}.out",)))
        values[f"{join}.out"] = Value(f"{join}.out", "float32", (4096,))
        previous = join
    values["x"] = Value("x", "float32", (4096,))
    return GraphView.build(nodes, ["x"], [f"{previous}.out"], values), tuple(sorted(host))


@settings(max_examples=80, deadline=None, derandomize=True)
@given(chained_blocks(), st.integers(1, 4))
def test_search_over_several_segments_links_valid_winners_no_slower_than_greedy(case, min_segment_nodes):
    view, host = case
    greedy = partition(view, options(OrderMode.GREEDY, host)).plan
    result = partition(view, options(OrderMode.SEARCH, host, order_budget=12, min_segment_nodes=min_segment_nodes))
    validate(result.plan, view)
    assert {n: r.device for r in result.plan.regions for n in r.nodes} == \
        {n: r.device for r in greedy.regions for n in r.nodes}
    outcome = result.order_search
    assert outcome.searched_us == pytest.approx(plan_cost(
        {r.name: Group(r.device, r.nodes) for r in result.plan.regions}, view, COST, result.plan.schedule).total_us
        if outcome.kept is OrderMode.SEARCH else outcome.searched_us)
    assert estimate(result.plan, view) <= estimate(greedy, view) + 1e-9
    if outcome.kept is OrderMode.SEARCH and outcome.fused_bounds == 0:
        # no region spans a segment bound: the plan's lane time is the sum of its segments' times
        transfers = plan_cost({r.name: Group(r.device, r.nodes) for r in result.plan.regions}, view, COST,
                              result.plan.schedule).transfer_us
        assert outcome.searched_us - transfers == pytest.approx(sum(s.chosen_us for s in outcome.segments), abs=0.01)


def test_a_grouping_the_selection_would_undo_is_vetoed():
    # With --min-compute 2 the search's favourite, a and j in accelerator regions of one node each,
    # would send both to the host: it must keep every accelerator region at two compute nodes.
    view = two_branches()
    result = partition(view, options(OrderMode.SEARCH, HOST_SIDE, min_compute=2))
    assert all(sum(view.node(n).is_compute for n in r.nodes) >= 2 for r in result.plan.regions if r.device == ACCEL)
    greedy = partition(view, options(OrderMode.GREEDY, HOST_SIDE, min_compute=2)).plan
    unchecked, _ = search.search(view, greedy, segments(view, 2), COST, 64, lambda groups: {})
    # what the veto prevented: the fastest grouping has a one-node accelerator region
    assert any(len(r.nodes) == 1 for r in unchecked.regions if r.device == ACCEL)


def test_the_html_report_escapes_and_shows_the_segments():
    import dataclasses

    from conftest import small_manifest, small_record
    from aot.record import SegmentRecord
    from aot.runtime.manifest import BoundaryTensor

    rec = small_record()
    rec = dataclasses.replace(rec, partition=dataclasses.replace(
        rec.partition, segments=(SegmentRecord(0, 3, "<b>", "x&y"),)))
    manifest = dataclasses.replace(small_manifest(), boundary_tensors=(
        ("x", BoundaryTensor("float32", (1, 2), 8)), ("y", BoundaryTensor("float32", (1, 2), 8))))
    page = report.html_page(manifest, rec)
    assert "<h2>Segments</h2>" in page and "&lt;b&gt;..x&amp;y" in page and "<b>.." not in page


def test_a_plan_file_that_does_not_fit_the_model_says_so_and_how_to_plan_again(example_model, tmp_path):
    """A pinned plan of another graph of the model (an older aot's front end rewrote it otherwise)."""
    from aot.errors import PartitionError

    planned = api.plan(example_model, BuildOptions(), suggest=False)
    first = planned.plan.regions[0]
    stale = dataclasses.replace(planned.plan, regions=(dataclasses.replace(first, nodes=first.nodes[1:]),
                                                       *planned.plan.regions[1:]))
    path = tmp_path / "stale.json"
    stale.save(path)
    with pytest.raises(PartitionError, match=r"--plan '.*stale.json' does not fit this model: 1 node\(s\) are in no "
                                             r"region") as caught:
        api.plan(example_model, BuildOptions(plan_file=path), suggest=False)
    assert "build without --plan" in caught.value.hint
