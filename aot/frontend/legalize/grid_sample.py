"""GridSample as in-graph coordinate arithmetic, one GatherElements of every tap, and a weighted sum.

IREE 3.13 lowers only part of ``onnx.GridSample`` (``aten.grid_sampler``, 4-D, zeros padding):
bicubic, border and reflection padding, and every 5-D (volumetric) variant fail with ``failed to
legalize operation 'torch.operator'`` (node tests ``gridsample_bicubic*``, ``_border_padding``,
``_reflection_padding``, ``_volumetric_*``), and nearest compiles but gives wrong results
(``gridsample_nearest``, ``_align_corners_{0,1}_additional_1``: max abs diff 1, 4, 2): IREE rounds
a coordinate halfway between two pixels away from zero, where ONNX (and PyTorch) round it to even.
The variant it does lower, bilinear with zeros padding on 4-D inputs, reads outside the image for
grid points beyond its border instead of taking 0 there: ``gridsample_zeros_padding`` (points at
+-10) fails now and then (max abs diff 1.9e31); on a 32x64x64 image with a grid in [-1.05, 1.05]
8,782 of 131,072 outputs are wrong; points at 1e3 give NaN, at 1e6 the process dies (SIGSEGV).
The grid is a run-time tensor, so no condition on the node tells a safe one apart: every
GridSample is rewritten (on that image the rewrite ran in 5-9 ms on a busy 2-core CPU, IREE's
wrong kernel in 1-3.5 ms).

The rewrite follows the standard's reference (``onnx/reference/ops/op_grid_sample.py``) step by
step, vectorised over the r spatial axes (grid's last axis, which lists them x first: W, H, D):

1. unnormalise: ``x = (g+1)/2 (L-1)`` with align_corners, else ``((g+1) L - 1)/2``;
2. nearest: ``x = Round(x)`` (ONNX Round is half to even, as the reference's ``np.rint``);
3. a coordinate outside ``[lo, hi]`` (``[0, L-1]`` with align_corners, else ``[-1/2, L-1/2]``) is
   clamped to ``[0, L-1]`` (border) or reflected into ``[lo, hi]`` (reflection); not in cubic
   mode, where onnxruntime and PyTorch leave the coordinate and pad only its taps (the reference
   clamps it first, which gives other values near a border; reflection agrees either way, by
   symmetry). onnxruntime is the oracle, and PyTorch is where such models come from;
4. taps: ``floor(x) + {0, 1}`` (linear) or ``{-1, 0, 1, 2}`` (cubic, Keys' kernel with A = -0.75),
   their weights polynomials in ``t = x - floor(x)``; each tap index is clamped (border) or
   reflected (reflection) again, as the reference's ``_pixel_at_array`` does; with zeros padding a
   tap outside ``[0, L-1]`` reads 0 (a ``Where`` on the gathered values, so an inf elsewhere in
   the image cannot leak in as 0 * inf);
5. the taps of all axes combine into flat indices into ``X`` viewed as ``[N, C, prod(L)]``: one
   GatherElements reads all K^r taps of every output point at once, then a Mul and a ReduceSum.

Index arithmetic is exact (integers held in float); weights differ from the reference's nested
1-D interpolations only by float rounding. Indices are clamped into range before the gather, so
the index-range analysis proves it in bounds.
"""

from __future__ import annotations

from math import prod

import numpy as np
import onnx
from numpy.polynomial import Polynomial

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs

_MODES = {b"bilinear": "linear", b"linear": "linear", b"bicubic": "cubic", b"cubic": "cubic", b"nearest": "nearest"}
_FLOATS = {onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE}


def _kernels() -> dict[str, tuple[list[int], np.ndarray]]:
    """mode -> (tap offsets from floor(x), weight polynomials in t: [tap, power] coefficients)."""
    a = -0.75   # the cubic coefficient ONNX fixes (as PyTorch)
    near = Polynomial([1, 0, -(a + 3), a + 2])        # |s| <= 1: (a+2)|s|^3 - (a+3)|s|^2 + 1
    far = Polynomial([-4 * a, 8 * a, -5 * a, a])      # 1 < |s| < 2: a|s|^3 - 5a|s|^2 + 8a|s| - 4a
    t = Polynomial([0, 1])
    cubic = [far(1 + t), near(t), near(1 - t), far(2 - t)]   # distances of taps -1, 0, 1, 2 from x
    return {"linear": ([0, 1], np.array([[1, -1], [0, 1]], np.float64)),
            "cubic": ([-1, 0, 1, 2], np.array([np.pad(p.coef, (0, 4 - len(p.coef))) for p in cubic]))}


_KERNELS = _kernels()


def _settings(node: onnx.NodeProto) -> tuple[str, str, bool]:
    a = attrs(node)
    mode = _MODES.get(a.get("mode", b"linear"), "")
    return mode, a.get("padding_mode", b"zeros").decode(), bool(a.get("align_corners", 0))


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    x, grid = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    if x is None or grid is None or len(x) < 3 or len(grid) != len(x) or grid[-1] != len(x) - 2:
        return False
    if 0 in x or 0 in grid or grid[0] != x[0]:
        return False
    if ctx.dtypes.get(node.input[0]) not in _FLOATS or ctx.dtypes.get(node.input[1]) not in _FLOATS:
        return False
    mode, padding, _ = _settings(node)
    return bool(mode) and padding in ("zeros", "border", "reflection")


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    x_shape, grid_shape = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    x_dtype, grid_dtype = ctx.numpy_dtype(node.input[0]), ctx.numpy_dtype(node.input[1])
    if x_shape is None or grid_shape is None or x_dtype is None or grid_dtype is None:
        return None
    mode, padding, align = _settings(node)
    n, c, dims = x_shape[0], x_shape[1], x_shape[2:]
    r, out_dims = len(dims), grid_shape[1:-1]
    p = prod(out_dims)
    # Coordinates in float32 (the reference's precision), float64 where the grid is float64.
    cd = np.dtype(np.float64) if grid_dtype == np.float64 else np.dtype(np.float32)
    e = Emitter(node)

    def const(value: object) -> str:
        return e.const(np.asarray(value, cd))

    # Per coordinate j of the grid's last axis (x first): its spatial length, range, reflection bounds.
    length = np.array(dims[::-1], np.float64)
    lo, hi = (np.zeros(r), length - 1) if align else (np.full(r, -0.5), length - 0.5)

    def clamp(v: str, low: np.ndarray, high: np.ndarray) -> str:
        return e.op("Min", [e.op("Max", [v, const(low)]), const(high)])

    def reflect(v: str, low: np.ndarray, high: np.ndarray) -> str:
        """v reflected at the near bound until it lies in [low, high] (the reference's _gs_reflect)."""
        span = high - low
        below, above = e.op("Less", [v, const(low)]), e.op("Greater", [v, const(high)])
        dist = e.op("Where", [below, e.op("Sub", [const(low), v]), e.op("Sub", [v, const(high)])])
        # A length-1 axis with align_corners has span 0: every point reflects onto its only pixel.
        folds = e.op("Floor", [e.op("Div", [dist, const(np.where(span > 0, span, 1))])])
        rest = e.op("Sub", [dist, e.op("Mul", [folds, const(span)])])
        odd = e.op("Cast", [e.op("Sub", [folds, e.op("Mul", [e.op("Floor", [e.op("Mul", [folds, const(0.5)])]),
                                                             const(2)])])], to=onnx.TensorProto.BOOL)
        # Even folds from below (odd from above) end up `rest` above low; the others `rest` below high.
        from_low = e.op("Xor", [below, odd])
        inside = e.op("Where", [from_low, e.op("Add", [const(low), rest]), e.op("Sub", [const(high), rest])])
        moved = e.op("Where", [e.op("Or", [below, above]), inside, v])
        return clamp(moved, low, high)

    # 1-3: the coordinates, [N, P, r].
    g = e.op("Reshape", [node.input[1], e.ints([n, p, r])])
    if grid_dtype != cd:
        g = e.op("Cast", [g], to=onnx.helper.np_dtype_to_tensor_dtype(cd))
    shifted = e.op("Add", [g, const(1)])
    if align:
        coords = e.op("Mul", [e.op("Div", [shifted, const(2)]), const(length - 1)])
    else:
        coords = e.op("Div", [e.op("Sub", [e.op("Mul", [shifted, const(length)]), const(1)]), const(2)])
    if mode == "nearest":
        coords = e.op("Round", [coords])
    # (onnxruntime and PyTorch pad only the taps of a cubic coordinate: see the docstring.)
    if mode != "cubic" and padding == "border":
        outside = e.op("Or", [e.op("Less", [coords, const(lo)]), e.op("Greater", [coords, const(hi)])])
        coords = e.op("Where", [outside, clamp(coords, np.zeros(r), length - 1), coords])
    elif mode != "cubic" and padding == "reflection":
        coords = reflect(coords, lo, hi)

    # 4: taps [N, P, r, K] and their weights.
    col = (r, 1)   # per-coordinate constants against the tap axis
    if mode == "nearest":
        offsets, weights = [0], None
        taps = e.op("Unsqueeze", [coords, e.ints([3])])
    else:
        offsets, poly = _KERNELS[mode]
        base = e.op("Floor", [coords])
        t = e.op("Unsqueeze", [e.op("Sub", [coords, base]), e.ints([3])])
        weights = const(poly[:, -1])
        for power in range(poly.shape[1] - 2, -1, -1):   # Horner, every tap at once
            weights = e.op("Add", [e.op("Mul", [weights, t]), const(poly[:, power])])
        taps = e.op("Add", [e.op("Unsqueeze", [base, e.ints([3])]), const(offsets)])
        if padding == "border":
            taps = clamp(taps, np.zeros(col), (length - 1).reshape(col))
        elif padding == "reflection":
            taps = reflect(taps, lo.reshape(col), hi.reshape(col))
    valid = None
    if padding == "zeros":
        valid = e.op("And", [e.op("GreaterOrEqual", [taps, const(np.zeros(col))]),
                             e.op("LessOrEqual", [taps, const((length - 1).reshape(col))])])
    # Clamped in float before the cast, so far-out coordinates never overflow int64.
    taps = e.op("Cast", [clamp(taps, np.zeros(col), (length - 1).reshape(col))], to=onnx.TensorProto.INT64)

    # 5: every axis' taps against every other's: flat indices, weights, validity [N, P, K, ..., K].
    k = len(offsets)
    strides = [prod(dims[r - j:]) for j in range(r)]   # coordinate j indexes spatial axis r-1-j
    flat = w = ok = None
    for j in range(r):
        spread = e.ints([n, p] + [k if i == j else 1 for i in range(r)])

        def axis_j(v: str) -> str:
            return e.op("Reshape", [e.op("Slice", [v, e.ints([j]), e.ints([j + 1]), e.ints([2])]), spread])

        # Clip in int64 as well: it lets the index-range analysis prove the gather in bounds.
        index = e.op("Clip", [axis_j(taps), e.const(np.int64(0)), e.const(np.int64(dims[r - 1 - j] - 1))])
        index = e.op("Mul", [index, e.const(np.int64(strides[j]))]) if strides[j] != 1 else index
        flat = index if flat is None else e.op("Add", [flat, index])
        if weights is not None:
            w = axis_j(weights) if w is None else e.op("Mul", [w, axis_j(weights)])
        if valid is not None:
            ok = axis_j(valid) if ok is None else e.op("And", [ok, axis_j(valid)])
    assert flat is not None
    taps_all = p * k ** r
    data = e.op("Reshape", [node.input[0], e.ints([n, c, prod(dims)])])
    index = e.op("Expand", [e.op("Reshape", [flat, e.ints([n, 1, taps_all])]), e.ints([n, c, taps_all])])
    values = e.op("GatherElements", [data, index], axis=2)
    if ok is not None:
        values = e.op("Where", [e.op("Reshape", [ok, e.ints([n, 1, taps_all])]), values,
                                e.const(np.zeros((), x_dtype))])
    if w is not None:
        w = e.op("Reshape", [w, e.ints([n, 1, p, k ** r])])
        if x_dtype != cd:
            w = e.op("Cast", [w], to=onnx.helper.np_dtype_to_tensor_dtype(x_dtype))
        weighted = e.op("Mul", [e.op("Reshape", [values, e.ints([n, c, p, k ** r])]), w])
        values = e.op("ReduceSum", [weighted, e.ints([3])], keepdims=0)
    e.op("Reshape", [values, e.ints([n, c, *out_dims])], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization(
    "GridSample", "IREE 3.13 cannot lower GridSample bicubic, border/reflection padding or 5-D (failed to "
    "legalize), rounds nearest halves away from zero and reads outside the image for bilinear points beyond "
    "it (wrong results, SIGSEGV); written out as coordinate arithmetic, one GatherElements of all taps and a "
    "weighted sum", _applies, _rewrite),)
