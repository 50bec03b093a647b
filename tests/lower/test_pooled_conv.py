"""lower/pooled_conv.py: a max pooling of a convolution over few input channels (and of its
activation) becomes one elementwise generic in data-tiled-conv modules; anything else is left to
the other rewrites; a build gives onnxruntime's values."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from aot.lower import depthwise, packed_conv, pooled_conv
from aot.lower.flags import DATA_TILED_CONV
from aot.lower.importer import import_onnx
from aot.runtime.target import Target
from conftest import onnx_model


def _layer(cin: int = 1, cout: int = 8, size: tuple[int, int] = (20, 16), activation: str | None = "Relu",
           conv: dict | None = None, pool: dict | None = None, also_read: bool = False, seed: int = 0) -> onnx.ModelProto:
    """x -> Conv (3x3, padded) -> activation -> MaxPool (2x2, stride 2) -> y; ``also_read``: the
    activation is an output of its own too."""
    rng = np.random.default_rng(seed)
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], **(conv or {})}
    w_shape = (cout, cin // conv.get("group", 1), *conv["kernel_shape"])
    inits = [numpy_helper.from_array((rng.standard_normal(w_shape) / 3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **conv)]
    pooled = "c"
    if activation == "PRelu":
        inits.append(numpy_helper.from_array(rng.uniform(-0.5, 0.5, (cout, 1, 1)).astype(np.float32), "slope"))
        nodes.append(helper.make_node("PRelu", ["c", "slope"], ["a"], name="act"))
        pooled = "a"
    elif activation is not None:
        attrs = {"alpha": 0.2} if activation == "LeakyRelu" else {}
        nodes.append(helper.make_node(activation, ["c"], ["a"], name="act", **attrs))
        pooled = "a"
    nodes.append(helper.make_node("MaxPool", [pooled], ["y"], name="pool",
                                  **{"kernel_shape": [2, 2], "strides": [2, 2], **(pool or {})}))
    outputs = ["y", pooled] if also_read else ["y"]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, *size])],
                       [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], inits)
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize(("model", "fused"), [
    (_layer(), True),                                                     # DNSMOS P.808's first layer
    (_layer(activation="LeakyRelu", cin=3), True),                        # AECMOS's
    (_layer(activation="PRelu", cin=3, conv={"kernel_shape": [3, 3], "pads": [0, 0, 0, 0]}), True),   # MTCNN's
    (_layer(activation=None), True),                                      # pooled as it is
    (_layer(pool={"kernel_shape": [3, 3], "strides": [2, 2]}, size=(21, 17)), True),   # overlapping windows
    (_layer(cin=8), False),                                               # channels fill the NCHWc blocks
    (_layer(activation="Sigmoid"), False),                                # no activation this knows
    (_layer(conv={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}), False),
    (_layer(cin=2, conv={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 2}, cout=8), False),
    (_layer(also_read=True), False),                                      # the activation is read again
    (_layer(pool={"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]}), False),
    (_layer(pool={"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, size=(21, 17)), False),  # past the edge
    (_layer(cin=3, pool={"kernel_shape": [3, 3], "strides": [2, 2]}, size=(21, 17)), False),  # 75 reads a value
], ids=["relu", "leaky-relu", "prelu", "none", "3x3-pool", "8-channels", "sigmoid", "strided", "grouped",
        "read-again", "padded-pool", "ceil-past-edge", "too-many-reads"])
def test_only_a_pooled_convolution_over_few_channels_is_fused(model, fused, tmp_path):
    mlir = import_onnx(model, "m", tmp_path, tmp_path / "w.irpa").mlir
    text, (count,) = depthwise.rewrite_ops(mlir, pooled_conv.fused_body)
    assert count == int(fused)
    # fused: the convolution, its activation and the pooling are gone, one generic in their place
    assert ('"onnx.MaxPool"' in text) != fused and ('"onnx.Conv"' in text) != fused
    assert ("linalg.generic" in text) == fused


def test_a_data_tiled_conv_module_gets_the_fusion_before_the_convolutions_own_rewrite(tmp_path):
    """Alone, the first layer's convolution is a product over its taps (``shifted_body``); with
    its pooling it is the fusion, and nothing of the product is left; with an activation read by
    more than the pooling, the unpooled fusion, and the pooling apart."""
    size = dict(cout=32, size=(120, 96))   # a product large enough to pay for packing
    mlir = import_onnx(_layer(**size), "m", tmp_path, tmp_path / "w.irpa").mlir.encode()
    text = packed_conv.module_text(Target.host(), mlir, DATA_TILED_CONV).decode()
    assert "linalg.matmul" not in text and '"onnx.MaxPool"' not in text and text.count("linalg.generic") == 1
    alone = import_onnx(_layer(activation=None, also_read=True, **size), "m", tmp_path, tmp_path / "w2.irpa").mlir.encode()
    assert "linalg.matmul" in packed_conv.module_text(Target.host(), alone, DATA_TILED_CONV).decode()
    read_again = import_onnx(_layer(also_read=True, **size), "m", tmp_path, tmp_path / "w3.irpa").mlir.encode()
    text = packed_conv.module_text(Target.host(), read_again, DATA_TILED_CONV).decode()
    assert "linalg.matmul" not in text and '"onnx.Conv"' not in text and '"onnx.MaxPool"' not in text


def _stack() -> onnx.ModelProto:
    """Four fused layers one after the other, over signed values: Relu, then PRelu unpooled (3
    channels, 1 x 3), then LeakyRelu, then PRelu with slopes of both signs (a maximum taken after
    PRelu differs from one before it), unpadded with overlapping 3x3 windows at the end."""
    rng = np.random.default_rng(3)
    nodes, inits, x = [], [], "x"
    for i, (cin, cout, act, pool) in enumerate(((1, 3, "Relu", [2, 2]), (3, 2, "PRelu", None),
                                                (2, 1, "LeakyRelu", [2, 2]), (1, 6, "PRelu", [3, 3]))):
        kernel = [1, 3] if pool is None else [3, 3]
        w = (rng.standard_normal((cout, cin, *kernel)) / 3).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), f"b{i}")]
        pads = [0, 1, 0, 1] if pool is None else [1, 1, 1, 1] if i < 3 else [0, 0, 0, 0]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=kernel, pads=pads))
        if act == "PRelu":
            inits.append(numpy_helper.from_array(rng.uniform(-1, 1, (cout, 1, 1)).astype(np.float32), f"s{i}"))
            nodes.append(helper.make_node("PRelu", [f"c{i}", f"s{i}"], [f"a{i}"]))
        else:
            nodes.append(helper.make_node(act, [f"c{i}"], [f"a{i}"], **({"alpha": 0.3} if act == "LeakyRelu" else {})))
        x = f"a{i}"
        if pool is not None:
            nodes.append(helper.make_node("MaxPool", [x], [f"p{i}"], kernel_shape=pool, strides=[2, 2]))
            x = f"p{i}"
    nodes[-1].output[0] = "y"
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 62, 46])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.device
def test_fused_layers_give_onnxruntimes_values(tmp_path):
    from aot import api, runtime
    from aot.checks import reference
    from aot.options import BuildOptions

    path = tmp_path / "stack.onnx"
    onnx.save(_stack(), path)
    built = api.build(path, tmp_path / "out", BuildOptions(accel=None))
    (entry,) = built.bundle.manifest.regions
    assert tuple(entry.flags) == DATA_TILED_CONV             # the default for a convolution region
    text = (built.bundle.path.parent / "build" / "regions" / "built" / "r0.mlir").read_bytes()
    compiled = packed_conv.module_text(Target.host(), text, DATA_TILED_CONV).decode()
    assert '"onnx.MaxPool"' not in compiled and '"onnx.Conv"' not in compiled   # the four fused
    x = np.random.default_rng(1).standard_normal((1, 1, 62, 46)).astype(np.float32)
    want = reference.session(path).run(None, {"x": x})[0]
    with runtime.load(built.bundle.path) as session:
        got = session.run({"x": x})[0]
    assert got.shape == want.shape == (1, 6, 6, 4) and np.isfinite(got).all() and np.abs(got).max() > 0.1
    assert_close(got, want, rtol=1e-4, atol=1e-4)


def _unpooled(cin: int = 1, cout: int = 16, activation: str = "Relu", also_read: bool = False,
              conv: dict | None = None) -> onnx.ModelProto:
    """x -> Conv (3x3, padded) -> activation -> y, no pooling after (DNSMOS P.835's first layer);
    ``also_read``: the convolution is an output of its own too."""
    model = _layer(cin=cin, cout=cout, activation=activation, conv=conv, pool={"kernel_shape": [1, 1], "strides": [1, 1]})
    graph = model.graph
    pool = next(n for n in graph.node if n.op_type == "MaxPool")
    graph.node.remove(pool)
    graph.output[0].name = "a"
    if also_read:
        graph.output.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize(("model", "fused"), [
    (_unpooled(), True),                                                  # DNSMOS P.835's first layer
    (_unpooled(activation="LeakyRelu"), True),
    (_unpooled(activation="PRelu"), True),
    (_unpooled(activation="PRelu", cin=3), False),                        # MTCNN-RNet's and ONet's: 27 taps
    (_unpooled(cin=8), False),                                            # channels fill the NCHWc blocks
    (_unpooled(activation="Sigmoid"), False),
    (_unpooled(also_read=True), False),                                   # the convolution is read again
    (_unpooled(conv={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}), False),
    (_unpooled(cin=2, conv={"kernel_shape": [1, 3], "pads": [0, 1, 0, 1]}), True),   # 6 taps
], ids=["relu", "leaky-relu", "prelu", "27-taps", "8-channels", "sigmoid", "read-again", "strided", "6-taps"])
def test_an_unpooled_activation_of_such_a_convolution_is_fused(model, fused, tmp_path):
    mlir = import_onnx(model, "m", tmp_path, tmp_path / "w.irpa").mlir
    text, (count,) = depthwise.rewrite_ops(mlir, pooled_conv.activated_body)
    assert count == int(fused)
    assert ('"onnx.Conv"' in text) != fused and ("linalg.generic" in text) == fused


def test_a_pooled_activation_is_fused_with_its_pooling_not_alone(tmp_path):
    """The pooled fusion's walk goes first: the activation it takes is not fused alone before it
    (which would leave the pooling reading the whole activated output)."""
    mlir = import_onnx(_layer(cout=32, size=(120, 96)), "m", tmp_path, tmp_path / "w.irpa").mlir
    _, counts = depthwise.rewrite_ops_in_turn(mlir, (pooled_conv.fused_body,), (pooled_conv.activated_body,))
    assert counts == (1, 0)
    text = packed_conv.module_text(Target.host(), mlir.encode(), DATA_TILED_CONV).decode()
    assert '"onnx.MaxPool"' not in text and text.count("linalg.generic") == 1


@pytest.mark.parametrize("shape", [[16], [4, 16], []], ids=["vector", "matrix", "scalar"])
def test_an_activation_of_fewer_than_four_dimensions_is_left(shape, tmp_path):
    """Only an image's activation can follow a convolution; any other is left, not misread."""
    model = onnx_model([helper.make_node("Relu", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [])
    mlir = import_onnx(model, "m", tmp_path, tmp_path / "w.irpa").mlir
    text, (count,) = depthwise.rewrite_ops(mlir, pooled_conv.activated_body)
    assert count == 0 and text == mlir


def test_each_input_value_is_used_in_one_run_of_the_generics_body(tmp_path):
    """The body takes the input values in turn, each into every window position's sum it is a tap
    of, so a value is live from its read to its last use (window by window, a 3-channel layer's
    48 values were all live at once: IREE spilled them, 1.7-1.9x slower on AECMOS's layer)."""
    import re

    bodies: list[str] = []

    def kept(op):
        found = pooled_conv.fused_body(op)
        bodies.extend([found.body] if found is not None else [])
        return found

    mlir = import_onnx(_layer(cin=3, activation="LeakyRelu"), "m", tmp_path, tmp_path / "w.irpa").mlir
    depthwise.rewrite_ops(mlir, kept)
    (body,) = bodies
    used = re.findall(r"arith\.mulf %v(\d+_\d+_\d+),", body)
    runs = [v for i, v in enumerate(used) if i == 0 or used[i - 1] != v]
    assert len(used) == 4 * 27 and len(runs) == len(set(runs)) == 48     # 48 values, one run each
