"""Products that share one constant weight and do not feed each other, as one product over their
stacked rows.

An exporter that unrolls a recurrence (``torch.onnx.export`` of a loop over an ``LSTMCell`` or
``GRUCell``, as in CRNN text recognisers and attention decoders) writes each step's input
projection as its own ``Gemm`` of one row against the cell's input weights. The steps' inputs are
slices of a sequence computed before the loop, so none of those products waits on another; but
each one alone is a matrix-vector product that streams the whole weight matrix from memory (a 4096
x 400 cell: 6.5 MB per step, memory-bound at ~50 GFLOP/s in IREE 3.13), where the same rows as one
product read it once. Only the hidden-to-hidden products stay per step: each reads the state the
previous step wrote. This is what cuDNN and onnxruntime's LSTM kernels do with the input
projection of a whole sequence, done here at the graph level for the unrolled form.

The rewrite: the rows of every such group (Gemm or MatMul with the same constant B, same bias and
attributes, a 2-D A, and no member's A computed from any member's output) concatenated, one
product, and a Split back into the members' outputs. Same FLOPs and the same sums per row, so the
results are equal to the last bit whenever the product's reduction order per row is unchanged.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.fold import static_shapes, subgraphs
from aot.frontend.passes import PassResult, in_topological_order

PRODUCTS = ("Gemm", "MatMul")


def batch_shared_weight_products(model: onnx.ModelProto) -> PassResult:
    """Pass: merge each group of independent products over one constant weight; count the groups."""
    g = model.graph
    if any(True for n in g.node for _ in subgraphs(n)):
        return PassResult(model, 0)    # a subgraph may read a product's output unseen by the order below
    shapes = static_shapes(g)
    constants = {t.name: tuple(t.dims) for t in g.initializer}
    groups: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for i, node in enumerate(g.node):
        key = _group_key(node, shapes, constants)
        if key is not None:
            groups[key].append(i)
    nodes = list(g.node)
    replaced: dict[int, list[onnx.NodeProto]] = {}
    inits: list[onnx.TensorProto] = []
    for members in groups.values():
        free = _independent(nodes, members)
        if len(free) < 2:
            continue
        new_nodes, new_init = _merged(nodes, free, shapes)
        replaced[free[0]] = new_nodes
        replaced.update({i: [] for i in free[1:]})
        inits.append(new_init)
    if not replaced:
        return PassResult(model, 0)
    rewritten = [n for i, node in enumerate(nodes) for n in replaced.get(i, [node])]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(in_topological_order(rewritten))   # a merged product's outputs are read by nodes before its last member
    out.graph.initializer.extend(inits)
    return PassResult(out, len(inits))


def _group_key(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]],
               constants: dict[str, tuple[int, ...]]) -> tuple[object, ...] | None:
    """What products must share to be merged: op, weight, bias and attributes; None for a node
    that is not a product of a static 2-D A (untransposed) with a constant 2-D B and a bias that
    is the same for every row."""
    if node.op_type not in PRODUCTS or len(node.input) < 2 or len(constants.get(node.input[1], ())) != 2:
        return None
    a = shapes.get(node.input[0])
    if a is None or len(a) != 2 or a[0] < 1:
        return None
    attrs = tuple(sorted((at.name, helper.get_attribute_value(at)) for at in node.attribute))
    if dict(attrs).get("transA", 0):
        return None
    bias = node.input[2] if len(node.input) > 2 else ""
    if bias and (bias not in constants or (len(constants[bias]) == 2 and constants[bias][0] != 1)):
        return None
    return (node.op_type, node.input[1], bias, attrs, a[1])


def _independent(nodes: Sequence[onnx.NodeProto], members: list[int]) -> list[int]:
    """The members whose A does not depend on any member's output (directly or through other nodes)."""
    reached = {o for i in members for o in nodes[i].output}
    first = min(members)
    for node in nodes[first:]:        # nodes are in topological order: one sweep propagates
        if any(v in reached for v in node.input):
            reached.update(node.output)
    return [i for i in members if nodes[i].input[0] not in reached]


def _merged(nodes: Sequence[onnx.NodeProto], free: list[int], shapes: dict[str, tuple[int, ...]]
            ) -> tuple[list[onnx.NodeProto], onnx.TensorProto]:
    first = nodes[free[0]]
    p = f"{first.output[0]}.stacked"    # an output name is unique (SSA); node names need not be
    rows = [shapes[nodes[i].input[0]][0] for i in free]
    product = onnx.NodeProto()
    product.CopyFrom(first)
    product.name = f"{first.name or first.output[0]}.stacked"
    product.input[0] = f"{p}.rows"
    product.output[0] = f"{p}.out"
    split = numpy_helper.from_array(np.array(rows, np.int64), f"{p}.split")
    return [helper.make_node("Concat", [nodes[i].input[0] for i in free], [f"{p}.rows"], name=f"{p}.concat", axis=0),
            product,
            helper.make_node("Split", [f"{p}.out", split.name], [nodes[i].output[0] for i in free],
                             name=f"{p}.split", axis=0)], split
