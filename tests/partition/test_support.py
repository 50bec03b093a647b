"""Known-wrong variants on an accelerator are routed to the host at plan time, with the reason."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from aot.frontend.graph import GraphView
from aot.partition.support import SupportTable


def _view(node: onnx.NodeProto, inputs, output) -> GraphView:
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(*output)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    return GraphView.from_onnx(onnx.shape_inference.infer_shapes(m))


@pytest.mark.parametrize("padding,to_host", [(None, True), ("zeros", True), ("border", False)])
def test_a_zeros_padded_grid_sample_runs_on_the_host_for_vulkan(padding, to_host):
    attrs = {"padding_mode": padding} if padding else {}
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="gs", **attrs)
    view = _view(node, [("x", T.FLOAT, [1, 1, 4, 4]), ("grid", T.FLOAT, [1, 3, 3, 2])], ("y", T.FLOAT, [1, 1, 3, 3]))
    decision = SupportTable.for_target("vulkan-spirv").decide(view.node("gs"), view)
    assert decision.supported is not to_host
    assert ("reads out-of-range taps" in decision.reason) is to_host
    assert SupportTable.for_target("cuda").decide(view.node("gs"), view).supported


def test_matmul_integer_runs_on_the_host_for_vulkan():
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"], name="mmi")
    view = _view(node, [("a", T.UINT8, [2, 3]), ("b", T.UINT8, [3, 2])], ("y", T.INT32, [2, 2]))
    decision = SupportTable.for_target("vulkan-spirv").decide(view.node("mmi"), view)
    assert not decision.supported and "MatMulInteger wrongly" in decision.reason


@pytest.mark.parametrize("dtype,to_host", [(T.INT32, True), (T.FLOAT, False)])
def test_an_integer_matmul_runs_on_the_host_for_vulkan(dtype, to_host):
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    view = _view(node, [("a", dtype, [2, 2, 3]), ("b", dtype, [3, 2])], ("y", dtype, [2, 2, 2]))
    decision = SupportTable.for_target("vulkan-spirv").decide(view.node("mm"), view)
    assert decision.supported is not to_host and ("integer" in decision.reason) is to_host
    assert SupportTable.for_target("cuda").decide(view.node("mm"), view).supported


@pytest.mark.parametrize("op,to_host", [("ReduceSum", True), ("Relu", False)])
def test_a_reduction_of_an_empty_tensor_runs_on_the_host_for_vulkan(op, to_host):
    node = helper.make_node(op, ["x"], ["y"], name="r", **({"keepdims": 1} if op == "ReduceSum" else {}))
    out = [1, 1, 1] if op == "ReduceSum" else [3, 0, 4]
    view = _view(node, [("x", T.FLOAT, [3, 0, 4])], ("y", T.FLOAT, out))
    decision = SupportTable.for_target("vulkan-spirv").decide(view.node("r"), view)
    assert decision.supported is not to_host and ("no elements" in decision.reason) is to_host
    assert SupportTable.for_target("cuda").decide(view.node("r"), view).supported
