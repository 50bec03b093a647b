"""Inline ``If`` nodes whose condition is a constant.

Exporters guard model variants with ``If`` (Silero VAD picks its 8 kHz or 16 kHz network on the
``sr`` input). Once such an input is baked in as a constant and folding has turned the condition
into one, only one branch can ever run: it is spliced into the graph in place of the ``If``, so the
partitioner and IREE see plain dataflow instead of a region op they cannot cut or legalize.
"""

from __future__ import annotations

import math

import onnx
from onnx import numpy_helper

from aot.frontend.fold import rename_values, subgraphs, with_nodes
from aot.frontend.passes import PassResult


def inline_constant_ifs(model: onnx.ModelProto) -> PassResult:
    """Pass: splice the taken branch of every constant-condition ``If`` of the main graph in
    place of the ``If``; count the ``If`` nodes inlined."""
    g = model.graph
    conditions = {t.name: bool(numpy_helper.to_array(t).reshape(-1)[0]) for t in g.initializer
                  if t.data_type == onnx.TensorProto.BOOL and math.prod(t.dims) == 1}
    chosen = [n for n in g.node if n.op_type == "If" and n.domain in ("", "ai.onnx") and n.input[0] in conditions]
    if not chosen:
        return PassResult(model, 0)
    taken = _all_names(g)
    out = with_nodes(model, [])
    for node in g.node:
        if node not in chosen:
            out.graph.node.append(node)
            continue
        branch = _attr(node, "then_branch" if conditions[node.input[0]] else "else_branch")
        rename = _fresh_names(branch, f"{node.name or 'If'}/", taken)
        for init in branch.initializer:
            copied = onnx.TensorProto()
            copied.CopyFrom(init)
            copied.name = rename[init.name]
            out.graph.initializer.append(copied)
        for i, inner in enumerate(branch.node):
            copied = onnx.NodeProto()
            copied.CopyFrom(inner)
            copied.name = rename[f"node#{i}"]
            rename_values(copied, lambda v: rename.get(v, v))
            out.graph.node.append(copied)
        for outer, inner_out in zip(node.output, branch.output):
            out.graph.node.append(onnx.helper.make_node(
                "Identity", [rename.get(inner_out.name, inner_out.name)], [outer], name=f"{node.name}/{outer}"))
    return PassResult(out, len(chosen))


def _attr(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == name)


def _all_names(g: onnx.GraphProto) -> set[str]:
    """Every value and node name in `g` and its subgraphs (new names must avoid all of them)."""
    names = {v.name for v in (*g.input, *g.output, *g.value_info)} | {t.name for t in g.initializer}
    for n in g.node:
        names.update(n.input, n.output, [n.name])
        for sub in subgraphs(n):
            names |= _all_names(sub)
    return names


def _fresh_names(branch: onnx.GraphProto, prefix: str, taken: set[str]) -> dict[str, str]:
    """New outer-graph names for everything `branch` defines (its initializers, node outputs and
    node names under ``node#INDEX`` keys); names read from the enclosing scope stay as they are."""
    local = {t.name: t.name for t in branch.initializer} | {o: o for n in branch.node for o in n.output if o}
    local |= {f"node#{i}": n.name or n.op_type for i, n in enumerate(branch.node)}
    mapping = {}
    for key, plain in local.items():
        base = prefix + plain
        name, i = base, 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name)
        mapping[key] = name
    return mapping
