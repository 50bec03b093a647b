"""Which axes an operator may be split along, and how each input follows the cut.

Memory-driven splitting (``frontend/split.py``) divides one node's output along one axis into
pieces; every piece is the same op over slices of the inputs that run along that axis. An axis the
op reduces over is never offered (a Conv's input channels unless grouped, a MatMul's K, a
Softmax's axis, LayerNormalization's axis..end, a Reduce*'s axes): splitting there would need a
second combining step, and the pieces would no longer be the op itself.

The rules are data per op family, in the order a split prefers them: the batch axis (axis 0) first,
then output channels (with the weights sliced too), then a grouped convolution's groups or any
other axis of an elementwise op. No IREE and no onnx runtime here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import onnx

from aot.runtime.codec import TextEnum

Shapes = Mapping[str, tuple[int, ...]]


class SplitAxis(TextEnum):
    """What a cut divides: the record's and the report's word for it."""

    BATCH = "batch"        # axis 0: samples or frames, which nothing couples
    CHANNEL = "channel"    # output channels (a Conv's, Gemm's or MatMul's weights are sliced with them)
    GROUP = "group"        # whole groups of a grouped or depthwise convolution (input, weights, group)
    OTHER = "other"        # another axis of an elementwise op (broadcast inputs stay whole)
    ROWS = "rows"          # output rows of a 2-D convolution: each piece reads its input rows and a halo


@dataclass(frozen=True, slots=True)
class Halo:
    """How a convolution's input rows follow a cut of its output rows: output row o reads input rows
    ``o * stride - pad_begin`` to ``... + (kernel - 1) * dilation``, so neighbouring pieces share the
    rows between (the halo) and a piece at the border keeps that border's padding."""

    stride: int
    dilation: int
    kernel: int
    pad_begin: int
    size: int               # input rows

    def rows(self, lo: int, hi: int) -> tuple[int, int, int, int]:
        """Output rows [lo, hi): the input rows [first, end) they read, and the zero rows to pad
        before and after (where the window reaches past the image)."""
        start = lo * self.stride - self.pad_begin
        stop = (hi - 1) * self.stride - self.pad_begin + (self.kernel - 1) * self.dilation + 1
        first, end = max(0, start), min(self.size, stop)
        return first, end, first - start, stop - end

    def read(self, units: int) -> int:
        """The most input rows ``units`` output rows read."""
        return min(self.size, (units - 1) * self.stride + (self.kernel - 1) * self.dilation + 1)


@dataclass(frozen=True, slots=True)
class Follow:
    """How one input of a node follows a cut: its axis, and its elements per unit of the cut."""

    axis: int
    step: int = 1


@dataclass(frozen=True, slots=True)
class Cut:
    """One way to divide a node: pieces share ``units`` along output ``axis`` (frames, channels
    or groups); each input is sliced as its ``Follow`` says or goes whole to every piece (None)."""

    kind: SplitAxis
    axis: int                              # the output axis
    units: int                             # what the pieces divide among themselves
    out_step: int                          # output elements along ``axis`` per unit
    inputs: tuple[Follow | None, ...]      # one per node input (None also for an absent optional)
    group_attr: bool = False               # each piece's ``group`` is its unit count
    halo: Halo | None = None               # ROWS: input 0's rows follow with this halo, pads per piece


ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where", "PRelu",
    "Sqrt", "Exp", "Log", "Tanh", "Sigmoid", "Erf", "Relu", "LeakyRelu", "Elu", "Selu", "Celu",
    "HardSigmoid", "HardSwish", "Gelu", "Clip", "Softplus", "Softsign", "Mish", "Neg", "Abs",
    "Reciprocal", "Sin", "Cos", "Tan", "Floor", "Ceil", "Round", "Sign", "Cast", "Identity",
    "ThresholdedRelu", "Shrink", "IsNaN", "IsInf", "Not", "And", "Or", "Xor",
})
_ALONG_AXIS = frozenset({"Softmax", "LogSoftmax", "Hardmax"})   # normalise along their one axis
_POOLS = frozenset({"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
_REDUCE = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                     "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})


def cuts(node: onnx.NodeProto, shapes: Shapes, consts: Mapping[str, np.ndarray]) -> tuple[tuple[Cut, ...], str]:
    """The cuts ``node`` allows, most preferred first, or () and why there is none.
    ``shapes`` holds every input's and output's static shape; ``consts`` the constant inputs' values
    (a Reduce's axes)."""
    outs = [o for o in node.output if o]
    if len(outs) != 1:
        return (), f"{node.op_type} has {len(outs)} outputs; only single-output ops are split"
    if any(i and i not in shapes for i in (*node.input, outs[0])):
        return (), f"{node.op_type} has a tensor without a static shape"
    out = shapes[outs[0]]
    ins = [shapes.get(i) if i else None for i in node.input]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    op = node.op_type
    if op in ELEMENTWISE:
        found = _elementwise(out, ins, exclude=())
    elif op in _ALONG_AXIS:
        found = _elementwise(out, ins, exclude=(_axis(attrs.get("axis", -1), len(out)),))
    elif op == "LayerNormalization":
        first = _axis(attrs.get("axis", -1), len(out))
        found = _elementwise(out, ins[:1], exclude=range(first, len(out)), whole=len(ins) - 1)
    elif op == "BatchNormalization" and not attrs.get("training_mode", 0):
        found = _per_channel(out, ins, channel_params=True, spatial=True)
    elif op == "InstanceNormalization":
        found = _per_channel(out, ins, channel_params=True, spatial=False)
    elif op in _POOLS:
        found = _per_channel(out, ins, channel_params=False, spatial=False)
    elif op in _REDUCE:
        found = _reduce(node, out, ins, attrs, consts)
    elif op in ("Conv", "ConvTranspose"):
        found = _conv(op, out, ins, int(attrs.get("group", 1)))
        found += _conv_rows(op, out, ins, attrs)
    elif op == "Gemm":
        found = _gemm(out, ins, bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0)))
    elif op == "MatMul":
        found = _matmul(out, ins)
    else:
        return (), f"aot has no rule to split {op}"
    kept = tuple(c for c in found if c.units > 1)
    return kept, "" if kept else f"{op} {list(out)}: every axis it could be split along is reduced or of size 1"


def _axis(axis: object, rank: int) -> int:
    return int(axis) % rank if rank else 0   # type: ignore[call-overload]


def _kind(axis: int) -> SplitAxis:
    return SplitAxis.BATCH if axis == 0 else SplitAxis.CHANNEL if axis == 1 else SplitAxis.OTHER


def _broadcast(out: Sequence[int], axis: int, shape: Sequence[int] | None) -> Follow | None:
    """The input axis that runs along output ``axis`` under numpy broadcasting, or None when the
    input is absent, shorter than that axis or broadcast along it (size 1): it goes whole."""
    if shape is None:
        return None
    at = axis - (len(out) - len(shape))
    return Follow(at) if at >= 0 and shape[at] == out[axis] else None


def _elementwise(out: Sequence[int], ins: Sequence[tuple[int, ...] | None], exclude: Sequence[int] | range,
                 whole: int = 0) -> list[Cut]:
    """Any output axis not in ``exclude``; broadcast inputs stay whole, as do ``whole`` trailing
    inputs (a normalisation's scale and bias over the reduced axes)."""
    return [Cut(_kind(a), a, out[a], 1, (*(_broadcast(out, a, s) for s in ins), *(None,) * whole))
            for a in range(len(out)) if a not in exclude]


def _per_channel(out: Sequence[int], ins: Sequence[tuple[int, ...] | None], *, channel_params: bool,
                 spatial: bool) -> list[Cut]:
    """N, C (and spatial axes when nothing reduces them) of an op over [N, C, ...]; per-channel
    parameters (a normalisation's scale, bias, mean, variance) follow the channel cut."""
    params = len(ins) - 1
    found = [Cut(SplitAxis.BATCH, 0, out[0], 1, (Follow(0), *(None,) * params))]
    if len(out) > 1:
        per = Follow(0) if channel_params else None
        found.append(Cut(SplitAxis.CHANNEL, 1, out[1], 1, (Follow(1), *(per if s else None for s in ins[1:]))))
    if spatial:
        found += [Cut(SplitAxis.OTHER, a, out[a], 1, (Follow(a), *(None,) * params)) for a in range(2, len(out))]
    return found


def _reduce(node: onnx.NodeProto, out: Sequence[int], ins: Sequence[tuple[int, ...] | None],
            attrs: Mapping[str, object], consts: Mapping[str, np.ndarray]) -> list[Cut]:
    """The axes a Reduce* keeps; with keepdims=0 output axis k is the k-th kept input axis."""
    rank = len(ins[0] or ())
    if "axes" in attrs:
        axes = list(attrs["axes"])   # type: ignore[call-overload]
    elif len(node.input) > 1 and node.input[1]:
        if node.input[1] not in consts:
            return []    # axes computed at run time: nothing is known to be kept
        axes = [int(a) for a in np.asarray(consts[node.input[1]]).reshape(-1)]
    else:
        axes = []
    if not axes:
        axes = [] if attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    reduced = {a % rank for a in axes}
    kept = [a for a in range(rank) if a not in reduced]
    keep = bool(attrs.get("keepdims", 1))
    found = []
    for k, a in enumerate(kept):
        o = a if keep else k
        found.append(Cut(_kind(o), o, out[o], 1, (Follow(a), *(None,) * (len(ins) - 1))))
    return found


def _conv(op: str, out: Sequence[int], ins: Sequence[tuple[int, ...] | None], group: int) -> list[Cut]:
    """Conv/ConvTranspose: the batch; then output channels (weights and bias sliced with them),
    or for a grouped one whole groups (input channels, weights and ``group`` too). Input channels
    of an ungrouped convolution are reduced over: never cut."""
    x, w = ins[0], ins[1]
    if x is None or w is None:
        return []
    bias = len(ins) > 2 and ins[2] is not None
    found = [Cut(SplitAxis.BATCH, 0, out[0], 1, (Follow(0), None, *((None,) if bias else ())))]
    cout, cin = out[1], x[1]
    if group == 1:
        w_axis = 0 if op == "Conv" else 1     # ConvTranspose weights are [Cin, Cout/group, k...]
        found.append(Cut(SplitAxis.CHANNEL, 1, cout, 1, (None, Follow(w_axis), *((Follow(0),) if bias else ()))))
    else:
        per_out, per_in = cout // group, cin // group
        w_step = per_out if op == "Conv" else per_in
        found.append(Cut(SplitAxis.GROUP, 1, group, per_out,
                         (Follow(1, per_in), Follow(0, w_step), *((Follow(0, per_out),) if bias else ())),
                         group_attr=True))
    return found


def _conv_rows(op: str, out: Sequence[int], ins: Sequence[tuple[int, ...] | None],
               attrs: Mapping[str, object]) -> list[Cut]:
    """A 2-D Conv's output rows, the last resort: where one image's input (batch 1) is over the limit
    whatever the output channels, each piece reads only its rows and the halo its kernel reaches
    (spatial tiling, as MCUNetV2's patch-based inference and Tenstorrent's conv slicing do). Only
    explicit padding (``auto_pad`` NOTSET): each piece gets its own top and bottom padding."""
    x, w = ins[0], ins[1]
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    if op != "Conv" or x is None or w is None or len(x) != 4 or auto_pad not in (b"NOTSET", "NOTSET", b""):
        return []
    pads = list(attrs.get("pads", [0, 0, 0, 0]))                # type: ignore[call-overload]
    stride = int(list(attrs.get("strides", [1, 1]))[0])          # type: ignore[call-overload]
    dilation = int(list(attrs.get("dilations", [1, 1]))[0])      # type: ignore[call-overload]
    halo = Halo(stride, dilation, int(w[2]), int(pads[0]), int(x[2]))
    follows = (Follow(2), None, *((None,) if len(ins) > 2 and ins[2] is not None else ()))
    return [Cut(SplitAxis.ROWS, 2, out[2], 1, follows, halo=halo)]


def _gemm(out: Sequence[int], ins: Sequence[tuple[int, ...] | None], trans_a: bool, trans_b: bool) -> list[Cut]:
    """Y[M, N] = A' B' + C: M (rows of A) is the batch axis, N (B's columns) the output channels;
    K is reduced. C follows where it is not broadcast."""
    c = ins[2] if len(ins) > 2 else None
    rows = Cut(SplitAxis.BATCH, 0, out[0], 1, (Follow(1 if trans_a else 0), None,
                                               *((_broadcast(out, 0, c),) if len(ins) > 2 else ())))
    cols = Cut(SplitAxis.CHANNEL, 1, out[1], 1, (None, Follow(0 if trans_b else 1),
                                                 *((_broadcast(out, 1, c),) if len(ins) > 2 else ())))
    return [rows, cols]


def _matmul(out: Sequence[int], ins: Sequence[tuple[int, ...] | None]) -> list[Cut]:
    """A[..., M, K] @ B[..., K, N]: axis 0 (a batch axis, or M for 2-D), then N (B's last axis,
    the output channels), then M and the other batch axes; K is reduced. Batch axes broadcast."""
    a, b = ins[0], ins[1]
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return []     # a 1-D operand: numpy's promotion rules, not worth a rule
    rank = len(out)

    def along(axis: int) -> tuple[Follow | None, Follow | None]:
        if axis == rank - 1:
            return None, Follow(len(b) - 1)
        if axis == rank - 2:
            return Follow(len(a) - 2), None
        return _broadcast(out[:-2], axis, a[:-2]), _broadcast(out[:-2], axis, b[:-2])

    order = [0, rank - 1, *range(1, rank - 1)] if rank > 2 else [0, 1]
    kinds = {0: SplitAxis.BATCH, rank - 1: SplitAxis.CHANNEL}
    return [Cut(kinds.get(ax, SplitAxis.OTHER), ax, out[ax], 1, along(ax)) for ax in dict.fromkeys(order)]
