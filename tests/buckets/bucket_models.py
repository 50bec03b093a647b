"""Small ONNX models with symbolic dimensions, seeded weights, for the bucket tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(path: Path, nodes, inputs, outputs, inits) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _weights(rng, name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def batch_cnn(path: Path) -> Path:
    """x[N,3,16,16] -> Conv -> Relu -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> y[N,4]."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1),
    ]
    inits = [_weights(rng, "w1", 8, 3, 3, 3), _weights(rng, "b1", 8), _weights(rng, "w2", 8, 8, 3, 3),
             _weights(rng, "b2", 8), _weights(rng, "w3", 4, 8), _weights(rng, "b3", 4)]
    return _save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], inits)


def per_token(path: Path) -> Path:
    """x[1,S,16] -> MatMul -> Relu -> MatMul -> y[1,S,16]: every position on its own, so padding
    along S is exact."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    return _save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S", 16])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "S", 16])],
                 [_weights(rng, "w1", 16, 16), _weights(rng, "w2", 16, 16)])


def across_tokens(path: Path) -> Path:
    """x[1,S,16] -> MatMul -> Softmax over S -> y[1,S,16]: padded positions take a share of every
    softmax, so padding along S changes the valid part."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Softmax", ["h"], ["y"], axis=1)]
    return _save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S", 16])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "S", 16])], [_weights(rng, "w1", 16, 16)])


def strided(path: Path) -> Path:
    """x[1,4,L] -> Conv1d stride 2 -> y[1,4,L/2]: the output axis is not the input's."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], strides=[2], kernel_shape=[2])]
    return _save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "L"])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, None])], [_weights(rng, "w", 4, 4, 2)])


def batch_sum(path: Path) -> Path:
    """x[N,4] -> Relu -> r[N,4], and ReduceSum over N -> s[4]: s does not follow the batch."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0)]
    return _save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                 [helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", 4]),
                  helper.make_tensor_value_info("s", TensorProto.FLOAT, [4])],
                 [numpy_helper.from_array(np.array([0], np.int64), "axes")])
