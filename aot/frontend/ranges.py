"""Value ranges of a model's integer tensors, by interval analysis at load time.

Every integer tensor gets the closed interval its values must lie in: constants give theirs, model
inputs the range of their dtype, and each op maps its inputs' intervals to its outputs'. An op the
analysis does not know gives its integer outputs no interval (None: anything). Sound, not exact:
an interval may be wider than the values that occur, never narrower. Index guards rely on it
(``frontend/indices.py``): a Gather whose indices provably stay inside the axis needs no check."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from aot.frontend.fold import static_shapes

Interval = tuple[int, int]
_Rule = Callable[[onnx.NodeProto, list["Interval | None"], dict[str, tuple[int, ...]]], "Interval | None"]

# Ops whose output values are some of their first input's values (moved, repeated or selected).
_SAME = frozenset({"Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Expand", "Tile",
                   "Slice", "Gather", "GatherElements", "GatherND", "Split", "ReduceMax", "ReduceMin",
                   "MaxPool", "DepthToSpace", "SpaceToDepth", "Compress"})


def integer_ranges(model: onnx.ModelProto) -> dict[str, Interval]:
    """The interval of every integer (and bool) tensor the analysis can bound."""
    g = model.graph
    dtypes = _elem_types(g)
    shapes = static_shapes(g)
    ranges: dict[str, Interval] = {}
    for t in g.initializer:
        if _is_integer(t.data_type) and t.data_location != onnx.TensorProto.EXTERNAL:
            ranges[t.name] = _of_array(numpy_helper.to_array(t))
    inits = {t.name for t in g.initializer}
    for v in g.input:
        if v.name not in inits and _is_integer(dtypes.get(v.name, 0)):
            ranges[v.name] = dtype_range(dtypes[v.name])
    for node in g.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            value = numpy_helper.to_array(node.attribute[0].t)
            if value.dtype.kind in "iub":
                ranges[node.output[0]] = _of_array(value)
            continue
        args = [ranges.get(v) if v else None for v in node.input]
        found = _transfer(node, args, shapes, dtypes)
        # TopK's first output holds values of its input, its second their positions.
        outs = zip(node.output, (args[0], found)) if node.op_type == "TopK" else ((o, found) for o in node.output)
        for out, interval in outs:
            if interval is not None and out and _is_integer(dtypes.get(out, 0)):
                lo, hi = dtype_range(dtypes[out])
                # Integer arithmetic wraps around: beyond its type's range a value can be anything.
                ranges[out] = interval if lo <= interval[0] and interval[1] <= hi else (lo, hi)
    return ranges


def dtype_range(elem_type: int) -> Interval:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    if dtype == np.bool_:
        return (0, 1)
    info = np.iinfo(dtype)
    return (int(info.min), int(info.max))


def _transfer(node: onnx.NodeProto, args: list[Interval | None], shapes: dict[str, tuple[int, ...]],
              dtypes: dict[str, int]) -> Interval | None:
    op = node.op_type
    if op in _SAME:
        return args[0] if args else None
    if op == "Cast":
        to = next(a.i for a in node.attribute if a.name == "to")
        if not _is_integer(to) or args[0] is None:
            return None
        lo, hi = dtype_range(to)
        # A value the target type cannot hold wraps around: then only the target's range is known.
        return args[0] if lo <= args[0][0] and args[0][1] <= hi else (lo, hi)
    if op in _RULES:
        return _RULES[op](node, args, shapes)
    return None


def _known(args: list[Interval | None], n: int) -> bool:
    return len(args) >= n and all(a is not None for a in args[:n])


def _arith(f: Callable[[int, int], int]) -> _Rule:
    def rule(node, args, shapes):
        if not _known(args, 2):
            return None
        corners = [f(a, b) for a in args[0] for b in args[1]]
        return (min(corners), max(corners))
    return rule


def _union(node, args, shapes):
    used = [a for a in args if a is not None]
    if len(used) != len([v for v in node.input if v]) or not used:
        return None
    return (min(a[0] for a in used), max(a[1] for a in used))


def _where(node, args, shapes):
    if not _known(args[1:], 2):
        return None
    return (min(args[1][0], args[2][0]), max(args[1][1], args[2][1]))


def _clip(node, args, shapes):
    lo = args[1][0] if len(args) > 1 and args[1] is not None else None
    hi = args[2][1] if len(args) > 2 and args[2] is not None else None
    base = args[0] or (-math.inf, math.inf)
    new = (max(base[0], lo) if lo is not None else base[0], min(base[1], hi) if hi is not None else base[1])
    return None if math.inf in map(abs, new) else (int(new[0]), int(new[1]))


def _mod(node, args, shapes):
    fmod = next((a.i for a in node.attribute if a.name == "fmod"), 0)
    if len(args) < 2 or args[1] is None or args[1][0] <= 0:
        return None
    d = args[1][1]
    if fmod == 0:  # the result takes the divisor's sign: positive divisors give [0, d-1]
        return (0, d - 1)
    return (-(d - 1), d - 1)


def _div(node, args, shapes):
    if not _known(args, 2) or args[1][0] <= 0:
        return None    # a divisor range through zero or below: skip (rare for indices)
    # Integer division truncates toward zero; for a positive divisor it is monotonic in the dividend.
    corners = [int(a / b) for a in args[0] for b in args[1]]
    return (min(corners), max(corners))


def _index_of(axis_input: int) -> _Rule:
    """ArgMax/ArgMin/TopK/NonZero: positions along an axis of their first input."""
    def rule(node, args, shapes):
        shape = shapes.get(node.input[0])
        if shape is None:
            return None
        if node.op_type == "NonZero":
            return (0, max(max(shape, default=1) - 1, 0))
        axis = next((a.i for a in node.attribute if a.name == "axis"), axis_input)
        return (0, max(shape[axis] - 1, 0)) if shape else (0, 0)
    return rule


_RULES: dict[str, _Rule] = {
    "Add": _arith(lambda a, b: a + b),
    "Sub": _arith(lambda a, b: a - b),
    "Mul": _arith(lambda a, b: a * b),
    "Max": lambda node, args, shapes: (max(a[0] for a in args), max(a[1] for a in args))
    if args and all(a is not None for a in args) else None,
    "Min": lambda node, args, shapes: (min(a[0] for a in args), min(a[1] for a in args))
    if args and all(a is not None for a in args) else None,
    "Neg": lambda node, args, shapes: (-args[0][1], -args[0][0]) if _known(args, 1) else None,
    "Abs": lambda node, args, shapes: ((0 if args[0][0] <= 0 <= args[0][1] else min(map(abs, args[0]))),
                                       max(map(abs, args[0]))) if _known(args, 1) else None,
    "Concat": _union,
    "Where": _where,
    "Clip": _clip,
    "Mod": _mod,
    "Div": _div,
    "ArgMax": _index_of(0),
    "ArgMin": _index_of(0),
    "TopK": _index_of(-1),
    "NonZero": _index_of(0),
    **{op: (lambda node, args, shapes: (0, 1)) for op in
       ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf")},
}


def _elem_types(g: onnx.GraphProto) -> dict[str, int]:
    types = {t.name: t.data_type for t in g.initializer}
    for vi in (*g.input, *g.value_info, *g.output):
        types.setdefault(vi.name, vi.type.tensor_type.elem_type)
    return types


def _is_integer(elem_type: int) -> bool:
    if not elem_type:
        return False
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type).kind in "iub"


def _of_array(a: np.ndarray) -> Interval:
    return (int(a.min()), int(a.max())) if a.size else (0, 0)
