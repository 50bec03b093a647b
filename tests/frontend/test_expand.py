"""Function expansion (aot/frontend/expand.py): the ops IREE 3.13 cannot lower are written out as
the ONNX standard's function bodies, recursively, and compute what the op computes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from conftest import golden

from aot.checks.compare import within
from aot.frontend import expand
from aot.frontend.load import load


def _model(nodes, inputs, outputs, inits=(), opset=23, path=None):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    if path is not None:
        onnx.save(m, str(path))
    return m


def _ops(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


def _same(original: onnx.ModelProto, rewritten: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    """The rewritten graph computes what onnx's reference computes for the original op."""
    want = ReferenceEvaluator(original).run(None, feeds)
    got = ReferenceEvaluator(rewritten).run(None, feeds)
    for g, w in zip(got, want):
        ok, diff = within(np.asarray(g), np.asarray(w), 1e-5)
        assert ok and np.isfinite(g).all(), diff


def decoder_block(seq: int = 8, hidden: int = 32, heads: int = 4, seed: int = 0) -> onnx.ModelProto:
    """An opset-23 decoder block as current exporters write it: RMSNormalization, Q/K/V
    projections, RotaryEmbedding, causal Attention, output projection, residual, a gated MLP."""
    rng = np.random.default_rng(seed)
    hd = hidden // heads

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)

    angles = np.arange(seq)[:, None] / (10000 ** (np.arange(hd // 2)[None, :] * 2 / hd))
    inits = [w("wq", hidden, hidden), w("wk", hidden, hidden), w("wv", hidden, hidden), w("wo", hidden, hidden),
             w("w1", hidden, 2 * hidden), w("w2", 2 * hidden, hidden), w("g1", hidden), w("g2", hidden),
             numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin"),
             numpy_helper.from_array(np.arange(seq, dtype=np.int64)[None], "pos"),
             numpy_helper.from_array(np.array([1, seq, heads, hd], np.int64), "heads4"),
             numpy_helper.from_array(np.array([1, seq, hidden], np.int64), "flat3")]
    n = helper.make_node
    nodes = [n("RMSNormalization", ["x", "g1"], ["h"], axis=-1, epsilon=1e-5, name="norm1")]
    for p in "qkv":
        nodes += [n("MatMul", ["h", f"w{p}"], [p]), n("Reshape", [p, "heads4"], [f"{p}4"]),
                  n("Transpose", [f"{p}4"], [f"{p}t"], perm=[0, 2, 1, 3])]
    nodes += [n("RotaryEmbedding", ["qt", "cos", "sin", "pos"], ["qr"], name="rope_q"),
              n("RotaryEmbedding", ["kt", "cos", "sin", "pos"], ["kr"], name="rope_k"),
              n("Attention", ["qr", "kr", "vt"], ["a"], is_causal=1, name="attention"),
              n("Transpose", ["a"], ["at"], perm=[0, 2, 1, 3]), n("Reshape", ["at", "flat3"], ["a3"]),
              n("MatMul", ["a3", "wo"], ["o"]), n("Add", ["x", "o"], ["r"]),
              n("RMSNormalization", ["r", "g2"], ["h2"], axis=-1, epsilon=1e-5, name="norm2"),
              n("MatMul", ["h2", "w1"], ["m1"]), n("Sigmoid", ["m1"], ["s1"]), n("Mul", ["m1", "s1"], ["m2"]),
              n("MatMul", ["m2", "w2"], ["m3"]), n("Add", ["r", "m3"], ["y"])]
    return _model(nodes, [("x", T.FLOAT, [1, seq, hidden])], [("y", T.FLOAT, [1, seq, hidden])], inits)


def test_rms_normalization_is_written_out_and_computes_the_same(tmp_path):
    m = _model([helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-1, epsilon=1e-3)],
               [("x", T.FLOAT, [2, 3, 8]), ("s", T.FLOAT, [8])], [("y", T.FLOAT, [2, 3, 8])], path=tmp_path / "m.onnx")
    source = load(tmp_path / "m.onnx")
    assert "RMSNormalization" not in _ops(source.model) and {"ReduceMean", "Sqrt"} <= _ops(source.model)
    assert [(e.op_type, e.count) for e in source.expanded] == [("RMSNormalization", 1)]
    rng = np.random.default_rng(0)
    _same(m, source.model, {"x": rng.standard_normal((2, 3, 8)).astype(np.float32),
                            "s": rng.standard_normal(8).astype(np.float32)})


def test_bodies_holding_other_expanded_ops_are_expanded_in_turn():
    """SoftmaxCrossEntropyLoss's body holds NegativeLogLikelihoodLoss, which IREE cannot lower
    either: both go, in two rounds."""
    m = _model([helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["loss"], reduction="mean")],
               [("x", T.FLOAT, [3, 5]), ("t", T.INT64, [3])], [("loss", T.FLOAT, [])], opset=17)
    m = onnx.shape_inference.infer_shapes(m)
    result = expand.expand_functions(m)
    assert result.changed == 2 and not _ops(result.model) & set(expand.EXPANDED)
    _same(m, result.model, {"x": np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32),
                            "t": np.array([0, 4, 2], np.int64)})


def test_ops_iree_lowers_well_keep_their_own_kernel(tmp_path):
    m = _model([helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=-1)],
               [("x", T.FLOAT, [2, 8]), ("s", T.FLOAT, [8])], [("y", T.FLOAT, [2, 8])], opset=17)
    assert "LayerNormalization" not in expand.EXPANDED
    assert expand.expand_functions(onnx.shape_inference.infer_shapes(m)).changed == 0


def test_the_decoder_block_expands_to_primitive_ops_and_matches_the_reference(tmp_path):
    onnx.save(decoder_block(), str(tmp_path / "block.onnx"))
    source = load(tmp_path / "block.onnx")
    assert not _ops(source.model) & set(expand.EXPANDED)
    assert {(e.op_type, e.count) for e in source.expanded} == {
        ("Attention", 1), ("RMSNormalization", 2), ("RotaryEmbedding", 2)}
    _same(decoder_block(), source.model, {"x": np.random.default_rng(2).standard_normal((1, 8, 32)).astype(np.float32)})


@pytest.mark.device  # compiles with IREE and runs on lavapipe and the CPU
@pytest.mark.parametrize("accel", ["vulkan", "none"])
def test_an_opset_23_decoder_block_builds_and_matches_onnxruntime(tmp_path, accel):
    """RMSNormalization, RotaryEmbedding and causal Attention failed to compile before expansion
    (`failed to legalize operation 'torch.operator'`), on every target."""
    import aot
    from aot import record
    from aot.options import BuildOptions
    from aot.partition.plan import GateMode
    from aot.runtime.target import Target

    path = tmp_path / "block.onnx"
    onnx.save(decoder_block(), str(path))
    result = aot.build(path, tmp_path / "out", BuildOptions(accel=None if accel == "none" else Target.parse(accel),
                                                                gate=GateMode.OFF))
    rec = record.read(result.bundle.path)
    assert rec is not None and {w.op for w in rec.rewrites} == {"Attention", "RMSNormalization", "RotaryEmbedding"}
    backends = {r.target.backend for r in result.bundle.manifest.regions}
    assert backends == ({"vulkan-spirv"} if accel == "vulkan" else {"llvm-cpu"})
    golden(result.bundle.path, path)
