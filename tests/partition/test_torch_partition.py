"""One partitioner for both front ends: the torch-op table entries, and the same plan whether a
module arrives through torch-dialect MLIR or through its ONNX export."""

from __future__ import annotations

import pytest

import torch_models as tm
from aot.frontend.graph import GraphView, Node, Value
from aot.frontend.torch.export import export
from aot.options import BuildOptions
from aot.partition.cost import node_flops
from aot.partition.plan import GateMode, Plan
from aot.partition.support import SupportTable
from aot.pipeline import plan_model, plan_torch
from aot.runtime.target import Target

# The gate off: these tests are about the support table and the two front ends; the gate's own
# decision on these models is tested below.
VULKAN = BuildOptions(accel=Target.parse("vulkan"), gate=GateMode.OFF)


@pytest.fixture(scope="module")
def planned():
    return {name: plan_torch(export(getattr(tm, name)(), tm.example_inputs(name), attention_as_matmuls=True), VULKAN)
            for name in tm.EXAMPLES}


@pytest.fixture(scope="module")
def planned_onnx(tmp_path_factory):
    out = {}
    for name in tm.EXAMPLES:
        path = tmp_path_factory.mktemp(name) / f"{name}.onnx"
        x = tm.example_inputs(name)
        tm.export_onnx(name, path, x)
        out[name] = plan_model(path, VULKAN)
    return out


def _devices(p) -> list[str]:
    return [r.device for r in p.plan.regions]


def test_topk_goes_to_the_host_with_the_tables_reason(planned):
    p = planned["resnet_like"]
    assert _devices(p) == ["accel", "host"]
    host = p.plan.regions[1].nodes
    assert [p.view.node(n).op_type for n in host] == ["aten.topk"]
    assert dict(p.plan.reasons)[host[0]].startswith("vulkan-spirv.aten.topk: selection/sort op")
    assert p.record.coverage.unsupported[0].op == "aten.topk"


def test_a_topk_in_the_middle_gives_accel_host_accel(planned):
    p = planned["topk_pool"]
    assert _devices(p) == ["accel", "host", "accel"]
    assert [p.view.node(n).op_type for n in p.plan.regions[1].nodes] == ["aten.topk"]


def test_the_encoder_runs_whole_on_the_accelerator(planned):
    assert _devices(planned["encoder"]) == ["accel"]


@pytest.mark.parametrize("accel", ["vulkan", "cuda"])
def test_the_roofline_gate_keeps_a_small_whole_accelerator_model_on_the_host(accel):
    """One accelerator region is weighed against the host too: the small encoder (16 tokens) costs
    less on the host than a call to a GPU and its transfers (Silero on an H100: 0.96 ms on CUDA,
    0.16 ms on the CPU)."""
    p = plan_torch(export(tm.encoder(), tm.example_inputs("encoder"), attention_as_matmuls=True),
                   BuildOptions(accel=Target.parse(accel)))
    assert _devices(p) == ["host"]
    gate = p.plan.gate
    assert gate is not None and not gate.accepted
    assert gate.all_accel_us == gate.partitioned_us > gate.all_host_us
    assert gate.whole_accel and gate.verdict() == "whole model on the accelerator rejected"
    assert Plan.from_json(p.plan.to_json()).gate == gate     # the plan file keeps what was judged
    why = dict(p.plan.reasons)
    assert all(why[n.name].startswith("the gate kept the whole model on the host: the accelerator does not beat it")
               for n in p.view.nodes)


@pytest.mark.parametrize("accel", ["vulkan", "cuda"])
def test_the_roofline_gate_keeps_a_whole_accelerator_model_that_pays(accel):
    """A model whose work outweighs the call stays whole on the accelerator: the same kind of
    encoder, 4 layers of width 256 over 8x128 tokens (7 GFLOP)."""
    p = plan_torch(export(tm.encoder_base(), tm.example_inputs("encoder_base"), attention_as_matmuls=True),
                   BuildOptions(accel=Target.parse(accel)))
    assert _devices(p) == ["accel"]
    gate = p.plan.gate
    assert gate is not None and gate.accepted and gate.partitioned_us < gate.all_host_us
    assert gate.verdict() == "whole model on the accelerator accepted"


@pytest.mark.parametrize("name", list(tm.EXAMPLES))
def test_the_torch_and_onnx_paths_plan_the_same_regions(name, planned, planned_onnx):
    t, o = planned[name], planned_onnx[name]
    assert _devices(t) == _devices(o)
    # The same nodes on the host for the same reason (the ONNX exporter writes torch.sort as TopK).
    def host_reasons(p):
        reasons = dict(p.plan.reasons)
        return [reasons[n].split(": ", 1)[1] for r in p.plan.regions if r.device == "host" for n in r.nodes]

    assert host_reasons(t) == host_reasons(o)


@pytest.mark.parametrize("name", ["resnet_like", "topk_pool"])
def test_convolution_and_matmul_flops_are_counted_alike(name, planned, planned_onnx):
    def flops(p, ops):
        return sum(node_flops(n, p.view) for n in p.view.nodes if n.op_type in ops)

    t, o = planned[name], planned_onnx[name]
    assert flops(t, {"aten.conv2d"}) == flops(o, {"Conv"}) > 0
    assert flops(t, {"aten.linear"}) == flops(o, {"Gemm", "MatMul"}) > 0


def test_attention_flops_count_both_products():
    view = GraphView.build([Node("a", "aten.scaled_dot_product_attention", ("q", "k", "v"), ("o",))], ("q", "k", "v"),
                           ("o",), {v: Value(v, "float32", (1, 4, 16, 8)) for v in "qkvo"})
    assert node_flops(view.node("a"), view) == 2 * 2 * (4 * 16 * 16 * 8)


@pytest.mark.parametrize("target", ["vulkan-spirv", "cuda"])
def test_torch_entries_exist_for_every_accelerator_target(target):
    table = SupportTable.for_target(target)
    view = GraphView.build([Node(op, op, ("x",), (f"{op}.out",)) for op in ("aten.topk", "aten.nonzero", "aten.randn")],
                           ("x",), (), {"x": Value("x", "float32", (4,))})
    for node in view.nodes:
        d = table.decide(node, view)
        assert not d.supported and d.reason.startswith(f"{target}.{node.op_type}: ")
    cmp = Node("gt", "aten.gt", ("x",), ("gt.out",))
    assert not table.may_cross(cmp, "gt.out", view).supported


def test_attention_stays_off_vulkan_unless_written_as_matmuls():
    view = GraphView.build([Node("a", "aten.scaled_dot_product_attention", ("q",), ("o",))], ("q",), ("o",),
                           {v: Value(v, "float32", (1, 4, 16, 8)) for v in "qo"})
    assert "online_attention" in SupportTable.for_target("vulkan-spirv").decide(view.node("a"), view).reason
    assert SupportTable.for_target("cuda").decide(view.node("a"), view).supported


def test_the_onnx_path_needs_no_torch(tmp_path):
    """`make model` and every ONNX build work where torch is not installed."""
    import subprocess
    import sys

    from conftest import ROOT

    code = ("import sys; sys.modules['torch'] = None; sys.modules['iree.turbine'] = None\n"
            "from aot import api; from aot.models import examples; from aot.options import BuildOptions\n"
            f"from pathlib import Path; path = examples.write(Path(r'{tmp_path / 'm.onnx'}'))\n"
            "p = api.plan(path, BuildOptions())\n"
            "print(len(p.plan.regions), 'torch' in sys.modules and sys.modules['torch'] is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "False"
