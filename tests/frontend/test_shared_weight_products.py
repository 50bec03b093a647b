"""Independent products over one constant weight become one product over their stacked rows: an
unrolled recurrence's input projections (and its output head) merge, with onnxruntime's values;
the hidden-to-hidden products, which read each other's outputs, stay per step; products with other
biases, a computed weight or a transposed A are left alone; the given model is not modified; and
a host build of the merged graph matches onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from aot.frontend.shared_weight_products import batch_shared_weight_products
from conftest import golden, on_host, onnx_model, rewrite_outputs

STEPS, IN, HIDDEN, OUT = 6, 12, 8, 5


def _unrolled_rnn(head: bool = False, op: str = "Gemm") -> onnx.ModelProto:
    """x [STEPS, 1, IN] -> per step h = tanh(x_t W_ih^T + b_ih + h W_hh^T + b_hh), as torch's
    exporter writes a loop over an RNN cell; with ``head``, each step's h through one Linear too."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n) for n, s in
             (("w_ih", (HIDDEN, IN)), ("b_ih", (HIDDEN,)), ("w_hh", (HIDDEN, HIDDEN)), ("b_hh", (HIDDEN,)),
              ("w_head", (HIDDEN, OUT)))]
    inits += [numpy_helper.from_array(np.zeros((1, HIDDEN), np.float32), "h_init")]
    nodes, h, outs = [], "h_init", []
    for t in range(STEPS):
        inits.append(numpy_helper.from_array(np.array(t, np.int64), f"t{t}"))
        nodes += [helper.make_node("Gather", ["x", f"t{t}"], [f"x{t}"], axis=0),
                  (helper.make_node("Gemm", [f"x{t}", "w_ih", "b_ih"], [f"i{t}"], transB=1) if op == "Gemm" else
                   helper.make_node("MatMul", [f"x{t}", "w_ih_t"], [f"i{t}"])),
                  helper.make_node("Gemm", [h, "w_hh", "b_hh"], [f"r{t}"], transB=1),
                  helper.make_node("Add", [f"i{t}", f"r{t}"], [f"s{t}"]),
                  helper.make_node("Tanh", [f"s{t}"], [f"h{t}"])]
        h = f"h{t}"
        if head:
            nodes.append(helper.make_node("MatMul", [h, "w_head"], [f"o{t}"]))
        outs.append(f"o{t}" if head else h)
    if op == "MatMul":
        inits.append(numpy_helper.from_array(numpy_helper.to_array(inits[0]).T.copy(), "w_ih_t"))
    nodes.append(helper.make_node("Concat", outs, ["y"], axis=0))
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [STEPS, 1, IN])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


def _count(model: onnx.ModelProto, op: str) -> int:
    return sum(n.op_type == op for n in model.graph.node)


@pytest.mark.parametrize(("head", "op", "groups"), [(False, "Gemm", 1), (True, "Gemm", 2), (False, "MatMul", 1)],
                         ids=["input-projections", "and-the-head", "as-matmuls"])
def test_an_unrolled_recurrences_independent_products_merge_with_the_same_values(head, op, groups):
    model = _unrolled_rnn(head, op)
    before = model.SerializeToString()
    result = batch_shared_weight_products(model)
    assert result.changed == groups
    assert model.SerializeToString() == before                       # the given model untouched
    merged = result.model
    onnx.checker.check_model(merged, full_check=True)
    # each merged group: STEPS products -> one; the recurrent Gemms over w_hh stay one per step
    assert _count(merged, "Gemm") + _count(merged, "MatMul") == _count(model, "Gemm") + _count(model, "MatMul") - groups * (STEPS - 1)
    assert sum(1 for n in merged.graph.node if n.op_type == "Gemm" and n.input[1] == "w_hh") == STEPS
    assert _count(merged, "Split") == groups
    got, want = rewrite_outputs(model, merged)
    assert got.shape == want.shape
    assert_close(got, want, rtol=1e-6, atol=1e-6)


def _pair(a_of_second: str = "x1", bias2: str = "b", weight: str = "w", trans_a: int = 0) -> onnx.ModelProto:
    """Two Gemms over `weight`: the first of x's row 0, the second of `a_of_second`."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b2"),
             numpy_helper.from_array(np.array([0], np.int64), "r0"), numpy_helper.from_array(np.array([1], np.int64), "r1")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])]
    if weight != "w":
        inputs.append(helper.make_tensor_value_info(weight, TensorProto.FLOAT, [4, 4]))
    nodes = [helper.make_node("Gather", ["x", "r0"], ["x0"], axis=0), helper.make_node("Gather", ["x", "r1"], ["x1"], axis=0),
             helper.make_node("Gemm", ["x0", weight, "b"], ["y0"], transA=trans_a),
             helper.make_node("Gemm", [a_of_second, weight, bias2], ["y1"], transA=trans_a),
             helper.make_node("Add", ["y0", "y1"], ["y"])]
    model = onnx_model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


def test_two_independent_products_merge():          # the control for the cases below
    assert batch_shared_weight_products(_pair()).changed == 1


@pytest.mark.parametrize("model", [_pair(a_of_second="y0"), _pair(bias2="b2"), _pair(weight="w_in"), _pair(trans_a=1)],
                         ids=["one-feeds-the-other", "other-bias", "computed-weight", "transposed-a"])
def test_other_products_are_left_alone(model):
    result = batch_shared_weight_products(model)
    assert result.changed == 0 and result.model is model


@pytest.mark.device    # compiles with IREE
def test_a_host_build_of_the_merged_recurrence_matches_onnxruntime(tmp_path):
    path, loaded, bundle = on_host(tmp_path, _unrolled_rnn(head=True), "rnn")
    assert _count(loaded, "Split") == 2
    golden(bundle, path, seed=1, rtol=1e-5, atol=1e-5, finite=True)
