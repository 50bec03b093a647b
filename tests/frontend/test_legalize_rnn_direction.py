"""RNN / GRU / LSTM reverse and bidirectional as forward runs over the time-reversed sequence
(frontend/legalize/rnn_direction.py), against onnxruntime (onnx's reference for layout=1); forward recurrences and the
bidirectional LSTM, which IREE 3.13 lowers, are not rewritten."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aot.checks.compare import assert_close
from aot.frontend.legalize import legalize

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _case(op, direction, layout=0, bias=False, initial=False, outputs=None, seed=0, lengths=None, **attributes):
    rng = np.random.default_rng(seed)
    seq, batch, inp, hidden = 4, 3, 2, 5
    dirs = 2 if direction == "bidirectional" else 1
    g = _GATES[op]
    feeds = {"X": rng.standard_normal((batch, seq, inp) if layout else (seq, batch, inp)).astype(np.float32),
             "W": rng.standard_normal((dirs, g * hidden, inp)).astype(np.float32) * 0.5,
             "R": rng.standard_normal((dirs, g * hidden, hidden)).astype(np.float32) * 0.5}
    names = ["X", "W", "R", "", "", "", "", ""]
    if bias:
        feeds["B"] = rng.standard_normal((dirs, 2 * g * hidden)).astype(np.float32)
        names[3] = "B"
    inits = []
    if lengths is not None:
        inits.append(numpy_helper.from_array(np.array(lengths, np.int32), "L"))
        names[4] = "L"
    if initial:
        state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
        feeds["H0"] = rng.standard_normal(state).astype(np.float32)
        names[5] = "H0"
        if op == "LSTM":
            feeds["C0"] = rng.standard_normal(state).astype(np.float32)
            names[6] = "C0"
    while not names[-1]:
        names.pop()
    outputs = outputs or (["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"])
    node = helper.make_node(op, names, outputs, name="rnn", direction=direction, hidden_size=hidden, layout=layout,
                            **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape)
                                            for n, v in feeds.items()],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), feeds


def _run(model, feeds):
    """onnxruntime; onnx's reference for layout=1, which onnxruntime does not implement."""
    if any(a.name == "layout" and a.i == 1 for n in model.graph.node for a in n.attribute):
        return ReferenceEvaluator(model).run(None, feeds)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _check(model, feeds, op):
    result, tally = legalize(model)
    assert result.modified and [(t.op_type, t.count) for t in tally] == [(op, 1)]
    nodes = [n for n in result.model.graph.node if n.op_type == op]
    assert nodes and all(a.s == b"forward" for n in nodes for a in n.attribute if a.name == "direction")
    onnx.checker.check_model(result.model, full_check=True)
    got, want = _run(result.model, feeds), _run(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("layout", [0, 1])
def test_reverse(op, layout):
    model, feeds = _case(op, "reverse", layout, bias=True, initial=True)
    _check(model, feeds, op)


@pytest.mark.parametrize("op", ["RNN", "GRU"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("bias,initial", [(False, False), (True, True)])
def test_bidirectional(op, layout, bias, initial):
    model, feeds = _case(op, "bidirectional", layout, bias=bias, initial=initial, seed=1)
    _check(model, feeds, op)


def test_activations_split_between_the_directions():
    model, feeds = _case("RNN", "bidirectional", activations=["Relu", "Tanh"], seed=2)
    _check(model, feeds, "RNN")
    model, feeds = _case("GRU", "bidirectional", activations=["Sigmoid", "Tanh", "HardSigmoid", "Tanh"],
                         activation_alpha=[0.3], activation_beta=[0.4],    # HardSigmoid's, of the reverse half
                         linear_before_reset=1, seed=3)
    _check(model, feeds, "GRU")
    model, feeds = _case("RNN", "bidirectional", activations=["LeakyRelu", "HardSigmoid"],
                         activation_alpha=[0.2, 0.3], activation_beta=[0.6], seed=5)
    _check(model, feeds, "RNN")


@pytest.mark.parametrize("outputs", [["", "Y_h"], ["Y"], ["", "", "Y_c"]])
def test_only_the_outputs_asked_for(outputs):
    op = "LSTM" if "Y_c" in outputs else "GRU"
    model, feeds = _case(op, "reverse" if op == "LSTM" else "bidirectional", outputs=outputs, seed=4)
    _check(model, feeds, op)


def test_full_length_sequence_lens_are_dropped():
    model, feeds = _case("GRU", "reverse", lengths=[4, 4, 4])
    _check(model, feeds, "GRU")


@pytest.mark.parametrize("op,direction,lengths", [
    ("GRU", "forward", None), ("LSTM", "forward", None), ("LSTM", "bidirectional", None),
    ("RNN", "reverse", [4, 2, 3]),                       # per-entry lengths: the reverse starts differ
])
def test_left_alone(op, direction, lengths):
    model, _ = _case(op, direction, lengths=lengths)
    result, tally = legalize(model)
    assert not result.modified and tally == ()
