"""Col2Im as a Gather and a ReduceSum per spatial axis.

IREE 3.13 lowers no Col2Im: the importer leaves ``torch.constant.int`` operands it cannot legalize
or, for three spatial axes, ``onnx.Col2Im`` stays an illegal ``torch.operator`` (0 of the 5 node
tests ``col2im*`` compiled).

Col2Im adds each column entry ``(c, k_1..k_n, b_1..b_n)`` into the image at
``i_j = b_j * stride_j + k_j * dilation_j - pad_begin_j`` where that is inside the image. The
position along one axis depends only on that axis's (k_j, b_j), so the scatter-add factors into
one fold per axis: with the input laid out ``[N, C, k_1*b_1, ..., k_n*b_n]`` (Reshape, Transpose,
Reshape), the fold of axis j gathers, for every image position, the (k_j, b_j) entries that land
on it (a constant [I_j, m_j] index table built at build time, m_j the most that land on one
position, shorter lists pointing at a zero slot concatenated to the axis) and sums them
(ReduceSum; none needed where m_j = 1). Every sum is of exactly the entries the standard adds:
the result is exact up to float addition order, NaN and infinities included (a MatMul with a 0/1
matrix would turn an infinite entry into NaN across its row). Needs ``image_shape`` and
``block_shape`` constant and static shapes; else the node is left as it is.
"""

from __future__ import annotations

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs, operand


def _geometry(node: onnx.NodeProto, ctx: Context) -> tuple[list[int], list[int], list[int], list[int],
                                                            list[int], list[int]] | None:
    """(image, kernel, blocks, strides, dilations, pad_begin) per spatial axis, or None."""
    x = ctx.shape(node.input[0])
    image, block = ctx.const(operand(node, 1)), ctx.const(operand(node, 2))
    if x is None or len(x) != 3 or image is None or block is None or image.shape != block.shape or image.ndim != 1:
        return None
    n, a = image.size, attrs(node)
    img, ker = [int(v) for v in image], [int(v) for v in block]
    strides = [int(v) for v in a.get("strides", [1] * n)]
    dilations = [int(v) for v in a.get("dilations", [1] * n)]
    pads = [int(v) for v in a.get("pads", [0] * 2 * n)]
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n or min(ker + strides + dilations) < 1:
        return None
    blocks = [(i + pads[j] + pads[n + j] - (k - 1) * d - 1) // s + 1
              for j, (i, k, s, d) in enumerate(zip(img, ker, strides, dilations))]
    kernel_volume, block_count = int(np.prod(ker)), int(np.prod(blocks))
    if min(blocks) < 1 or x[1] % kernel_volume or x[2] != block_count:
        return None
    return img, ker, blocks, strides, dilations, pads[:n]


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    return ctx.numpy_dtype(node.input[0]) is not None and _geometry(node, ctx) is not None


def fold_table(size: int, kernel: int, blocks: int, stride: int, dilation: int, pad: int) -> np.ndarray:
    """[size, m] indices into a (kernel, blocks) axis flattened, plus a zero slot kernel*blocks:
    for each image position, the entries that land on it, in kernel order."""
    lists: list[list[int]] = [[] for _ in range(size)]
    for k in range(kernel):
        for b in range(blocks):
            i = b * stride + k * dilation - pad
            if 0 <= i < size:
                lists[i].append(k * blocks + b)
    m = max(1, max(len(entries) for entries in lists))
    table = np.full((size, m), kernel * blocks, np.int64)
    for i, entries in enumerate(lists):
        table[i, : len(entries)] = entries
    return table


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    geometry, x, dtype = _geometry(node, ctx), ctx.shape(node.input[0]), ctx.numpy_dtype(node.input[0])
    if geometry is None or x is None or dtype is None:
        return None
    image, kernel, blocks, strides, dilations, pads = geometry
    n, batch, channels = len(image), x[0], x[1] // int(np.prod(kernel))
    e = Emitter(node)
    split = e.op("Reshape", [node.input[0], e.ints([batch, channels, *kernel, *blocks])])
    pairs = [0, 1, *(a for j in range(n) for a in (2 + j, 2 + n + j))]     # k_j next to b_j
    moved = e.op("Transpose", [split], perm=pairs)
    v = e.op("Reshape", [moved, e.ints([batch, channels, *(k * b for k, b in zip(kernel, blocks))])])
    shape = [batch, channels, *(k * b for k, b in zip(kernel, blocks))]
    for j in range(n):
        axis = 2 + j
        table = fold_table(image[j], kernel[j], blocks[j], strides[j], dilations[j], pads[j])
        slot = list(shape)
        slot[axis] = 1
        v = e.op("Concat", [v, e.const(np.zeros(slot, dtype), hint="zero_slot")], axis=axis)
        last = j == n - 1
        if table.shape[1] == 1:
            v = e.op("Gather", [v, e.const(table[:, 0], hint="fold")], axis=axis, out=node.output[0] if last else None)
        else:
            v = e.op("Gather", [v, e.const(table, hint="fold")], axis=axis)
            v = e.op("ReduceSum", [v, e.ints([axis + 1])], keepdims=0, out=node.output[0] if last else None)
        shape[axis] = image[j]
    return e.replacement()


LEGALIZATIONS = (Legalization("Col2Im", "IREE 3.13 cannot lower onnx.Col2Im (0 of 5 node tests compiled); a Gather "
                              "and a ReduceSum per spatial axis with constant fold tables", _applies, _rewrite),)
