"""1-D convolutions with few output positions as one matmul over their input windows.

Silero-VAD's STFT is a Conv of 258 filters 256 taps long over 4 windows, then three 3-tap
Convs over 129, 128 and 64 channels with 1-4 outputs each. IREE 3.13's CPU convolution code
tiles along the output positions, of which there are 4: the STFT alone ran at 5 GFLOP/s, 99 of
the model's 223 us, and the convolutions were 94% of its dispatch time (`aot profile`). Each
window is a contiguous slice, so the same products are

    y[n, :, l] = W.reshape(O, C*K) @ x[n, :, l*s : l*s + K].reshape(C*K)

for every output position ``l``: a Slice per position, one Concat and one MatMul.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.conv_rewrite import Constants, Replacement, StaticShapes, conv_operands, rewrite_each
from aot.frontend.passes import PassResult

MAX_POSITIONS = 8   # one Slice node per output position; longer outputs suit IREE's own tiling


def decompose_short_conv1ds(model: onnx.ModelProto) -> PassResult:
    """Pass: rewrite each 1-D Conv with constant weights and few outputs; count them."""
    return rewrite_each(model, _rewrite)


def _rewrite(node: onnx.NodeProto, shapes: StaticShapes, consts: Constants) -> Replacement | None:
    """The windows and matmul replacing ``node`` when it is a 1-D Conv this pass handles."""
    ops = conv_operands(node, shapes, consts, "Conv", 3)
    if ops is None:
        return None
    attrs, x, w = ops.attrs, ops.x, ops.w
    if (w.shape[1] != x[1] or w.shape[2] < 2 or attrs.get("group", 1) != 1
            or any(d != 1 for d in attrs.get("dilations", (1,)))
            or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"", "NOTSET")):
        return None
    (stride,), pads = attrs.get("strides", (1,)), tuple(attrs.get("pads", (0, 0)))
    positions = (x[2] + sum(pads) - w.shape[2]) // stride + 1
    if not 0 < positions <= MAX_POSITIONS:
        return None
    return _decompose(node, w, ops.b, stride, pads, x, positions)


def _decompose(node: onnx.NodeProto, w: np.ndarray, b: np.ndarray | None, stride: int, pads: tuple[int, ...],
               x: tuple[int, ...], positions: int) -> Replacement:
    p = f"{node.name}.windows"
    (n, c, _), (o, _, k) = x, w.shape
    inits = [numpy_helper.from_array(np.ascontiguousarray(w.reshape(o, c * k).T), f"{p}.w"),
             numpy_helper.from_array(np.array([2], np.int64), f"{p}.axis"),
             numpy_helper.from_array(np.array([n, 1, c * k], np.int64), f"{p}.row")]
    nodes: list[onnx.NodeProto] = []
    source = node.input[0]
    if any(pads):
        inits.append(numpy_helper.from_array(np.array([0, 0, pads[0], 0, 0, pads[1]], np.int64), f"{p}.pads"))
        nodes.append(helper.make_node("Pad", [source, f"{p}.pads"], [f"{p}.padded"], name=f"{p}.pad"))
        source = f"{p}.padded"
    rows: list[str] = []
    for pos in range(positions):
        q = f"{p}.{pos}"
        inits += [numpy_helper.from_array(np.array([pos * stride], np.int64), f"{q}.start"),
                  numpy_helper.from_array(np.array([pos * stride + k], np.int64), f"{q}.end")]
        nodes += [helper.make_node("Slice", [source, f"{q}.start", f"{q}.end", f"{p}.axis"], [f"{q}.window"],
                                   name=f"{q}.slice"),
                  helper.make_node("Reshape", [f"{q}.window", f"{p}.row"], [f"{q}.row"], name=f"{q}.flatten")]
        rows.append(f"{q}.row")
    product = f"{p}.product"
    nodes += [helper.make_node("Concat", rows, [f"{p}.rows"], name=f"{p}.stack", axis=1),
              helper.make_node("MatMul", [f"{p}.rows", f"{p}.w"], [f"{p}.mm"], name=f"{p}.matmul"),
              helper.make_node("Transpose", [f"{p}.mm"], [product if b is not None else node.output[0]],
                               name=f"{p}.channels_first", perm=[0, 2, 1])]
    if b is not None:
        inits.append(numpy_helper.from_array(b.astype(np.float32).reshape(1, o, 1), f"{p}.bias"))
        nodes.append(helper.make_node("Add", [product, f"{p}.bias"], [node.output[0]], name=f"{p}.add_bias"))
    return nodes, inits
