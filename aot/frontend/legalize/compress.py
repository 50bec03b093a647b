"""Compress with a constant condition, as a Gather of the kept indices.

IREE 3.13 fails on every Compress (node tests ``compress_*``: ``'tensor.cast' op operand type
'tensor<?x1xi1>' and result type 'tensor<2xi1>' are cast incompatible``): its result's length
depends on the condition. A deployment whose condition is fixed (a channel or class selection
baked in with ``--const-input``) has a static result: the indices where the condition holds,
read with a Gather along the axis (or from the flattened input when the node has no axis).
A condition computed at run time stays a Compress, which the partitioner keeps on the host.
"""

from __future__ import annotations

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs, operand


def _kept(node: onnx.NodeProto, ctx: Context) -> np.ndarray | None:
    """The indices the constant condition keeps (within the axis's length), or None."""
    x, condition = ctx.shape(node.input[0]), ctx.const(operand(node, 1))
    if x is None or condition is None or condition.ndim != 1:
        return None
    axis = attrs(node).get("axis")
    length = int(np.prod(x)) if axis is None else x[int(axis)]
    return np.flatnonzero(condition[:length].astype(bool)).astype(np.int64)


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    return _kept(node, ctx) is not None


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    kept = _kept(node, ctx)
    if kept is None:
        return None
    e = Emitter(node)
    axis = attrs(node).get("axis")
    source = node.input[0] if axis is not None else e.op("Reshape", [node.input[0], e.ints([-1])])
    e.op("Gather", [source, e.const(kept, hint="kept")], out=node.output[0], axis=int(axis or 0))
    return e.replacement()


LEGALIZATIONS = (Legalization("Compress", "IREE 3.13 cannot lower Compress (its result length depends on the "
                              "condition); with a constant condition it is a Gather of the kept indices",
                              _applies, _rewrite),)
