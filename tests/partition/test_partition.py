"""The partitioner on hand-built graphs: DESIGN §5 fixtures, invariants on random DAGs, plan files."""

from __future__ import annotations

import json

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

from aot.errors import PartitionError
from aot.frontend.graph import GraphView, Node, Value
from aot.partition import regions
from aot.options import BuildOptions
from aot.partition.partitioner import PartitionOptions, make_plan, plan_from_groups
from aot.partition.plan import Plan, Region, region_edges, validate
from aot.partition.support import ACCEL, HOST, Device, Group, Overrides
from aot.partition.plan import GateMode
from conftest import graph


def vulkan_options(**settings) -> PartitionOptions:
    """The partitioner's view of build options for the Vulkan accelerator."""
    return BuildOptions(**settings).partition_options()


def merged(view: GraphView, host: set[str]) -> list[tuple[str, set[str]]]:
    out = regions.merge(view, {n.name: (HOST if n.name in host else ACCEL) for n in view.nodes})
    return [(group.device, set(group.nodes)) for group in out]


def test_seed_host_node_in_the_middle_splits_into_three_regions():
    view = graph([("A", "B"), ("A", "C"), ("B", "D"), ("C", "D"), ("D", "E"), ("D", "F"), ("E", "G"), ("F", "G")])
    assert merged(view, {"D"}) == [("accel", {"A", "B", "C"}), ("host", {"D"}), ("accel", {"E", "F", "G"})]


def test_seed_path_through_host_node_keeps_a_and_b_apart():
    view = graph([("A", "B"), ("A", "C"), ("C", "B")], order=["A", "C", "B"])
    assert merged(view, {"C"}) == [("accel", {"A"}), ("host", {"C"}), ("accel", {"B"})]


def test_seed_diamond_all_accel_is_one_region():
    view = graph([("matmul", "add"), ("matmul", "scale"), ("add", "conv"), ("scale", "conv")])
    assert merged(view, set()) == [("accel", {"matmul", "add", "scale", "conv"})]


def test_independent_siblings_of_one_label_fuse():
    # H feeds two accel branches that a host node joins: the branches share one region.
    view = graph([("H", "a1"), ("H", "b1"), ("a1", "J"), ("b1", "J")])
    assert merged(view, {"H", "J"}) == [("host", {"H"}), ("accel", {"a1", "b1"}), ("host", {"J"})]


def test_small_accelerator_region_is_demoted_to_host_with_a_reason():
    view = graph([("a", "b"), ("b", "c")], op_types={"a": "Conv", "b": "TopK", "c": "Relu"})
    plan = make_plan(view, vulkan_options(min_compute=2, gate=GateMode.OFF))
    assert [(r.device, r.nodes) for r in plan.regions] == [("host", ("a", "b", "c"))]
    assert "fewer than --min-compute 2" in dict(plan.reasons)["a"]
    assert "TopK" in dict(plan.reasons)["b"]


def test_overrides_force_nodes_and_op_types():
    view = graph([("a", "b"), ("b", "c"), ("c", "d")], op_types={"a": "Conv", "b": "Conv", "c": "Relu", "d": "Relu"})
    plan = make_plan(view, vulkan_options(min_compute=1, gate=GateMode.OFF,
                                            overrides=Overrides(host_ops=frozenset({"Relu"}), accel_nodes=("d",))))
    assert [(r.device, r.nodes) for r in plan.regions] == [("accel", ("a", "b")), ("host", ("c",)), ("accel", ("d",))]
    assert "--host-ops" in dict(plan.reasons)["c"]


def test_schedule_is_topological_and_groups_devices():
    # two independent chains a->b (accel) and x (host), then joined: accel regions run back to back
    view = graph([("a", "j"), ("x", "j"), ("y", "j")], order=["a", "x", "y", "j"])
    plan = plan_from_groups(view, [Group(ACCEL, ("a",)), Group(HOST, ("x",)), Group(ACCEL, ("y",)), Group(HOST, ("j",))])
    validate(plan, view)
    assert plan.schedule == ("r0", "r2", "r1", "r3")  # the second accel region runs before the host hop


@st.composite
def labelled_dags(draw):
    n = draw(st.integers(min_value=5, max_value=60))
    edges = set()
    for j in range(1, n):
        preds = draw(st.lists(st.integers(0, j - 1), max_size=3, unique=True))
        edges.update((i, j) for i in preds)
    host = draw(st.sets(st.integers(0, n - 1), max_size=n))
    nodes = [Node(f"n{j}", "Conv", tuple(f"v{i}" for i, k in sorted(edges) if k == j), (f"v{j}",)) for j in range(n)]
    values = {f"v{j}": Value(f"v{j}", "float32", (4,)) for j in range(n)}
    return GraphView.build(nodes, [], [f"v{n - 1}"], values), {f"n{j}" for j in host}


@pytest.mark.slow   # 1,000 seeded DAGs: ~10 s alone, over 20 s on a loaded 2-core machine
@settings(max_examples=1000, deadline=None, derandomize=True)
@given(labelled_dags())
def test_merge_partitions_every_dag_into_acyclic_homogeneous_regions(case):
    view, host = case
    labels = {n.name: (HOST if n.name in host else ACCEL) for n in view.nodes}
    groups = regions.merge(view, labels)
    placed = [n for g in groups for n in g.nodes]
    assert sorted(placed) == sorted(labels)                         # every node exactly once
    assert all(labels[n] == g.device for g in groups for n in g.nodes)  # homogeneous
    plan = plan_from_groups(view, groups)
    g = nx.DiGraph()
    g.add_nodes_from(r.name for r in plan.regions)
    g.add_edges_from((a, b) for a, bs in region_edges(plan, view).items() for b in bs)
    assert nx.is_directed_acyclic_graph(g)                          # independent oracle
    validate(plan, view)                                             # and our own validator agrees


@settings(max_examples=200, deadline=None, derandomize=True)
@given(labelled_dags(), st.integers(1, 4))
def test_make_plan_is_valid_for_any_min_compute(case, min_compute):
    view, host = case
    plan = make_plan(view, vulkan_options(min_compute=min_compute,
                                            overrides=Overrides(host_nodes=tuple(sorted(host))), gate=GateMode.OFF))
    validate(plan, view)
    assert {n for r in plan.regions if r.device == "host" for n in r.nodes} >= host  # forced nodes stay
    for r in plan.regions:
        if r.device == "accel":
            assert len(r.nodes) >= min_compute  # every node is a Conv: compute count = size


def test_cyclic_hand_edited_plan_is_rejected_naming_the_cycle():
    view = graph([("A", "B"), ("B", "C")])
    plan = Plan((Region("x", "accel", ("A", "C")), Region("y", "host", ("B",))), ("x", "y"))
    with pytest.raises(PartitionError, match=r"cycle: (x -> y -> x|y -> x -> y)"):
        validate(plan, view)


@pytest.mark.parametrize("regions_, message", [
    ((Region("x", "accel", ("A",)),), "in no region"),
    ((Region("x", "accel", ("A", "B")), Region("y", "host", ("B",))), "is in regions"),
    ((Region("x", "gpu", ("A", "B")),), "unknown device"),
    ((Region("x", "accel", ("A", "B", "Z")),), "does not have"),
])
def test_invalid_plans_are_rejected(regions_, message):
    view = graph([("A", "B")])
    with pytest.raises(PartitionError, match=message):
        validate(Plan(regions_, tuple(r.name for r in regions_)), view)


def test_plan_file_round_trip(tmp_path):
    view = graph([("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")], op_types={"C": "TopK"})
    plan = make_plan(view, vulkan_options(min_compute=1, gate=GateMode.OFF))
    path = tmp_path / "plan.json"
    plan.save(path)
    again = Plan.load(path)
    assert again == plan
    validate(again, view)
    data = json.loads(path.read_text())
    assert data["regions"][0]["nodes"]
    # Devices are a Device enum in memory and their bare strings in the file.
    assert {type(r.device) for r in again.regions} == {Device}
    assert {r["device"] for r in data["regions"]} == {"accel", "host"}


def test_malformed_plan_file_is_a_partition_error(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text('{"regions": [{"name": "r0"}]}')
    with pytest.raises(PartitionError, match="malformed"):
        Plan.load(path)


def test_a_plan_file_with_an_unknown_device_names_it(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text('{"regions": [{"name": "r0", "device": "gpu", "nodes": ["A"]}], "schedule": ["r0"]}')
    with pytest.raises(PartitionError, match="region 'r0' has unknown device 'gpu'"):
        Plan.load(path)
