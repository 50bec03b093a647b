"""Index-range safety at load time: the interval analysis, each indexing op's status, and the guard
rewrite run through onnxruntime (bit-identical on valid indices, a raised flag on bad ones)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks import reference
from aot.frontend.indices import FLAG_PREFIX, index_safety
from aot.frontend.load import load
from aot.frontend.ranges import integer_ranges
from aot.runtime.manifest import IndexStatus
from conftest import indexing_model, onnx_model

I64 = TensorProto.INT64


def _save(model: onnx.ModelProto, tmp_path, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return path


def test_intervals_follow_constants_inputs_and_arithmetic():
    ranges = integer_ranges(onnx.shape_inference.infer_shapes(indexing_model()))
    assert ranges["ids"] == (np.iinfo(np.int64).min, np.iinfo(np.int64).max)   # an input: its dtype
    assert ranges["clipped"] == (0, 9) and ranges["const_ids"] == (-10, 9) and ranges["three"] == (3, 3)
    # ids + 3 overflows int64 at the top: the sum's interval is int64's again, not a wrong narrow one
    assert ranges["shifted"] == (np.iinfo(np.int64).min, np.iinfo(np.int64).max)


def test_interval_rules_for_casts_mod_and_argmax():
    nodes = [helper.make_node("Cast", ["small"], ["wide"], to=I64),
             helper.make_node("Mod", ["wide", "seven"], ["m"]),
             helper.make_node("ArgMax", ["x"], ["am"], axis=1),
             helper.make_node("Mul", ["m", "wide"], ["prod"])]
    model = onnx_model(nodes, [helper.make_tensor_value_info("small", TensorProto.INT8, [4]),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                   [helper.make_tensor_value_info(n, I64, None) for n in ("m", "am", "prod")],
                   [numpy_helper.from_array(np.array(7, np.int64), "seven")])
    model = onnx.shape_inference.infer_shapes(model)
    ranges = integer_ranges(model)
    assert ranges["wide"] == (-128, 127) and ranges["m"] == (0, 6) and ranges["am"] == (0, 5)
    assert ranges["prod"] == (-768, 762)


def test_each_indexing_op_gets_its_status():
    model = onnx.shape_inference.infer_shapes(indexing_model())
    guarded, ops = index_safety(model)
    status = {op.node: (op.status, op.input, op.dims) for op in ops}
    assert status == {"g_direct": ("checked", "ids", (10,)), "g_computed": ("guarded", None, (10,)),
                      "g_clipped": ("proved", None, (10,)), "g_const": ("proved", None, (10,)),
                      "g_nd": ("checked", "pairs", (3, 5))}
    assert all(type(op.status) is IndexStatus for op in ops)     # an enum that equals its string
    assert [o.name for o in guarded.graph.output][-1] == FLAG_PREFIX + "g_computed"
    unguarded, ops = index_safety(model, guard=False)
    assert unguarded is model and {op.node: op.status for op in ops}["g_computed"] == "unguarded"


def test_guard_is_bit_identical_on_valid_ids_and_flags_bad_ones(tmp_path):
    source = load(_save(indexing_model(), tmp_path))
    assert [o.name for o in source.outputs] == ["direct", "computed", "bounded", "fixed", "picked"]
    plain = reference.session(_save(indexing_model(), tmp_path, "plain.onnx"))
    guarded = reference.session(source.model.SerializeToString())
    flag = FLAG_PREFIX + "g_computed"
    feeds = {"ids": np.array([0, 1, 2, 3, 4, 6], np.int64), "grid": np.ones((3, 5), np.float32),
             "pairs": np.array([[0, 0], [2, 4], [-3, -5], [1, 2]], np.int64)}
    want = plain.run(["computed"], feeds)[0]
    got, count = guarded.run(["computed", flag], feeds)
    assert got.tobytes() == want.tobytes() and int(count) == 0
    feeds["ids"] = np.array([0, 1, 2, 7, 8, -1], np.int64)       # 7+3 and 8+3 are past the table's end
    got, count = guarded.run(["computed", flag], feeds)           # the guarded model reads in range...
    assert int(count) == 2 and np.array_equal(got[3:5], [[0, 1, 2, 3]] * 2)  # ...bad ids replaced by 0
    with pytest.raises(Exception, match="out of"):                 # where onnxruntime alone refuses
        plain.run(["computed"], feeds)
