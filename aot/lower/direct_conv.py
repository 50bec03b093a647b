"""Convolutions with few output channels over wide kernels kept out of im2col in llvm-cpu regions.

im2col (a default llvm-cpu flag, ``lower/flags.py``) copies each output pixel's ``K = Cin*kh*kw``
inputs into a buffer, then multiplies it by the ``Cout x K`` weights. When ``K`` dwarfs ``Cout``,
the copy is the work and its buffer leaves the cache: Basic Pitch's 8 -> 8 convolution over 3x39
frequency bins copies its input 117 times into 170 MB, half of the model's call (60 ms of 130,
docs/performance.md). Measured one convolution at a time, side by side, the direct code beat
im2col 9.3x there, 5.9x on 32 -> 1 over 7x7, 2.6x on 64 -> 4 over 3x3 and 2.1x on 96 -> 8 over
5x5 (``K / Cout`` of 117, 1568, 144 and 300), and by only 1.3-1.9x where ``K / Cout`` is 6-25.
Whole models with the small ratios keep im2col (it is the default because it won on them), so only
a convolution whose copy is at least ``DIRECT_RATIO`` values per output value is written as a
``linalg.generic`` with the named NCHW op's indexing maps: IREE's im2col pass leaves a generic
alone (as it does ``lower/depthwise.py``'s), and IREE's CPU code compiles it as a direct
convolution. The other convolutions of the module keep im2col.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aot.lower.depthwise import ConvOperands, accumulator_init, conv_operands, expected_output, zero_pad

DIRECT_REASON = "few output channels over a wide kernel: a direct convolution instead of im2col for llvm-cpu"
# K = Cin*kh*kw against Cout: at or above this, im2col copies at least this many values per output value.
DIRECT_RATIO = 64


def match(op: Any) -> ConvOperands | None:
    """``op``'s operands when it is an ungrouped ``onnx.Conv`` whose im2col copy would be at least
    ``DIRECT_RATIO`` values per output value."""
    c = conv_operands(op)
    if c is None or c.group != 1 or c.w[1] != c.x[1] or expected_output(c) != c.y:
        return None
    cout, cin, kh, kw = c.w
    return c if kh * kw > 1 and cin * kh * kw >= DIRECT_RATIO * cout else None


def direct_body(op: Any) -> str | None:
    """The direct form of ``op`` (``depthwise.Lowering``), or None for any other op."""
    c = match(op)
    return None if c is None else body_mlir(c)


def body_mlir(c: ConvOperands) -> str:
    """A function computing ``c`` with one NCHW ``linalg.generic`` over the padded input."""
    n, cin, h, w = c.x
    cout, _, kh, kw = c.w
    _, _, oh, ow = c.y
    (sh, sw), (dh, dw) = c.strides, c.dilations
    top, left, bottom, right = c.pads
    t = c.dtype
    x_t, w_t, y_t = f"{n}x{cin}x{h}x{w}x{t}", f"{cout}x{cin}x{kh}x{kw}x{t}", f"{n}x{cout}x{oh}x{ow}x{t}"
    padded = f"{n}x{cin}x{h + top + bottom}x{w + left + right}x{t}"
    vt = lambda dims: f"!torch.vtensor<[{','.join(map(str, dims))}],{t}>"   # noqa: E731
    bias_arg = f", %bt: {vt((cout,))}" if c.bias else ""
    init = accumulator_init(c.bias, cout, t, y_t, "(n, c, h, w) -> (c)")
    return f"""func.func @direct(%xt: {vt(c.x)}, %wt: {vt(c.w)}{bias_arg}) -> {vt(c.y)} {{
    %zero = arith.constant 0.0 : {t}
    %x = torch_c.to_builtin_tensor %xt : {vt(c.x)} -> tensor<{x_t}>
    %w = torch_c.to_builtin_tensor %wt : {vt(c.w)} -> tensor<{w_t}>
    {zero_pad('xp', 'x', (0, 0, top, left), (0, 0, bottom, right), x_t, padded, t)}
    %e = tensor.empty() : tensor<{y_t}>
    {init}
    %y = linalg.generic {{indexing_maps = [affine_map<(n, f, h, w, c, i, j) -> (n, c, h * {sh} + i * {dh}, w * {sw} + j * {dw})>, affine_map<(n, f, h, w, c, i, j) -> (f, c, i, j)>, affine_map<(n, f, h, w, c, i, j) -> (n, f, h, w)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}} ins(%xp, %w : tensor<{padded}>, tensor<{w_t}>) outs(%init : tensor<{y_t}>) {{
    ^bb0(%in: {t}, %k: {t}, %acc: {t}):
      %m = arith.mulf %in, %k : {t}
      %s = arith.addf %acc, %m : {t}
      linalg.yield %s : {t}
    }} -> tensor<{y_t}>
    %yt = torch_c.from_builtin_tensor %y : tensor<{y_t}> -> {vt(c.y)}
    return %yt : {vt(c.y)}
}}"""
