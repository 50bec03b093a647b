"""Three kinds of convolution, and max pooling, rewritten for IREE's data-tiled convolutions, in
llvm-cpu modules compiled with them (the tuner's ``data-tiled-conv`` set:
``flags.CONV_DATA_TILING`` and the ``conv_nchwc`` ukernel).

That set packs every convolution's channels in blocks of 16 and runs IREE's NCHWc kernel, which
on a dense 3x3 convolution over 32-256 channels beats im2col with data tiling (the default's
best) 1.5-3x: 1.46 ms against 4.1 for 64 -> 64 channels at 56x56, where im2col's gather, fused
with data tiling's packing, writes 7.2 MB at 3 GB/s (docs/performance.md). Three kinds of
convolution fall off that kernel (a ResNet has the first two):

- **Pointwise** (1x1, ungrouped, unpadded, batch 1, large enough to pay for packing). IREE leaves it a 4-D contraction that misses
  the packed matmul path (24 GFLOP/s), and with a stride a reduction (a ResNet's strided
  projections: 13-14 ms each where the whole model takes 40). Written as a strided slice and one
  2-D ``linalg.matmul`` [Cout, Cin] x [Cin, pixels], which data tiling packs for mmt4d.
- **A stride-2 convolution over few input channels** (a network's stem over RGB): 3 channels
  padded to 16 do 5.3x the work. Written space-to-depth: the input padded to even sizes, each 2x2
  block of pixels moved into the channels (4 Cin), and a stride-1 convolution with a
  ceil(K / 2) kernel over them (its weights rearranged the same way, zeros where the kernel
  ends; a constant expression IREE evaluates at load time).
- **A stride-1 convolution with a non-square kernel or over few input channels** (the
  openWakeWord embedding's 3x1 and 1x3 convolutions: 2.1-3.1 ms each against ~0.1 ms as a matmul;
  MTCNN's first 3x3 over RGB). Written as a matmul over the kernel's taps: the output computed on
  the padded width and cropped, so that each tap is one contiguous slice of the flattened padded
  image; the slices concatenated ([taps x Cin, pixels]) and one ``linalg.matmul``. A gather
  written as one ``linalg.generic`` (its index a sum of the tap's offset and the pixel) fuses
  into data tiling's packing and runs 2x slower than the copy and the packing apart.

The set packs a **max pooling** like a convolution too: its input padded, then packed, a pass
that cost more than the pooling itself (MTCNN-ONet, ResNet-50's stem). Written as an
elementwise maximum of the window's slices (``lower/packed_pool.py``), which packs nothing. A
max pooling of a convolution over few input channels (and its activation) is computed with it,
as one elementwise generic that reads the small input and writes the pooled output alone
(``lower/pooled_conv.py``): apart, the three wrote and read the convolution's whole output. So
is its activation where no pooling follows, which the product would write, unpack and read again.

Modules compiled with other flags are left as they are (channels-last and im2col have their own
forms for these convolutions), but for the strided pointwise ones of a channels-last module, which
IREE 3.13's conversion leaves a reduction it runs at a few GFLOP/s: those get the form above
(``strided_pointwise_body``). ``module_text`` is the one place a region's text meets its flags,
for every compile of it (the build, the tuner, the memory and dispatch statistics, replays).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aot.lower.depthwise import (ConvOperands, accumulator_init, conv_operands, expected_output, rewrite_ops,
                                 rewrite_ops_in_turn, zero_pad)
from aot.lower.flags import CHANNELS_LAST, CONV_DATA_TILING, PACKING_PAYS_FROM_FLOPS
from aot.lower.packed_pool import max_pool_body
from aot.lower.pooled_conv import activated_body, fused_body
from aot.lower.rewrite_text import cropped, dims_text, epilogue, prologue, tensor_type, vtensor_type
from aot.runtime.target import Target

# Bump with any change to what this module writes (or lower/packed_pool.py, lower/pooled_conv.py,
# or the text pieces of lower/rewrite_text.py): the learned database keys a plan by it
# (learn/key.py); the compile cache and the tune records key by the text it gives.
PACKED_CONV_VERSION = 7
# The same for what a channels-last module is given (``strided_pointwise_body``).
CHANNELS_LAST_REWRITE_VERSION = 1
# Input channels the NCHWc kernel pads to its block of 16 at a loss of 4x or more. A stride-2 stem
# over this many still fills a block after space-to-depth (4 Cin); at stride 1 they are gathered.
FEW_INPUT_CHANNELS = 4
# A stem kernel this wide or wider is padded after its space-to-depth, in blocks; a narrower one
# before. Measured on lone stems over 224 x 224 RGB, 16 and 64 outputs, pinned to this set and
# side by side (docs/performance.md, stop 57): padded first, IREE 3.13 fuses the padding into the
# transpose that makes the blocks and, for 5x5 and 7x7 kernels, wrote it at 0.2-0.5 G floats/s
# (2.1-3.1 ms for a 5x5 stem, 0.5 as blocks padded after); for 3x3 kernels padding after made the
# packing of the blocks the slow pass instead (0.67 ms against 0.38).
PAD_BLOCKS_FROM_TAPS = 5
# The gathered input is the kernel's taps times the input: up to a 7x7 kernel's.
MAX_TAPS = 49
_CONVOLUTION_TILING = next(f for f in CONV_DATA_TILING if f.endswith("=convolution"))


def applies(target: Target, opt: tuple[str, ...] | None) -> bool:
    """A module for ``target`` compiled with ``opt`` gets these rewrites."""
    return target.backend == "llvm-cpu" and opt is not None and _CONVOLUTION_TILING in opt


def module_text(target: Target, text: bytes, opt: tuple[str, ...] | None) -> bytes:
    """The text a region compiles from with these flags: rewritten where ``applies``; in a
    channels-last module, the strided pointwise convolutions alone."""
    if _channels_last(target, opt):
        rewritten, _ = rewrite_ops(text.decode(), strided_pointwise_body)
        return rewritten.encode()
    if not applies(target, opt):
        return text
    # the fusions first: their convolutions would be rewritten on their own before their pooling;
    # a pooled one before an unpooled one, which would take its activation from it
    rewritten, _ = rewrite_ops_in_turn(text.decode(), (fused_body,), (activated_body,),
                                       (pointwise_body, stem_body, shifted_body, max_pool_body))
    return rewritten.encode()


def _channels_last(target: Target, opt: tuple[str, ...] | None) -> bool:
    return target.backend == "llvm-cpu" and opt is not None and CHANNELS_LAST[0] in opt


def key_tag(target: Target, opt: tuple[str, ...] | None) -> tuple[str, ...]:
    """What a learned-database key adds for a region compiled this way: the rewrites' version for
    the data-tiled-conv and channels-last sets, nothing for any other (so no other row's key
    changes)."""
    if _channels_last(target, opt):
        return (f"channels-last strided pointwise {CHANNELS_LAST_REWRITE_VERSION}",)
    return (f"packed-conv {PACKED_CONV_VERSION}",) if applies(target, opt) else ()


def pointwise(op: Any) -> ConvOperands | None:
    """``op``'s operands when it is an ungrouped, unpadded 1x1 ``onnx.Conv`` over one image whose
    product pays for the dispatches that pack and unpack a data-tiled matmul (the rule of
    ``flags.PACKING_PAYS_FROM_FLOPS``; MTCNN-PNet's 1x1 heads, 46 and 92 kFLOP, stay as they are)."""
    c = conv_operands(op, valid=True)
    if (c is None or c.group != 1 or c.w[2:] != (1, 1) or c.w[1] != c.x[1] or c.x[0] != 1 or any(c.pads)
            or expected_output(c) != c.y):
        return None
    return c if 2 * c.w[0] * c.w[1] * c.y[2] * c.y[3] >= PACKING_PAYS_FROM_FLOPS else None


def strided_pointwise_body(op: Any) -> str | None:
    """``pointwise_body`` for the strided ones alone: IREE 3.13's channels-last conversion lowers
    every other pointwise convolution to a product it vectorises, but these to a generic reduction
    (the open-NSFW ResNet-50's six projections: 15.8 ms of the 25 ms its channels-last build ran)."""
    c = pointwise(op)
    return pointwise_body(op) if c is not None and c.strides != (1, 1) else None


def pointwise_body(op: Any) -> str | None:
    c = pointwise(op)
    if c is None:
        return None
    _, cin, h, w = c.x
    cout = c.w[0]
    _, _, oh, ow = c.y
    t, sh, sw = c.dtype, *c.strides
    pixels = oh * ow
    sub = tensor_type((1, cin, oh, ow), t)
    # every stride-th pixel (the kernel is one pixel and unpadded, so these are the ones it reads)
    strided = (f"%xs = tensor.extract_slice %x[0, 0, 0, 0] [1, {cin}, {oh}, {ow}] [1, 1, {sh}, {sw}] : "
               f"{tensor_type(c.x, t)} to {sub}") if (oh, ow) != (h, w) else ""
    source = "%xs" if strided else "%x"
    out2 = tensor_type((cout, pixels), t)
    init = _init_2d(c.bias, cout, t, out2)
    return f"""{prologue("pointwise", c)}
    {strided}
    %x2 = tensor.collapse_shape {source} [[0, 1], [2, 3]] : {sub} into {tensor_type((cin, pixels), t)}
    %w2 = tensor.collapse_shape %w [[0], [1, 2, 3]] : {tensor_type(c.w, t)} into {tensor_type((cout, cin), t)}
    %e = tensor.empty() : {out2}
    {init}
    %y2 = linalg.matmul ins(%w2, %x2 : {tensor_type((cout, cin), t)}, {tensor_type((cin, pixels), t)}) outs(%init : {out2}) -> {out2}
    %y = tensor.expand_shape %y2 [[0, 1], [2, 3]] output_shape [1, {cout}, {oh}, {ow}] : {out2} into {tensor_type(c.y, t)}
{epilogue("%y", c.y, c.dtype)}"""


def _init_2d(bias: bool, channels: int, t: str, out: str) -> str:
    if not bias:
        return f"%init = linalg.fill ins(%zero : {t}) outs(%e : {out}) -> {out}"
    return f"""%b = torch_c.to_builtin_tensor %bt : {vtensor_type((channels,), t)} -> tensor<{channels}x{t}>
    %init = linalg.generic {{indexing_maps = [affine_map<(c, p) -> (c)>, affine_map<(c, p) -> (c, p)>], iterator_types = ["parallel", "parallel"]}} ins(%b : tensor<{channels}x{t}>) outs(%e : {out}) {{
    ^bb0(%v: {t}, %o: {t}):
      linalg.yield %v : {t}
    }} -> {out}"""


def stem(op: Any) -> ConvOperands | None:
    """``op``'s operands when it is an ungrouped stride-2 ``onnx.Conv`` over at most
    ``FEW_INPUT_CHANNELS`` input channels with a kernel wider than its stride."""
    c = conv_operands(op, valid=True)
    if (c is None or c.group != 1 or c.w[1] != c.x[1] or c.x[1] > FEW_INPUT_CHANNELS or c.strides != (2, 2)
            or c.dilations != (1, 1) or min(c.w[2:]) < 2 or expected_output(c) != c.y):
        return None
    return c


@dataclass(frozen=True)
class StemBlocks:
    """How a stem's input becomes 2x2 blocks: zeros around the image in pixels, then around the
    blocks in whole blocks (``PAD_BLOCKS_FROM_TAPS`` says which of the two holds the stem's
    padding), and the kernel over blocks."""

    early: bool                          # the stem's padding in pixels (a narrow kernel), not in blocks
    pixels: tuple[int, int, int, int]    # top, left, bottom, right, before the blocks are made
    blocks: tuple[int, int, int, int]    # the same, in blocks, after
    shift: tuple[int, int]               # zero rows, columns in front of the kernel
    kernel: tuple[int, int]              # over blocks
    size: tuple[int, int]                # the image in pixels once padded (even)

    @property
    def grid(self) -> tuple[int, int]:
        """The padded input in blocks."""
        top, left, bottom, right = self.blocks
        return top + self.size[0] // 2 + bottom, left + self.size[1] // 2 + right

    @property
    def output(self) -> tuple[int, int]:
        """The convolution over blocks: the stem's output, or a row or column more."""
        (gh, gw), (bh, bw) = self.grid, self.kernel
        return gh - bh + 1, gw - bw + 1


def stem_blocks(c: ConvOperands) -> StemBlocks:
    """The stem's padding in pixels before the blocks are made, or in blocks after (a kernel of
    ``PAD_BLOCKS_FROM_TAPS`` or more; the image then padded only to an even size)."""
    _, _, h, w = c.x
    _, _, kh, kw = c.w
    top, left, bottom, right = c.pads
    if max(kh, kw) < PAD_BLOCKS_FROM_TAPS:
        hp, wp = h + top + bottom, w + left + right
        hp, wp = hp + hp % 2, wp + wp % 2
        return StemBlocks(True, (top, left, hp - h - top, wp - w - left), (0, 0, 0, 0), (0, 0),
                          ((kh + 1) // 2, (kw + 1) // 2), (hp, wp))
    sh, sw = top % 2, left % 2          # an odd leading pad: one more, and a zero row in front of the kernel
    he, we = h + h % 2, w + w % 2
    bh, bw = (kh + sh + 1) // 2, (kw + sw + 1) // 2
    th, tw = (top + sh) // 2, (left + sw) // 2
    oh, ow = c.y[2], c.y[3]
    gh, gw = max(0, oh + bh - 1 - th - he // 2), max(0, ow + bw - 1 - tw - we // 2)
    return StemBlocks(False, (0, 0, he - h, we - w), (th, tw, gh, gw), (sh, sw), (bh, bw), (he, we))


def _padded(result: str, source: str, pads: tuple[int, int, int, int], source_type: str, padded_type: str,
            t: str) -> str:
    """``%result``: ``%source`` with zeros around its last two axes, or the same value where none."""
    top, left, bottom, right = pads
    if not any(pads):
        return f"%{result} = tensor.cast %{source} : tensor<{source_type}> to tensor<{padded_type}>"
    return zero_pad(result, source, (0, 0, top, left), (0, 0, bottom, right), source_type, padded_type, t)


def stem_body(op: Any) -> str | None:
    c = stem(op)
    if c is None:
        return None
    n, cin, h, w = c.x
    cout, _, kh, kw = c.w
    t = c.dtype
    b = stem_blocks(c)
    (he, we), (bh, bw), (sh, sw) = b.size, b.kernel, b.shift
    fh, fw = b.output
    x_t, even = dims_text(c.x, t), dims_text((n, cin, he, we), t)
    blocks = tensor_type((n, cin, he // 2, 2, we // 2, 2), t)
    moved = tensor_type((n, 2, 2, cin, he // 2, we // 2), t)
    x_s2d = dims_text((n, 4 * cin, he // 2, we // 2), t)
    x_padded = dims_text((n, 4 * cin, *b.grid), t)
    w_t, w_padded = dims_text(c.w, t), dims_text((cout, cin, 2 * bh, 2 * bw), t)
    w_blocks, w_moved = tensor_type((cout, cin, bh, 2, bw, 2), t), tensor_type((cout, 2, 2, cin, bh, bw), t)
    w_s2d = tensor_type((cout, 4 * cin, bh, bw), t)
    full = f"{n}x{cout}x{fh}x{fw}x{t}"
    init = accumulator_init(c.bias, cout, t, full, "(n, c, h, w) -> (c)")
    # a kernel over whole blocks can give a row or column more: cropped
    crop, result = cropped("%yf", f"tensor<{full}>", c)
    return f"""{prologue("stem", c)}
    {_padded('xe', 'x', b.pixels, x_t, even, t)}
    %x6 = tensor.expand_shape %xe [[0], [1], [2, 3], [4, 5]] output_shape [{n}, {cin}, {he // 2}, 2, {we // 2}, 2] : tensor<{even}> into {blocks}
    %xo = tensor.empty() : {moved}
    %xm = linalg.transpose ins(%x6 : {blocks}) outs(%xo : {moved}) permutation = [0, 3, 5, 1, 2, 4]
    %xc = tensor.collapse_shape %xm [[0], [1, 2, 3], [4], [5]] : {moved} into tensor<{x_s2d}>
    {_padded('xs', 'xc', b.blocks, x_s2d, x_padded, t)}
    {zero_pad('wp', 'w', (0, 0, sh, sw), (0, 0, 2 * bh - kh - sh, 2 * bw - kw - sw), w_t, w_padded, t)}
    %w6 = tensor.expand_shape %wp [[0], [1], [2, 3], [4, 5]] output_shape [{cout}, {cin}, {bh}, 2, {bw}, 2] : tensor<{w_padded}> into {w_blocks}
    %we = tensor.empty() : {w_moved}
    %wm = linalg.transpose ins(%w6 : {w_blocks}) outs(%we : {w_moved}) permutation = [0, 3, 5, 1, 2, 4]
    %ws = tensor.collapse_shape %wm [[0], [1, 2, 3], [4], [5]] : {w_moved} into {w_s2d}
    %e = tensor.empty() : tensor<{full}>
    {init}
    %yf = linalg.conv_2d_nchw_fchw {{dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}} ins(%xs, %ws : tensor<{x_padded}>, {w_s2d}) outs(%init : tensor<{full}>) -> tensor<{full}>
    {crop}
{epilogue(result, c.y, c.dtype)}"""


def shifted(op: Any) -> ConvOperands | None:
    """``op``'s operands when it is an ungrouped stride-1 ``onnx.Conv`` over one image that the
    NCHWc kernel runs badly: a non-square kernel (3x1, 1x3, 1x7...) or at most
    ``FEW_INPUT_CHANNELS`` input channels; and whose product pays for packing."""
    c = conv_operands(op, valid=True)
    if (c is None or c.group != 1 or c.w[1] != c.x[1] or c.x[0] != 1 or c.strides != (1, 1)
            or c.dilations != (1, 1) or c.w[2:] == (1, 1) or expected_output(c) != c.y):
        return None
    if (c.w[2] == c.w[3] and c.x[1] > FEW_INPUT_CHANNELS) or c.w[2] * c.w[3] > MAX_TAPS:
        return None
    return c if 2 * c.w[0] * c.w[1] * c.w[2] * c.w[3] * c.y[2] * c.y[3] >= PACKING_PAYS_FROM_FLOPS else None


def shifted_body(op: Any) -> str | None:
    """``op`` as one matmul over its kernel's taps, or None for any other op (``shifted``)."""
    c = shifted(op)
    if c is None:
        return None
    _, cin, h, w = c.x
    cout, _, kh, kw = c.w
    oh = c.y[2]
    top, left, bottom, right = c.pads
    t = c.dtype
    # The output is computed on the padded width (wp columns per row, the last kw - 1 of them
    # wrapping into the next row) and cropped: then each kernel tap reads the flattened padded
    # image at one offset, and the taps' gather is contiguous. One more zero row keeps the last
    # tap's reads inside it.
    hp, wp = h + top + bottom, w + left + right
    rows = hp + (1 if kw > 1 else 0)
    flat, cols = rows * wp, oh * wp
    x_t, padded = dims_text(c.x, t), dims_text((1, cin, rows, wp), t)
    pad = zero_pad("xp", "x", (0, 0, top, left), (0, 0, rows - h - top, right), x_t, padded, t) \
        if (rows, wp) != (h, w) else ""
    source = "%xp" if pad else "%x"
    tap = tensor_type((cin, cols), t)
    names = [f"%s{a}_{b}" for a in range(kh) for b in range(kw)]
    slices = "\n    ".join(
        f"%s{a}_{b} = tensor.extract_slice %xf[0, {a * wp + b}] [{cin}, {cols}] [1, 1] : {tensor_type((cin, flat), t)} to {tap}"
        for a in range(kh) for b in range(kw))
    col, wk = tensor_type((kh * kw * cin, cols), t), tensor_type((cout, kh * kw * cin), t)
    w_moved = tensor_type((cout, kh, kw, cin), t)
    out2, grid = tensor_type((cout, cols), t), tensor_type((1, cout, oh, wp), t)
    crop, result = cropped("%yg", grid, c)
    return f"""{prologue("shifted", c)}
    {pad}
    %xf = tensor.collapse_shape {source} [[0, 1], [2, 3]] : tensor<{padded}> into {tensor_type((cin, flat), t)}
    {slices}
    %x2 = tensor.concat dim(0) {', '.join(names)} : ({', '.join([tap] * len(names))}) -> {col}
    %we = tensor.empty() : {w_moved}
    %wm = linalg.transpose ins(%w : tensor<{dims_text(c.w, t)}>) outs(%we : {w_moved}) permutation = [0, 2, 3, 1]
    %w2 = tensor.collapse_shape %wm [[0], [1, 2, 3]] : {w_moved} into {wk}
    %e = tensor.empty() : {out2}
    {_init_2d(c.bias, cout, t, out2)}
    %y2 = linalg.matmul ins(%w2, %x2 : {wk}, {col}) outs(%init : {out2}) -> {out2}
    %yg = tensor.expand_shape %y2 [[0, 1], [2, 3]] output_shape [1, {cout}, {oh}, {wp}] : {out2} into {grid}
    {crop}
{epilogue(result, c.y, c.dtype)}"""


