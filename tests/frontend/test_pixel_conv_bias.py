"""A Conv with a one-pixel output and a bias becomes a bias-free Conv and an Add with the same
values; other convolutions are left alone; and the squeeze-excitation block that made IREE 3.13's
im2col fail compiles with the default flags again."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks import reference
from aot.checks.compare import assert_close
from aot.frontend.pixel_conv_bias import split_pixel_conv_biases
from conftest import onnx_model


def _se_block(size: int = 20, bias: bool = True, pooled: bool = True) -> onnx.ModelProto:
    """PP-OCRv4-det's neck: a 3x3 conv, then x + x * hardsigmoid(conv(relu(conv(pool(x)))))."""
    rng = np.random.default_rng(0)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    inits = [init("w", 24, 96, 3, 3), init("w1", 6, 24, 1, 1), init("b1", 6), init("w2", 24, 6, 1, 1), init("b2", 24)]
    squeeze = ["GlobalAveragePool"] if pooled else ["Identity"]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node(squeeze[0], ["c"], ["g"], name="squeeze"),
             helper.make_node("Conv", ["g", "w1", *(["b1"] if bias else [])], ["g1"], name="reduce", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["g1"], ["g2"], name="relu"),
             helper.make_node("Conv", ["g2", "w2", *(["b2"] if bias else [])], ["g3"], name="expand", kernel_shape=[1, 1]),
             helper.make_node("HardSigmoid", ["g3"], ["g4"], name="gate", alpha=0.2, beta=0.5),
             helper.make_node("Mul", ["c", "g4"], ["m"], name="scale"),
             helper.make_node("Add", ["c", "m"], ["y"], name="residual")]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 96, size, size])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, size, size])], inits)
    return onnx.shape_inference.infer_shapes(model)


def test_the_excitation_convs_lose_their_bias_to_an_add_with_the_same_values():
    model = _se_block()
    result = split_pixel_conv_biases(model)
    assert result.changed == 2                      # the two 1x1 convs over the pooled pixel; not the 3x3
    convs = {n.name: list(n.input) for n in result.model.graph.node if n.op_type == "Conv"}
    assert convs == {"conv": ["x", "w"], "reduce": ["g", "w1"], "expand": ["g2", "w2"]}
    assert [n.name for n in result.model.graph.node if n.op_type == "Add"] == \
        ["reduce.bias_after.add", "expand.bias_after.add", "residual"]
    x = np.random.default_rng(1).standard_normal((1, 96, 20, 20)).astype(np.float32)
    want = reference.session(model.SerializeToString()).run(None, {"x": x})[0]
    got = reference.session(result.model.SerializeToString(), optimize=False).run(None, {"x": x})[0]
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", [_se_block(bias=False), _se_block(pooled=False)], ids=["no-bias", "not-one-pixel"])
def test_other_convolutions_are_left_alone(model):
    result = split_pixel_conv_biases(model)
    assert result.changed == 0 and result.model is model


@pytest.mark.device    # compiles with IREE
def test_the_excitation_block_compiles_with_the_default_flags_on_the_cpu(tmp_path):
    """Without the rewrite IREE 3.13's im2col failed on the second excitation conv and the region
    was compiled again without any optimisation flag (lower/compile.py)."""
    from aot import api
    from aot.lower.flags import Holds, default_opt_flags
    from aot.options import BuildOptions

    path = tmp_path / "se.onnx"
    onnx.save(_se_block(), str(path))
    options = BuildOptions(accel=None)
    result = api.build(path, tmp_path / "out", options)
    manifest = json.loads((result.bundle.path / "manifest.json").read_text())
    assert [r.get("flags") for r in manifest["regions"]] == [list(default_opt_flags(options.host, Holds(convolution=True)))]
    x = np.random.default_rng(1).standard_normal((1, 96, 20, 20)).astype(np.float32)
    from aot import runtime

    with runtime.load(result.bundle.path) as b:
        got = b.run({"x": x})[0]
    want = reference.session(_se_block().SerializeToString()).run(None, {"x": x})[0]
    assert_close(got, want, rtol=1e-4, atol=1e-4)
