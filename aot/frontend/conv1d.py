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

from aot.frontend.fold import static_shapes
from aot.frontend.passes import PassResult, rewrite_result

MAX_POSITIONS = 8   # one Slice node per output position; longer outputs suit IREE's own tiling


def decompose_short_conv1ds(model: onnx.ModelProto) -> PassResult:
    """Pass: rewrite each 1-D Conv with constant weights and few outputs; count them."""
    g = model.graph
    shapes = static_shapes(g)
    consts = {t.name: t for t in g.initializer}
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    changed = 0
    for node in g.node:
        plan = _short_conv1d(node, shapes, consts)
        if plan is None:
            nodes.append(node)
            continue
        new_nodes, new_inits = _decompose(node, *plan)
        nodes += new_nodes
        inits += new_inits
        changed += 1
    return rewrite_result(model, nodes, inits, changed)


def _short_conv1d(node: onnx.NodeProto, shapes, consts):
    """(weights, bias, stride, pads, input shape, positions) when this pass handles ``node``."""
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    x = shapes.get(node.input[0])
    weight = consts.get(node.input[1])
    has_bias = len(node.input) > 2 and bool(node.input[2])
    bias = consts.get(node.input[2]) if has_bias else None
    if x is None or len(x) != 3 or weight is None or (has_bias and bias is None):
        return None
    w = numpy_helper.to_array(weight)
    if (w.dtype != np.float32 or w.ndim != 3 or w.shape[1] != x[1] or w.shape[2] < 2 or attrs.get("group", 1) != 1
            or any(d != 1 for d in attrs.get("dilations", (1,)))
            or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"", "NOTSET")):
        return None
    (stride,), pads = attrs.get("strides", (1,)), tuple(attrs.get("pads", (0, 0)))
    positions = (x[2] + sum(pads) - w.shape[2]) // stride + 1
    if not 0 < positions <= MAX_POSITIONS:
        return None
    b = numpy_helper.to_array(bias) if bias is not None else None
    return w, b, stride, pads, x, positions


def _decompose(node, w, b, stride, pads, x, positions):
    p = f"{node.name}.windows"
    (n, c, _), (o, _, k) = x, w.shape
    inits = [numpy_helper.from_array(np.ascontiguousarray(w.reshape(o, c * k).T), f"{p}.w"),
             numpy_helper.from_array(np.array([2], np.int64), f"{p}.axis"),
             numpy_helper.from_array(np.array([n, 1, c * k], np.int64), f"{p}.row")]
    nodes = []
    source = node.input[0]
    if any(pads):
        inits.append(numpy_helper.from_array(np.array([0, 0, pads[0], 0, 0, pads[1]], np.int64), f"{p}.pads"))
        nodes.append(helper.make_node("Pad", [source, f"{p}.pads"], [f"{p}.padded"], name=f"{p}.pad"))
        source = f"{p}.padded"
    rows = []
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
