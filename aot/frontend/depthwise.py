"""Depthwise convolutions as sums of shifted, scaled slices.

A depthwise Conv (``group`` = channels, one filter per channel) does kh*kw multiply-adds per
output: too few for IREE 3.13's convolution code on the CPU, which ran PP-OCRv4's 5x5 depthwise
convolutions at 8.5 GFLOP/s against 126 for a matmul of the same module, half the recognizer's
time (`aot profile`, docs/performance.md). Written as ``sum_ij Slice(x, i, j, strides) * w[:, i, j]``
the same arithmetic is one elementwise dispatch that IREE fuses and vectorises along the width:
PP-OCR-rec's whole model went from 34 to 15.5 ms. Each output is the float32 sum of the same
kh*kw products a direct convolution adds (in row-major tap order).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.conv_rewrite import Constants, Replacement, StaticShapes, conv_operands, rewrite_each
from aot.frontend.passes import PassResult

MIN_TAPS = 9    # 3x3 and up; smaller kernels are cheap either way


def decompose_depthwise_convs(model: onnx.ModelProto) -> PassResult:
    """Pass: rewrite each 2-D depthwise Conv with constant weights; count the Convs rewritten."""
    return rewrite_each(model, _rewrite)


def _rewrite(node: onnx.NodeProto, shapes: StaticShapes, consts: Constants) -> Replacement | None:
    """The slices replacing ``node`` when it is a depthwise Conv this pass handles."""
    ops = conv_operands(node, shapes, consts, "Conv", 4)
    if ops is None:
        return None
    attrs, x, w = ops.attrs, ops.x, ops.w
    channels = x[1]
    if (attrs.get("group", 1) != channels or w.shape[:2] != (channels, 1)
            or w.shape[2] * w.shape[3] < MIN_TAPS or any(d != 1 for d in attrs.get("dilations", (1, 1)))
            or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"", "NOTSET")):
        return None
    return _decompose(node, w, ops.b, tuple(attrs.get("strides", (1, 1))), tuple(attrs.get("pads", (0, 0, 0, 0))), x)


def _decompose(node: onnx.NodeProto, w: np.ndarray, b: np.ndarray | None, strides: tuple[int, ...],
               pads: tuple[int, ...], x: tuple[int, ...]) -> Replacement:
    p = f"{node.name}.dw"
    channels, (kh, kw), (sh, sw) = x[1], w.shape[2:], strides
    height, width = x[2] + pads[0] + pads[2], x[3] + pads[1] + pads[3]
    oh, ow = (height - kh) // sh + 1, (width - kw) // sw + 1
    nodes: list[onnx.NodeProto] = []
    inits = [numpy_helper.from_array(np.array([2, 3], np.int64), f"{p}.axes"),
                        numpy_helper.from_array(np.array([sh, sw], np.int64), f"{p}.steps")]
    source = node.input[0]
    if any(pads):
        inits.append(numpy_helper.from_array(np.array([0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], np.int64),
                                             f"{p}.pads"))
        nodes.append(helper.make_node("Pad", [source, f"{p}.pads"], [f"{p}.padded"], name=f"{p}.pad"))
        source = f"{p}.padded"
    total: str | None = None
    for i in range(kh):
        for j in range(kw):
            q = f"{p}.{i}.{j}"
            inits += [numpy_helper.from_array(np.array([i, j], np.int64), f"{q}.start"),
                      numpy_helper.from_array(np.array([i + sh * (oh - 1) + 1, j + sw * (ow - 1) + 1], np.int64), f"{q}.end"),
                      numpy_helper.from_array(np.ascontiguousarray(w[:, 0, i, j]).reshape(1, channels, 1, 1), f"{q}.w")]
            nodes += [helper.make_node("Slice", [source, f"{q}.start", f"{q}.end", f"{p}.axes", f"{p}.steps"],
                                       [f"{q}.tap"], name=f"{q}.slice"),
                      helper.make_node("Mul", [f"{q}.tap", f"{q}.w"], [f"{q}.prod"], name=f"{q}.mul")]
            if total is not None:
                nodes.append(helper.make_node("Add", [total, f"{q}.prod"], [f"{q}.sum"], name=f"{q}.add"))
            total = f"{q}.sum" if total is not None else f"{q}.prod"
    assert total is not None    # _rewrite takes only kernels of MIN_TAPS taps or more
    if b is not None:
        inits.append(numpy_helper.from_array(b.astype(np.float32).reshape(1, channels, 1, 1), f"{p}.bias"))
        nodes.append(helper.make_node("Add", [total, f"{p}.bias"], [node.output[0]], name=f"{p}.out"))
    else:
        nodes.append(helper.make_node("Identity", [total], [node.output[0]], name=f"{p}.out"))
    return nodes, inits
