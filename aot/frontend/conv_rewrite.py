"""What the CPU convolution rewrites share (``depthwise``, ``conv_transpose``, ``conv1d``): the
node-by-node pass loop, and the operands of a convolution whose weights are constants."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.fold import static_shapes
from aot.frontend.passes import PassResult, rewrite_result

StaticShapes = dict[str, tuple[int, ...]]            # value -> its static shape (fold.static_shapes)
Constants = dict[str, onnx.TensorProto]              # initializer name -> the initializer
Replacement = tuple[list[onnx.NodeProto], list[onnx.TensorProto]]   # the nodes and initializers
# (node, static shapes, constant initializers) -> the nodes and initializers replacing it, or None.
Rewrite = Callable[[onnx.NodeProto, StaticShapes, Constants], "Replacement | None"]


def rewrite_each(model: onnx.ModelProto, rewrite: Rewrite) -> PassResult:
    """Pass: replace every node ``rewrite`` returns a replacement for; count them."""
    g = model.graph
    shapes = static_shapes(g)
    consts = {t.name: t for t in g.initializer}
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    changed = 0
    for node in g.node:
        replacement = rewrite(node, shapes, consts)
        if replacement is None:
            nodes.append(node)
            continue
        nodes += replacement[0]
        inits += replacement[1]
        changed += 1
    return rewrite_result(model, nodes, inits, changed)


@dataclass(frozen=True)
class ConvOperands:
    attrs: dict[str, Any]
    x: tuple[int, ...]          # the input's static shape
    w: np.ndarray               # float32 weights
    b: np.ndarray | None        # bias, if any


def conv_operands(node: onnx.NodeProto, shapes: StaticShapes, consts: Constants, op_type: str,
                  rank: int | None = None) -> ConvOperands | None:
    """The operands of ``node`` when it is an ``op_type`` over a static rank-``rank`` input (any
    rank with a spatial axis when None) with constant float32 weights (and a constant bias, if it
    has one); else None."""
    if node.op_type != op_type or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return None
    x = shapes.get(node.input[0])
    weight = consts.get(node.input[1])
    has_bias = len(node.input) > 2 and bool(node.input[2])
    bias = consts.get(node.input[2]) if has_bias else None
    if x is None or (len(x) != rank if rank else len(x) < 3) or weight is None or (has_bias and bias is None):
        return None
    w = numpy_helper.to_array(weight)
    if w.dtype != np.float32 or w.ndim != len(x):
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return ConvOperands(attrs, tuple(x), w, numpy_helper.to_array(bias) if bias is not None else None)
