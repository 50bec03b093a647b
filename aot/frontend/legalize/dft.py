"""DFT as one MatMul with a constant matrix of cosines and sines.

IREE 3.13 lowers no DFT: at opset 20 (axis as an input) the importer leaves ``torch.constant.int``
operands it cannot legalize, at opset 17-19 ``onnx.DFT`` stays a ``torch.operator`` with no pattern
(``failed to legalize operation 'torch.operator'``): 0 of the 10 node tests ``dft*`` compiled.

A DFT along an axis of static length is a linear map of the signal along that axis, real and
imaginary parts together (the last dimension, 1 for a real signal, 2 for a complex one). With the
axis moved next to that last dimension and the other dimensions flattened, it is
``[M, L*c] @ W[L*c, K*co]`` where W holds, for each input (n, part) and output (k, part), the
coefficient of the transform: ``cos``/``sin`` of ``2 pi (k n mod N) / N``, computed in float64 at
build time (the angle reduced in integers first, so every entry is the correctly rounded value).
Every variant the standard defines is a choice of W, so none needs more ops:
- ``dft_length`` N: input rows past N are left out (truncation); a shorter input simply has no rows
  for the missing samples (zero padding);
- ``onesided`` forward: only the first N//2+1 output frequencies;
- ``inverse``: the conjugate kernel scaled by 1/N;
- ``inverse`` + ``onesided`` (the reference's irfft): a real output of length N from the first
  N//2+1 frequencies with their Hermitian mirror folded in (weight 2 except DC and, N even, the
  Nyquist term; their imaginary parts meet sin = 0, so they drop out as numpy's irfft drops them).
The result is the exact DFT up to float rounding of a length-L dot product (16-bit floats
accumulate in float32). W has L*c x K*co entries; beyond ``_MAX_ENTRIES`` the node is left as it is.
8 of the 10 node tests pass; ``dft_inverse`` (both opsets) is off in one element per column: the
imaginary part at the Nyquist frequency is exactly 0 (float64 numpy says 7e-16, this gives ~1e-15)
but the expected output holds numpy's float32 FFT rounding there, 1.9e-7, beyond the test's atol 1e-7.
"""

from __future__ import annotations

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs, operand

_MAX_ENTRIES = 1 << 23   # 32 MiB of float32: a complex DFT of length 1448, a real one of 2048


def _plan(node: onnx.NodeProto, ctx: Context) -> tuple[int, int, bool, bool] | None:
    """(axis, N, inverse, onesided) of a DFT whose shapes and operands are static, else None."""
    x, dtype = ctx.shape(node.input[0]), ctx.numpy_dtype(node.input[0])
    if x is None or dtype is None or dtype.kind != "f" or len(x) < 2 or x[-1] not in (1, 2):
        return None
    a = attrs(node)
    axis_name, length_name = operand(node, 2), operand(node, 1)
    if ctx.opset >= 20:
        axis_value = ctx.const(axis_name) if axis_name else np.array(-2)
        if axis_value is None or axis_value.size != 1:
            return None
        axis = int(axis_value.reshape(-1)[0])
    else:
        axis = int(a.get("axis", 1))
    if not -len(x) <= axis < len(x):
        return None
    axis %= len(x)
    if axis == len(x) - 1:
        return None
    inverse, onesided = bool(a.get("inverse", 0)), bool(a.get("onesided", 0))
    if length_name:
        length = ctx.const(length_name)
        if length is None or length.size != 1:
            return None
        n = int(length.reshape(-1)[0])
    else:
        n = 2 * (x[axis] - 1) if inverse and onesided else x[axis]
    if n < 1:
        return None
    k, co = (n, 1) if inverse and onesided else (n // 2 + 1 if onesided else n, 2)
    if x[axis] * x[-1] * k * co > _MAX_ENTRIES:
        return None
    return axis, n, inverse, onesided


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    return _plan(node, ctx) is not None


def matrix(length: int, parts: int, n: int, inverse: bool, onesided: bool) -> np.ndarray:
    """W[length*parts, K*co] in float64: row (sample, part), column (frequency or sample, part)."""
    rows = min(length, n)
    if inverse and onesided:
        k = np.arange(min(rows, n // 2 + 1))        # the frequencies irfft reads
        out = np.arange(n)
        turns = (k[:, None] * out[None, :]) % n
        cos, sin = np.cos(2 * np.pi * turns / n), np.sin(2 * np.pi * turns / n)
        weight = np.where((k == 0) | (2 * k == n), 1.0, 2.0)[:, None] / n
        w = np.zeros((length, parts, n, 1))
        w[: len(k), 0, :, 0] = weight * cos
        if parts == 2:
            w[: len(k), 1, :, 0] = -weight * sin
        return w.reshape(length * parts, n)
    freqs = n // 2 + 1 if onesided and not inverse else n
    samples, k = np.arange(rows), np.arange(freqs)
    turns = (samples[:, None] * k[None, :]) % n
    cos, sin = np.cos(2 * np.pi * turns / n), np.sin(2 * np.pi * turns / n)
    sign, scale = (1.0, 1.0 / n) if inverse else (-1.0, 1.0)
    # (a + ib)(cos + i sign sin) = (a cos - b sign sin) + i (a sign sin + b cos)
    w = np.zeros((length, parts, freqs, 2))
    w[:rows, 0, :, 0], w[:rows, 0, :, 1] = cos * scale, sign * sin * scale
    if parts == 2:
        w[:rows, 1, :, 0], w[:rows, 1, :, 1] = -sign * sin * scale, cos * scale
    return w.reshape(length * parts, freqs * 2)


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    plan, x, dtype = _plan(node, ctx), ctx.shape(node.input[0]), ctx.numpy_dtype(node.input[0])
    if plan is None or x is None or dtype is None:
        return None
    axis, n, inverse, onesided = plan
    rank, parts = len(x), x[-1]
    w = matrix(x[axis], parts, n, inverse, onesided)
    co = 1 if inverse and onesided else 2
    k = w.shape[1] // co
    e = Emitter(node)
    # The transform axis goes next to the (real, imaginary) axis; the others keep their order.
    others = [d for d in range(rank - 1) if d != axis]
    perm = [*others, axis, rank - 1]
    moved = node.input[0] if perm == list(range(rank)) else e.op("Transpose", [node.input[0]], perm=perm)
    m = int(np.prod([x[d] for d in others], dtype=np.int64))
    flat = e.op("Reshape", [moved, e.ints([m, x[axis] * parts])])
    wide = dtype.itemsize < 4       # accumulate 16-bit floats in float32
    if wide:
        flat = e.op("Cast", [flat], to=onnx.TensorProto.FLOAT)
    product = e.op("MatMul", [flat, e.const(w.astype(np.float32 if wide else dtype), hint="dft_matrix")])
    if wide:
        product = e.op("Cast", [product], to=onnx.helper.np_dtype_to_tensor_dtype(dtype))
    moved_shape = [*(x[d] for d in others), k, co]
    if perm == list(range(rank)):
        e.op("Reshape", [product, e.ints(moved_shape)], out=node.output[0])
    else:
        shaped = e.op("Reshape", [product, e.ints(moved_shape)])
        e.op("Transpose", [shaped], out=node.output[0], perm=[int(i) for i in np.argsort(perm)])
    return e.replacement()


LEGALIZATIONS = (Legalization("DFT", "IREE 3.13 cannot lower onnx.DFT (0 of 10 node tests compiled); one MatMul "
                              "with a constant cos/sin matrix instead", _applies, _rewrite),)
