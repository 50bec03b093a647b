"""2-D DeformConv as bilinear gathers and a grouped matmul.

IREE 3.13's ONNX import has no pattern for ``onnx.DeformConv`` (0 of the 4 node tests compiled;
until this rewrite ``unlowerable.py`` refused it at plan time).

DeformConv samples the input at each kernel tap's position moved by a learned offset,
``p = (oh * stride - pad_begin + i * dilation + dy, ow * stride - pad_begin + j * dilation + dx)``,
bilinearly with zeros outside the image (the standard's reference: GridSample, align_corners=1,
zero padding), scales each sample by the mask, and convolves the samples with the weights. Here:
- the four neighbours of every position, ``floor(p)`` and ``floor(p) + 1`` per axis, each
  weighted by its bilinear factor and by whether it lies inside the image (a neighbour outside
  adds zero, as GridSample's zero padding does), are gathered (GatherElements over the flattened
  pixels, index clamped into the image) from each offset group's channels;
- the summed, masked samples form the im2col columns ``[N, C * kh * kw, Ho * Wo]`` (channel-major,
  as the weights ``[M, C / group, kh, kw]`` flatten), and one batched MatMul per group
  convolves them; the bias is added last.
Needs 2-D static shapes; else the node is left as it is (and refused at plan time).
"""

from __future__ import annotations

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs, operand


def _geometry(node: onnx.NodeProto, ctx: Context) -> dict[str, tuple[int, ...]] | None:
    x, w, off = ctx.shape(node.input[0]), ctx.shape(node.input[1]), ctx.shape(operand(node, 2))
    if x is None or w is None or off is None or len(x) != 4 or len(w) != 4 or len(off) != 4:
        return None
    a = attrs(node)
    group, offset_group = int(a.get("group", 1)), int(a.get("offset_group", 1))
    kernel = tuple(int(v) for v in a.get("kernel_shape", w[2:]))
    taps = kernel[0] * kernel[1]
    if (x[1] != w[1] * group or w[0] % group or x[1] % offset_group or kernel != tuple(w[2:])
            or off[1] != offset_group * taps * 2 or off[0] != x[0]):
        return None
    mask = ctx.shape(operand(node, 4))
    if operand(node, 4) and mask != (x[0], offset_group * taps, off[2], off[3]):
        return None
    return dict(x=x, w=w, out=off[2:], kernel=kernel, groups=(group, offset_group),
                strides=tuple(int(v) for v in a.get("strides", (1, 1))),
                dilations=tuple(int(v) for v in a.get("dilations", (1, 1))),
                pads=tuple(int(v) for v in a.get("pads", (0, 0, 0, 0))))


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    return ctx.numpy_dtype(node.input[0]) is not None and _geometry(node, ctx) is not None


def _base_positions(g: dict[str, tuple[int, ...]], axis: int) -> np.ndarray:
    """[taps, Ho, 1] (axis 0) or [taps, 1, Wo] (axis 1): where each tap samples before its offset."""
    kh, kw = g["kernel"]
    tap = np.repeat(np.arange(kh), kw) if axis == 0 else np.tile(np.arange(kw), kh)
    out = np.arange(g["out"][axis]) * g["strides"][axis] - g["pads"][axis]
    pos = out[None, :] + tap[:, None] * g["dilations"][axis]
    return pos[:, :, None] if axis == 0 else pos[:, None, :]


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    g, dtype = _geometry(node, ctx), ctx.numpy_dtype(node.input[0])
    if g is None or dtype is None:
        return None
    (n, c, h, w), (m, _, kh, kw), (oh, ow) = g["x"], g["w"], g["out"]
    group, og = g["groups"]
    taps, cg, points = kh * kw, c // og, kh * kw * oh * ow
    e = Emitter(node)
    one, zero = e.const(np.array(1, dtype)), e.const(np.array(0, dtype))
    offsets = e.op("Reshape", [node.input[2], e.ints([n, og, taps, 2, oh, ow])])
    pos = []   # per axis: [N, og, taps, Ho, Wo] sampling positions
    for axis in (0, 1):
        d = e.op("Gather", [offsets, e.const(np.array(axis, np.int64))], axis=3)
        pos.append(e.op("Add", [d, e.const(_base_positions(g, axis).astype(dtype), hint="base")]))
    low = [e.op("Floor", [p]) for p in pos]
    frac = [e.op("Sub", [p, lo]) for p, lo in zip(pos, low)]
    flat_x = e.op("Reshape", [node.input[0], e.ints([n, og, cg, h * w])])
    points_shape = e.ints([n, og, 1, points])
    full = e.ints([n, og, cg, points])
    total = None
    for dy in (0, 1):
        for dx in (0, 1):
            corner, factor, inside = [], None, None
            for axis, (delta, size) in enumerate(((dy, h), (dx, w))):
                at = e.op("Add", [low[axis], e.const(np.array(delta, dtype))]) if delta else low[axis]
                weight = frac[axis] if delta else e.op("Sub", [one, frac[axis]])
                valid = e.op("And", [e.op("GreaterOrEqual", [at, zero]),
                                     e.op("LessOrEqual", [at, e.const(np.array(size - 1, dtype))])])
                factor = weight if factor is None else e.op("Mul", [factor, weight])
                inside = valid if inside is None else e.op("And", [inside, valid])
                corner.append(e.op("Cast", [e.op("Clip", [at, zero, e.const(np.array(size - 1, dtype))])],
                                   to=onnx.TensorProto.INT64))
            assert factor is not None and inside is not None
            index = e.op("Add", [e.op("Mul", [corner[0], e.const(np.array(w, np.int64))]), corner[1]])
            index = e.op("Expand", [e.op("Reshape", [index, points_shape]), full])
            scale = e.op("Where", [inside, factor, zero])
            sample = e.op("Mul", [e.op("GatherElements", [flat_x, index], axis=3),
                                  e.op("Reshape", [scale, points_shape])])
            total = sample if total is None else e.op("Add", [total, sample])
    assert total is not None
    if operand(node, 4):
        total = e.op("Mul", [total, e.op("Reshape", [node.input[4], points_shape])])
    # [N, og, cg, taps*Ho*Wo] -> columns [N, group, (C/group)*taps, Ho*Wo]
    columns = e.op("Reshape", [total, e.ints([n, group, (c // group) * taps, oh * ow])])
    weights = e.op("Reshape", [node.input[1], e.ints([group, m // group, (c // group) * taps])])
    conv = e.op("MatMul", [weights, columns])
    bias = operand(node, 3)
    if bias:
        conv = e.op("Reshape", [conv, e.ints([n, m, oh * ow])])
        conv = e.op("Add", [conv, e.op("Reshape", [bias, e.ints([m, 1])])])
    e.op("Reshape", [conv, e.ints([n, m, oh, ow])], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization("DeformConv", "IREE 3.13 has no pattern for onnx.DeformConv (0 of 4 node tests "
                              "compiled); bilinear GatherElements of each tap's four neighbours and a grouped "
                              "MatMul over the columns", _applies, _rewrite),)
