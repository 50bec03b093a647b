"""`aot learn generate`: seeded random graphs of deployed blocks, valid, runnable and reproducible."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from aot.cli import main
from aot.frontend.graph import GraphView
from aot.frontend.load import load
from aot.learn import generate as gen
from aot.partition.cost import node_flops
from aot.partition.support import HOST_ONLY

BATCH = 20


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_models(tmp_path):
    a, b, c = (gen.write(tmp_path / d, 4, seed) for d, seed in (("a", 7), ("b", 7), ("c", 8)))
    assert [p.name for p in a] == [f"gen-7-{i:04d}.onnx" for i in range(4)]
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert not {p.read_bytes() for p in a} & {p.read_bytes() for p in c}
    assert len({p.read_bytes() for p in a}) == 4   # the index matters too


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return gen.write(tmp_path_factory.mktemp("generated"), BATCH, seed=0)


def test_a_seeded_batch_is_valid_runs_in_onnxruntime_and_loads(batch):
    for path in batch:
        model = onnx.load(str(path))
        onnx.checker.check_model(model, full_check=True)
        assert model.opset_import[0].version == gen.OPSET and 8 <= len(model.graph.node) <= gen.MAX_NODES
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (x,), (y,) = session.get_inputs(), session.get_outputs()
        assert x.type == y.type == "tensor(float)" and all(isinstance(d, int) for d in (*x.shape, *y.shape))
        (out,) = session.run(None, {x.name: np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)})
        assert out.shape == tuple(y.shape) and np.isfinite(out).all(), path.name
        source = load(path)
        assert [s.shape for s in source.inputs] == [tuple(x.shape)], path.name


def _flops(model: onnx.ModelProto) -> int:
    view = GraphView.from_onnx(onnx.shape_inference.infer_shapes(model))
    return sum(node_flops(n, view) for n in view.nodes)


def test_the_blocks_ops_and_sizes_are_varied():
    made = [gen.generate(0, i) for i in range(60)]
    kinds = collections.Counter(s.kind for _, specs in made for s in specs)
    assert set(kinds) == set(gen.Kind), set(gen.Kind) - set(kinds)
    ops = {n.op_type for m, _ in made for n in m.graph.node}
    assert {"Conv", "BatchNormalization", "MatMul", "Gemm", "Softmax", "Transpose", "Reshape", "GlobalAveragePool",
            "Sigmoid", "HardSwish", "Mul", "Add"} <= ops
    host_only = {op for op in ops if f"vulkan-spirv.{op}" in HOST_ONLY}
    assert host_only == {"TopK", "ArgMax", "LSTM"}       # only those that keep shapes static
    assert sum(any(f"vulkan-spirv.{n.op_type}" in HOST_ONLY for n in m.graph.node) for m, _ in made) >= 20
    flops = [_flops(m) for m, _ in made[:BATCH]]
    assert max(flops) / min(flops) > 1e3                  # several orders of magnitude
    assert sum(any(s.kind is gen.Kind.BRANCH for s in specs) for _, specs in made) >= 20   # two paths joined


def test_names_are_counters_not_random():
    model, _ = gen.generate(3, 1)
    assert [n.name for n in model.graph.node] == [f"n{i}_{n.op_type}" for i, n in enumerate(model.graph.node)]
    assert model.graph.input[0].name == "x" and model.graph.name == "generated_3_1"


def test_the_command_writes_count_models(tmp_path, capsys):
    assert main(["learn", "generate", "-o", str(tmp_path / "g"), "--count", "3", "--seed", "5"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(tmp_path / "g" / f"gen-5-{i:04d}.onnx") for i in range(3)]
    assert (tmp_path / "g" / "gen-5-0002.onnx").read_bytes() == gen.generate(5, 2)[0].SerializeToString()
