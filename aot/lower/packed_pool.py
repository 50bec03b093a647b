"""A max pooling rewritten for the data-tiled-conv set (``lower/packed_conv.py``, whose
``module_text`` applies it with that set's convolution rewrites, under its ``PACKED_CONV_VERSION``:
a change here bumps that version).

The set packs a max pooling like a convolution: its input padded, then packed into blocks of 16
channels, a pass that cost more than the pooling itself (MTCNN-ONet, ResNet-50's stem). Written
as an elementwise maximum of the window's slices (``max_pool_body``), which packs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aot.lower.depthwise import VTENSOR, ints, onnx_attributes, zero_pad
from aot.lower.rewrite_text import dims_text, epilogue, tensor_type, vtensor_type

NEG_INF = "0xFF800000"   # f32 -inf: what a max pooling's padding reads as


@dataclass(frozen=True, slots=True)
class MaxPool:
    """A 2-D ``onnx.MaxPool`` over a static NCHW f32 tensor, without indices or dilation."""

    x: tuple[int, ...]
    y: tuple[int, ...]
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]   # top, left, bottom, right


def max_pool(op: Any) -> MaxPool | None:
    """``op``'s shapes and attributes when it is a MaxPool this rewrite handles: explicit pads or
    VALID, floor or ceil mode (the stated result shape says which windows there are)."""
    attrs = onnx_attributes(op, "MaxPool")
    if attrs is None or len(op.operands) != 1 or len(op.results) != 1:   # a second result: the indices
        return None
    auto_pad = attrs.get("torch.onnx.auto_pad", '"NOTSET"')
    if auto_pad not in ('"NOTSET"', '"VALID"') or ints(attrs.get("torch.onnx.storage_order", "")) not in ([], [0]) \
            or ints(attrs.get("torch.onnx.dilations", "")) not in ([], [1, 1]):
        return None
    found = [VTENSOR.fullmatch(str(v.type)) for v in (op.operands[0], op.results[0])]
    if any(t is None or t[2] != "f32" for t in found):
        return None
    x, y = (tuple(int(d) for d in t[1].split(",")) for t in found if t is not None)
    kernel = ints(attrs.get("torch.onnx.kernel_shape", ""))
    strides = ints(attrs.get("torch.onnx.strides", "")) or [1, 1]
    pads = (ints(attrs.get("torch.onnx.pads", "")) if auto_pad == '"NOTSET"' else []) or [0, 0, 0, 0]
    if len(x) != 4 or len(y) != 4 or y[:2] != x[:2] or len(kernel) != 2 or len(strides) != 2 or len(pads) != 4:
        return None
    for i in range(2):   # the stated output: floor or ceil of the windows that fit
        span = x[2 + i] + pads[i] + pads[2 + i] - kernel[i]
        if span < 0 or y[2 + i] not in (span // strides[i] + 1, -(-span // strides[i]) + 1):
            return None
    return MaxPool(x, y, (kernel[0], kernel[1]), (strides[0], strides[1]), (pads[0], pads[1], pads[2], pads[3]))


def _only_convolutions_read(op: Any) -> bool:
    return all(onnx_attributes(use.owner, "Conv") is not None for use in op.results[0].uses)


def max_pool_body(op: Any) -> str | None:
    """``op`` as an elementwise maximum of its window's slices of the input padded with -inf, or
    None for any other op (``max_pool``). The set's own pooling packs its padded input into blocks
    of 16 channels like a convolution's: MTCNN-ONet spent 150 us of its 490 in dispatches on
    its three poolings and their packing, ResNet-50's stem pooling 1.65 ms (docs/performance.md).

    The maximum runs at every window position along the width, so each tap is a slice contiguous
    in the width (one tap read with the stride is a gather: 3 ms for ResNet's stem pooling against
    0.5 contiguous), and every stride-th column is taken from it. That strided read fuses into
    the next data-tiled convolution's packing, which then costs that convolution 35-80 us more
    (MTCNN's); copying the columns out behind an optimization barrier instead cost as much in
    dispatches, and the gain on ONet and the ResNet with it (docs/performance.md). Where another
    op reads the pooled value as well (torchvision's ResNets add it to their first block's output),
    the columns are copied out behind one all the same: the strided read fused into that addition,
    in the data-tiled convolution's dispatch before it, and asked 786 KiB of stack, over IREE's 32
    KiB limit (the set failed to compile for a ResNet-18)."""
    p = max_pool(op)
    if p is None:
        return None
    n, c, h, w = p.x
    _, _, oh, ow = p.y
    (kh, kw), (sh, sw) = p.kernel, p.strides
    top, left = p.pads[:2]
    hp = max((oh - 1) * sh + kh, h + top)                   # the rows and columns the windows read
    wp = max((ow - 1) * sw + kw, w + left)
    fw = wp - kw + 1                                         # window positions along the width
    padded = tensor_type((n, c, hp, wp), "f32")
    pad = zero_pad("xp", "x", (0, 0, top, left), (0, 0, hp - h - top, wp - w - left), dims_text(p.x, "f32"),
                   dims_text((n, c, hp, wp), "f32"), "f32", value=NEG_INF)
    full, out = tensor_type((n, c, oh, fw), "f32"), tensor_type(p.y, "f32")
    taps = [(a, b) for a in range(kh) for b in range(kw)]
    slices = "\n    ".join(
        f"%s{i} = tensor.extract_slice %xp[0, 0, {a}, {b}] [{n}, {c}, {oh}, {fw}] [1, 1, {sh}, 1] : {padded} to {full}"
        for i, (a, b) in enumerate(taps))
    identity = "affine_map<(n, c, h, w) -> (n, c, h, w)>"
    maxima = "\n      ".join(f"%m{i} = arith.maximumf {f'%m{i - 1}' if i > 1 else '%v0'}, %v{i} : f32"
                             for i in range(1, len(taps)))
    largest = f"%m{len(taps) - 1}" if len(taps) > 1 else "%v0"
    columns = "%yf" if fw == ow else "%y"
    strided = "" if fw == ow else \
        f"%y = tensor.extract_slice %yf[0, 0, 0, 0] [{n}, {c}, {oh}, {ow}] [1, 1, 1, {sw}] : {full} to {out}"
    if strided and not _only_convolutions_read(op):
        strided += f"\n    %yb = util.optimization_barrier %y : {out}"
        columns = "%yb"
    return f"""func.func @max_pool(%xt: {vtensor_type(p.x, "f32")}) -> {vtensor_type(p.y, "f32")} {{
    %x = torch_c.to_builtin_tensor %xt : {vtensor_type(p.x, "f32")} -> {tensor_type(p.x, "f32")}
    {pad}
    {slices}
    %e = tensor.empty() : {full}
    %yf = linalg.generic {{indexing_maps = [{", ".join([identity] * (len(taps) + 1))}], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins({", ".join(f"%s{i}" for i in range(len(taps)))} : {", ".join([full] * len(taps))}) outs(%e : {full}) {{
    ^bb0({", ".join(f"%v{i}: f32" for i in range(len(taps)))}, %o: f32):
      {maxima}
      linalg.yield {largest} : f32
    }} -> {full}
    {strided}
{epilogue(columns, p.y, "f32")}"""
