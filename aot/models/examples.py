"""The default model `make model` builds: a small CNN with seeded weights, written with
onnx.helper. Its classifier head ends in TopK, which the support table keeps on the host, so the
default bundle shows an accelerator region and a host region."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aot.frontend.passes import in_topological_order

NAME = "tiny_cnn"
INPUT_SHAPE = (1, 3, 64, 64)


def tiny_cnn(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        data = rng.standard_normal(shape).astype(np.float32) * np.float32(1.0 / np.sqrt(fan_in))
        return numpy_helper.from_array(data, name)

    nodes = [
        helper.make_node("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn1.s", "bn1.b", "bn1.m", "bn1.v"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "conv3.w", "conv3.b"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c3", "p1_proj"], ["s3"], name="residual"),
        helper.make_node("Conv", ["p1", "proj.w"], ["p1_proj"], name="proj"),
        helper.make_node("Relu", ["s3"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["feat"], name="flatten"),
        helper.make_node("Gemm", ["feat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
        helper.make_node("TopK", ["probs", "k"], ["top_probs", "top_classes"], name="top5"),
    ]
    # ONNX wants nodes topologically sorted; "proj" is listed late above to
    # keep the residual readable, so sort here.
    nodes = in_topological_order(nodes)
    inits = [
        weight("conv1.w", (16, 3, 3, 3)), weight("conv1.b", (16,)),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "bn1.s"),
        numpy_helper.from_array(rng.normal(0, 0.1, 16).astype(np.float32), "bn1.b"),
        numpy_helper.from_array(rng.normal(0, 0.1, 16).astype(np.float32), "bn1.m"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "bn1.v"),
        weight("conv2.w", (32, 16, 3, 3)), weight("conv2.b", (32,)),
        weight("conv3.w", (32, 32, 3, 3)), weight("conv3.b", (32,)),
        weight("proj.w", (32, 16, 1, 1)),
        weight("fc.w", (10, 32)), weight("fc.b", (10,)),
        numpy_helper.from_array(np.array([5], dtype=np.int64), "k"),
    ]
    graph = helper.make_graph(
        nodes, NAME,
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10]),
         helper.make_tensor_value_info("top_probs", TensorProto.FLOAT, [1, 5]),
         helper.make_tensor_value_info("top_classes", TensorProto.INT64, [1, 5])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="aot.examples")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def write(path: Path, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(tiny_cnn(seed), str(path))
    return path
