"""Resize as one constant 1-D interpolation per resized axis: a Gather where each output position
copies one input position (nearest), else a weighted sum of a few gathered taps, or a MatMul with
the axis's interpolation matrix where the axis is short or the filter wide.

IREE 3.13's lowering (onnx.Resize -> aten.__interpolate) covers only part of the op. It fails to
compile (``failed to legalize operation 'torch.operator'``; ``aten.__interpolate`` for linear/cubic
off rank 4; ``'arith.mulf' op requires the same type`` for linear/cubic on float16, float64 and
integers) with: the ``axes`` attribute, keep_aspect_ratio_policy, tf_crop_and_resize, antialias,
exclude_outside, cubic_coeff_a != -0.75, nearest with align_corners / pytorch_half_pixel /
half_pixel_symmetric, a resized batch or channel axis, rank < 3 (19 node tests: *_axes_*,
*_not_larger, *_not_smaller, tf_crop_and_resize*, *_antialias, *_exclude_outside,
*_nearest_floor_align_corners). It computes wrong numbers, silently, for linear/cubic align_corners
where in x scale is not whole (downsample_scales_{linear,cubic}_align_corners, max abs diff 0.86 and
1.05; an upsample by 1.7 too): the standard divides by ``scale * in - 1``, IREE by the rounded size.
The rest (18 node tests; probes of nearest in any dtype on rank 3 to 5 with half_pixel/asymmetric,
float32 linear/cubic on rank 4) it computes right, and keeps.

Why the rewrite is exact: Resize is separable; each resized axis is a linear map whose coefficients
depend only on the static shapes and the constant operands. They are computed in float64 with the
helpers of onnx's reference (``onnx.reference.ops.op_resize``, pinned with onnx: the numbers the node
tests' outputs come from): coordinate transform, nearest/linear/cubic (antialiased) coefficients;
the choice of the k neighbours and exclude_outside's renormalisation are copied from its
``_interpolate_1d_along_axis``, which computes them inline. tf_crop_and_resize's extrapolated
positions are a constant mask and a Where. Nearest copies, exactly, in any dtype; linear/cubic
compute in float32 (float64 stays), rounding half to even and saturating back to 8/16-bit integers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.reference.ops import op_resize as _ref

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs, operand

_TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_crop_and_resize")
# Element types linear/cubic compute in: themselves, or float32 (cast back after, rounding and
# saturating integers). Nearest only copies, so it takes these and the wider integers as they are.
_OWN = {TensorProto.FLOAT, TensorProto.DOUBLE}
_VIA_FLOAT = {TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.INT8, TensorProto.UINT8,
              TensorProto.INT16, TensorProto.UINT16}
_COPY_ONLY = {TensorProto.INT32, TensorProto.INT64, TensorProto.UINT32, TensorProto.UINT64}
# An axis is a weighted sum of gathered taps (O(k) per output) where a dense product would do at
# least this many times the work (in_len >= ratio * k) and the filter has at most _MAX_TAPS taps; a
# MatMul otherwise (short axes, wide antialias filters), which is one op whatever k is.
_DENSE_RATIO = 4
_MAX_TAPS = 16


def _near(a: float, b: float, rel: float = 1e-9) -> bool:
    """Two scalars equal up to `rel` (math.isclose's rule and default, which the reference's
    identity test uses)."""
    return abs(float(a) - float(b)) <= rel * max(abs(float(a)), abs(float(b)))


@dataclass(frozen=True)
class _Axis:
    axis: int
    n_in: int
    index: np.ndarray     # (out, k) int64: the input positions each output position reads
    weight: np.ndarray    # (out, k) float64: their weights; 0 on extrapolated positions
    outside: np.ndarray   # (out,) bool: extrapolated (tf_crop_and_resize), the value is the constant

    @property
    def copies(self) -> bool:
        """Every output position (that is not extrapolated) copies one input position."""
        inside = self.weight[~self.outside]
        return self.weight.shape[1] == 1 and bool((inside == 1.0).all())

    def matrix(self) -> np.ndarray:
        m = np.zeros((len(self.outside), self.n_in))
        np.add.at(m, (np.arange(len(self.outside))[:, None], self.index), self.weight)
        return m


@dataclass(frozen=True)
class _Geometry:
    shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    scales: tuple[float, ...]            # per axis (1.0 where not resized)
    roi: np.ndarray | None               # [starts..., ends...] over all axes (tf_crop_and_resize), its dtype
    axes: tuple[int, ...]                # the resized axes, in the node's order

    def resized(self, axis: int) -> bool:
        """What the reference leaves out as an identity (scale 1, same length, whole roi)."""
        r = len(self.shape)
        return not (_near(self.scales[axis], 1.0) and self.out_shape[axis] == self.shape[axis]
                    and (self.roi is None or (_near(self.roi[axis], 0.0) and _near(self.roi[axis + r], 1.0))))


def _geometry(node: onnx.NodeProto, ctx: Context) -> _Geometry | None:
    """Output shape and per-axis scales as the reference's ``_interpolate_nd`` derives them."""
    shape = ctx.shape(node.input[0])
    if shape is None or ctx.opset < 11 or any(d <= 0 for d in shape):
        return None
    r, a = len(shape), attrs(node)
    crop = a.get("coordinate_transformation_mode") == b"tf_crop_and_resize"   # the only reader of roi
    operands = []
    for i in (1, 2, 3):
        if operand(node, i) and ctx.const(operand(node, i)) is None and (i > 1 or crop):
            return None   # a runtime scales / sizes (roi): nothing to compute at build time
        value = ctx.const(operand(node, i)) if i > 1 or crop else None
        operands.append(None if value is None or value.size == 0 else value.reshape(-1))
    roi, scales, sizes = operands
    axes = [int(x) + r if int(x) < 0 else int(x) for x in a.get("axes", range(r))]
    n = len(axes)
    if (scales is None) == (sizes is None) or len(set(axes)) != n or not all(0 <= x < r for x in axes):
        return None
    given = scales if scales is not None else sizes
    if given is None or len(given) != n or (roi is not None and len(roi) != 2 * n):
        return None
    full_roi = None
    if roi is not None:   # kept in its own dtype: the reference computes tf_crop_and_resize's offsets in it
        full_roi = np.array([0] * r + [1] * r, roi.dtype)
        for i, d in enumerate(axes):
            full_roi[d], full_roi[r + d] = roi[i], roi[n + i]
    if sizes is not None:
        out = list(shape)
        for i, d in enumerate(axes):
            out[d] = int(given[i])
        factors = [out[d] / shape[d] for d in range(r)]
        policy = a.get("keep_aspect_ratio_policy", b"stretch").decode()
        if policy in ("not_larger", "not_smaller"):
            common = (min if policy == "not_larger" else max)(factors[d] for d in axes)
            factors = [common if d in axes else 1.0 for d in range(r)]
            out = [int(common * shape[d] + 0.5) if d in axes else shape[d] for d in range(r)]
        elif policy != "stretch":
            return None
    else:
        factors = [1.0] * r
        for i, d in enumerate(axes):
            factors[d] = float(given[i])   # float32 as given, read in float64 like the reference
        out = [int(f * s) for f, s in zip(factors, shape)]
    expected = ctx.shape(node.output[0])
    if any(d <= 0 for d in out) or (expected is not None and tuple(expected) != tuple(out)):
        return None
    return _Geometry(tuple(shape), tuple(out), tuple(factors), full_roi, tuple(axes))


def _coefficients(node: onnx.NodeProto) -> Callable[[float, float], np.ndarray] | None:
    """The reference's coefficient function for the node's mode (``Resize._run``)."""
    a = attrs(node)
    mode, antialias, cubic_a = a.get("mode", b"nearest").decode(), a.get("antialias", 0), a.get("cubic_coeff_a", -0.75)
    if mode == "nearest" and not antialias:
        nearest = a.get("nearest_mode", b"round_prefer_floor").decode()
        if nearest not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
            return None
        return lambda ratio, scale: _ref._nearest_coeffs(ratio, mode=nearest)
    if mode == "linear":
        return _ref._linear_coeffs_antialias if antialias else _ref._linear_coeffs
    if mode == "cubic":
        cubic = _ref._cubic_coeffs_antialias if antialias else _ref._cubic_coeffs
        return lambda ratio, scale: cubic(ratio, scale, A=cubic_a)
    return None


def _axis(geo: _Geometry, axis: int, coeffs: Callable[[float, float], np.ndarray], transform: str,
          exclude_outside: bool) -> _Axis:
    """One axis's taps, as ``_interpolate_1d_along_axis`` computes them (its neighbour choice is
    copied here: it builds them inline, for the data it is given)."""
    n_in, n_out, scale = geo.shape[axis], geo.out_shape[axis], geo.scales[axis]
    r = len(geo.shape)
    roi = None if geo.roi is None else geo.roi[[axis, axis + r]]
    x_ori, extrapolated = _ref._compute_x_ori(transform, np.arange(n_out, dtype=np.float64), scale, n_in,
                                              scale * n_in, n_out, roi)
    x_int = np.floor(x_ori).astype(np.int64)
    ratios = np.where(x_ori == x_int, 1.0, x_ori - x_int)   # an exact position prefers the left pixel
    weight = np.array([np.asarray(coeffs(float(t), scale), np.float64) for t in ratios])
    k = weight.shape[1]
    # The k positions nearest x_ori (in edge-padded coordinates), ties to the smaller index.
    pad = int(np.ceil(k / 2))
    x_padded = x_ori + pad
    p_padded = np.floor(x_padded).astype(np.int64)
    frac = x_padded - p_padded
    if k % 2 == 0:
        start = p_padded + np.where(frac == 0, -(k // 2), -(k // 2) + 1)
    else:
        start = p_padded + np.where(frac <= 0.5, -((k - 1) // 2), -((k - 1) // 2) + 1)
    index = start[:, None] + np.arange(k)[None, :] - pad
    if exclude_outside:
        weight = np.where((index < 0) | (index >= n_in), 0.0, weight)
        total = weight.sum(axis=-1, keepdims=True)
        weight = weight / np.where(total == 0, 1.0, total)
    outside = np.zeros(n_out, bool) if extrapolated is None else np.asarray(extrapolated, bool)
    return _compact(axis, n_in, np.clip(index, 0, n_in - 1), np.where(outside[:, None], 0.0, weight), outside)


def _compact(axis: int, n_in: int, index: np.ndarray, weight: np.ndarray, outside: np.ndarray) -> _Axis:
    """The same taps with repeated positions (edge clamping) merged and zero weights dropped, so
    nearest becomes one tap of weight 1 (a Gather) and linear at a whole position one tap too."""
    rows: list[dict[int, float]] = []
    for idx, w in zip(index.tolist(), weight.tolist()):
        merged: dict[int, float] = {}
        for i, v in zip(idx, w):
            merged[i] = merged.get(i, 0.0) + v
        rows.append({i: v for i, v in merged.items() if v != 0.0})
    k = max(1, max(len(m) for m in rows))
    # Padding taps repeat a position the row reads anyway, with weight 0.
    idx_out = np.array([list(m) + [next(iter(m), 0)] * (k - len(m)) for m in rows], np.int64)
    w_out = np.array([list(m.values()) + [0.0] * (k - len(m)) for m in rows], np.float64)
    return _Axis(axis, n_in, idx_out, w_out, outside)


@dataclass(frozen=True)
class _Plan:
    geo: _Geometry
    axes: tuple[_Axis, ...]     # in the order they are applied: shrinking axes first
    extrapolation: float


def _plan(node: onnx.NodeProto, ctx: Context) -> _Plan | None:
    a = attrs(node)
    geo, coeffs = _geometry(node, ctx), _coefficients(node)
    transform = a.get("coordinate_transformation_mode", b"half_pixel").decode()
    elem = ctx.dtypes.get(node.input[0])
    if geo is None or coeffs is None or transform not in _TRANSFORMS or elem not in _OWN | _VIA_FLOAT | _COPY_ONLY:
        return None
    if transform == "tf_crop_and_resize" and geo.roi is None:
        return None
    resized = sorted((d for d in geo.axes if geo.resized(d)), key=lambda d: geo.out_shape[d] / geo.shape[d])
    axes = tuple(_axis(geo, d, coeffs, transform, bool(a.get("exclude_outside", 0))) for d in resized)
    if elem in _COPY_ONLY and not all(x.copies for x in axes):
        return None   # linear/cubic on a 32/64-bit integer: float32 cannot hold it exactly
    return _Plan(geo, axes, float(a.get("extrapolation_value", 0.0)))


def _iree_lowers(node: onnx.NodeProto, ctx: Context, geo: _Geometry) -> bool:
    """The variants IREE 3.13's own lowering compiles (the module docstring says what was measured)."""
    a = attrs(node)
    mode = a.get("mode", b"nearest").decode()
    transform = a.get("coordinate_transformation_mode", b"half_pixel").decode()
    if (a.get("antialias", 0) or a.get("exclude_outside", 0) or "axes" in a or transform == "tf_crop_and_resize"
            or a.get("keep_aspect_ratio_policy", b"stretch") != b"stretch"
            or len(geo.shape) < 3 or geo.resized(0) or geo.resized(1)):
        return False
    if mode == "nearest":
        return transform in ("half_pixel", "asymmetric")
    return (len(geo.shape) == 4 and ctx.dtypes.get(node.input[0]) == TensorProto.FLOAT
            and (mode == "linear" or a.get("cubic_coeff_a", -0.75) == -0.75))


def _fails_to_compile(node: onnx.NodeProto, ctx: Context) -> bool:
    geo = _geometry(node, ctx)
    return geo is not None and not _iree_lowers(node, ctx, geo) and _plan(node, ctx) is not None


def _computes_wrong(node: onnx.NodeProto, ctx: Context) -> bool:
    """Compiles, but align_corners where in x scale is not whole gives wrong numbers."""
    a, geo = attrs(node), _geometry(node, ctx)
    return (geo is not None and _iree_lowers(node, ctx, geo) and a.get("mode", b"nearest") in (b"linear", b"cubic")
            and a.get("coordinate_transformation_mode") == b"align_corners"
            and any(not _near(geo.scales[d] * geo.shape[d], geo.out_shape[d], 1e-6) for d in geo.axes)
            and _plan(node, ctx) is not None)


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    plan = _plan(node, ctx)
    elem = ctx.dtypes.get(node.input[0])
    dtype = ctx.numpy_dtype(node.input[0])
    if plan is None or elem is None or dtype is None:
        return None
    e = Emitter(node)
    copying = all(x.copies for x in plan.axes)
    compute = dtype if copying or elem in _OWN else np.dtype(np.float32)
    y = node.input[0] if compute == dtype else e.op("Cast", [node.input[0]], to=TensorProto.FLOAT)
    shape = list(plan.geo.shape)
    for ax in plan.axes:
        y = _apply(e, y, shape, ax, compute)
        shape[ax.axis] = len(ax.outside)
    masked = [x for x in plan.axes if x.outside.any()]
    if masked:   # tf_crop_and_resize: a position out of the input on any axis takes the constant
        mask = np.zeros([1] * len(shape), bool)
        for x in masked:
            view = [1] * len(shape)
            view[x.axis] = len(x.outside)
            mask = mask | x.outside.reshape(view)
        fill = (numpy_helper.saturate_cast(np.array(plan.extrapolation), dtype) if copying
                else np.array(plan.extrapolation))
        y = e.op("Where", [e.const(mask, hint="outside"), e.const(fill, compute, hint="extrapolation"), y])
    if compute != dtype:
        if dtype.kind in "iu":   # the reference rounds half to even, then saturates
            info = np.iinfo(dtype)
            y = e.op("Clip", [e.op("Round", [y]), e.const(info.min, compute), e.const(info.max, compute)])
        y = e.op("Cast", [y], to=elem)
    e.op("Identity", [y], out=node.output[0])
    return e.replacement()


def _apply(e: Emitter, y: str, shape: list[int], ax: _Axis, dtype: np.dtype) -> str:
    """Resize `y` (of `shape`) along one axis."""
    a, (n_out, k) = ax.axis, ax.index.shape
    if ax.copies:
        return e.op("Gather", [y, e.ints(ax.index[:, 0].tolist(), hint="positions")], axis=a)
    if ax.n_in >= _DENSE_RATIO * k and k <= _MAX_TAPS:
        view = [n_out] + [1] * (len(shape) - a - 1)
        terms = []
        for t in range(k):
            tap = e.op("Gather", [y, e.ints(ax.index[:, t].tolist(), hint="positions")], axis=a)
            w = ax.weight[:, t]
            terms.append(tap if (w == 1.0).all() else e.op("Mul", [tap, e.const(w.reshape(view), dtype, "weights")]))
        return terms[0] if k == 1 else e.op("Sum", terms)
    m = ax.matrix()
    if a == len(shape) - 1:   # [..., in] @ [in, out]
        return e.op("MatMul", [y, e.const(m.T, dtype, "interpolation")])
    if a == len(shape) - 2:   # [out, in] @ [..., in, last], broadcast over the leading axes
        return e.op("MatMul", [e.const(m, dtype, "interpolation"), y])
    pre, post = int(np.prod(shape[:a])), int(np.prod(shape[a + 1:]))
    flat = e.op("Reshape", [y, e.ints([pre, ax.n_in, post])])
    product = e.op("MatMul", [e.const(m, dtype, "interpolation"), flat])
    return e.op("Reshape", [product, e.ints([*shape[:a], n_out, *shape[a + 1:]])])


_HOW = "one constant interpolation per resized axis instead (a Gather, gathered taps or a MatMul)"
LEGALIZATIONS = (
    Legalization("Resize", "IREE 3.13 computes Resize linear/cubic with align_corners wrongly where input size x "
                 f"scale is not whole (it divides by the rounded size); {_HOW}", _computes_wrong, _rewrite),
    Legalization("Resize", "IREE 3.13 cannot lower this Resize variant (axes, keep_aspect_ratio_policy, "
                 "tf_crop_and_resize, antialias, exclude_outside, cubic_coeff_a, nearest off half_pixel/asymmetric, "
                 f"linear/cubic off float32 rank 4, a batch/channel axis resized); {_HOW}", _fails_to_compile, _rewrite),
)
