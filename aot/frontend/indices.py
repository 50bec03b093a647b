"""Index-range safety, decided at load time for every op that indexes with a tensor.

IREE's generated code does not bounds-check data-dependent indices: a Gather given an id outside
its table reads whatever memory lies there (MiniLM with a token id of 10^9: SIGSEGV), where
onnxruntime returns INVALID_ARGUMENT. Each indexing op gets one of three treatments
(``runtime.manifest.IndexOp``):

- proved: the interval analysis (``frontend/ranges.py``) bounds its indices inside the axis;
- checked: its indices are a model input (possibly reshaped or widened on the way): the runtime
  checks the input's values before running anything, and names the first bad one;
- guarded: its indices are computed in the graph: nodes inserted before the op replace an
  out-of-range index by 0 (so the dispatch never leaves its tensor) and count them into a flag
  output; the runtime raises instead of returning a result computed from clamped indices. For
  in-range indices the guard passes every index through unchanged, so answers are bit-identical.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.fold import static_shapes, with_nodes
from aot.frontend.ranges import integer_ranges
from aot.runtime.manifest import IndexOp, IndexStatus

# op -> which input holds the indices. Negative indices count from the end in all of them.
INDEXING = {"Gather": 1, "GatherElements": 1, "GatherND": 1, "ScatterElements": 1, "Scatter": 1, "ScatterND": 1}
# Ops that pass an input's values on unchanged (a Cast only when it widens or keeps an integer).
_VALUE_PRESERVING = frozenset({"Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten"})
# Ops whose spec defines out-of-range indices without reading there: OneHot gives an all-off row
# (IREE 3.13 lowers it to comparisons and matches onnxruntime on such indices).
DEFINED = {"OneHot": 0}
FLAG_PREFIX = "aot.index_flag."


def index_safety(model: onnx.ModelProto, guard: bool = True) -> tuple[onnx.ModelProto, tuple[IndexOp, ...]]:
    """Classify every indexing op of ``model`` (static shapes, inferred) and, with ``guard``, insert
    guards for the ones computed in the graph; return the model (a new one if guards were added)
    and the ops in graph order. Without ``guard`` those ops are reported as "unguarded"."""
    g = model.graph
    shapes = {**{t.name: tuple(t.dims) for t in g.initializer}, **static_shapes(g)}
    ranges = integer_ranges(model)
    producers = {o: n for n in g.node for o in n.output}
    inputs = {v.name for v in g.input} - {t.name for t in g.initializer}
    constants = {t.name: t for t in g.initializer}
    ops: list[IndexOp] = []
    for node in g.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type in DEFINED:
            depth = constants.get(node.input[1])
            depth_dims = (int(numpy_helper.to_array(depth).reshape(-1)[0]),) if depth is not None else ()
            ops.append(IndexOp(node.name, node.op_type, node.input[DEFINED[node.op_type]], depth_dims,
                               IndexStatus.DEFINED))
            continue
        if node.op_type not in INDEXING:
            continue
        indices = node.input[INDEXING[node.op_type]]
        indexed = _indexed_dims(node, shapes)
        # shapes unknown: cannot bound it; guard it like a computed index
        dims = indexed if indexed is not None else ()
        interval = ranges.get(indices)
        if dims and (_constant_in_range(constants.get(indices), dims) or interval is not None and all(
                -d <= interval[0] and interval[1] <= d - 1 for d in dims)):
            ops.append(IndexOp(node.name, node.op_type, indices, dims, IndexStatus.PROVED))
            continue
        source = _model_input(indices, producers, inputs, direct=len(dims) > 1)
        if source is not None and dims:
            ops.append(IndexOp(node.name, node.op_type, indices, dims, IndexStatus.CHECKED, input=source))
        elif guard and dims:
            ops.append(IndexOp(node.name, node.op_type, indices, dims, IndexStatus.GUARDED,
                               flag=FLAG_PREFIX + node.name))
        else:
            ops.append(IndexOp(node.name, node.op_type, indices, dims, IndexStatus.UNGUARDED))
    guarded = [op for op in ops if op.status == IndexStatus.GUARDED]
    return (_insert_guards(model, guarded) if guarded else model), tuple(ops)


def _constant_in_range(tensor: onnx.TensorProto | None, dims: tuple[int, ...]) -> bool:
    """Constant indices, checked value by value (per position along the last axis for several
    indexed axes, where one interval for the whole tensor would be too coarse)."""
    if tensor is None or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return False
    values = numpy_helper.to_array(tensor).astype(np.int64)
    if len(dims) > 1 and (values.ndim == 0 or values.shape[-1] != len(dims)):
        return False
    bound = np.array(dims, dtype=np.int64)
    return bool(((values >= -bound) & (values <= bound - 1)).all())


def _indexed_dims(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...] | None:
    data, indices = shapes.get(node.input[0]), shapes.get(node.input[1])
    if data is None or indices is None:
        return None
    attrs = {a.name: a.i for a in node.attribute}
    if node.op_type == "GatherND":
        b, k = attrs.get("batch_dims", 0), indices[-1]
        return tuple(data[b:b + k])
    if node.op_type == "ScatterND":
        return tuple(data[:indices[-1]])
    axis = attrs.get("axis", 0)
    return (data[axis],)


def _model_input(value: str, producers: dict[str, onnx.NodeProto], inputs: set[str], direct: bool) -> str | None:
    """The model input whose values ``value`` carries unchanged, if any. ``direct``: only the input
    itself (several indexed axes: its last axis must be the one the check reads per position)."""
    while value not in inputs:
        node = producers.get(value)
        if direct or node is None or not _preserves_values(node):
            return None
        value = node.input[0]
    return value


def _preserves_values(node: onnx.NodeProto) -> bool:
    if node.op_type in _VALUE_PRESERVING:
        return True
    if node.op_type == "Cast":
        # Any integer to int32/int64: a value the check let through (|v| < 2^31 for any real axis)
        # survives the cast unchanged.
        to = next(a.i for a in node.attribute if a.name == "to")
        return to in (onnx.TensorProto.INT32, onnx.TensorProto.INT64)
    return False


def _insert_guards(model: onnx.ModelProto, guarded: list[IndexOp]) -> onnx.ModelProto:
    by_node = {op.node: op for op in guarded}
    types = {vi.name: vi.type.tensor_type.elem_type for vi in (*model.graph.input, *model.graph.value_info)}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    nodes: list[onnx.NodeProto] = []
    constants: list[onnx.TensorProto] = []
    for node in model.graph.node:
        op = by_node.get(node.name)
        if op is not None:
            dtype = helper.tensor_dtype_to_np_dtype(types.get(op.indices, onnx.TensorProto.INT64))
            safe, new_nodes, new_constants = _guard(op, dtype)
            nodes += new_nodes
            constants += new_constants
            node = _with_input(node, INDEXING[node.op_type], safe)
        nodes.append(node)
    out = with_nodes(model, nodes)
    out.graph.initializer.extend(constants)
    out.graph.output.extend(helper.make_tensor_value_info(_flag(op), onnx.TensorProto.INT32, []) for op in guarded)
    return out


def _guard(op: IndexOp, dtype: np.dtype) -> tuple[str, list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Nodes computing ``safe`` (the indices with every out-of-range one replaced by 0) and the
    flag (how many were out of range). Where/Less/Greater: valid at every opset we load (17+)."""
    p = f"{op.node}.guard"
    dims = np.array(op.dims, dtype=dtype)
    shape = () if len(op.dims) == 1 else (len(op.dims),)   # several axes: one bound per position
    lo, hi = (-dims).reshape(shape), (dims - 1).reshape(shape)
    constants = [numpy_helper.from_array(lo, f"{p}.lo"), numpy_helper.from_array(hi, f"{p}.hi"),
                 numpy_helper.from_array(np.zeros((), dtype), f"{p}.zero")]
    nodes = [
        helper.make_node("Less", [op.indices, f"{p}.lo"], [f"{p}.below"], name=f"{p}.below"),
        helper.make_node("Greater", [op.indices, f"{p}.hi"], [f"{p}.above"], name=f"{p}.above"),
        helper.make_node("Or", [f"{p}.below", f"{p}.above"], [f"{p}.bad"], name=f"{p}.bad"),
        helper.make_node("Where", [f"{p}.bad", f"{p}.zero", op.indices], [f"{p}.safe"], name=f"{p}.safe"),
        helper.make_node("Cast", [f"{p}.bad"], [f"{p}.bad_i32"], name=f"{p}.cast", to=onnx.TensorProto.INT32),
        helper.make_node("ReduceSum", [f"{p}.bad_i32"], [_flag(op)], name=f"{p}.count", keepdims=0),
    ]
    return f"{p}.safe", nodes, constants


def _flag(op: IndexOp) -> str:
    """The output that counts a guarded op's out-of-range indices (every guarded op has one)."""
    if op.flag is None:
        raise ValueError(f"guarded index op {op.node!r} has no flag output")
    return op.flag


def _with_input(node: onnx.NodeProto, index: int, value: str) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    out.input[index] = value
    return out
