"""Load-time recipes: constant inputs bake away the branches they decide; IREE workarounds keep
every value while moving models off known miscompiles."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.errors import ModelError
from aot.frontend import load
from aot.option_flags import UsageError
from aot.options import parse_constant
from conftest import run_aot


def rate_switch_model() -> onnx.ModelProto:
    """y = x * 2 if sr == 16000 else x * 3; the 16 kHz branch holds a nested If on (sr > 8000),
    whose inner branch reads a value of the outer branch (a capture), as exporters write them."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])

    def const(name, value):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value)))

    def branch(name, nodes, out):
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4])])

    inner_then = branch("inner_then", [helper.make_node("Mul", ["x", "two"], ["inner_y"])], "inner_y")
    inner_else = branch("inner_else", [helper.make_node("Neg", ["x"], ["inner_n"])], "inner_n")
    then = branch("then", [const("two", np.float32(2)), const("k8", np.int64(8000)),
                           helper.make_node("Greater", ["sr", "k8"], ["wide"]),
                           helper.make_node("If", ["wide"], ["then_y"], then_branch=inner_then,
                                            else_branch=inner_else)], "then_y")
    other = branch("else", [const("three", np.float32(3)), helper.make_node("Mul", ["x", "three"], ["else_y"])], "else_y")
    nodes = [const("k16", np.int64(16000)), helper.make_node("Equal", ["sr", "k16"], ["is16"]),
             helper.make_node("If", ["is16"], ["y"], then_branch=then, else_branch=other)]
    return helper.make_model(helper.make_graph(nodes, "rate", [x, sr], [y]), opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("rate, factor", [(16000, 2.0), (8000, 3.0)])
def test_a_constant_input_inlines_the_branches_it_decides(tmp_path, rate, factor):
    path = tmp_path / "rate.onnx"
    onnx.save(rate_switch_model(), path)
    source = load.load(path, constants={"sr": np.array(rate)})
    assert [i.name for i in source.inputs] == ["x"]
    assert not [n for n in source.model.graph.node if n.op_type == "If"]
    # Identity survives only where it names a graph output (the inlined branch's result).
    assert all(n.output[0] == "y" for n in source.model.graph.node if n.op_type == "Identity")
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    (y,) = ort.InferenceSession(source.model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(y, x * factor)


@pytest.mark.device
def test_const_input_through_the_cli_and_the_golden_check(tmp_path):
    path = tmp_path / "rate.onnx"
    onnx.save(rate_switch_model(), path)
    out = tmp_path / "rate"
    run_aot("build", str(path), "-o", str(out), "--accel", "none", "--const-input", "sr=16000")
    report = run_aot("check", str(out / "bundle")).stdout   # onnxruntime gets sr from the manifest
    assert "max abs error vs onnxruntime: 0" in report


@pytest.mark.parametrize("text, message", [
    ("sr", "bad --const-input"), ("sr=fast", "not a number list"), ("sr=@missing.npy", "cannot read")])
def test_bad_const_input_text_is_a_clear_error(text, message):
    with pytest.raises(UsageError, match=message):
        parse_constant(text)


@pytest.mark.parametrize("constants, message", [
    ({"rate": np.array(1)}, "not an input of the model"),
    ({"sr": np.array([1, 2])}, r"does not fit the input's declared shape \[scalar\]")])
def test_const_input_that_does_not_fit_the_model_is_refused(tmp_path, constants, message):
    path = tmp_path / "rate.onnx"
    onnx.save(rate_switch_model(), path)
    with pytest.raises(ModelError, match=message):
        load.load(path, constants=constants)


def one_node(op: str, x_shape, y_shape, inits, **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, ["x", *(t.name for t in inits)], ["y"], **attrs)
    graph = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


rng = np.random.default_rng(0)
WORKAROUND_CASES = {
    # Strided Conv whose end padding no window reads (Silero's encoder): trimmed padding.
    "conv_pad": one_node("Conv", [1, 4, 2], [1, 8, 1], [numpy_helper.from_array(rng.random((8, 4, 3), np.float32), "w")],
                         kernel_shape=[3], pads=[1, 1], strides=[2]),
    # ... where even input elements go unread: a Slice drops them too.
    "conv_slice": one_node("Conv", [1, 4, 4], [1, 8, 1], [numpy_helper.from_array(rng.random((8, 4, 3), np.float32), "w")],
                           kernel_shape=[3], pads=[1, 1], strides=[4]),
    # Reflect Pad by 64 at the end of a [1, 576] chunk (Silero's STFT), and on both sides of two axes.
    "reflect_64": one_node("Pad", [1, 576], [1, 640], [numpy_helper.from_array(np.array([0, 0, 0, 64]), "p")],
                           mode="reflect"),
    "reflect_2d": one_node("Pad", [2, 5, 7], [3, 5, 14], [numpy_helper.from_array(np.array([0, 0, 3, 1, 0, 4]), "p")],
                           mode="reflect"),
}


@pytest.mark.parametrize("case", sorted(WORKAROUND_CASES))
def test_iree_workarounds_keep_every_value(case, tmp_path):
    path = tmp_path / f"{case}.onnx"
    onnx.save(WORKAROUND_CASES[case], path)
    source = load.load(path)
    assert source.model.SerializeToString() != WORKAROUND_CASES[case].SerializeToString()
    x = rng.standard_normal([d.dim_value for d in WORKAROUND_CASES[case].graph.input[0].type.tensor_type.shape.dim])
    x = x.astype(np.float32)
    (want,) = ort.InferenceSession(str(path)).run(None, {"x": x})
    (got,) = ort.InferenceSession(source.model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.device
@pytest.mark.parametrize("case", sorted(WORKAROUND_CASES))
def test_iree_workarounds_compile_and_match(case, tmp_path):
    # IREE 3.13 rejects the original form of each of these; the rewritten one builds and matches.
    path = tmp_path / f"{case}.onnx"
    onnx.save(WORKAROUND_CASES[case], path)
    run_aot("build", str(path), "-o", str(tmp_path / "out"), "--accel", "none")
    report = run_aot("check", str(tmp_path / "out" / "bundle")).stdout
    assert float(report.rsplit("max abs error vs onnxruntime:", 1)[1]) < 1e-5
