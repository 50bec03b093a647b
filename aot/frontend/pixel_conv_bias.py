"""The bias of a convolution that outputs one pixel, added after it instead of inside it.

Squeeze-excitation blocks (MobileNetV3, PP-LCNet, PP-OCRv4's detector neck) pool a feature map to
one pixel and run two 1x1 Convs over it. With im2col (a default llvm-cpu flag, 2x on ordinary
convolutions) such a Conv becomes a matmul whose accumulator starts as the bias; over one pixel
IREE 3.13 folds that broadcast into a constant, and when no elementwise op fuses after the matmul
its CPU code copies the constant outside the workgroup loop and fails ("write affecting operations
on global resources are restricted to workgroup distributed contexts"). The region was then
compiled again without any optimisation flag (``lower/compile.py``), losing im2col for every
convolution in it: PP-OCRv4-det's default build ran without it. With the bias as an ``Add`` the
matmul starts from zeros and the Add is an ordinary elementwise op: the same sums, no fold.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.conv_rewrite import Constants, Replacement, StaticShapes, conv_operands, rewrite_each
from aot.frontend.passes import PassResult


def split_pixel_conv_biases(model: onnx.ModelProto) -> PassResult:
    """Pass: move the bias of every 2-D Conv whose output is one pixel into an Add; count them."""
    return rewrite_each(model, _rewrite)


def _rewrite(node: onnx.NodeProto, shapes: StaticShapes, consts: Constants) -> Replacement | None:
    ops = conv_operands(node, shapes, consts, "Conv", 4)
    if ops is None or ops.b is None:
        return None
    out = shapes.get(node.output[0])
    if out is None or len(out) != 4 or out[2:] != (1, 1):
        return None
    p = f"{node.name}.bias_after"
    conv = helper.make_node("Conv", list(node.input[:2]), [f"{p}.product"], name=node.name, **ops.attrs)
    bias = numpy_helper.from_array(ops.b.astype(np.float32).reshape(1, -1, 1, 1), f"{p}.bias")
    add = helper.make_node("Add", [f"{p}.product", bias.name], [node.output[0]], name=f"{p}.add")
    return [conv, add], [bias]
