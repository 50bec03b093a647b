"""AffineGrid with a constant ``size`` as a constant base grid and one MatMul with theta.

IREE 3.13 has no lowering for ``onnx.AffineGrid``. Its standard function body (``frontend/
expand.py``) compiles where ``size`` is known, but it builds the base grid at run time from about
60 small ops (constant folding stops at its ``CastLike(constant, theta)``s, which read theta), and
where ``size`` is a run-time input its 2-D branch loses its rank (a ``Squeeze`` of a batch of
unknown length: ``failed to legalize ... onnx.Transpose``) and align_corners leaves an ``If`` on
the depth (node tests ``affine_grid_2d``, ``_2d_align_corners``, ``_3d_align_corners``). So an
AffineGrid whose ``size`` is constant when it is expanded is left to this legalization (the
expansion's condition), and the others are expanded as before.

The standard's definition (``onnx/reference/ops/op_affine_grid.py``): for spatial lengths L (W,
H, D) the base grid holds, per output point, ``[x, y, (z), 1]`` with each coordinate ``-1 + (2i+1)/L``
(``-1 + 2i/(L-1)`` with align_corners); the output is ``theta[n] @ point`` for every point. With
the base grid a constant ``B`` [P, r+1] that is ``MatMul(B, Transpose(theta))`` -> [N, P, r],
reshaped to [N, *spatial, r]. The grid is computed in float64 and rounded to theta's type once.
A length-1 axis with align_corners sits at -1, as in the reference and the body's depth axis
(onnxruntime puts it at +1, PyTorch at 0; the body's H and W divide by zero there).
"""

from __future__ import annotations

from math import prod

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs, operand


def _shapes(node: onnx.NodeProto, ctx: Context) -> tuple[tuple[int, ...], list[int]] | None:
    """(theta's shape [N, r, r+1], the output's spatial lengths [D,] H, W), when both are known."""
    theta, size = ctx.shape(node.input[0]), ctx.const(operand(node, 1))
    if theta is None or size is None or len(theta) != 3 or ctx.numpy_dtype(node.input[0]) is None:
        return None
    r = theta[1]
    spatial = [int(v) for v in size.reshape(-1)[2:]]
    if r not in (2, 3) or theta[2] != r + 1 or size.size != r + 2 or int(size.reshape(-1)[0]) != theta[0]:
        return None
    return (theta, spatial) if all(v > 0 for v in spatial) else None


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    return _shapes(node, ctx) is not None


def base_grid(spatial: list[int], align_corners: bool) -> np.ndarray:
    """[prod(spatial), r+1] float64: each output point's (x, y, (z), 1), points in row-major order."""
    def axis(length: int) -> np.ndarray:
        i = np.arange(length, dtype=np.float64)
        if align_corners:
            return -1 + 2 * i / (length - 1) if length > 1 else np.full(1, -1.0)
        return -1 + (2 * i + 1) / length

    mesh = np.meshgrid(*(axis(n) for n in spatial), indexing="ij")   # [D,] H, W order
    columns = [m.reshape(-1) for m in mesh[::-1]]                      # x (along W) first
    return np.stack([*columns, np.ones(prod(spatial))], axis=1)


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    shapes, dtype = _shapes(node, ctx), ctx.numpy_dtype(node.input[0])
    if shapes is None or dtype is None:
        return None
    (n, r, _), spatial = shapes
    e = Emitter(node)
    grid = e.const(base_grid(spatial, bool(attrs(node).get("align_corners", 0))).astype(dtype), hint="base_grid")
    points = e.op("MatMul", [grid, e.op("Transpose", [node.input[0]], perm=[0, 2, 1])])   # [N, P, r]
    e.op("Reshape", [points, e.ints([n, *spatial, r])], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization("AffineGrid", "IREE 3.13 cannot lower onnx.AffineGrid; with a constant size, a "
                              "constant base grid times theta transposed (one MatMul)", _applies, _rewrite),)
