"""Value ranges of a model's integer tensors, by interval analysis at load time.

Every integer tensor gets the closed interval its values must lie in: constants give theirs, model
inputs the range of their dtype, and each op maps its inputs' intervals to its outputs'. An op the
analysis does not know gives its integer outputs no interval (None: anything). Sound, not exact:
an interval may be wider than the values that occur, never narrower. Index guards rely on it
(``frontend/indices.py``): a Gather whose indices provably stay inside the axis needs no check."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from aot.frontend.fold import static_shapes

Interval = tuple[int, int]
Shapes = dict[str, tuple[int, ...]]
_Rule = Callable[[onnx.NodeProto, list["Interval | None"], Shapes], "Interval | None"]

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


def _known(args: list[Interval | None], n: int) -> list[Interval] | None:
    """The first ``n`` intervals when there are ``n`` and every one is known; else None."""
    first = args[:n]
    if len(first) < n:
        return None
    known = [a for a in first if a is not None]
    return known if len(known) == n else None


def _arith(f: Callable[[int, int], int]) -> _Rule:
    def rule(node: onnx.NodeProto, args: list[Interval | None], shapes: Shapes) -> Interval | None:
        known = _known(args, 2)
        if known is None:
            return None
        corners = [f(a, b) for a in known[0] for b in known[1]]
        return (min(corners), max(corners))
    return rule


def _pick(f: Callable[[Iterable[int]], int]) -> _Rule:
    """Max/Min: ``f`` of the lower bounds, ``f`` of the upper bounds."""
    def rule(node: onnx.NodeProto, args: list[Interval | None], shapes: Shapes) -> Interval | None:
        known = _known(args, len(args)) if args else None
        if known is None:
            return None
        return (f(a[0] for a in known), f(a[1] for a in known))
    return rule


def _neg(node: onnx.NodeProto, args: list[Interval | None], shapes: Shapes) -> Interval | None:
    known = _known(args, 1)
    return (-known[0][1], -known[0][0]) if known is not None else None


def _abs(node: onnx.NodeProto, args: list[Interval | None], shapes: Shapes) -> Interval | None:
    known = _known(args, 1)
    if known is None:
        return None
    lo, hi = known[0]
    return (0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))


def _boolean(node: onnx.NodeProto, args: list[Interval | None], shapes: Shapes) -> Interval | None:
    return (0, 1)


def _union(node: onnx.NodeProto, args: list[Interval | None], shapes: Shapes) -> Interval | None:
    used = [a for a in args if a is not None]
    if len(used) != len([v for v in node.input if v]) or not used:
        return None
    return (min(a[0] for a in used), max(a[1] for a in used))


def _where(node: onnx.NodeProto, args: list[Interval | None], shapes: Shapes) -> Interval | None:
    known = _known(args[1:], 2)
    if known is None:
        return None
    return (min(known[0][0], known[1][0]), max(known[0][1], known[1][1]))


def _clip(node: onnx.NodeProto, args: list[Interval | None], shapes: Shapes) -> Interval | None:
    lo_arg, hi_arg = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else None)
    lo = lo_arg[0] if lo_arg is not None else None
    hi = hi_arg[1] if hi_arg is not None else None
    base: tuple[float, float] = args[0] or (-math.inf, math.inf)
    new = (max(base[0], lo) if lo is not None else base[0], min(base[1], hi) if hi is not None else base[1])
    return None if math.inf in map(abs, new) else (int(new[0]), int(new[1]))


def _mod(node: onnx.NodeProto, args: list[Interval | None], shapes: Shapes) -> Interval | None:
    fmod = next((a.i for a in node.attribute if a.name == "fmod"), 0)
    divisor = args[1] if len(args) >= 2 else None
    if divisor is None or divisor[0] <= 0:
        return None
    d = divisor[1]
    if fmod == 0:  # the result takes the divisor's sign: positive divisors give [0, d-1]
        return (0, d - 1)
    return (-(d - 1), d - 1)


def _div(node: onnx.NodeProto, args: list[Interval | None], shapes: Shapes) -> Interval | None:
    known = _known(args, 2)
    if known is None or known[1][0] <= 0:
        return None    # a divisor range through zero or below: skip (rare for indices)
    # Integer division truncates toward zero; for a positive divisor it is monotonic in the dividend.
    corners = [int(a / b) for a in known[0] for b in known[1]]
    return (min(corners), max(corners))


def _index_of(axis_input: int) -> _Rule:
    """ArgMax/ArgMin/TopK/NonZero: positions along an axis of their first input."""
    def rule(node: onnx.NodeProto, args: list[Interval | None], shapes: Shapes) -> Interval | None:
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
    "Max": _pick(max),
    "Min": _pick(min),
    "Neg": _neg,
    "Abs": _abs,
    "Concat": _union,
    "Where": _where,
    "Clip": _clip,
    "Mod": _mod,
    "Div": _div,
    "ArgMax": _index_of(0),
    "ArgMin": _index_of(0),
    "TopK": _index_of(-1),
    "NonZero": _index_of(0),
    **{op: _boolean for op in
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
