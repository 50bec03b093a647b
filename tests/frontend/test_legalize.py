"""Legalization (aot/frontend/legalize/): the registry rewrites what IREE 3.13 cannot lower into
standard ops that compute the same values, only where the condition holds, and tallies each
rewrite for the build record."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aot.checks.compare import assert_close
from aot.frontend.legalize import LEGALIZATIONS, legalize
from aot.frontend.load import load

_DTYPES = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float64): T.DOUBLE, np.dtype(np.int32): T.INT32,
           np.dtype(np.int64): T.INT64, np.dtype(np.int8): T.INT8}


def _model(node: onnx.NodeProto, inputs: dict[str, np.ndarray], out_shape, out_dtype, consts=(), opset=26):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, _DTYPES[a.dtype], a.shape)
                                        for n, a in inputs.items()],
                          [helper.make_tensor_value_info(node.output[0], out_dtype, out_shape)], list(consts))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m)


def _legalized_matches(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 0.0):
    """Legalize `model`; its op is gone, tallied once, and the result equals the reference's."""
    result, tally = legalize(model)
    op = model.graph.node[0].op_type
    assert result.changed == 1 and [t.op_type for t in tally] == [op] and tally[0].count == 1
    assert model.graph.node[0] not in result.model.graph.node
    onnx.checker.check_model(result.model, full_check=True)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = ReferenceEvaluator(result.model).run(None, feeds)[0]
    assert np.isfinite(np.asarray(got, np.float64)).all()
    assert got.dtype == want.dtype
    assert_close(got, want, rtol=rtol, atol=rtol)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(op=st.sampled_from(["CumSum", "CumProd"]), shape=st.lists(st.integers(1, 9), min_size=1, max_size=3),
       axis_pick=st.integers(0, 5), negative=st.booleans(), exclusive=st.booleans(), reverse=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64, np.int32, np.int64]))
def test_a_scan_computes_what_the_op_computes(op, shape, axis_pick, negative, exclusive, reverse, dtype):
    rng = np.random.default_rng(sum(shape))
    x = (rng.integers(-3, 4, shape) if np.dtype(dtype).kind == "i" else rng.uniform(0.5, 1.5, shape)).astype(dtype)
    axis = axis_pick % len(shape) - (len(shape) if negative else 0)
    node = helper.make_node(op, ["x", "axis"], ["y"], exclusive=int(exclusive), reverse=int(reverse))
    model = _model(node, {"x": x}, shape, _DTYPES[x.dtype], [numpy_helper.from_array(np.array(axis, np.int64), "axis")])
    _legalized_matches(model, {"x": x}, rtol=1e-6 if x.dtype.kind == "f" else 0.0)


def test_a_scan_with_a_runtime_axis_is_left_alone():
    x = np.ones((3, 4), np.float32)
    node = helper.make_node("CumSum", ["x", "axis"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [3, 4]),
                                        helper.make_tensor_value_info("axis", T.INT64, [])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [3, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    result, tally = legalize(model)
    assert result.changed == 0 and result.model is model and tally == () and x.size


@pytest.mark.parametrize("a_shape,b_shape,out", [((4,), (2, 4, 3), (2, 3)), ((2, 3, 5, 4), (4,), (2, 3, 5))])
def test_a_vector_times_a_batch_of_matrices_becomes_a_matrix_product(a_shape, b_shape, out):
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32), "b": rng.standard_normal(b_shape).astype(np.float32)}
    model = _model(helper.make_node("MatMul", ["a", "b"], ["y"]), feeds, out, T.FLOAT, opset=13)
    _legalized_matches(model, feeds, rtol=1e-6)


@pytest.mark.parametrize("a_shape,b_shape", [((4,), (4, 3)), ((2, 4), (4,)), ((2, 2, 4), (2, 4, 3)), ((4,), (4,))])
def test_products_iree_lowers_are_left_to_it(a_shape, b_shape):
    feeds = {"a": np.ones(a_shape, np.float32), "b": np.ones(b_shape, np.float32)}
    out = np.matmul(feeds["a"], feeds["b"]).shape
    model = _model(helper.make_node("MatMul", ["a", "b"], ["y"]), feeds, out, T.FLOAT, opset=13)
    assert legalize(model)[0].changed == 0


@pytest.mark.parametrize("mode,rewritten", [("CRD", True), ("DCR", False)])
def test_space_to_depth_in_crd_order_is_written_out(mode, rewritten):
    x = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    node = helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2, mode=mode)
    model = _model(node, {"x": x}, (2, 12, 2, 3), T.FLOAT, opset=28)
    if rewritten:
        _legalized_matches(model, {"x": x})
    else:
        assert legalize(model)[0].changed == 0


def test_every_legalization_says_why():
    assert LEGALIZATIONS and all(e.reason.startswith("IREE 3.13") for e in LEGALIZATIONS)


def test_load_records_each_legalization_with_its_reason(tmp_path):
    x = np.ones((2, 5), np.float32)
    node = helper.make_node("CumSum", ["x", "axis"], ["y"])
    model = _model(node, {"x": x}, (2, 5), T.FLOAT, [numpy_helper.from_array(np.array(1, np.int64), "axis")], opset=17)
    onnx.save(model, tmp_path / "m.onnx")
    source = load(tmp_path / "m.onnx")
    assert [(e.op_type, e.count) for e in source.expanded] == [("CumSum", 1)]
    assert "scan" in source.expanded[0].reason
    assert "CumSum" not in {n.op_type for n in source.model.graph.node}


@pytest.mark.parametrize("node,rewritten", [
    (helper.make_node("Clip", ["x"], ["y"]), True),
    (helper.make_node("Clip", ["x", "lo"], ["y"]), False),
    (helper.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1), True),
    (helper.make_node("ReduceSum", ["x", "none"], ["y"], noop_with_empty_axes=1), True),
    (helper.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=0, keepdims=1), False),
])
def test_nodes_that_compute_nothing_become_identities(node, rewritten):
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    consts = [numpy_helper.from_array(np.array(-0.5, np.float32), "lo"), numpy_helper.from_array(np.zeros(0, np.int64), "none")]
    out = (1, 1) if node.op_type == "ReduceSum" and not rewritten else (2, 3)
    model = _model(node, {"x": x}, out, T.FLOAT, [c for c in consts if c.name in node.input], opset=18)
    if rewritten:
        _legalized_matches(model, {"x": x})
        assert [n.op_type for n in legalize(model)[0].model.graph.node] == ["Identity"]
    else:
        assert legalize(model)[0].changed == 0


@pytest.mark.parametrize("op", ["BitCast", "RegexFullMatch"])
def test_an_op_no_target_compiles_is_refused_at_load_naming_the_node(tmp_path, op):
    from aot.errors import ModelError

    if op == "BitCast":
        node = helper.make_node("BitCast", ["x"], ["y"], name="the_cast", to=T.INT32)
        io = (T.FLOAT, T.INT32, 26)
    else:
        node = helper.make_node("RegexFullMatch", ["x"], ["y"], name="the_cast", pattern="a+")
        io = (T.STRING, T.BOOL, 20)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", io[0], [3])],
                          [helper.make_tensor_value_info("y", io[1], [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", io[2])])
    m.ir_version = 11
    onnx.save(m, tmp_path / "m.onnx")
    with pytest.raises(ModelError) as e:
        load(tmp_path / "m.onnx")
    if op == "BitCast":   # a string input may already be refused for its type; BitCast reaches the table
        assert "'the_cast'" in e.value.message and "BitCast" in e.value.message and "no target can compile" in e.value.message


def _mod(dtype, fmod):
    node = helper.make_node("Mod", ["x", "y"], ["z"], name="remainder", fmod=fmod)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, dtype, (6,)) for n in "xy"],
                              [helper.make_tensor_value_info("z", dtype, (6,))])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]))


@pytest.mark.parametrize("dtype,fmod", [(T.DOUBLE, 0), (T.DOUBLE, 1), (T.FLOAT, 0), (T.INT64, 0), (T.FLOAT16, 0)])
def test_no_mod_is_refused_and_a_float64_one_is_rewritten(dtype, fmod):
    """float64 Mod with fmod=0 was refused at load (libm's fmod is not linked); it is now an exact
    long division (legalize/exact_mod.py, tested in test_legalize_exact_mod.py)."""
    from aot.frontend.legalize.unlowerable import unlowerable_nodes

    assert unlowerable_nodes(_mod(dtype, fmod)) == []
    assert legalize(_mod(dtype, fmod))[0].modified is (dtype == T.DOUBLE)


@pytest.mark.parametrize("pads", [[0, 0, 1, 1, 0, 0, 1, 1], [0, 1, 0, 3, 0, 0, 2, 0], [0, 0, 4, 5, 0, 0, 4, 5]])
@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_a_wrap_pad_is_slices_concatenated_around_the_input(pads, dtype):
    x = np.arange(60).reshape(1, 3, 4, 5).astype(dtype)
    out = tuple(n + pads[i] + pads[4 + i] for i, n in enumerate(x.shape))
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")
    model = _model(node, {"x": x}, out, _DTYPES[x.dtype], [numpy_helper.from_array(np.array(pads, np.int64), "pads")],
                   opset=19)
    _legalized_matches(model, {"x": x})


def test_a_wrap_pad_longer_than_its_axis_is_left_alone():
    x = np.zeros((2, 3), np.float32)
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")
    model = _model(node, {"x": x}, (2, 10), T.FLOAT, [numpy_helper.from_array(np.array([0, 4, 0, 3], np.int64), "pads")],
                   opset=19)
    assert legalize(model)[0].changed == 0


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32])
def test_a_signed_shift_out_of_range_gives_the_defined_result(direction, dtype):
    width = 8 * np.dtype(dtype).itemsize
    x = np.array([-8, 4, -1, 5, -128, 3], dtype)
    s = np.array([-1, width, width + 3, 1, 2, 0], dtype)
    node = helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction)
    model = _model(node, {"x": x, "s": s}, x.shape, _DTYPES[np.dtype(dtype)], opset=26)
    result, tally = legalize(model)
    assert [t.op_type for t in tally] == ["BitShift"]
    got = ReferenceEvaluator(result.model).run(None, {"x": x, "s": s})[0]
    in_range = np.clip(s, 0, width - 1)
    shifted = (x.astype(np.int64) << in_range) if direction == "LEFT" else (x.astype(np.int64) >> in_range)
    emptied = np.zeros_like(x) if direction == "LEFT" else np.where(x < 0, -1, 0)
    want = np.where((s < 0) | (s >= width), emptied, shifted.astype(dtype))
    assert_close(got, want.astype(dtype))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_a_compress_with_a_constant_condition_is_a_gather(axis):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    condition = np.array([1, 0, 1, 1, 0], bool)[: (x.size if axis is None else x.shape[axis])]
    want = np.compress(condition, x, axis=axis)
    node = helper.make_node("Compress", ["x", "c"], ["y"], **({} if axis is None else {"axis": axis}))
    model = _model(node, {"x": x}, want.shape, T.FLOAT, [numpy_helper.from_array(condition, "c")], opset=11)
    _legalized_matches(model, {"x": x})
