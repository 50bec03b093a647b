"""ScatterElements with ``reduction`` max or min as a masked reduction and an elementwise Max / Min.

IREE 3.13 has no pattern for these two reductions (``failed to legalize operation
'torch.operator'``: node tests ``scatter_elements_with_reduction_max`` / ``_min``); none, add and
mul lower and are left alone.

Along the scatter axis a, an update at index j lands on data position ``indices[j]`` (negative
ones count from the end) with the same coordinates on every other axis. So compare each index
with every position of the axis (a constant ``arange(D_a)``: a [..., U_a, D_a, ...] mask), put
the update where it matches and the reduction's identity elsewhere (-inf / +inf, the type's lowest
/ highest for integers), reduce over the updates' axis (ReduceMax / ReduceMin), fill the
coordinates the updates do not cover with the identity (a Concat with constant blocks), and take
``Max(data, that)`` / ``Min``. Every output is the max (min) of its data element and exactly the
updates that land on it, as the standard defines: max and min are exact in any order, and the
identity leaves a position without updates unchanged. The mask holds U x D_a elements.
"""

from __future__ import annotations

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs

_OPS = {b"max": ("ReduceMax", "Max"), b"min": ("ReduceMin", "Min")}


def _identity(dtype: np.dtype, reduction: bytes) -> np.ndarray:
    high = reduction == b"min"
    if dtype.kind == "f":
        return np.array(np.inf if high else -np.inf, dtype)
    info = np.iinfo(dtype)
    return np.array(info.max if high else info.min, dtype)


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    data, indices = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    dtype = ctx.numpy_dtype(node.input[0])
    if attrs(node).get("reduction", b"none") not in _OPS or data is None or indices is None or dtype is None:
        return False
    axis = int(attrs(node).get("axis", 0))
    return (dtype.kind in "fiu" and len(data) == len(indices) > 0 and -len(data) <= axis < len(data)
            and all(u <= d for i, (u, d) in enumerate(zip(indices, data)) if i != axis % len(data)))


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    data, indices, dtype = ctx.shape(node.input[0]), ctx.shape(node.input[1]), ctx.numpy_dtype(node.input[0])
    if not _applies(node, ctx) or data is None or indices is None or dtype is None:
        return None
    a = attrs(node)
    reduce_op, combine_op = _OPS[a["reduction"]]
    rank = len(data)
    axis = int(a.get("axis", 0)) % rank
    identity = _identity(dtype, a["reduction"])
    e = Emitter(node)
    index_type = ctx.dtypes.get(node.input[1], onnx.TensorProto.INT64)
    idx = node.input[1]
    if index_type != onnx.TensorProto.INT64:
        idx = e.op("Cast", [idx], to=onnx.TensorProto.INT64)
    wrapped = e.op("Add", [idx, e.const(np.array(data[axis], np.int64), hint="axis_size")])
    idx = e.op("Where", [e.op("Less", [idx, e.const(np.array(0, np.int64), hint="zero")]), wrapped, idx])
    # [..., U_a, 1, ...] against positions [1, ..., 1, D_a, 1, ...]: the updates' axis a, the data's a+1.
    positions = np.arange(data[axis], dtype=np.int64).reshape([data[axis] if i == axis + 1 else 1
                                                               for i in range(rank + 1)])
    match = e.op("Equal", [e.op("Unsqueeze", [idx, e.ints([axis + 1])]), e.const(positions, hint="positions")])
    placed = e.op("Where", [match, e.op("Unsqueeze", [node.input[2], e.ints([axis + 1])]),
                            e.const(identity, hint="identity")])
    reduced = e.op(reduce_op, [placed, e.ints([axis])], keepdims=0)   # max/min exist from opset 18: axes an input
    shape = [data[axis] if i == axis else u for i, u in enumerate(indices)]
    for i in range(rank):
        if shape[i] < data[i]:        # coordinates no update reaches
            block = list(shape)
            block[i] = data[i] - shape[i]
            reduced = e.op("Concat", [reduced, e.const(np.full(block, identity, dtype), hint="identities")], axis=i)
            shape[i] = data[i]
    e.op(combine_op, [node.input[0], reduced], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization("ScatterElements", "IREE 3.13 cannot lower ScatterElements reduction max/min; a "
                              "masked ReduceMax/ReduceMin over the updates and an elementwise Max/Min",
                              _applies, _rewrite),)
