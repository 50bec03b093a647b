"""Memory-driven operator splitting: one node whose working set (inputs + weights + outputs, in
bytes, static shapes) is over a device's limit becomes k copies of itself over slices of its
inputs, joined by a Concat that writes the original output (so consumers are unchanged).

``choose`` picks the cut (``split_rules.cuts``, batch first) and the fewest pieces that fit, the
pieces as equal as possible; ``apply`` rewrites the model for a list of decisions, the same way
whether the decisions were just made or replayed from a plan. Weights that are initializers are
sliced here, once (no Slice runs for them at run time); activations get one Slice per piece.
No IREE: the partitioner calls this between its first labelling and merging.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.errors import PartitionError
from aot.frontend.split_rules import Cut, Shapes, SplitAxis, cuts
from aot.runtime.memory import size_text


@dataclass(frozen=True, slots=True)
class Split:
    """One node split to fit its device's limit: the decision a plan pins and the record shows."""

    node: str
    op: str
    axis: int                   # the output axis divided
    kind: SplitAxis
    pieces: tuple[int, ...]     # units per piece along the axis (frames, channels or groups), in order
    driver: str                 # the device whose limit it fits
    limit: int                  # bytes
    bytes_before: int           # the node's working set
    bytes_after: int            # the largest piece's working set

    def text(self) -> str:
        sizes = "+".join(map(str, self.pieces)) if len(self.pieces) <= 8 else \
            f"{max(self.pieces)}" + (f" or {min(self.pieces)}" if min(self.pieces) != max(self.pieces) else "") + " each"
        return (f"{self.node} ({self.op}): {len(self.pieces)} x {self.kind} axis {self.axis} "
                f"[{sizes}], {size_text(self.bytes_before)} -> "
                f"{size_text(self.bytes_after)} per piece (limit {self.driver} {size_text(self.limit)})")


@dataclass(frozen=True, slots=True)
class Tensors:
    """What splitting reads of a model: every static shape and dtype, and the constant values."""

    shapes: Mapping[str, tuple[int, ...]]
    itemsize: Mapping[str, int]
    consts: Mapping[str, np.ndarray]

    @classmethod
    def of(cls, model: onnx.ModelProto) -> "Tensors":
        """Of a shape-inferred model."""
        g = model.graph
        shapes: dict[str, tuple[int, ...]] = {}
        sizes: dict[str, int] = {}
        for vi in (*g.input, *g.value_info, *g.output):
            t = vi.type.tensor_type
            if t.elem_type and t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
                shapes[vi.name] = tuple(d.dim_value for d in t.shape.dim)
                sizes[vi.name] = helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
        consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        for n in g.node:
            if n.op_type == "Constant" and n.output and any(a.name == "value" for a in n.attribute):
                consts[n.output[0]] = numpy_helper.to_array(next(a.t for a in n.attribute if a.name == "value"))
        for name, value in consts.items():
            shapes[name], sizes[name] = tuple(value.shape), value.dtype.itemsize
        return cls(shapes, sizes, consts)

    def nbytes(self, name: str) -> int:
        n = self.itemsize[name]
        for d in self.shapes[name]:
            n *= d
        return n


def working_set(node: onnx.NodeProto, tensors: Tensors) -> int | None:
    """Bytes ``node`` reads and writes (each distinct tensor once); None when a shape is unknown."""
    names = [v for v in dict.fromkeys((*node.input, *node.output)) if v]
    if any(v not in tensors.shapes for v in names):
        return None
    return sum(tensors.nbytes(v) for v in names) + _padding(node, tensors.nbytes(node.input[0]), tensors)


def _padding(node: onnx.NodeProto, x_bytes: int, tensors: Tensors) -> int:
    """The bytes a padded convolution's input grows by: IREE writes the padded input into a buffer
    of its own, which the convolution's dispatch then reads instead of the input."""
    pads = next((list(a.ints) for a in node.attribute if a.name == "pads"), None)
    if node.op_type != "Conv" or not pads or not any(pads):
        return 0
    spatial = tensors.shapes[node.input[0]][2:]
    grown = 1.0
    for i, d in enumerate(spatial):
        grown *= (d + pads[i] + pads[i + len(spatial)]) / d
    return int(x_bytes * grown) - x_bytes


def piece_bytes(node: onnx.NodeProto, cut: Cut, units: int, tensors: Tensors) -> int:
    """The working set of a piece that takes ``units`` of ``cut``."""
    total = 0
    seen: set[str] = set()
    for i, (name, follow) in enumerate(itertools.zip_longest(node.input, cut.inputs)):
        if not name or name in seen:
            continue
        seen.add(name)
        full = tensors.nbytes(name)
        along = cut.halo.read(units) if cut.halo is not None and i == 0 else units * (follow.step if follow else 1)
        part = full if follow is None else full // tensors.shapes[name][follow.axis] * along
        total += part + (_padding(node, part, tensors) if name == node.input[0] else 0)
    out = next(o for o in node.output if o)
    return total + tensors.nbytes(out) // tensors.shapes[out][cut.axis] * units * cut.out_step


def even(units: int, k: int) -> tuple[int, ...]:
    """``units`` in ``k`` pieces as equal as possible, the larger first."""
    return tuple(units // k + (1 if i < units % k else 0) for i in range(k))


def choose(node: onnx.NodeProto, tensors: Tensors, driver: str, limit: int) -> Split | str:
    """The split of ``node`` that fits ``limit``: the first cut (batch, channels, groups or another
    axis) along which some number of pieces fits, with the fewest pieces; or why none does."""
    before = working_set(node, tensors)
    if before is None:
        return f"{node.op_type} has a tensor without a static shape"
    found, why = cuts(node, tensors.shapes, tensors.consts)
    tried = []
    for cut in found:
        for k in range(2, cut.units + 1):
            largest = piece_bytes(node, cut, -(-cut.units // k), tensors)
            if largest <= limit:
                return Split(node.name, node.op_type, cut.axis, cut.kind, even(cut.units, k), driver, limit,
                             before, largest)
        tried.append(f"{cut.units} pieces along {cut.kind} axis {cut.axis} still need "
                     f"{size_text(piece_bytes(node, cut, 1, tensors))} each")
    return "; ".join(tried) if tried else why


def apply(model: onnx.ModelProto, splits: Iterable[Split]) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``model`` with every split made (a new model, shapes to be inferred again) and, for each
    node the rewrite added (pieces, slices, concat), the node it came from."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    tensors = Tensors.of(model)
    by_node = {s.node: s for s in splits}
    names = _Names(out)
    origin: dict[str, str] = {}
    rewritten: list[onnx.NodeProto] = []
    joined: dict[str, _Joined] = {}
    for node in out.graph.node:
        split = by_node.pop(node.name, None)
        if split is None:
            rewritten.append(node)
            continue
        added = _rewrite(node, split, tensors, names, out.graph, joined)
        origin.update({n.name: node.name for n in added})
        rewritten += added
    rewritten = _without_unread_concats(rewritten, {o.name for o in out.graph.output})
    origin = {n: o for n, o in origin.items() if n in {r.name for r in rewritten}}
    if by_node:
        raise PartitionError(f"the plan splits node(s) the model does not have: {sorted(by_node)[:3]}",
                             hint="build the plan's own model, or drop --plan to split anew")
    del out.graph.node[:]
    out.graph.node.extend(rewritten)
    used = {i for n in out.graph.node for i in n.input}
    kept = [t for t in out.graph.initializer if t.name in used or t.name in {o.name for o in out.graph.output}]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    return out, origin


@dataclass(frozen=True, slots=True)
class _Joined:
    """A split's Concat: its axis and each piece's output with its element range along it."""

    axis: int
    pieces: tuple[tuple[int, int, str], ...]    # (start, end, piece output)

    def piece(self, axis: int, lo: int, hi: int) -> str | None:
        return next((p for a, b, p in self.pieces if (a, b) == (lo, hi)), None) if axis == self.axis else None


def _without_unread_concats(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """Drop the split Concats nothing reads any more (every consumer took its piece directly)."""
    read = {i for n in nodes for i in n.input}
    return [n for n in nodes if not (n.op_type == "Concat" and n.output[0] not in read | outputs
                                     and n.name.endswith(".concat"))]


def _rewrite(node: onnx.NodeProto, split: Split, tensors: Tensors, names: "_Names",
             graph: onnx.GraphProto, joined: dict[str, _Joined]) -> list[onnx.NodeProto]:
    """Slices, the k pieces and the Concat that replace ``node``. A slice that is exactly one
    piece of an earlier split's Concat reads that piece instead: a chain of nodes split alike
    (conv -> bn -> relu by the same channels) runs piece by piece, and the compiler can fuse each
    chain of pieces into dispatches that bind only their piece."""
    found, why = cuts(node, tensors.shapes, tensors.consts)
    cut = next((c for c in found if c.axis == split.axis and c.kind == split.kind), None)
    if cut is None or sum(split.pieces) != cut.units or node.op_type != split.op:
        raise PartitionError(f"node {node.name!r} ({node.op_type}) cannot be split as the plan says "
                             f"({split.op}, {split.kind} axis {split.axis}, pieces {list(split.pieces)})"
                             + (f": {why}" if why else ""), hint="build the plan's own model, or drop --plan")
    added: list[onnx.NodeProto] = []
    output = next(o for o in node.output if o)
    piece_outputs = []
    ranges = []
    start = 0
    for j, units in enumerate(split.pieces):
        # a convolution's rows: the input rows they read (with the halo), the piece's own padding
        rows = cut.halo.rows(start, start + units) if cut.halo is not None else None
        inputs = []
        for i, (name, follow) in enumerate(itertools.zip_longest(node.input, cut.inputs)):
            if not name or follow is None:
                inputs.append(name)
                continue
            lo, hi = (rows[0], rows[1]) if rows is not None and i == 0 else (start * follow.step, (start + units) * follow.step)
            direct = joined[name].piece(follow.axis, lo, hi) if name in joined else None
            if direct is not None:
                inputs.append(direct)
                continue
            if name in tensors.consts:   # a weight: slice it now, once
                sliced = np.take(tensors.consts[name], np.arange(lo, hi), axis=follow.axis)
                inputs.append(names.value(f"{name}.{node.name}.split{j}"))
                graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(sliced), inputs[-1]))
                continue
            inputs.append(names.value(f"{name}.{node.name}.split{j}"))
            bounds = [names.value(f"{node.name}.split{j}.in{i}.{b}") for b in ("starts", "ends", "axes")]
            for bound, v in zip(bounds, (lo, hi, follow.axis)):
                graph.initializer.append(numpy_helper.from_array(np.array([v], dtype=np.int64), bound))
            added.append(helper.make_node("Slice", [name, *bounds], [inputs[-1]],
                                          name=names.node(f"{node.name}.split{j}.slice{i}")))
        piece = onnx.NodeProto()
        piece.CopyFrom(node)
        piece.name = names.node(f"{node.name}.split{j}")
        del piece.input[:]
        piece.input.extend(inputs)
        piece_outputs.append(names.value(f"{output}.split{j}"))
        piece.output[list(piece.output).index(output)] = piece_outputs[-1]
        if cut.group_attr:
            for a in piece.attribute:
                if a.name == "group":
                    a.i = units
        if rows is not None:
            _set_row_pads(piece, (rows[2], rows[3]))
        added.append(piece)
        ranges.append((start * cut.out_step, (start + units) * cut.out_step, piece_outputs[-1]))
        start += units
    joined[output] = _Joined(cut.axis, tuple(ranges))
    added.append(helper.make_node("Concat", piece_outputs, [output], name=names.node(f"{node.name}.concat"),
                                  axis=cut.axis))
    return added


def _set_row_pads(conv: onnx.NodeProto, rows: tuple[int, int]) -> None:
    """A row piece's own top and bottom padding (ONNX pads: begins, then ends, rows first)."""
    pads = next((list(a.ints) for a in conv.attribute if a.name == "pads"), [0, 0, 0, 0])
    pads[0], pads[2] = rows
    kept = [a for a in conv.attribute if a.name != "pads"]
    del conv.attribute[:]
    conv.attribute.extend([*kept, helper.make_attribute("pads", pads)])


class _Names:
    """Fresh node and value names: a model-supplied name may already hold any suffix we pick."""

    def __init__(self, model: onnx.ModelProto) -> None:
        g = model.graph
        self._nodes = {n.name for n in g.node}
        self._values = {v for n in g.node for v in (*n.input, *n.output)} | {
            t.name for t in g.initializer} | {v.name for v in (*g.input, *g.output, *g.value_info)}

    def node(self, base: str) -> str:
        return self._fresh(base, self._nodes)

    def value(self, base: str) -> str:
        return self._fresh(base, self._values)

    @staticmethod
    def _fresh(base: str, taken: set[str]) -> str:
        name, n = base, 1
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        taken.add(name)
        return name
