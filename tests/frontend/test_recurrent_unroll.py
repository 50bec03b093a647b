"""A standard ONNX LSTM or GRU over a short static sequence is unrolled with one input product (a
bidirectional node's two directions stepped together, as batched products), and computes
onnxruntime's: forward, reverse and bidirectional, with and without
initial states and full-length sequence lengths, any subset of its outputs, a GRU with and without
``linear_before_reset``; its weights go with it. Peepholes, clip, another layout, other
activations, short sequence lengths and long sequences are left alone; host builds of a
bidirectional LSTM and GRU match onnxruntime."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks import reference
from aot.checks.compare import assert_close
from aot.frontend.recurrent_unroll import MAX_STEPS, unroll_and_count, unroll_recurrences
from conftest import golden, on_host

STEPS, BATCH, INPUT, HIDDEN = 5, 2, 6, 4


def _lstm(direction: str = "forward", states: bool = False, lengths: int | None = None,
          outputs: tuple[str, ...] = ("Y", "Y_h", "Y_c"), steps: int = STEPS, peepholes: bool = False,
          **attributes: object) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    d = 2 if direction == "bidirectional" else 1
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.5, n) for n, s in
             (("W", (d, 4 * HIDDEN, INPUT)), ("R", (d, 4 * HIDDEN, HIDDEN)), ("B", (d, 8 * HIDDEN)))]
    operands, inputs = ["x", "W", "R", "B", ""], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, BATCH, INPUT])]
    if lengths is not None:
        inits.append(numpy_helper.from_array(np.full(BATCH, lengths, np.int32), "lengths"))
        operands[4] = "lengths"
    if states or peepholes:
        operands += ["h0", "c0"]
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [d, BATCH, HIDDEN]) for n in ("h0", "c0")]
    if peepholes:
        inits.append(numpy_helper.from_array(rng.standard_normal((d, 3 * HIDDEN)).astype(np.float32), "P"))
        operands.append("P")
    named = [o if o in outputs else "" for o in ("Y", "Y_h", "Y_c")]
    while not named[-1]:
        named.pop()
    node = helper.make_node("LSTM", operands, named, name="lstm", direction=direction, **{"hidden_size": HIDDEN, **attributes})
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in named if o], inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _gru(direction: str = "forward", states: bool = False, reset_first: int = 1, outputs: tuple[str, ...] = ("Y", "Y_h"),
         **attributes: object) -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    d = 2 if direction == "bidirectional" else 1
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.5, n) for n, s in
             (("W", (d, 3 * HIDDEN, INPUT)), ("R", (d, 3 * HIDDEN, HIDDEN)), ("B", (d, 6 * HIDDEN)))]
    operands, inputs = ["x", "W", "R", "B", ""], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [STEPS, BATCH, INPUT])]
    if states:
        operands.append("h0")
        inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, [d, BATCH, HIDDEN]))
    named = [o if o in outputs else "" for o in ("Y", "Y_h")]
    while not named[-1]:
        named.pop()
    node = helper.make_node("GRU", operands, named, name="gru", hidden_size=HIDDEN, direction=direction,
                            linear_before_reset=reset_first, **attributes)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in named if o], inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _run(model: onnx.ModelProto, optimize: bool = True) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    feed = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}
    return reference.session(model.SerializeToString(), optimize=optimize).run(None, feed)


def _products(ops: list[str], direction: str) -> int:
    """The unrolled node's matrix products: a bidirectional node's are batched over both directions
    (MatMul over [2, ...]), one chain of steps for the two; a single direction's are Gemms."""
    assert ops.count("MatMul" if direction != "bidirectional" else "Gemm") == 0
    return ops.count("MatMul") + ops.count("Gemm")


CASES = list(itertools.product(("forward", "reverse", "bidirectional"), (False, True), (None, STEPS),
                               (("Y", "Y_h", "Y_c"), ("Y_h",), ("Y",))))


@pytest.mark.parametrize(("direction", "states", "lengths", "outputs"), CASES,
                         ids=["-".join((d, "states" if s else "zeros", "lengths" if n else "all", "+".join(o)))
                              for d, s, n, o in CASES])
def test_the_unrolled_lstm_computes_onnxruntimes(direction, states, lengths, outputs):
    model = _lstm(direction, states, lengths, outputs)
    result = unroll_recurrences(model)
    assert result.changed == 1
    unrolled = result.model
    onnx.checker.check_model(unrolled, full_check=True)
    ops = [n.op_type for n in unrolled.graph.node]
    assert "LSTM" not in ops and {"W", "R", "B"}.isdisjoint(t.name for t in unrolled.graph.initializer)
    # one input product, one recurrent product per step after a zero state's first
    assert _products(ops, direction) == 1 + STEPS - (0 if states else 1)
    want, got = _run(model), _run(unrolled, optimize=False)
    assert len(got) == len(want) == len(outputs)
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.all(np.isfinite(g)) and np.all(np.isfinite(w))
        assert_close(g, w, rtol=1e-5, atol=1e-5)


GRU_CASES = list(itertools.product(("forward", "reverse", "bidirectional"), (False, True), (1, 0), (("Y", "Y_h"), ("Y_h",))))


@pytest.mark.parametrize(("direction", "states", "reset_first", "outputs"), GRU_CASES,
                         ids=["-".join((d, "states" if s else "zeros", f"lbr{r}", "+".join(o))) for d, s, r, o in GRU_CASES])
def test_the_unrolled_gru_computes_onnxruntimes(direction, states, reset_first, outputs):
    model = _gru(direction, states, reset_first, outputs)
    result = unroll_recurrences(model)
    assert result.changed == 1
    onnx.checker.check_model(result.model, full_check=True)
    ops = [n.op_type for n in result.model.graph.node]
    assert "GRU" not in ops and {"W", "R", "B"}.isdisjoint(t.name for t in result.model.graph.initializer)
    recurrent_steps = STEPS - (0 if states else 1)
    # one input product; per step after a zero state's first, one recurrent product, two without
    # linear_before_reset (the reset gate scales the state before the h gate's)
    assert _products(ops, direction) == 1 + recurrent_steps * (1 if reset_first else 2)
    want, got = _run(model), _run(result.model, optimize=False)
    assert len(got) == len(want) == len(outputs)
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.all(np.isfinite(g)) and np.all(np.isfinite(w))
        assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_a_constant_zero_initial_state_is_no_state():
    model = _lstm("bidirectional", states=True)
    zeros = [numpy_helper.from_array(np.zeros((2, BATCH, HIDDEN), np.float32), n) for n in ("h0", "c0")]
    del model.graph.input[1:]
    model.graph.initializer.extend(zeros)
    unrolled = unroll_recurrences(model).model
    assert _products([n.op_type for n in unrolled.graph.node], "bidirectional") == STEPS   # none of the zero state
    assert not {"h0", "c0"} & {v for n in unrolled.graph.node for v in n.input}
    for g, w in zip(_run(unrolled, optimize=False), _run(model)):
        assert np.all(np.isfinite(g)) and np.all(np.isfinite(w))
        assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_a_weight_a_branch_also_reads_is_kept():
    """The unrolled nodes read rearranged copies of W, R and B; the originals go, unless another
    node reads one, inside an If's branch included."""
    model = _lstm()
    branch = helper.make_graph([helper.make_node("Identity", ["W"], ["w_out"])], "then", [],
                               [helper.make_tensor_value_info("w_out", TensorProto.FLOAT, None)])
    cond = numpy_helper.from_array(np.array(True), "cond")
    model.graph.initializer.append(cond)
    model.graph.node.append(helper.make_node("If", ["cond"], ["w_seen"], name="if", then_branch=branch,
                                             else_branch=branch))
    model.graph.output.append(helper.make_tensor_value_info("w_seen", TensorProto.FLOAT, None))
    kept = {t.name for t in unroll_recurrences(model).model.graph.initializer}
    assert "W" in kept and not {"R", "B"} & kept


@pytest.mark.parametrize("model", [
    _lstm(peepholes=True), _lstm(clip=1.0), _lstm(layout=1), _lstm(input_forget=1),
    _lstm(activations=["Sigmoid", "Tanh", "Relu"]), _lstm(lengths=STEPS - 1), _lstm(steps=MAX_STEPS + 1),
    _gru(clip=2.0), _gru(activations=["Sigmoid", "Relu"]), _lstm(hidden_size=HIDDEN + 1),
], ids=["peepholes", "clip", "layout-1", "input-forget", "relu", "short-lengths", "long", "gru-clip", "gru-relu",
        "weights-of-another-size"])
def test_other_lstms_are_left_alone(model):
    result = unroll_recurrences(model)
    assert result.changed == 0 and result.model is model


def test_what_was_unrolled_is_counted_per_op_for_the_record():
    for op, model in (("GRU", _gru()), ("LSTM", _lstm("bidirectional"))):
        unrolled, done = unroll_and_count(model, lambda m: m)
        assert [(e.op_type, e.count) for e in done] == [(op, 1)] and "unrolled" in done[0].reason
        assert op not in {n.op_type for n in unrolled.graph.node}
    kept, nothing = unroll_and_count(_lstm(clip=1.0), lambda m: m)
    assert nothing == () and [n.op_type for n in kept.graph.node] == ["LSTM"]


@pytest.mark.device    # compiles with IREE
def test_host_builds_of_a_bidirectional_lstm_and_gru_match_onnxruntime(tmp_path):
    for name, model in (("lstm", _lstm("bidirectional", states=True)), ("gru", _gru("bidirectional"))):
        path, loaded, bundle = on_host(tmp_path, model, name)
        assert not {"LSTM", "GRU"} & {n.op_type for n in loaded.graph.node}
        golden(bundle, path, seed=1, rtol=1e-5, atol=1e-5, finite=True)
