"""The front-end pass contract: a pass never mutates its input, returns that same object when it
changes nothing, and counts what it changed; run_to_fixpoint sums rounds until one changes nothing;
nodes a pass reorders come out in a topological order."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference

from aot.frontend import load
from aot.frontend.branches import inline_constant_ifs
from aot.frontend.fold import fold_constants, prune
from aot.frontend.passes import Pass, PassResult, in_topological_order, run_sequence, run_to_fixpoint
from aot.frontend.workarounds import expand_reflect_pad, trim_conv_end_padding
from conftest import onnx_model
from test_load import small_model
from test_recipes import WORKAROUND_CASES

OPSET = [helper.make_opsetid("", 17)]


def scripted(name: str, counts: list[int], log: list[str]) -> Pass:
    """A pass reporting counts[i] on its i-th call (0 once they run out); a change appends its
    name to the doc string of a copy, so the result shows which passes changed what, in order."""
    pending = iter(counts)

    def run(model: onnx.ModelProto) -> PassResult:
        log.append(name)
        changed = next(pending, 0)
        if not changed:
            return PassResult(model, 0)
        out = onnx.ModelProto()
        out.CopyFrom(model)
        out.doc_string += name
        return PassResult(out, changed)

    run.__name__ = name
    return run


def marking(log: list[str]) -> Callable[[onnx.ModelProto], onnx.ModelProto]:
    """An after_change hook that logs its call and leaves a '+' in the model it returns."""
    def hook(model: onnx.ModelProto) -> onnx.ModelProto:
        log.append("+")
        model.doc_string += "+"
        return model
    return hook


def test_run_to_fixpoint_sums_rounds_until_one_changes_nothing():
    log: list[str] = []
    start = onnx.ModelProto()
    result = run_to_fixpoint(start, [scripted("a", [2, 1], log), scripted("b", [3], log)], after_change=marking(log))
    assert result.changed == 6 and result.modified
    # after_change ran after the two rounds that changed something, not after the quiet third one,
    # and the next round started from what it returned.
    assert log == ["a", "b", "+", "a", "b", "+", "a", "b"]
    assert result.model.doc_string == "ab+a+"
    assert start.doc_string == ""


def test_run_to_fixpoint_of_passes_that_change_nothing_returns_the_input():
    log: list[str] = []
    start = onnx.ModelProto()
    result = run_to_fixpoint(start, [scripted("a", [], log)], after_change=marking(log))
    assert result == PassResult(start, 0) and result.model is start and not result.modified
    assert log == ["a"]


def test_a_pass_that_never_settles_stops_at_max_rounds_with_a_warning_naming_it():
    log: list[str] = []
    passes = [scripted("restless", [1] * 10, log), scripted("quiet", [4], log)]
    with pytest.warns(RuntimeWarning, match=r"^restless still changed the model after 3 rounds"):
        result = run_to_fixpoint(onnx.ModelProto(), passes, after_change=marking(log), max_rounds=3)
    assert result.changed == 3 + 4
    assert log == ["restless", "quiet", "+"] + ["restless", "quiet", "+"] * 2
    assert result.model.doc_string == "restlessquiet+restless+restless+"
    with pytest.raises(ValueError, match="max_rounds"):
        run_to_fixpoint(onnx.ModelProto(), passes, max_rounds=0)


def test_run_sequence_runs_each_pass_once_and_sums():
    log: list[str] = []
    result = run_sequence(onnx.ModelProto(), [scripted("a", [2, 2], log), scripted("b", [], log),
                                              scripted("c", [1], log)])
    assert (result.changed, result.model.doc_string, log) == (3, "ac", ["a", "b", "c"])


def shape_chain_model() -> onnx.ModelProto:
    """y = Reshape(x, [1, 4, Shape(x)[2]]) + 0, the target computed by Shape -> Gather ->
    Unsqueeze -> Concat, as exporters write them; shapes inferred, as load has them."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6])
    consts = {"two": np.array(2), "zero_axis": np.array([0]), "head": np.array([1, 4]), "zero": np.float32(0)}
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "two"], ["last"], axis=0),
             helper.make_node("Unsqueeze", ["last", "zero_axis"], ["last_1d"]),
             helper.make_node("Concat", ["head", "last_1d"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Add", ["r", "zero"], ["y"])]
    graph = helper.make_graph(nodes, "chain", [x], [y], [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return shape_inference.infer_shapes(helper.make_model(graph, opset_imports=OPSET))


def constant_if_model() -> onnx.ModelProto:
    """y = If(True) then x * 2 else -x, the condition already an initializer."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])

    def branch(name: str, node: onnx.NodeProto) -> onnx.GraphProto:
        return helper.make_graph([node], name, [], [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT,
                                                                                  [1, 4])])

    cond = numpy_helper.from_array(np.array(True), "cond")
    two = numpy_helper.from_array(np.float32(2), "two")
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", helper.make_node("Mul", ["x", "two"],
                                                                                                   ["doubled"])),
                            else_branch=branch("else", helper.make_node("Neg", ["x"], ["negated"])))
    return helper.make_model(helper.make_graph([node], "branch", [x], [y], [cond, two]), opset_imports=OPSET)


def prunable_model() -> onnx.ModelProto:
    """y = Relu(Identity(x)), with an initializer nothing reads."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Identity", ["x"], ["alias"]), helper.make_node("Relu", ["alias"], ["y"])]
    unread = numpy_helper.from_array(np.ones(3, np.float32), "unread")
    return helper.make_model(helper.make_graph(nodes, "prunable", [x], [y], [unread]), opset_imports=OPSET)


# Each pass with a model it rewrites, and how many things it reports changed.
PASSES: dict[str, tuple[Pass, Callable[[], onnx.ModelProto], int]] = {
    "fold_constants": (fold_constants, shape_chain_model, 4),             # Shape, Gather, Unsqueeze, Concat
    "inline_constant_ifs": (inline_constant_ifs, constant_if_model, 1),
    "prune": (prune, prunable_model, 2),                                  # the Identity and the unread initializer
    "trim_conv_end_padding": (trim_conv_end_padding, lambda: WORKAROUND_CASES["conv_slice"], 1),
    "expand_reflect_pad": (expand_reflect_pad, lambda: WORKAROUND_CASES["reflect_2d"], 1),
}


def run_ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]


@pytest.mark.parametrize("name", sorted(PASSES))
def test_a_pass_returns_a_new_model_with_the_same_values_and_leaves_its_input_alone(name):
    run, build, count = PASSES[name]
    model = build()
    before = model.SerializeToString()
    result = run(model)
    assert model.SerializeToString() == before
    assert result.changed == count and result.model is not model
    onnx.checker.check_model(result.model, full_check=True)
    x = np.random.default_rng(0).standard_normal([d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim])
    x = x.astype(np.float32)
    np.testing.assert_array_equal(run_ort(result.model, x), run_ort(model, x))


@pytest.mark.parametrize("name", sorted(PASSES))
def test_a_pass_with_nothing_to_do_returns_its_input_unchanged(name):
    run, _, _ = PASSES[name]
    model = small_model()   # MatMul -> Relu: nothing to fold, inline, prune or work around
    before = model.SerializeToString()
    result = run(model)
    assert result.model is model and result.changed == 0 and not result.modified
    assert model.SerializeToString() == before


def test_load_counts_the_nodes_the_fixpoint_folded(tmp_path):
    path = tmp_path / "chain.onnx"
    onnx.save(shape_chain_model(), path)
    source = load.load(path)
    assert source.folded_nodes == 4
    assert [n.op_type for n in source.model.graph.node] == ["Reshape", "Add"]


def test_large_constants_fold_unless_they_decompress():
    """A Constant node's value is folded at any size (it is stored already); a large result that
    widens its element type (a dequantized weight) stays computed; one that does not is folded."""
    big = np.arange(6000, dtype=np.float32)
    q = np.zeros(6000, np.int8)
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(big)),
             helper.make_node("Mul", ["c", "two"], ["scaled"]),
             helper.make_node("Cast", ["q"], ["dq"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["scaled", "x"], ["y1"]),
             helper.make_node("Add", ["dq", "x"], ["y2"])]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6000])],
                       [helper.make_tensor_value_info(n, TensorProto.FLOAT, [6000]) for n in ("y1", "y2")],
                       [numpy_helper.from_array(np.array(2, np.float32), "two"), numpy_helper.from_array(q, "q")])
    folded = fold_constants(onnx.shape_inference.infer_shapes(model)).model
    left = [n.op_type for n in folded.graph.node]
    assert left == ["Cast", "Add", "Add"]            # Constant and Mul folded, the int8 -> f32 Cast kept
    assert "scaled" in {t.name for t in folded.graph.initializer}


def test_nodes_are_put_in_an_order_that_makes_each_value_before_it_is_read():
    # c reads b's output and comes first; a and d read only the graph input: they keep their order
    a, c, b, d = (helper.make_node("Relu", [i], [o], name=o) for i, o in
                  (("x", "a"), ("b", "c"), ("a", "b"), ("x", "d")))
    assert [n.name for n in in_topological_order([a, c, b, d])] == ["a", "b", "c", "d"]
    assert [n.name for n in in_topological_order([a, b, c, d])] == ["a", "b", "c", "d"]   # already one: kept
    loop = [helper.make_node("Relu", ["q"], ["p"]), helper.make_node("Relu", ["p"], ["q"])]
    with pytest.raises(ValueError, match="cycle"):
        in_topological_order(loop)
