"""A spatial convolution with one output channel as a depthwise convolution and a channel sum.

IREE 3.13's CPU convolution code vectorises along the output channels; with one output channel
there is nothing to vectorise along, and such a convolution runs at 4-10 GFLOP/s (Basic Pitch's
pitch and contour heads: 32 channels with a 7x3 kernel, 8 with 5x5, 33 with 3x3, over 172-264
frequency bins: 1-2 ms each, a third of the model). The same sums are

    y[n, 0] = b + sum_c conv(x[n, c], w[0, c])

one depthwise convolution (``group`` = the input channels, each channel with its own kernel),
which IREE vectorises along the channels and the width, then a ReduceSum over the channels.
Measured alone against the convolution (docs/performance.md, stop 55): 1.75-5.8x faster over 8-48
channels with 3x3 to 7x3 kernels. A 1x1 kernel is excluded: that convolution is a matrix-vector
product IREE already runs faster than onnxruntime, and the rewrite made it 1.8-2x slower.
These convolutions met ``lower/direct_conv.py``'s rule before (a direct convolution instead of
im2col, 5.9x im2col on 32 -> 1 over 7x7); the figures above are against that direct form.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.conv_rewrite import Constants, Replacement, StaticShapes, conv_operands, rewrite_each
from aot.frontend.passes import PassResult


def split_single_output_convs(model: onnx.ModelProto) -> PassResult:
    """Pass: rewrite each ungrouped Conv with one output channel, several input channels and a
    kernel of more than one tap; count them."""
    return rewrite_each(model, _rewrite)


def _rewrite(node: onnx.NodeProto, shapes: StaticShapes, consts: Constants) -> Replacement | None:
    ops = conv_operands(node, shapes, consts, "Conv")
    if ops is None:
        return None
    x = ops.x
    w, channels = ops.w, x[1]
    if (w.shape[0] != 1 or ops.attrs.get("group", 1) != 1 or channels < 2 or w.shape[1] != channels
            or math.prod(w.shape[2:]) < 2):
        return None
    p = f"{node.name}.per_channel"
    summed = f"{p}.sum" if ops.b is not None else node.output[0]
    inits = [numpy_helper.from_array(np.ascontiguousarray(w.reshape(channels, 1, *w.shape[2:])), f"{p}.w"),
             numpy_helper.from_array(np.array([1], np.int64), f"{p}.axis")]
    nodes = [helper.make_node("Conv", [node.input[0], f"{p}.w"], [f"{p}.taps"], name=node.name,
                              **{**ops.attrs, "group": channels}),
             helper.make_node("ReduceSum", [f"{p}.taps", f"{p}.axis"], [summed], name=f"{p}.reduce", keepdims=1)]
    if ops.b is not None:
        inits.append(numpy_helper.from_array(ops.b.astype(np.float32).reshape(1, 1, *[1] * (len(x) - 2)), f"{p}.bias"))
        nodes.append(helper.make_node("Add", [summed, f"{p}.bias"], [node.output[0]], name=f"{p}.add_bias"))
    return nodes, inits
