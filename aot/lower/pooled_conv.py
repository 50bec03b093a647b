"""A convolution over few input channels whose activation is max-pooled, written as one
elementwise ``linalg.generic`` over the pooled output, in modules compiled with the data-tiled-conv
set (``lower/packed_conv.py``'s ``module_text`` applies it first, under its ``PACKED_CONV_VERSION``).

A network's first layer over a spectrogram or an image (DNSMOS's 1 -> 32 channels at 900 x 120,
AECMOS's 3 -> 32, MTCNN's 3 -> 10) does a few multiply-adds per output value and writes its whole
output: 13.8 MB for DNSMOS P.808's, which the activation reads and writes again and the pooling
reads once more. Apart, as ``packed_conv.shifted_body``'s product over the taps, then the
activation and ``packed_pool``'s maximum, they took 4.8 ms of P.808's 14.1 under the profiler, at
34 GFLOP/s for the product (docs/performance.md, stop 72). Together, each pooled value is the
largest of its window's convolution values, each computed from the input where it is needed: the
input is read (it is small: few channels) and only the pooled output, a quarter of the bytes at a
2 x 2 pooling, is written, in one dispatch that needs no packing.

For a pooling window of ``P`` positions and a kernel of ``K`` taps over ``C`` input channels, the
generic reads ``C x`` (window rows + kernel rows - 1) ``x`` (the same in columns) input values and
does ``P x K x C`` multiply-adds per output value, a convolution's work again where the windows do
not overlap. The input is padded as the convolution pads it and split by the pooling's stride into
phases (space-to-depth), so each value the generic reads is an unstrided slice along the width
and the width vectorises. The activation is applied to each convolution value before the maximum,
so it holds for any activation, monotone or not (PRelu's slopes are weights, unknown here).

An activation of such a convolution over at most ``MAX_UNPOOLED_TAPS`` taps that no max pooling
follows (DNSMOS P.835's first layer, 1 -> 128 channels at 900 x 161 under a ReLU; the openWakeWord
embedding's) is the same generic with a window of one value (``activated_body``): the product
over the taps, the unpacking of its output and the activation's pass (16.4 ms in three dispatches
for P.835's layer) become one pass that writes the activated output (7.8 ms).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from aot.lower.depthwise import (VTENSOR, ConvOperands, Replacement, conv_operands, expected_output,
                                 onnx_attributes)
from aot.lower.packed_pool import MaxPool, max_pool
from aot.lower.rewrite_text import epilogue, tensor_type, vtensor_type

# At most this many input channels: a convolution over more fills the NCHWc kernel's blocks of 16
# well enough (``packed_conv.FEW_INPUT_CHANNELS``, the same bound), and the generic's operands grow
# with the channels.
MAX_INPUT_CHANNELS = 4
# At most this many input values read per output value (channels x the window's input rows x
# columns): each is an operand of the generic and a vector register in its loop.
MAX_READS = 48
# Without a pooling, at most this many taps (channels x kernel rows x columns): the product over
# the taps is a matrix product this deep, which IREE runs at a memory-bound 60 GFLOP/s (DNSMOS
# P.835's 9: 5.7 ms, then 10.8 to unpack and activate its output; fused, 7.8 ms in all). At 27
# taps (MTCNN-RNet's and ONet's 3 x 3 over 3 channels) the product pays and the fusion lost 2-6%.
MAX_UNPOOLED_TAPS = 9
_FLOAT = re.compile(r"(-?[0-9.]+(?:e[-+]?\d+)?) : f32")


class Activation(enum.Enum):
    NONE = "none"
    RELU = "Relu"
    LEAKY_RELU = "LeakyRelu"
    PRELU = "PRelu"


@dataclass(frozen=True, slots=True)
class PooledConv:
    """A stride-1 convolution, its activation and the max pooling of that, as region MLIR states them."""

    conv: ConvOperands
    activation: Activation
    alpha: float            # LeakyRelu's slope
    pool: MaxPool

    @property
    def span(self) -> tuple[int, int]:
        """The input rows and columns one pooled value reads."""
        return (self.pool.kernel[0] + self.conv.w[2] - 1, self.pool.kernel[1] + self.conv.w[3] - 1)


# The fused convolution, the values the fusion takes (the convolution's operands, PRelu's slopes)
# and the ops it leaves dead.
Matched = tuple[PooledConv, tuple[Any, ...], tuple[Any, ...]]


def _single_use_producer(value: Any) -> Any | None:
    """The op that defines ``value`` where ``value`` has no other reader, else None."""
    owner = value.owner
    if not hasattr(owner, "operands") or len(list(value.uses)) != 1:
        return None
    return owner


def match(pool_op: Any) -> Matched | None:
    """The fused convolution when ``pool_op`` is a max pooling without padding of an activation
    (Relu, LeakyRelu, PRelu with one slope per channel, or none) of an ungrouped stride-1
    convolution over one image of at most ``MAX_INPUT_CHANNELS`` channels, each read by the next
    alone; with the values the fusion takes and the ops it leaves dead."""
    p = max_pool(pool_op)
    if p is None or p.pads != (0, 0, 0, 0) or p.x[0] != 1 or any(
            (p.y[2 + i] - 1) * p.strides[i] + p.kernel[i] > p.x[2 + i] for i in range(2)):   # a window past the edge
        return None
    act_op = _single_use_producer(pool_op.operands[0])
    if act_op is None:
        return None
    activation, alpha, slopes = _activation(act_op, p.x[1])
    conv_op = act_op if activation is Activation.NONE else _single_use_producer(act_op.operands[0])
    if activation is None or conv_op is None:
        return None
    dead = (act_op, conv_op) if conv_op is not act_op else (conv_op,)
    return _fused(conv_op, activation, alpha, slopes, p, dead, max_taps=None)


def match_unpooled(act_op: Any) -> Matched | None:
    """The same for an activation of such a convolution that no max pooling follows (DNSMOS
    P.835's first layer, 1 -> 128 channels under a ReLU): a window of one value, so the generic
    writes the activated convolution. ``fused_body`` goes first where a pooling does follow."""
    y = _result_shape(act_op)
    if y is None or len(y) != 4 or not len(act_op.operands):   # no image: no convolution before it
        return None
    conv_op = _single_use_producer(act_op.operands[0])
    if conv_op is None:
        return None
    activation, alpha, slopes = _activation(act_op, y[1])
    if activation in (None, Activation.NONE):
        return None
    one_value = MaxPool(y, y, (1, 1), (1, 1), (0, 0, 0, 0))
    return _fused(conv_op, activation, alpha, slopes, one_value, (conv_op,), max_taps=MAX_UNPOOLED_TAPS)


def _fused(conv_op: Any, activation: Activation, alpha: float, slopes: tuple[Any, ...], pool: MaxPool,
           dead: tuple[Any, ...], max_taps: int | None) -> Matched | None:
    """``match``'s answer when ``conv_op`` is a convolution the fusion takes, pooled by ``pool``
    (and over at most ``max_taps`` taps, where that is bounded)."""
    c = conv_operands(conv_op, valid=True)
    if (c is None or c.group != 1 or c.strides != (1, 1) or c.dilations != (1, 1) or c.x[0] != 1
            or c.x[1] > MAX_INPUT_CHANNELS or c.dtype != "f32" or expected_output(c) != c.y or c.y != pool.x):
        return None
    if max_taps is not None and c.w[1] * c.w[2] * c.w[3] > max_taps:
        return None
    fused = PooledConv(c, activation, alpha, pool)
    if c.x[1] * fused.span[0] * fused.span[1] > MAX_READS:
        return None
    return fused, (*conv_op.operands, *slopes), dead


def _result_shape(op: Any) -> tuple[int, ...] | None:
    """The static f32 shape of ``op``'s one result, or None."""
    if len(op.results) != 1:
        return None
    found = VTENSOR.fullmatch(str(op.results[0].type))
    return _dims(found) if found is not None and found[2] == "f32" else None


def _activation(op: Any, channels: int) -> tuple[Activation | None, float, tuple[Any, ...]]:
    """The activation ``op`` is, LeakyRelu's slope and PRelu's slopes operand (one per channel)."""
    for kind in (Activation.RELU, Activation.LEAKY_RELU, Activation.PRELU):
        attrs = onnx_attributes(op, kind.value)
        if attrs is None:
            continue
        if kind is Activation.LEAKY_RELU:
            found = _FLOAT.search(attrs.get("torch.onnx.alpha", "0.01 : f32"))
            return (kind, float(found[1]), ()) if found else (None, 0.0, ())
        if kind is Activation.PRELU:
            slope = VTENSOR.fullmatch(str(op.operands[1].type)) if len(op.operands) == 2 else None
            # one slope per channel, broadcast over the rows and columns: [C, 1, 1] or [1, C, 1, 1]
            if slope is None or slope[2] != "f32" or _dims(slope) not in ((channels, 1, 1), (1, channels, 1, 1)):
                return None, 0.0, ()
            return kind, 0.0, (op.operands[1],)
        return kind, 0.0, ()
    return Activation.NONE, 0.0, ()


def _dims(vtensor: re.Match[str]) -> tuple[int, ...]:
    """The shape a ``VTENSOR`` match states."""
    return tuple(int(d) for d in vtensor[1].split(","))


def fused_body(pool_op: Any) -> Replacement | None:
    """``pool_op`` with the convolution and activation before it as one generic (``match``), or
    None for any other op."""
    return _replacement(match(pool_op))


def activated_body(act_op: Any) -> Replacement | None:
    """``act_op`` with the convolution before it as one generic (``match_unpooled``), or None."""
    return _replacement(match_unpooled(act_op))


def _replacement(found: Matched | None) -> Replacement | None:
    if found is None:
        return None
    fused, operands, dead = found
    slope_types = tuple(str(v.type) for v in operands[3 if fused.conv.bias else 2:])
    return Replacement(body_mlir(fused, slope_types), operands, dead)


def body_mlir(f: PooledConv, slope_types: tuple[str, ...] = ()) -> str:
    """The function computing ``f``'s pooled output from the convolution's operands (and PRelu's
    slopes, of ``slope_types``). Its ops are cloned into the region, so no nested region reads a
    value of the body (it would dangle there): the generic's constants are its own."""
    c, p = f.conv, f.pool
    t = c.dtype
    _, cin, h, w = c.x
    cout, _, kh, kw = c.w
    _, _, oh, ow = p.y
    (sh, sw), (span_h, span_w) = p.strides, f.span
    top, left = c.pads[:2]
    # the padded input, rounded up to whole phases of the stride: every row and column a window reads
    rows = -(-max(h + top + c.pads[2], sh * (oh - 1) + span_h) // sh) * sh
    cols = -(-max(w + left + c.pads[3], sw * (ow - 1) + span_w) // sw) * sw
    u, v = rows // sh, cols // sw
    padded, split = (1, cin, rows, cols), (1, cin, u, sh, v, sw)
    phases = (cin, sh, sw, u, v)
    reads = [(ci, dy, dx) for ci in range(cin) for dy in range(span_h) for dx in range(span_w)]
    taps = [(ci, a, b) for ci in range(cin) for a in range(kh) for b in range(kw)]
    # Each value the generic reads is a view of its own, so every indexing map is a projected
    # permutation (a map with a constant index left IREE's generic unvectorised, 15 GFLOP/s): the
    # phases' rows and columns at one offset for each input value, each tap's weights over the
    # output channels (a constant expression IREE evaluates at load time).
    view = tensor_type((oh, ow), t)
    channel = tensor_type((cout,), t)
    views = [f"%x{ci}_{dy}_{dx} = tensor.extract_slice %xs[{ci}, {dy % sh}, {dx % sw}, {dy // sh}, {dx // sw}] "
             f"[1, 1, 1, {oh}, {ow}] [1, 1, 1, 1, 1] : {tensor_type(phases, t)} to {view}" for ci, dy, dx in reads]
    views += [f"%w{ci}_{a}_{b} = tensor.extract_slice %w[0, {ci}, {a}, {b}] [{cout}, 1, 1, 1] [1, 1, 1, 1] : "
              f"{tensor_type(c.w, t)} to {channel}" for ci, a, b in taps]
    maps = [*(["affine_map<(n, c, i, j) -> (i, j)>"] * len(reads)), *(["affine_map<(n, c, i, j) -> (c)>"] * len(taps))]
    ins = [(f"%x{ci}_{dy}_{dx}", view) for ci, dy, dx in reads] + [(f"%w{ci}_{a}_{b}", channel) for ci, a, b in taps]
    args = [f"%v{ci}_{dy}_{dx}" for ci, dy, dx in reads] + [f"%k{ci}_{a}_{b}" for ci, a, b in taps]
    extra, convert, per_channel = _per_channel_operands(f, slope_types)
    for name, tensor, value, indices in per_channel:
        ins.append((name, tensor))
        maps.append(f"affine_map<(n, c, i, j) -> ({indices})>")
        args.append(value)
    maps.append("affine_map<(n, c, i, j) -> (n, c, i, j)>")
    body: list[str] = []
    positions = [(pa, pb) for pa in range(p.kernel[0]) for pb in range(p.kernel[1])]
    sums = {q: "%bias" if c.bias else "%zero" for q in positions}
    # Input by input, each into every window position's sum it is a tap of: an input value is
    # live from its read to its last use, not from the first position's sum to the last's.
    for ci, dy, dx in reads:
        for pa, pb in positions:
            a, b = dy - pa, dx - pb
            if 0 <= a < kh and 0 <= b < kw:
                name = f"{pa}_{pb}_{ci}_{a}_{b}"
                body.append(f"%m{name} = arith.mulf %v{ci}_{dy}_{dx}, %k{ci}_{a}_{b} : {t}")
                body.append(f"%a{name} = arith.addf {sums[pa, pb]}, %m{name} : {t}")
                sums[pa, pb] = f"%a{name}"
    values = [_activated(f.activation, sums[pa, pb], f"{pa}_{pb}", body, t) for pa, pb in positions]
    largest = values[0]
    for i, value in enumerate(values[1:]):
        body.append(f"%max{i} = arith.maximumf {largest}, {value} : {t}")
        largest = f"%max{i}"
    x_t, out = vtensor_type(c.x, t), tensor_type(p.y, t)
    header_args = ", ".join([f"%xt: {x_t}", f"%wt: {vtensor_type(c.w, t)}", *(f"{n}: {ty}" for n, ty in extra)])
    split_t = tensor_type(split, t)
    newline = "\n    "
    return f"""func.func @pooled_conv({header_args}) -> {vtensor_type(p.y, t)} {{
    %x = torch_c.to_builtin_tensor %xt : {x_t} -> {tensor_type(c.x, t)}
    %w = torch_c.to_builtin_tensor %wt : {vtensor_type(c.w, t)} -> {tensor_type(c.w, t)}
    {newline.join(convert)}
    %xp = tensor.pad %x low[0, 0, {top}, {left}] high[0, 0, {rows - h - top}, {cols - w - left}] {{
    ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
      %pad = arith.constant 0.0 : {t}
      tensor.yield %pad : {t}
    }} : {tensor_type(c.x, t)} to {tensor_type(padded, t)}
    %x6 = tensor.expand_shape %xp [[0], [1], [2, 3], [4, 5]] output_shape [{", ".join(map(str, split))}] : {tensor_type(padded, t)} into {split_t}
    %x5 = tensor.collapse_shape %x6 [[0, 1], [2], [3], [4], [5]] : {split_t} into {tensor_type((cin, u, sh, v, sw), t)}
    %xe = tensor.empty() : {tensor_type(phases, t)}
    %xs = linalg.transpose ins(%x5 : {tensor_type((cin, u, sh, v, sw), t)}) outs(%xe : {tensor_type(phases, t)}) permutation = [0, 2, 4, 1, 3]
    {newline.join(views)}
    %e = tensor.empty() : {out}
    %y = linalg.generic {{indexing_maps = [{", ".join(maps)}], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins({", ".join(n for n, _ in ins)} : {", ".join(ty for _, ty in ins)}) outs(%e : {out}) {{
    ^bb0({", ".join(f"{a}: {t}" for a in args)}, %o: {t}):
      %zero = arith.constant 0.0 : {t}
      %alpha = arith.constant {f.alpha:.9e} : {t}
      {(newline + "  ").join(body)}
      linalg.yield {largest} : {t}
    }} -> {out}
{epilogue("%y", p.y, t)}"""


def _per_channel_operands(f: PooledConv, slope_types: tuple[str, ...]
                          ) -> tuple[list[tuple[str, str]], list[str], list[tuple[str, str, str, str]]]:
    """The function's arguments beyond the input and weights (the bias, PRelu's slopes), their
    conversions to builtin tensors, and each as the generic's operand: its name, its tensor type,
    the block argument that reads it and its indices over the output channel ``c``."""
    t, cout = f.conv.dtype, f.conv.w[0]
    extra, convert, operands = [], [], []
    if f.conv.bias:
        extra.append(("%bt", vtensor_type((cout,), t)))
        convert.append(f"%b = torch_c.to_builtin_tensor %bt : {vtensor_type((cout,), t)} -> {tensor_type((cout,), t)}")
        operands.append(("%b", tensor_type((cout,), t), "%bias", "c"))
    if f.activation is Activation.PRELU:
        (slope_type,) = slope_types
        found = VTENSOR.fullmatch(slope_type)
        assert found is not None, slope_type   # ``_activation`` matched it
        dims = _dims(found)   # [C, 1, 1] or [1, C, 1, 1]
        extra.append(("%st", slope_type))
        convert.append(f"%s = torch_c.to_builtin_tensor %st : {slope_type} -> {tensor_type(dims, t)}")
        operands.append(("%s", tensor_type(dims, t), "%slope", "c, 0, 0" if len(dims) == 3 else "0, c, 0, 0"))
    return extra, convert, operands


def _activated(activation: Activation, value: str, name: str, body: list[str], t: str) -> str:
    """``value`` through ``activation``, its ops appended to ``body``; the value that holds it."""
    if activation is Activation.NONE:
        return value
    if activation is Activation.RELU:
        body.append(f"%r{name} = arith.maximumf {value}, %zero : {t}")
        return f"%r{name}"
    slope = "%alpha" if activation is Activation.LEAKY_RELU else "%slope"
    body.append(f"%n{name} = arith.mulf {value}, {slope} : {t}")
    body.append(f"%p{name} = arith.cmpf ogt, {value}, %zero : {t}")
    body.append(f"%r{name} = arith.select %p{name}, {value}, %n{name} : {t}")
    return f"%r{name}"
