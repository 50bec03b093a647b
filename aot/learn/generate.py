"""``aot learn generate``: seeded random graphs made of the blocks people deploy, for training the
learned policy (issue 28). Never evaluation: held-out models are real ones.

A graph walks through layouts — spatial ``[1, C, H, W]``, sequence ``[1, T, D]``, vector ``[1, D]``
— drawing one block at a time among those its layout allows: conv blocks (Conv with BatchNorm or a
bias and an activation, depthwise separable, residual, pooling, squeeze-excitation), matmul blocks
(an MLP with MatMul on sequences and Gemm on vectors), attention written out (MatMul, Reshape,
Transpose, scale, Softmax), elementwise chains, two paths joined by an Add, and host-only ops that
keep static shapes (TopK, ArgMax, a small LSTM). Everything is opset 17, float32 in and out, shapes
static, weights drawn from the seed scaled by fan-in so outputs stay finite. The same seed and index
give the same bytes; names are counters, so they are the same too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Sequence, TypeVar

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET, IR_VERSION = 17, 8
MAX_NODES = 60
T = TypeVar("T")


class Layout(Enum):
    SPATIAL = 4      # the tensor's rank
    SEQUENCE = 3
    VECTOR = 2


class Act(Enum):
    RELU = "Relu"
    HARDSWISH = "HardSwish"
    SIGMOID = "Sigmoid"
    TANH = "Tanh"


class Kind(Enum):
    CONV = "conv"
    DEPTHWISE = "depthwise"
    RESIDUAL = "residual"
    POOL = "pool"
    SQUEEZE_EXCITE = "squeeze-excite"
    MLP = "mlp"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    BRANCH = "branch"
    TOPK = "topk"
    ARGMAX = "argmax"
    LSTM = "lstm"
    TO_SEQUENCE = "to-sequence"
    TO_VECTOR = "to-vector"


# Which blocks each layout draws from, and how often (relative weights).
WEIGHTS: dict[Layout, dict[Kind, float]] = {
    Layout.SPATIAL: {Kind.CONV: 3, Kind.DEPTHWISE: 2, Kind.RESIDUAL: 2, Kind.POOL: 1, Kind.SQUEEZE_EXCITE: 1,
                     Kind.ELEMENTWISE: 1, Kind.BRANCH: 2, Kind.TOPK: 0.7, Kind.ARGMAX: 0.7,
                     Kind.TO_SEQUENCE: 0.7, Kind.TO_VECTOR: 0.5},
    Layout.SEQUENCE: {Kind.MLP: 2, Kind.ATTENTION: 2, Kind.ELEMENTWISE: 1, Kind.BRANCH: 1.5, Kind.TOPK: 0.7,
                      Kind.ARGMAX: 0.7, Kind.LSTM: 0.7, Kind.TO_VECTOR: 0.4},
    Layout.VECTOR: {Kind.MLP: 3, Kind.ELEMENTWISE: 1, Kind.BRANCH: 1, Kind.TOPK: 0.7, Kind.ARGMAX: 0.7},
}
ELEMENTWISE_OPS = ("Relu", "Sigmoid", "Tanh", "HardSwish", "Abs", "Neg", "Mul", "Add")


@dataclass(frozen=True, slots=True)
class Tensor:
    name: str
    shape: tuple[int, ...]

    @property
    def layout(self) -> Layout:
        return Layout(len(self.shape))


@dataclass(frozen=True, slots=True)
class BlockSpec:
    kind: Kind
    width: int = 0              # output channels / features where the block sets them
    act: Act = Act.RELU
    kernel: int = 1
    stride: int = 1
    norm: bool = False          # BatchNorm / LayerNorm instead of (or before) a bias
    heads: int = 1
    ops: tuple[str, ...] = ()   # an elementwise chain's ops
    arm: Kind = Kind.CONV       # a branch's second path: CONV (or MLP), ARGMAX or ELEMENTWISE


@dataclass
class _Graph:
    """Nodes and weights being written; names are counters, so they follow from the seed."""

    rng: np.random.Generator
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    weights: list[onnx.TensorProto] = field(default_factory=list)

    def const(self, array: np.ndarray) -> str:
        name = f"w{len(self.weights)}"
        self.weights.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, shape: tuple[int, ...], fan_in: int) -> str:
        return self.const((self.rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))).astype(np.float32))

    def op(self, op: str, inputs: list[str], shape: tuple[int, ...], outputs: int = 1, **attrs: Any) -> Tensor:
        i = len(self.nodes)
        names = [f"t{i}" if k == 0 else f"t{i}_{k}" for k in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=f"n{i}_{op}", **attrs))
        return Tensor(names[0], shape)


def _pick(rng: np.random.Generator, options: Sequence[T]) -> T:
    return options[int(rng.integers(len(options)))]


def _valid(kind: Kind, x: Tensor) -> bool:
    limits = {Kind.POOL: lambda: x.shape[2] >= 4, Kind.TO_SEQUENCE: lambda: x.shape[2] * x.shape[3] <= 256,
              Kind.LSTM: lambda: x.shape[-1] <= 64, Kind.TOPK: lambda: x.shape[1 if len(x.shape) == 4 else -1] >= 2}
    return limits.get(kind, lambda: True)()


def draw_spec(rng: np.random.Generator, x: Tensor) -> BlockSpec:
    """The next block for ``x``, drawn among those its layout allows."""
    weights = {k: w for k, w in WEIGHTS[x.layout].items() if _valid(k, x)}
    p = np.array(list(weights.values()))
    kind = list(weights)[int(rng.choice(len(p), p=p / p.sum()))]
    spatial = x.layout is Layout.SPATIAL
    width = _pick(rng, (4, 8, 16, 32, 64) if spatial else (16, 32, 64, 128, 256))
    heads = _pick(rng, tuple(h for h in (1, 2, 4) if x.shape[-1] % h == 0))
    return BlockSpec(kind, width, act=_pick(rng, tuple(Act)), kernel=_pick(rng, (1, 3, 3, 5)),
                     stride=2 if spatial and x.shape[2] >= 8 and rng.random() < 0.3 else 1,
                     norm=bool(rng.random() < 0.5), heads=heads,
                     ops=tuple(_pick(rng, ELEMENTWISE_OPS) for _ in range(int(rng.integers(2, 5)))),
                     arm=_pick(rng, (Kind.CONV if spatial else Kind.MLP, Kind.ARGMAX, Kind.ELEMENTWISE)))


def _conv(g: _Graph, x: Tensor, out: int, kernel: int, stride: int, group: int, norm: bool,
          act: Act | None) -> Tensor:
    c, h, w = x.shape[1:]
    shape = (1, out, (h + stride - 1) // stride, (w + stride - 1) // stride)
    wt = g.weight((out, c // group, kernel, kernel), c // group * kernel * kernel)
    y = g.op("Conv", [x.name, wt] + ([] if norm else [g.const(np.zeros(out, np.float32))]), shape,
             kernel_shape=[kernel, kernel], pads=[kernel // 2] * 4, strides=[stride, stride], group=group)
    if norm:
        stats = [np.abs(g.rng.standard_normal(out)) + 0.5, 0.1 * g.rng.standard_normal(out),
                 0.1 * g.rng.standard_normal(out), np.abs(g.rng.standard_normal(out)) + 0.5]
        y = g.op("BatchNormalization", [y.name, *(g.const(s.astype(np.float32)) for s in stats)], shape)
    return y if act is None else g.op(act.value, [y.name], shape)


def _linear(g: _Graph, x: Tensor, out: int) -> Tensor:
    d = x.shape[-1]
    if x.layout is Layout.VECTOR:
        return g.op("Gemm", [x.name, g.weight((d, out), d), g.const(np.zeros(out, np.float32))], (1, out))
    y = g.op("MatMul", [x.name, g.weight((d, out), d)], (*x.shape[:-1], out))
    return g.op("Add", [y.name, g.const((0.1 * g.rng.standard_normal(out)).astype(np.float32))], y.shape)


def _elementwise(g: _Graph, x: Tensor, ops: tuple[str, ...]) -> Tensor:
    for op in ops:
        if op in ("Mul", "Add"):
            x = g.op(op, [x.name, g.const(np.array(0.5 if op == "Mul" else 0.25, np.float32))], x.shape)
        else:
            x = g.op(op, [x.name], x.shape)
    return x


def _argmax_gate(g: _Graph, x: Tensor) -> Tensor:
    """ArgMax (host-only) over channels or features, scaled into [0, 1) and added."""
    axis = 1 if x.layout is Layout.SPATIAL else len(x.shape) - 1
    shape = tuple(1 if i == axis else s for i, s in enumerate(x.shape))
    i = g.op("ArgMax", [x.name], shape, axis=axis, keepdims=1)
    f = g.op("Cast", [i.name], shape, to=TensorProto.FLOAT)
    f = g.op("Mul", [f.name, g.const(np.array(1.0 / x.shape[axis], np.float32))], shape)
    return g.op("Add", [x.name, f.name], x.shape)


def _topk(g: _Graph, x: Tensor) -> Tensor:
    """TopK (host-only) over channels or features, projected back to the width."""
    axis = 1 if x.layout is Layout.SPATIAL else len(x.shape) - 1
    k = x.shape[axis] // 2
    shape = tuple(k if i == axis else s for i, s in enumerate(x.shape))
    v = g.op("TopK", [x.name, g.const(np.array([k], np.int64))], shape, outputs=2, axis=axis)
    return (_conv(g, v, x.shape[axis], 1, 1, 1, False, None) if x.layout is Layout.SPATIAL
            else _linear(g, v, x.shape[axis]))


def _lstm(g: _Graph, x: Tensor) -> Tensor:
    """A one-layer LSTM (host-only on Vulkan) over the sequence, hidden size = features."""
    _, t, d = x.shape
    s = g.op("Transpose", [x.name], (t, 1, d), perm=[1, 0, 2])
    y = g.op("LSTM", [s.name, g.weight((1, 4 * d, d), d), g.weight((1, 4 * d, d), d),
                      g.const(np.zeros((1, 8 * d), np.float32))], (t, 1, 1, d), hidden_size=d)
    y = g.op("Squeeze", [y.name, g.const(np.array([1], np.int64))], (t, 1, d))
    return g.op("Transpose", [y.name], (1, t, d), perm=[1, 0, 2])


def _attention(g: _Graph, x: Tensor, heads: int, norm: bool) -> Tensor:
    _, t, d = x.shape
    dh = d // heads
    h = x if not norm else g.op("LayerNormalization", [x.name, g.const(np.ones(d, np.float32)),
                                                       g.const(np.zeros(d, np.float32))], x.shape, axis=-1)
    split = g.const(np.array([1, t, heads, dh], np.int64))
    q, k, v = (g.op("Reshape", [g.op("MatMul", [h.name, g.weight((d, d), d)], x.shape).name, split],
                    (1, t, heads, dh)) for _ in range(3))
    q = g.op("Transpose", [q.name], (1, heads, t, dh), perm=[0, 2, 1, 3])
    k = g.op("Transpose", [k.name], (1, heads, dh, t), perm=[0, 2, 3, 1])
    v = g.op("Transpose", [v.name], (1, heads, t, dh), perm=[0, 2, 1, 3])
    s = g.op("MatMul", [q.name, k.name], (1, heads, t, t))
    s = g.op("Mul", [s.name, g.const(np.array(1 / np.sqrt(dh), np.float32))], s.shape)
    p = g.op("Softmax", [s.name], s.shape, axis=-1)
    o = g.op("MatMul", [p.name, v.name], (1, heads, t, dh))
    o = g.op("Transpose", [o.name], (1, t, heads, dh), perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o.name, g.const(np.array([1, t, d], np.int64))], x.shape)
    o = g.op("MatMul", [o.name, g.weight((d, d), d)], x.shape)
    return g.op("Add", [x.name, o.name], x.shape)


def _mlp(g: _Graph, x: Tensor, s: BlockSpec) -> Tensor:
    h = g.op(s.act.value, [_linear(g, x, s.width).name], (*x.shape[:-1], s.width))
    if x.layout is Layout.VECTOR:
        return _linear(g, h, s.width)     # a classifier-style stack: the width changes
    return g.op("Add", [x.name, _linear(g, h, x.shape[-1]).name], x.shape)


def _branch(g: _Graph, x: Tensor, s: BlockSpec) -> Tensor:
    """Two paths from ``x`` joined by an Add: the second may hold a host-only op."""
    width = x.shape[1] if x.layout is Layout.SPATIAL else x.shape[-1]
    a = (_conv(g, x, width, 1, 1, 1, s.norm, s.act) if x.layout is Layout.SPATIAL
         else g.op(s.act.value, [_linear(g, x, width).name], x.shape))
    b = (_argmax_gate(g, x) if s.arm is Kind.ARGMAX else _elementwise(g, x, s.ops[:2]) if s.arm is Kind.ELEMENTWISE
         else _conv(g, x, width, 3, 1, 1, s.norm, s.act) if x.layout is Layout.SPATIAL else _linear(g, x, width))
    return g.op("Add", [a.name, b.name], x.shape)


def emit(g: _Graph, x: Tensor, s: BlockSpec) -> Tensor:
    """Write block ``s`` after ``x``; the block's output."""
    c = x.shape[1]
    match s.kind:
        case Kind.CONV:
            return _conv(g, x, s.width, s.kernel, s.stride, 1, s.norm, s.act)
        case Kind.DEPTHWISE:
            return _conv(g, _conv(g, x, c, 3, s.stride, c, s.norm, s.act), s.width, 1, 1, 1, s.norm, None)
        case Kind.RESIDUAL:
            y = _conv(g, _conv(g, x, c, 3, 1, 1, s.norm, s.act), c, 3, 1, 1, s.norm, None)
            return g.op("Relu", [g.op("Add", [x.name, y.name], x.shape).name], x.shape)
        case Kind.POOL:
            op = "MaxPool" if s.norm else "AveragePool"
            return g.op(op, [x.name], (1, c, x.shape[2] // 2, x.shape[3] // 2), kernel_shape=[2, 2], strides=[2, 2])
        case Kind.SQUEEZE_EXCITE:
            p = g.op("GlobalAveragePool", [x.name], (1, c, 1, 1))
            e = _conv(g, _conv(g, p, max(c // 4, 1), 1, 1, 1, False, Act.RELU), c, 1, 1, 1, False, Act.SIGMOID)
            return g.op("Mul", [x.name, e.name], x.shape)
        case Kind.MLP:
            return _mlp(g, x, s)
        case Kind.ATTENTION:
            return _attention(g, x, s.heads, s.norm)
        case Kind.ELEMENTWISE:
            return _elementwise(g, x, s.ops)
        case Kind.BRANCH:
            return _branch(g, x, s)
        case Kind.TOPK:
            return _topk(g, x)
        case Kind.ARGMAX:
            return _argmax_gate(g, x)
        case Kind.LSTM:
            return _lstm(g, x)
        case Kind.TO_SEQUENCE:
            _, c, h, w = x.shape
            y = g.op("Reshape", [x.name, g.const(np.array([1, c, h * w], np.int64))], (1, c, h * w))
            return g.op("Transpose", [y.name], (1, h * w, c), perm=[0, 2, 1])
        case Kind.TO_VECTOR:
            if x.layout is Layout.SPATIAL:
                p = g.op("GlobalAveragePool", [x.name], (1, c, 1, 1))
                return g.op("Flatten", [p.name], (1, c), axis=1)
            return g.op("ReduceMean", [x.name], (1, x.shape[-1]), axes=[1], keepdims=0)
    raise ValueError(f"unknown block {s.kind}")


def _input(rng: np.random.Generator) -> Tensor:
    layout = _pick(rng, (Layout.SPATIAL,) * 5 + (Layout.SEQUENCE,) * 4 + (Layout.VECTOR,))
    if layout is Layout.SPATIAL:
        return Tensor("x", (1, _pick(rng, (1, 3, 8)), *(_pick(rng, (8, 16, 32, 64)),) * 2))
    if layout is Layout.SEQUENCE:
        return Tensor("x", (1, _pick(rng, (4, 8, 16, 32, 64)), _pick(rng, (8, 16, 32, 64, 128))))
    return Tensor("x", (1, _pick(rng, (16, 64, 256, 512))))


def generate(seed: int, index: int = 0) -> tuple[onnx.ModelProto, tuple[BlockSpec, ...]]:
    """Model ``index`` of ``seed`` and the blocks it is made of."""
    rng = np.random.default_rng([seed, index])
    g, x = _Graph(rng), _input(rng)
    first, target = x, int(rng.integers(8, MAX_NODES - 17))   # the largest block (attention) has 17 nodes
    specs: list[BlockSpec] = []
    while len(g.nodes) < target:
        specs.append(draw_spec(rng, x))
        x = emit(g, x, specs[-1])
    graph = helper.make_graph(g.nodes, f"generated_{seed}_{index}",
                              [helper.make_tensor_value_info(first.name, TensorProto.FLOAT, first.shape)],
                              [helper.make_tensor_value_info(x.name, TensorProto.FLOAT, x.shape)], g.weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
                              producer_name="aot.learn.generate",
                              doc_string=f"seed {seed} index {index}: " + ", ".join(s.kind.value for s in specs))
    return model, tuple(specs)


def write(out: Path, count: int, seed: int) -> list[Path]:
    """``count`` models of ``seed`` as ``gen-SEED-INDEX.onnx`` in ``out``; their paths."""
    from aot.runtime.atomic import write_atomic

    out.mkdir(parents=True, exist_ok=True)
    return [write_atomic(out / f"gen-{seed}-{i:04d}.onnx", generate(seed, i)[0].SerializeToString())
            for i in range(count)]
