"""Constant folding at load time, once shapes are static.

With every input shape pinned, Shape/Size and the small integer chains that follow them
(Shape -> Gather -> Unsqueeze -> Concat -> Reshape) compute constants. Folding them means they
never become tensors crossing between devices; the outliner copies the resulting small constants
into each region that reads them. Folding uses ONNX's reference evaluator, one node at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from aot.frontend.passes import PassResult

# Never fold: nondeterministic ops, and ops with subgraphs (their captures are not plain inputs).
_NEVER = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                    "Bernoulli", "If", "Loop", "Scan", "SequenceMap"})
# Larger results are folded only when folding stores no decompressed data: of an element type no
# wider than their inputs' (a dequantized int8 weight stays computed at run time, not stored 4x in
# the weights archive) and at most GROWTH times their inputs' bytes. That folds a re-parameterised
# block's weights (PP-OCRv4 pads its 3x3 and 1x1 branches to 5x5 and sums them) into the one
# weight each convolution reads.
MAX_FOLD_ELEMENTS = 4096
GROWTH = 4


def fold_constants(model: onnx.ModelProto, max_elements: int = MAX_FOLD_ELEMENTS) -> PassResult:
    """Pass: replace the nodes whose outputs are constants by initializers; count the nodes folded."""
    g = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    shapes = static_shapes(g)
    consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in g.initializer
                                     if t.data_location != onnx.TensorProto.EXTERNAL}
    graph_outputs = {o.name for o in g.output}
    created: dict[str, np.ndarray] = {}
    kept: list[onnx.NodeProto] = []
    for node in g.node:
        values = _try_fold(node, consts, shapes, opset, max_elements)
        if values is None or graph_outputs & set(node.output):
            kept.append(node)
            continue
        for name, value in zip(node.output, values):
            consts[name] = created[name] = value
    if not created:
        return PassResult(model, 0)
    used = referenced(kept)
    out = with_nodes(model, kept)
    out.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in created.items() if k in used)
    keep_info = [vi for vi in out.graph.value_info if vi.name not in created]
    del out.graph.value_info[:]
    out.graph.value_info.extend(keep_info)
    return PassResult(out, len(g.node) - len(kept))


def with_nodes(model: onnx.ModelProto, nodes: Iterable[onnx.NodeProto]) -> onnx.ModelProto:
    """A copy of `model` whose graph holds `nodes` instead of its own (rewrites never mutate
    the model they are given)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def prune(model: onnx.ModelProto) -> PassResult:
    """Pass: drop initializers nothing reads (left behind by folding and branch inlining), and
    bypass Identity nodes, which only rename values (inlined branches end in one per output);
    count the nodes and initializers dropped."""
    g = model.graph
    outputs = {o.name for o in g.output}
    alias = {n.output[0]: n.input[0] for n in g.node
             if n.op_type == "Identity" and n.domain in ("", "ai.onnx") and n.output[0] not in outputs}
    if not alias and {t.name for t in g.initializer} <= referenced(g.node) | outputs:
        return PassResult(model, 0)  # nothing to drop: skip copying the weights

    def resolve(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    out = with_nodes(model, [n for n in g.node if not (n.op_type == "Identity" and n.output[0] in alias)])
    for n in out.graph.node:  # the copies: rewire readers of a bypassed Identity to its input
        rename_values(n, resolve)
    used = referenced(out.graph.node) | outputs
    keep = [t for t in out.graph.initializer if t.name in used]
    unread = len(out.graph.initializer) - len(keep)
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    keep_info = [vi for vi in out.graph.value_info if vi.name not in alias]
    del out.graph.value_info[:]
    out.graph.value_info.extend(keep_info)
    return PassResult(out, len(alias) + unread)


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held by `node`'s attributes (If branches, Loop/Scan bodies)."""
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def rename_values(node: onnx.NodeProto, rename: Callable[[str], str]) -> None:
    """Apply `rename` (name -> name) to every value `node` reads or writes, in place, and in every
    subgraph it holds, captures included (ONNX forbids shadowing, so a name means the same value
    at every depth). Empty names (omitted optional inputs) stay empty."""
    node.input[:] = [rename(i) if i else i for i in node.input]
    node.output[:] = [rename(o) if o else o for o in node.output]
    for sub in subgraphs(node):
        for inner in sub.node:
            rename_values(inner, rename)
        for vi in (*sub.output, *sub.value_info):
            vi.name = rename(vi.name)


def referenced(nodes: Iterable[onnx.NodeProto]) -> set[str]:
    """Names the nodes read, including captures inside their subgraphs (If/Loop bodies)."""
    names: set[str] = set()
    for n in nodes:
        names.update(n.input)
        for sub in subgraphs(n):
            names |= referenced(sub.node)
    return names


def static_shapes(g: onnx.GraphProto) -> dict[str, tuple[int, ...]]:
    """Shapes of the graph's values whose every dimension is known (inputs, inferred, outputs)."""
    shapes = {}
    for vi in (*g.input, *g.value_info, *g.output):
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in t.shape.dim)
    return shapes


def _try_fold(node: onnx.NodeProto, consts: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]],
              opset: int, max_elements: int) -> list[np.ndarray] | None:
    if node.domain not in ("", "ai.onnx") or node.op_type in _NEVER:
        return None
    if node.op_type in ("Shape", "Size") and node.input[0] in shapes:
        shape = np.array(shapes[node.input[0]], dtype=np.int64)
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape)), dtype=np.int64)]
        attrs = {a.name: a.i for a in node.attribute}
        return [shape[attrs.get("start", 0):attrs.get("end", len(shape)) or None]
                if "end" in attrs else shape[attrs.get("start", 0):]]
    inputs = [i for i in node.input if i]
    if not all(i in consts for i in inputs):
        return None
    in_bytes = sum(consts[i].nbytes for i in inputs)
    widest = max((consts[i].dtype.itemsize for i in inputs), default=0)
    # Too large by its inferred shape: never evaluated (a ConstantOfShape can ask for terabytes).
    if node.op_type != "Constant" and any(int(np.prod(shapes[o], dtype=object)) > max(max_elements, GROWTH * in_bytes)
                                          for o in node.output if o in shapes):
        return None
    try:
        results = ReferenceEvaluator(node, opsets={"": opset}).run(None, {i: consts[i] for i in inputs})
    except Exception:  # an op the reference evaluator lacks stays in the graph: folding is optional
        return None
    results = [np.asarray(r) for r in results]
    if node.op_type == "Constant":   # its value is stored in the model already: any size
        return results if all(r.dtype != object for r in results) else None
    if any(r.dtype == object or (r.size > max_elements and (r.dtype.itemsize > widest or r.nbytes > GROWTH * in_bytes))
           for r in results):
        return None
    return results
