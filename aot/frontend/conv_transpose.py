"""Non-overlapping transposed convolutions as one matmul and a pixel shuffle.

IREE 3.13 lowers a ConvTranspose as a convolution over the input with zeros inserted between its
pixels: for PP-OCR-det's 2x2 stride-2 upsampling head that is a transpose of the dilated 321x321
input (1.35 ms) and a convolution that is three quarters multiplications by zero (3.1 ms), a
sixth of the detector's CPU time (`aot profile`, docs/performance.md). When the kernel equals
the stride and nothing pads, each output pixel takes exactly one tap, so the operator is a
channel matmul followed by a reshuffle of pixels:

    y[n, o, s*h + i, t*w + j] = sum_c x[n, c, h, w] * W[c, o, i, j] (+ b[o])

i.e. Transpose(NCHW -> NHWC) . MatMul(C x O*kh*kw) . Reshape . Transpose . Reshape, which IREE
compiles as one well-tiled matmul and a copy. The sum over ``c`` is the one the convolution adds.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.conv_rewrite import Constants, Replacement, StaticShapes, conv_operands, rewrite_each
from aot.frontend.passes import PassResult


def decompose_strided_conv_transposes(model: onnx.ModelProto) -> PassResult:
    """Pass: rewrite each 2-D ConvTranspose whose kernel equals its stride; count them."""
    return rewrite_each(model, _rewrite)


def _rewrite(node: onnx.NodeProto, shapes: StaticShapes, consts: Constants) -> Replacement | None:
    """The matmul and shuffle replacing ``node`` when it is a ConvTranspose this pass handles."""
    ops = conv_operands(node, shapes, consts, "ConvTranspose", 4)
    if ops is None:
        return None
    attrs, x, w = ops.attrs, ops.x, ops.w
    kernel = tuple(w.shape[2:])
    if (w.shape[0] != x[1] or attrs.get("group", 1) != 1
            or tuple(attrs.get("strides", (1, 1))) != kernel or kernel == (1, 1)
            or any(d != 1 for d in attrs.get("dilations", (1, 1)))
            or any(attrs.get("pads", (0, 0, 0, 0))) or any(attrs.get("output_padding", (0, 0)))
            or "output_shape" in attrs
            or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", b"", "NOTSET", "VALID")):
        return None
    return _decompose(node, w, ops.b, x)


def _decompose(node: onnx.NodeProto, w: np.ndarray, b: np.ndarray | None, x: tuple[int, ...]) -> Replacement:
    p = f"{node.name}.shuffle"
    n, c, h, width = x
    o, (kh, kw) = w.shape[1], w.shape[2:]
    shape = lambda name, dims: numpy_helper.from_array(np.array(dims, np.int64), f"{p}.{name}")  # noqa: E731
    inits = [numpy_helper.from_array(np.ascontiguousarray(w.reshape(c, o * kh * kw)), f"{p}.w"),
             shape("taps", (n, h, width, o, kh, kw)), shape("merged", (n, o, h * kh, width * kw))]
    shuffled = f"{p}.unbiased" if b is not None else node.output[0]
    nodes = [helper.make_node("Transpose", [node.input[0]], [f"{p}.nhwc"], name=f"{p}.nhwc", perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", [f"{p}.nhwc", f"{p}.w"], [f"{p}.mm"], name=f"{p}.matmul"),
             helper.make_node("Reshape", [f"{p}.mm", f"{p}.taps"], [f"{p}.taps6"], name=f"{p}.split"),
             helper.make_node("Transpose", [f"{p}.taps6"], [f"{p}.interleaved"], name=f"{p}.interleave",
                              perm=[0, 3, 1, 4, 2, 5]),
             helper.make_node("Reshape", [f"{p}.interleaved", f"{p}.merged"], [shuffled], name=f"{p}.merge")]
    if b is not None:
        inits.append(numpy_helper.from_array(b.astype(np.float32).reshape(1, o, 1, 1), f"{p}.bias"))
        nodes.append(helper.make_node("Add", [shuffled, f"{p}.bias"], [node.output[0]], name=f"{p}.add_bias"))
    return nodes, inits
