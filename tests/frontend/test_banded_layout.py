"""The banded rewrite's transposes sunk through elementwise ops and cancelled in pairs
(aot/frontend/banded_layout.py): a PESTO-like chain (convolutions, activations, a residual Add) keeps
one transpose in and one out, with the same values; transposes the rewrite did not make, graph
outputs, and values read twice are left where they are."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from aot.frontend.banded_layout import sink_banded_transposes
from aot.frontend.long_filter import long_filters_as_matmuls
from conftest import onnx_model, rewrite_outputs

BATCH, CHANNELS, LENGTH = 4, 8, 50


def _chain(residual: bool = True, extra_output: bool = False) -> onnx.ModelProto:
    """x -> conv(1 -> C, 9 taps) -> LeakyRelu -> conv(C -> C, 9 taps) -> LeakyRelu (+ the first
    activation) -> conv(C -> 3, 1 x 1) -> Relu, over a batch of frames (PESTO's encoder, smaller)."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def conv(name: str, x: str, c_in: int, c_out: int, taps: int) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal((c_out, c_in, taps)) / (c_in * taps) ** 0.5)
                                             .astype(np.float32), f"{name}.w"))
        inits.append(numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32) * 0.1, f"{name}.b"))
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [name], name=name,
                                      kernel_shape=[taps], pads=[taps // 2, taps // 2]))
        return name

    def act(op: str, x: str, name: str, **kw) -> str:
        nodes.append(helper.make_node(op, [x], [name], name=name, **kw))
        return name

    a = act("LeakyRelu", conv("c1", "x", 1, CHANNELS, 9), "a1", alpha=0.3)
    b = act("LeakyRelu", conv("c2", a, CHANNELS, CHANNELS, 9), "a2", alpha=0.3)
    if residual:
        nodes.append(helper.make_node("Add", [b, a], ["res"], name="res"))
        b = "res"
    y = act("Relu", conv("c3", b, CHANNELS, 3, 1), "y")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, 1, LENGTH])
    outs = [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)]
    if extra_output:
        outs.append(helper.make_tensor_value_info("a1", TensorProto.FLOAT, None))
    return onnx.shape_inference.infer_shapes(onnx_model(nodes, [x], outs, inits))


def _transposes(model: onnx.ModelProto) -> int:
    return sum(n.op_type == "Transpose" for n in model.graph.node)


def _reshapes(model: onnx.ModelProto) -> int:
    return sum(n.op_type == "Reshape" for n in model.graph.node)


@pytest.mark.parametrize("residual", [True, False], ids=["residual", "plain"])
def test_a_chain_of_banded_convolutions_stays_channels_last(residual):
    model = _chain(residual)
    banded = long_filters_as_matmuls(model)
    assert banded.changed == 3 and _transposes(banded.model) == 5   # one in (one channel: a Reshape), three out, two in
    inferred = onnx.shape_inference.infer_shapes(banded.model)
    sunk = sink_banded_transposes(inferred)
    assert _transposes(sunk.model) == 1                                # the last one out is left
    assert sunk.changed == 4 + _reshapes(inferred) - _reshapes(sunk.model) and _reshapes(sunk.model) < _reshapes(inferred)
    onnx.checker.check_model(onnx.shape_inference.infer_shapes(sunk.model), full_check=True)
    got, want = rewrite_outputs(model, sunk.model)
    assert got.shape == want.shape == (BATCH, 3, LENGTH)
    assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_value_read_elsewhere_or_a_graph_output_keeps_its_layout():
    model = _chain(residual=False, extra_output=True)     # the first activation is a graph output
    inferred = onnx.shape_inference.infer_shapes(long_filters_as_matmuls(model).model)
    sunk = sink_banded_transposes(inferred)
    assert _transposes(sunk.model) > 1
    got, want = rewrite_outputs(model, sunk.model)
    assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert "a1" in {o for n in sunk.model.graph.node for o in n.output}


def test_transposes_the_rewrite_did_not_make_stay():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="t", perm=[0, 2, 1]),
             helper.make_node("Relu", ["t"], ["r"], name="r"),
             helper.make_node("Transpose", ["r"], ["y"], name="back", perm=[0, 2, 1])]
    model = onnx.shape_inference.infer_shapes(
        onnx_model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]))
    result = sink_banded_transposes(model)
    assert result.changed == 0 and result.model is model


def test_an_identity_reshape_alone_is_dropped_and_the_input_model_is_left_alone():
    """A 1 x 3 convolution over a batch at one output per product row (ICLabel's spectral branches):
    the rewrite's Reshapes of the padded input into rows and of the product out of them change no
    shape, and there is no transpose pair to cancel. The pass drops them in a copy; the model it was given keeps its nodes (a
    rename done in place once left two nodes writing one value, which the checker refused)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((64, 64, 1, 3)) / 14).astype(np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[1, 3], pads=[0, 1, 0, 1])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 64, 1, 20])
    model = onnx_model([conv], [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    banded = onnx.shape_inference.infer_shapes(long_filters_as_matmuls(model).model)
    given = banded.SerializeToString()
    sunk = sink_banded_transposes(banded)
    assert banded.SerializeToString() == given
    assert sunk.changed == 2 and _reshapes(sunk.model) == _reshapes(banded) - 2   # into rows, out of them
    onnx.checker.check_model(onnx.shape_inference.infer_shapes(sunk.model), full_check=True)
    got, want = rewrite_outputs(model, sunk.model)
    assert got.shape == want.shape == (6, 64, 1, 20)
    assert_close(got, want, rtol=1e-4, atol=1e-4)
