"""What every legalization shares: the facts a rewrite reads about the graph (``Context``), the
builder its replacement is written with (``Emitter``), and the registry entry (``Legalization``).

A legalization rewrites one ONNX node that IREE 3.13 cannot lower (or lowers wrongly) into
standard ops it lowers well. Each one lives in its own module under ``frontend/legalize/``, is
registered by op type and a condition on the node, and says why it exists, so it can be deleted
once IREE handles the op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.fold import static_shapes

Replacement = tuple[list[onnx.NodeProto], list[onnx.TensorProto]]   # the nodes and initializers


@dataclass(frozen=True)
class Context:
    """What shape inference and folding know about the graph a node sits in."""

    shapes: Mapping[str, tuple[int, ...]]   # value -> static shape
    dtypes: Mapping[str, int]               # value -> onnx.TensorProto element type
    consts: Mapping[str, np.ndarray]        # initializer -> its value
    opset: int

    @classmethod
    def of(cls, model: onnx.ModelProto) -> Context:
        g = model.graph
        dtypes = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.value_info, *g.output)
                  if v.type.HasField("tensor_type")}
        dtypes.update({t.name: t.data_type for t in g.initializer})
        shapes = dict(static_shapes(g))
        shapes.update({t.name: tuple(t.dims) for t in g.initializer})
        consts = {t.name: numpy_helper.to_array(t) for t in g.initializer
                  if t.data_location != onnx.TensorProto.EXTERNAL}
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
        return cls(shapes, dtypes, consts, opset)

    def shape(self, value: str) -> tuple[int, ...] | None:
        return self.shapes.get(value) if value else None

    def const(self, value: str) -> np.ndarray | None:
        return self.consts.get(value) if value else None

    def numpy_dtype(self, value: str) -> np.dtype | None:
        t = self.dtypes.get(value)
        return np.dtype(helper.tensor_dtype_to_np_dtype(t)) if t else None


def attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes as plain Python values (bytes for strings)."""
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def operand(node: onnx.NodeProto, i: int) -> str:
    """The name of input `i`, or "" where the node leaves that optional input out."""
    return node.input[i] if len(node.input) > i else ""


@dataclass
class Emitter:
    """Writes a node's replacement: every value and node named under the original node's name (so
    reports and errors still point at it), constants as initializers."""

    node: onnx.NodeProto
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    _count: int = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{self.node.name or self.node.output[0]}/{hint}{self._count}"

    def const(self, value: Any, dtype: Any = None, hint: str = "const") -> str:
        name = self._name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def ints(self, values: Sequence[int], hint: str = "ints") -> str:
        return self.const(np.array(list(values), np.int64), hint=hint)

    def op(self, op_type: str, inputs: Sequence[str], *, out: str | None = None, **attributes: Any) -> str:
        """Append one single-output node; return its output (``out`` names it, e.g. the original's)."""
        name = self._name(op_type.lower())
        output = out or f"{name}/out"
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=name, **attributes))
        return output

    def ops(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str | None], **attributes: Any) -> list[str]:
        """Append one multi-output node: each output named as given, a fresh name where None, left
        out where "" (trailing empty inputs and outputs dropped, as ONNX allows); return the names."""
        name = self._name(op_type.lower())
        names = [f"{name}/out{i}" if o is None else o for i, o in enumerate(outputs)]
        trimmed = list(names)
        while trimmed and not trimmed[-1]:
            trimmed.pop()
        used = list(inputs)
        while used and not used[-1]:
            used.pop()
        self.nodes.append(helper.make_node(op_type, used, trimmed, name=name, **attributes))
        return names

    def replacement(self) -> Replacement:
        return self.nodes, self.initializers


@dataclass(frozen=True)
class Legalization:
    """One registered rewrite: which nodes it takes (op type, then ``applies``), why, and how."""

    op_type: str
    reason: str                                                  # what IREE 3.13 does with the node as it is
    applies: Callable[[onnx.NodeProto, Context], bool]           # the condition on the node
    rewrite: Callable[[onnx.NodeProto, Context], Replacement | None]   # None: leave the node as it is
