"""2-D DeformConv as bilinear gathers and a grouped matmul (frontend/legalize/deform_conv.py),
run by onnxruntime against onnx's reference implementation (where the node tests' outputs come from)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from aot.checks.compare import assert_close
from aot.frontend.legalize import legalize
from conftest import legalized_once


def _model(x, w, out, *, bias=False, mask=False, offset_group=1, **attributes):
    taps = w[2] * w[3]
    shapes = {"x": x, "w": w, "offset": (x[0], offset_group * taps * 2, *out)}
    names = ["x", "w", "offset"]
    if bias or mask:
        names.append("b" if bias else "")      # a mask without a bias leaves the bias out by name
        shapes.update({"b": (w[0],)} if bias else {})
    if mask:
        names.append("mask")
        shapes["mask"] = (x[0], offset_group * taps, *out)
    node = helper.make_node("DeformConv", names, ["y"], name="deform", offset_group=offset_group, **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), shapes


def _feeds(shapes, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    if "offset" in feeds:
        feeds["offset"] *= 1.7      # offsets past the image edge too: those samples are zero
    if "mask" in feeds:
        feeds["mask"] = rng.uniform(0, 1, shapes["mask"]).astype(np.float32)
    return feeds


@pytest.mark.parametrize("x, w, out, options", [
    ((1, 1, 3, 3), (1, 1, 2, 2), (2, 2), {}),                                       # the node tests' shape
    ((2, 4, 6, 7), (6, 4, 3, 3), (6, 7), dict(pads=[1, 1, 1, 1], bias=True)),
    ((1, 4, 7, 8), (4, 2, 3, 3), (4, 4), dict(pads=[1, 1, 1, 1], strides=[2, 2], group=2, mask=True)),
    ((1, 6, 8, 8), (3, 6, 3, 2), (4, 7), dict(dilations=[2, 1], offset_group=3, bias=True, mask=True)),
])
def test_matches_the_reference(x, w, out, options):
    model, shapes = _model(x, w, out, **options)
    feeds = _feeds(shapes)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    # onnxruntime runs the rewrite (the reference's GatherElements takes at most 64 indices per row)
    rewritten = legalized_once(model, "DeformConv").SerializeToString()
    got = ort.InferenceSession(rewritten, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape == (x[0], w[0], *out)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_dynamic_input_is_left_alone():
    node = helper.make_node("DeformConv", ["x", "w", "offset"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 1, "h", 3)),
                                            helper.make_tensor_value_info("w", TensorProto.FLOAT, (1, 1, 2, 2)),
                                            helper.make_tensor_value_info("offset", TensorProto.FLOAT, (1, 8, 2, 2))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    result, tally = legalize(onnx.shape_inference.infer_shapes(model))
    assert not result.modified and tally == ()
