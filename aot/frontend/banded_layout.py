"""Keep a chain of banded convolutions channels last: the transposes ``long_filter`` writes at each
product's ends sunk through the elementwise ops between them, and cancelled in pairs.

``long_filter`` writes each convolution channels last inside (one Transpose in, one out), so two
rewritten convolutions with an activation between them transpose [frames, 40, 219] back and forth
for nothing. IREE 3.13 does not cancel those pairs through the activation, and ran each of PESTO's
at about 1 GB/s (3.4 ms for 100 x 40 x 219; docs/performance.md, stop 56). Three local rewrites,
applied until none applies, to the transposes the rewrite made and to what they become:

- an identity Reshape (its output the shape of its input) after or before one is dropped;
- ``Unary(Transpose(x))`` becomes ``Transpose(Unary(x))`` when the transpose feeds only it, and
  ``Binary(Transpose(a), Transpose(b))``, both the same permutation and shape, ``Transpose(Binary(a, b))``
  when each feeds only it (a residual Add);
- ``Transpose(Transpose(x))`` with inverse permutations is ``x``.

Only transposes whose node name the rewrite gave (``.banded.``, and those this pass derives from
them) move: the other models' graphs, and the plans measured on them, stay as they are.
"""

from __future__ import annotations

import onnx
from onnx import helper

from aot.frontend.fold import referenced, rename_values, static_shapes
from aot.frontend.passes import PassResult, rewrite_result

MARK = ".banded."
# Ops whose result at each position depends on that position of their (first) input alone; their
# other inputs, if any, are scalars (Clip's bounds), which a permutation leaves alone.
UNARY = frozenset({"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "HardSigmoid", "HardSwish", "Softplus",
                   "Neg", "Abs", "Exp", "Log", "Sqrt", "Erf", "Identity", "Clip", "Cast"})
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})
MAX_ROUNDS = 10_000   # each round one rewrite; a bound, not a tuning


def sink_banded_transposes(model: onnx.ModelProto) -> PassResult:
    """Pass: sink and cancel the banded rewrite's transposes (module docstring); count the
    transposes and Reshapes removed."""
    g = model.graph
    nodes = [_copy(n) for n in g.node]     # the rewrites edit nodes in place; `model` stays as it was
    outputs = {o.name for o in g.output}
    shapes = static_shapes(g)
    before = _marked(nodes)
    if not before:          # every rewrite below moves only marked nodes
        return PassResult(model, 0)
    for _ in range(MAX_ROUNDS):
        step = _drop_identity_reshape(nodes, shapes, outputs) or _swap(nodes, outputs) or _cancel(nodes, outputs)
        if not step:
            break
    removed = before - _marked(nodes)
    if removed <= 0:
        return PassResult(model, 0)
    result = rewrite_result(model, nodes, [], removed)
    del result.model.graph.value_info[:]   # values now hold other layouts: load infers them again
    return result


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out


def _remove(nodes: list[onnx.NodeProto], node: onnx.NodeProto) -> None:
    """By identity: ``list.remove`` compares protobuf messages by value, and a renamed node may
    equal another."""
    del nodes[next(i for i, m in enumerate(nodes) if m is node)]


def _marked(nodes: list[onnx.NodeProto]) -> int:
    """The banded rewrite's Transposes and Reshapes: what this pass removes."""
    return sum(n.op_type in ("Transpose", "Reshape") and MARK in n.name for n in nodes)


def _perm(node: onnx.NodeProto) -> tuple[int, ...]:
    return tuple(next(a.ints for a in node.attribute if a.name == "perm"))


def _read_by_others(nodes: list[onnx.NodeProto], value: str, node: onnx.NodeProto | None = None) -> bool:
    """Whether a node other than `node` reads `value` (a capture inside an If or Loop body counts)."""
    return value in referenced(m for m in nodes if m is not node)


def _producers(nodes: list[onnx.NodeProto]) -> dict[str, onnx.NodeProto]:
    """Each value's producer, looked up once a round: a scan of the graph per operand made a round
    quadratic (23 s on a 2,200-node graph)."""
    return {v: n for n in reversed(nodes) for v in n.output}


def _marked_transpose(producers: dict[str, onnx.NodeProto], value: str) -> onnx.NodeProto | None:
    found = producers.get(value)
    return found if found is not None and found.op_type == "Transpose" and MARK in found.name else None


def _rename_uses(nodes: list[onnx.NodeProto], old: str, new: str) -> None:
    for n in nodes:
        rename_values(n, lambda v: new if v == old else v)


def _drop_identity_reshape(nodes: list[onnx.NodeProto], shapes: dict[str, tuple[int, ...]],
                           outputs: set[str]) -> bool:
    for n in nodes:
        if (n.op_type == "Reshape" and MARK in n.name and n.output[0] not in outputs
                and shapes.get(n.input[0]) is not None and shapes.get(n.input[0]) == shapes.get(n.output[0])):
            _rename_uses(nodes, n.output[0], n.input[0])
            _remove(nodes, n)
            return True
    return False


def _swap(nodes: list[onnx.NodeProto], outputs: set[str]) -> bool:
    """One elementwise op moved above the transpose(s) feeding it."""
    producers = _producers(nodes)
    for n in nodes:
        if n.op_type in UNARY and n.input:
            sources = [n.input[0]]
        elif n.op_type in BINARY and len(n.input) == 2:
            sources = list(n.input)
        else:
            continue
        feeds = [_marked_transpose(producers, s) for s in sources]
        if any(t is None for t in feeds) or len({_perm(t) for t in feeds if t is not None}) != 1:
            continue
        if len(set(sources)) != len(sources) or any(s in outputs or _read_by_others(nodes, s, n) for s in sources):
            continue
        ts = [t for t in feeds if t is not None]
        for i, t in enumerate(ts):       # the op now reads the untransposed values
            n.input[i] = t.input[0]
        value = n.output[0]                # unique, so the new node's name is too
        inner = f"{value}.channels_last"
        moved = helper.make_node("Transpose", [inner], [value], name=f"{value}{MARK}sunk", perm=_perm(ts[0]))
        n.output[0] = inner
        at = next(i for i, m in enumerate(nodes) if m is n)
        nodes.insert(at + 1, moved)
        for t in ts:
            _remove(nodes, t)
        return True
    return False


def _cancel(nodes: list[onnx.NodeProto], outputs: set[str]) -> bool:
    """One pair of inverse transposes removed (the outer one; the inner one when nothing else reads it)."""
    producers = _producers(nodes)
    for outer in nodes:
        if outer.op_type != "Transpose" or MARK not in outer.name:
            continue
        inner = _marked_transpose(producers, outer.input[0])
        if inner is None:
            continue
        p, q = _perm(inner), _perm(outer)
        if len(p) != len(q) or any(p[q[i]] != i for i in range(len(q))):
            continue
        if outer.output[0] in outputs:
            continue
        _rename_uses(nodes, outer.output[0], inner.input[0])
        _remove(nodes, outer)
        if not _read_by_others(nodes, inner.output[0]) and inner.output[0] not in outputs:
            _remove(nodes, inner)
        return True
    return False
