"""A read-only view of the model's dataflow graph: nodes, values, producers and consumers.

Constants (initializers and Constant nodes) are values, not nodes: every region that reads one gets
its own copy, so a constant never becomes a boundary between devices. No IREE import here, so the
partitioner and its tests run in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

import onnx

from aot.frontend.torch.ops import ATTENTION, ONNX_EQUIVALENT

COMPUTE_OPS = frozenset({
    "Conv", "ConvTranspose", "Gemm", "MatMul", "MatMulInteger", "QLinearConv", "QLinearMatMul",
    "ConvInteger", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Tanh", "Sigmoid", "Erf",
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Gelu", "Softmax",
    "LogSoftmax", "BatchNormalization", "InstanceNormalization", "LayerNormalization",
    "GroupNormalization", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "Clip",
    "LSTM", "GRU", "RNN", "Einsum", "Resize", "DequantizeLinear", "QuantizeLinear",
    "DynamicQuantizeLinear", "Softplus", "Mish", "Neg", "Abs", "Reciprocal", "Sin", "Cos",
})
# The torch front end's op types that compute like one of those (``frontend/torch/ops.py``).
COMPUTE_OPS = COMPUTE_OPS | {t for t, onnx_op in ONNX_EQUIVALENT.items() if onnx_op in COMPUTE_OPS} | {ATTENTION}


DERIVE_CONSTANTS = True
_NOT_CONSTANT = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                           "Multinomial", "Bernoulli", "If", "Loop", "Scan"})


@dataclass(frozen=True, slots=True)
class Value:
    name: str
    dtype: str = "float32"               # numpy dtype name; "" when unknown
    shape: tuple[int, ...] | None = None  # None when unknown

    @property
    def nbytes(self) -> int | None:
        if self.shape is None or not self.dtype:
            return None
        import numpy as np

        n = 1
        for d in self.shape:
            n *= d
        return n * np.dtype(self.dtype).itemsize


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    op_type: str
    inputs: tuple[str, ...]   # non-constant input values, in order, without empty optionals
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, object], ...] = ()   # plain-data attributes (tensors/graphs as markers)
    const_inputs: tuple[str, ...] = ()           # constant inputs (weights), for FLOP/byte counts
    origin: str = ""   # where the model defines it, when the name does not say (torch: module path and line)

    def attr(self, name: str, default: object = None) -> object:
        return next((v for k, v in self.attrs if k == name), default)

    @property
    def is_compute(self) -> bool:
        return self.op_type in COMPUTE_OPS


@dataclass(frozen=True, slots=True)
class GraphView:
    """Nodes in a topological order plus lookups. Build with ``from_onnx`` or ``build``."""

    nodes: tuple[Node, ...]
    values: Mapping[str, Value]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    constants: frozenset[str] = frozenset()
    _by_name: Mapping[str, Node] = field(default_factory=dict, repr=False, compare=False)
    _producer: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    _consumers: Mapping[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, nodes: Iterable[Node], inputs: Iterable[str], outputs: Iterable[str],
              values: Mapping[str, Value] | None = None, constants: Iterable[str] = ()) -> "GraphView":
        nodes = tuple(nodes)
        by_name = {n.name: n for n in nodes}
        if len(by_name) != len(nodes):
            raise ValueError("node names must be unique")
        producer = {v: n.name for n in nodes for v in n.outputs}
        consumers: dict[str, list[str]] = {}
        for n in nodes:
            for v in dict.fromkeys(n.inputs):
                consumers.setdefault(v, []).append(n.name)
        vals = dict(values or {})
        for n in nodes:
            for v in (*n.inputs, *n.outputs):
                vals.setdefault(v, Value(v))
        return cls(nodes, vals, tuple(inputs), tuple(outputs), frozenset(constants), by_name, producer,
                   {k: tuple(v) for k, v in consumers.items()})

    @classmethod
    def from_onnx(cls, model: onnx.ModelProto) -> "GraphView":
        """View of a loaded (checked, shape-inferred, uniquely named) model's main graph."""
        g = model.graph
        values: dict[str, Value] = {}
        for vi in (*g.input, *g.value_info, *g.output):
            t = vi.type.tensor_type
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else ""
            shape = (tuple(d.dim_value for d in t.shape.dim)
                     if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim) else None)
            values[vi.name] = Value(vi.name, dtype, shape)
        constants = {t.name for t in g.initializer}
        for t in g.initializer:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name if t.data_type else ""
            values[t.name] = Value(t.name, dtype, tuple(t.dims))
        nodes = []
        graph_outputs = {v.name for v in g.output}
        for n in g.node:
            # Constants, and computations on constants only (e.g. int8 weights -> Cast -> Mul,
            # too large to fold at load time), are values: each region that reads one recomputes
            # it from the weights instead of receiving it across a device boundary.
            derived = (DERIVE_CONSTANTS and all(i in constants for i in n.input if i) and n.op_type not in _NOT_CONSTANT
                       and not graph_outputs & set(n.output))
            if n.domain in ("", "ai.onnx") and (n.op_type == "Constant" or derived):
                constants.update(n.output)
                continue
            ins = tuple(i for i in n.input if i and i not in constants)
            consts = tuple(i for i in n.input if i in constants)
            nodes.append(Node(n.name, n.op_type, ins, tuple(o for o in n.output if o),
                              tuple((a.name, _plain(a)) for a in n.attribute), consts))
        inputs = tuple(v.name for v in g.input if v.name not in constants)
        return cls.build(nodes, inputs, [v.name for v in g.output], values, constants)

    def node(self, name: str) -> Node:
        return self._by_name[name]

    def producer(self, value: str) -> str | None:
        """Name of the node that computes ``value``; None for graph inputs and constants."""
        return self._producer.get(value)

    def consumers(self, value: str) -> tuple[str, ...]:
        return self._consumers.get(value, ())

    def predecessors(self, node: str) -> tuple[str, ...]:
        preds = (self._producer.get(v) for v in self._by_name[node].inputs)
        return tuple(dict.fromkeys(p for p in preds if p is not None))

    def successors(self, node: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for v in self._by_name[node].outputs for c in self.consumers(v)))


def _plain(attr: onnx.AttributeProto) -> object:
    if attr.type in (onnx.AttributeProto.TENSOR, onnx.AttributeProto.SPARSE_TENSOR):
        return "<tensor>"
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return "<graph>"
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return tuple(v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value)
    return value
