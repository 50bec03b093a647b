"""Depthwise convolutions of llvm-cpu regions written channels-last, as one ``linalg.generic``.

IREE 3.13 lowers an ONNX depthwise Conv to ``linalg.depthwise_conv_2d_nchw_chw``, which its CPU
code vectorises along the width (14 pixels at LCNet's 14x14 stage: 1.16 ms for a 5x5 conv over
256 channels in ``iree-benchmark-module``). Over an NHWC view, with the channels innermost, the
same loop nest vectorises along the channels: 0.11-0.2 ms. The named NHWC op is not used because
``--iree-global-opt-use-im2col-for-convs`` (a default llvm-cpu flag, 2x on ordinary
convolutions) turns it into a per-channel matrix-vector product (1.1 ms); a ``linalg.generic``
with the same indexing maps is left alone by that pass and gets the same vectorised code.

The transposes in and out cost a pass over the tensor each (IREE fuses them into neighbouring
elementwise dispatches where it can); the weights' transpose is a constant expression IREE
evaluates at load time. Runs on each llvm-cpu region's module after outlining, so partitioned
builds get it for their host regions too. ``direct_conv.py`` reuses its matching and splicing
(``conv_operands``, ``rewrite_ops``) for ordinary convolutions with few output channels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

CHANNELS_LAST_REASON = "depthwise: lowered channels-last for llvm-cpu"   # the build record's word for it
VTENSOR = re.compile(r"!torch\.vtensor<\[([0-9,]+)\],(f32|f16|bf16)>")
_INT = re.compile(r"-?\d+(?= : si64)")


@dataclass(frozen=True, slots=True)
class DepthwiseConv:
    """A 2-D depthwise Conv (one filter per channel) over static NCHW shapes."""

    x: tuple[int, ...]            # N, C, H, W
    y: tuple[int, ...]            # N, C, Ho, Wo
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int, int, int]   # ONNX order: top, left, bottom, right
    dtype: str
    bias: bool


@dataclass(frozen=True, slots=True)
class Replacement:
    """A lowering's function whose arguments are other values than its op's operands (a fusion
    with the ops before it: ``pooled_conv``): those values, and the ops its op was the one reader
    of, erased after it."""

    body: str
    operands: tuple[Any, ...]
    dead: tuple[Any, ...]


# An op of region MLIR -> the function whose body replaces it (its operands become the
# function's arguments, its result the returned value; a Replacement names other arguments), or
# None to leave it.
Lowering = Callable[[Any], "str | Replacement | None"]


def rewrite_ops(mlir: str, *lowerings: Lowering) -> tuple[str, tuple[int, ...]]:
    """``mlir`` with every op the first of ``lowerings`` to give a body for replaced (one parse
    for all of them); and how many each replaced."""
    return rewrite_ops_in_turn(mlir, lowerings)


def rewrite_ops_in_turn(mlir: str, *walks: Sequence[Lowering]) -> tuple[str, tuple[int, ...]]:
    """``rewrite_ops`` with each of ``walks`` over the ops in turn, on what the walks before it
    left (one parse for all of them: a fusion with the ops before its op goes first, before
    those ops are rewritten on their own); and how many each lowering replaced, in order."""
    from iree.compiler import ir

    counts: list[int] = []
    with ir.Context():
        module = ir.Module.parse(mlir)
        for lowerings in walks:
            counts += _walk(module, lowerings)
        return (str(module) if any(counts) else mlir), tuple(counts)


def _walk(module: Any, lowerings: Sequence[Lowering]) -> list[int]:
    """Replace every op of ``module``'s functions the first of ``lowerings`` gives a body for;
    how many each replaced."""
    counts = [0] * len(lowerings)
    for fn in module.body.operations:
        if fn.operation.name != "func.func" or not fn.regions[0].blocks:
            continue
        for op in list(fn.regions[0].blocks[0].operations):
            for i, lowering in enumerate(lowerings):
                if (body := lowering(op)) is None:
                    continue
                if isinstance(body, Replacement):
                    _replace(op, body.body, body.operands)
                    for dead in body.dead:   # producers before ``op``: visited already
                        dead.operation.erase()
                else:
                    _replace(op, body)
                counts[i] += 1
                break
    return counts


def rewrite_depthwise_convs(mlir: str) -> tuple[str, int]:
    """``mlir`` with each depthwise ``onnx.Conv`` replaced; and how many were replaced."""
    mlir, (count,) = rewrite_ops(mlir, depthwise_body)
    return mlir, count


def depthwise_body(op: Any) -> str | None:
    conv = match(op)
    return None if conv is None else body_mlir(conv)


@dataclass(frozen=True, slots=True)
class ConvOperands:
    """A static 2-D ``onnx.Conv`` as region MLIR states it: the shapes of its operands and result,
    its attributes, and whether it has a bias. What the convolution rewrites match on."""

    x: tuple[int, ...]
    w: tuple[int, ...]
    y: tuple[int, ...]
    group: int
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int, int, int]
    dtype: str
    bias: bool


def conv_operands(op: Any, valid: bool = False) -> ConvOperands | None:
    """``op``'s operands when it is an ``onnx.Conv`` over static 4-D float tensors with explicit
    padding (with ``valid``, also ``auto_pad`` VALID, none: MTCNN's exporter writes it) and a bias
    of one value per output channel, if any; None otherwise. The host lowering's rewrites match
    without ``valid``: with it, their modules (and LOWERING_VERSION) would change."""
    attrs = onnx_attributes(op, "Conv")
    if attrs is None:
        return None
    auto_pad = attrs.get("torch.onnx.auto_pad", '"NOTSET"')
    if auto_pad not in (('"NOTSET"', '"VALID"') if valid else ('"NOTSET"',)) or len(op.results) != 1:
        return None
    if auto_pad == '"VALID"':
        attrs.pop("torch.onnx.pads", None)
    found = [VTENSOR.fullmatch(str(v.type)) for v in (*op.operands, op.results[0])]
    types = [t for t in found if t is not None]
    if len(op.operands) not in (2, 3) or len(types) != len(found) or len({t[2] for t in types}) != 1:
        return None
    x, w, *rest = (tuple(int(d) for d in t[1].split(",")) for t in types)
    y = rest[-1]
    if len(x) != 4 or len(w) != 4 or len(y) != 4 or (len(rest) == 2 and rest[0] != (y[1],)):
        return None
    group = ints(attrs.get("torch.onnx.group", "1 : si64")) or [1]
    pads = ints(attrs.get("torch.onnx.pads", "")) or [0, 0, 0, 0]
    strides = ints(attrs.get("torch.onnx.strides", "")) or [1, 1]
    dilations = ints(attrs.get("torch.onnx.dilations", "")) or [1, 1]
    if len(group) != 1 or len(pads) != 4 or len(strides) != 2 or len(dilations) != 2:
        return None
    return ConvOperands(x, w, y, group[0], (strides[0], strides[1]), (dilations[0], dilations[1]),
                        (pads[0], pads[1], pads[2], pads[3]), types[0][2], len(rest) == 2)


def match(op: Any) -> DepthwiseConv | None:
    """The depthwise convolution ``op`` is, when it is an ``onnx.Conv`` this rewrite handles."""
    c = conv_operands(op)
    if c is None:
        return None
    channels = c.x[1]
    if c.group != channels or c.w[:2] != (channels, 1) or expected_output(c) != c.y:
        return None
    return DepthwiseConv(c.x, c.y, (c.w[2], c.w[3]), c.strides, c.dilations, c.pads, c.dtype, c.bias)


def onnx_attributes(op: Any, op_type: str) -> dict[str, str] | None:
    """``op``'s attributes as text when it is the ONNX operator ``op_type``; None otherwise."""
    if op.operation.name != "torch.operator" or str(op.operation.attributes["name"]) != f'"onnx.{op_type}"':
        return None
    return {name: str(op.operation.attributes[name]) for name in op.operation.attributes}


def ints(attr: str) -> list[int]:
    return [int(v) for v in _INT.findall(attr)]


def expected_output(c: ConvOperands) -> tuple[int, ...]:
    """The result shape ``c``'s operands and attributes give (NCHW), to check the stated one by."""
    n, _, h, w = c.x
    kh, kw = c.w[2], c.w[3]
    (sh, sw), (dh, dw) = c.strides, c.dilations
    height, width = h + c.pads[0] + c.pads[2], w + c.pads[1] + c.pads[3]
    return n, c.w[0], (height - dh * (kh - 1) - 1) // sh + 1, (width - dw * (kw - 1) - 1) // sw + 1


def _replace(op: Any, body: str, operands: Sequence[Any] | None = None) -> None:
    """Clone the function ``body``'s ops in before ``op``, wired to ``operands`` (``op``'s own by
    default); then drop ``op``."""
    from iree.compiler import ir

    helper = ir.Module.parse(body)
    fn = helper.body.operations[0]
    block = fn.regions[0].blocks[0]
    mapping = dict(zip(block.arguments, op.operands if operands is None else operands))
    with ir.InsertionPoint(op), op.location:
        for inner in block.operations:
            if inner.operation.name == "func.return":
                op.results[0].replace_all_uses_with(mapping[inner.operands[0]])
                break
            clone = inner.operation.clone()
            for i, operand in enumerate(clone.operands):
                if operand in mapping:
                    clone.operands[i] = mapping[operand]
            for old, fresh in zip(inner.results, clone.results):
                mapping[old] = fresh
    op.operation.erase()


def accumulator_init(bias: bool, channels: int, t: str, out: str, channel_map: str) -> str:
    """``%init``: the convolution's accumulator of type ``tensor<out>`` (from ``%e``), the bias
    ``%bt`` broadcast by ``channel_map`` (its channel dim, e.g. ``(n, h, w, c) -> (c)``) or zeros."""
    if not bias:
        return f"%init = linalg.fill ins(%zero : {t}) outs(%e : tensor<{out}>) -> tensor<{out}>"
    dims = channel_map.split("->")[0].strip()
    return f"""%b = torch_c.to_builtin_tensor %bt : !torch.vtensor<[{channels}],{t}> -> tensor<{channels}x{t}>
    %init = linalg.generic {{indexing_maps = [affine_map<{channel_map}>, affine_map<{dims} -> {dims}>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%b : tensor<{channels}x{t}>) outs(%e : tensor<{out}>) {{
    ^bb0(%v: {t}, %o: {t}):
      linalg.yield %v : {t}
    }} -> tensor<{out}>"""


def zero_pad(result: str, source: str, low: tuple[int, ...], high: tuple[int, ...], source_type: str,
             padded_type: str, t: str, value: str = "0.0") -> str:
    """``%result = tensor.pad %source`` with zeros (or with ``value``, an MLIR literal of type ``t``)."""
    return f"""%{result} = tensor.pad %{source} low{list(low)} high{list(high)} {{
    ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
      %pad = arith.constant {value} : {t}
      tensor.yield %pad : {t}
    }} : tensor<{source_type}> to tensor<{padded_type}>"""


def body_mlir(c: DepthwiseConv) -> str:
    """A function computing ``c`` through an NHWC ``linalg.generic``. Its body is cloned into the
    region, so no nested region may read a value of the body (it would dangle there)."""
    n, ch, h, w = c.x
    _, _, oh, ow = c.y
    kh, kw = c.kernel
    (sh, sw), (dh, dw) = c.strides, c.dilations
    top, left, bottom, right = c.pads
    t = c.dtype
    ph, pw = h + top + bottom, w + left + right
    nchw, nhwc = f"{n}x{ch}x{h}x{w}x{t}", f"{n}x{h}x{w}x{ch}x{t}"
    padded, out_nhwc, out_nchw = f"{n}x{ph}x{pw}x{ch}x{t}", f"{n}x{oh}x{ow}x{ch}x{t}", f"{n}x{ch}x{oh}x{ow}x{t}"
    kernel, filt = f"{ch}x1x{kh}x{kw}x{t}", f"{kh}x{kw}x{ch}x{t}"
    vt = lambda dims: f"!torch.vtensor<[{','.join(map(str, dims))}],{t}>"   # noqa: E731
    bias_arg = f", %bt: {vt((ch,))}" if c.bias else ""
    init = accumulator_init(c.bias, ch, t, out_nhwc, "(n, h, w, c) -> (c)")
    return f"""func.func @depthwise(%xt: {vt(c.x)}, %wt: {vt((ch, 1, kh, kw))}{bias_arg}) -> {vt(c.y)} {{
    %zero = arith.constant 0.0 : {t}
    %x = torch_c.to_builtin_tensor %xt : {vt(c.x)} -> tensor<{nchw}>
    %w4 = torch_c.to_builtin_tensor %wt : {vt((ch, 1, kh, kw))} -> tensor<{kernel}>
    %w3 = tensor.collapse_shape %w4 [[0, 1], [2], [3]] : tensor<{kernel}> into tensor<{ch}x{kh}x{kw}x{t}>
    %we = tensor.empty() : tensor<{filt}>
    %wl = linalg.transpose ins(%w3 : tensor<{ch}x{kh}x{kw}x{t}>) outs(%we : tensor<{filt}>) permutation = [1, 2, 0]
    %xe = tensor.empty() : tensor<{nhwc}>
    %xl = linalg.transpose ins(%x : tensor<{nchw}>) outs(%xe : tensor<{nhwc}>) permutation = [0, 2, 3, 1]
    {zero_pad('xp', 'xl', (0, top, left, 0), (0, bottom, right, 0), nhwc, padded, t)}
    %e = tensor.empty() : tensor<{out_nhwc}>
    {init}
    %yl = linalg.generic {{indexing_maps = [affine_map<(n, h, w, c, i, j) -> (n, h * {sh} + i * {dh}, w * {sw} + j * {dw}, c)>, affine_map<(n, h, w, c, i, j) -> (i, j, c)>, affine_map<(n, h, w, c, i, j) -> (n, h, w, c)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}} ins(%xp, %wl : tensor<{padded}>, tensor<{filt}>) outs(%init : tensor<{out_nhwc}>) {{
    ^bb0(%in: {t}, %k: {t}, %acc: {t}):
      %m = arith.mulf %in, %k : {t}
      %s = arith.addf %acc, %m : {t}
      linalg.yield %s : {t}
    }} -> tensor<{out_nhwc}>
    %ye = tensor.empty() : tensor<{out_nchw}>
    %y = linalg.transpose ins(%yl : tensor<{out_nhwc}>) outs(%ye : tensor<{out_nchw}>) permutation = [0, 3, 1, 2]
    %yt = torch_c.from_builtin_tensor %y : tensor<{out_nchw}> -> {vt(c.y)}
    return %yt : {vt(c.y)}
}}"""
