"""Function expansion: ONNX ops that IREE 3.13 cannot lower, written out as the standard's own
function bodies (front-end pass, ``passes.Pass`` contract).

Many recent ONNX ops are *functions*: the standard defines each one as a graph of primitive ops.
IREE's ONNX-to-torch conversion has no pattern for several of them, so a model holding one failed
to compile with ``failed to legalize operation 'torch.operator'``, on every target, host included.
Their bodies compile: the node tests' ``_expanded`` variants (the same computation written out)
pass where the op itself fails (onnx 1.23 node tests on llvm-cpu, docs/conformance.md).

Only the ops listed in ``EXPANDED`` are expanded, each with the measured reason: an op IREE lowers
well keeps IREE's own kernel (LayerNormalization passes all 57 cases and would lose its fused
kernel; Gelu, HardSwish, Mish lower too). Most of these are *context-dependent* functions: their
body depends on the node's attributes and its inputs' types, so it is asked of the schema
(``get_context_dependent_function_with_opset_version``) after shape inference, for the opset the
model imports. Bodies may hold other listed ops (SoftmaxCrossEntropyLoss holds
NegativeLogLikelihoodLoss, SwiGLU holds Swish): expansion repeats until none is left.

IREE's importer has a switch of its own for this
(``onnx_importer.Config(function_expansion_allowlists_by_domain=...)``). It is not used: it runs
after aot has planned the graph, so the partitioner, the index-range checks and constant folding
would see one opaque node instead of the primitive ops the device runs, and the static shapes that
folding gives the bodies (their ``Shape``/``Range`` arithmetic) would stay dynamic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx
import onnx.inliner
from onnx import helper, version_converter

from aot.frontend.passes import PassResult

# The ops expanded, and why: each one fails to compile as itself in IREE 3.13 (the counts are onnx
# 1.23's node tests on llvm-cpu before expansion; the expanded bodies pass).
EXPANDED: dict[str, str] = {
    "Attention": "no IREE lowering for onnx.Attention (93 node tests failed to compile; their bodies pass)",
    "RMSNormalization": "no IREE lowering for onnx.RMSNormalization (19 of 19 failed to compile)",
    "RotaryEmbedding": "no IREE lowering for onnx.RotaryEmbedding (8 of 8 failed to compile)",
    "NegativeLogLikelihoodLoss": "IREE lowers only some variants of onnx.NegativeLogLikelihoodLoss (16 of 18 failed)",
    "SoftmaxCrossEntropyLoss": "IREE fails or computes inf on most onnx.SoftmaxCrossEntropyLoss variants (22 of 34)",
    "CausalConvWithState": "no IREE lowering for onnx.CausalConvWithState (13 of 13 failed to compile)",
    "Swish": "no IREE lowering for onnx.Swish",
    "SwiGLU": "no IREE lowering for onnx.SwiGLU (its body holds Swish, expanded in turn)",
    "AffineGrid": "no IREE lowering for onnx.AffineGrid (4 of 4 failed to compile)",
}


def _legalized_instead(node: onnx.NodeProto, constants: set[str]) -> bool:
    """A node a legalization writes better than its body: AffineGrid with a constant ``size`` is a
    constant base grid and one MatMul (``frontend/legalize/affine_grid.py``); its body would build
    that grid at run time from ~60 small ops."""
    return node.op_type == "AffineGrid" and len(node.input) > 1 and node.input[1] in constants

_DOMAIN = "aot.expand"   # a body's domain while it is inlined; gone afterwards
MAX_DEPTH = 4            # bodies within bodies: SCE -> NLL is two


class ExpansionError(ValueError):
    """The schema gave no body for a node that needs one (front ends turn it into a ModelError)."""


@dataclass(frozen=True, slots=True)
class Expanded:
    op_type: str
    count: int
    reason: str


def expand_functions(model: onnx.ModelProto) -> PassResult:
    """Every node of an ``EXPANDED`` op replaced by its function body, recursively. The model
    must have been through shape inference: context-dependent bodies need their inputs' types.
    ``changed`` counts the nodes expanded, at every depth."""
    total = 0
    for _ in range(MAX_DEPTH):
        constants = _constants(model)
        targets = {i for i, n in enumerate(model.graph.node) if _expands(n, constants)}
        if not targets:
            return PassResult(model, total)
        model = _expand_once(model, targets)
        total += len(targets)
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    left = sorted({n.op_type for n in model.graph.node if _expands(n, _constants(model))})
    raise ExpansionError(f"function bodies still hold {', '.join(left)} after {MAX_DEPTH} expansions")


def expanded_ops(before: onnx.ModelProto) -> tuple[Expanded, ...]:
    """What ``expand_functions`` expands at the top level of ``before``, for the build record."""
    counts: dict[str, int] = {}
    constants = _constants(before)
    for n in before.graph.node:
        if _expands(n, constants):
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return tuple(Expanded(op, k, EXPANDED[op]) for op, k in sorted(counts.items()))


def _expands(node: onnx.NodeProto, constants: set[str]) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in EXPANDED and not _legalized_instead(node, constants)


def _constants(model: onnx.ModelProto) -> set[str]:
    """The values known before folding: initializers and Constant nodes' outputs."""
    g = model.graph
    return {t.name for t in g.initializer} | {n.output[0] for n in g.node if n.op_type == "Constant"}


def _expand_once(model: onnx.ModelProto, targets: set[int]) -> onnx.ModelProto:
    """The model with each target node replaced by its written-out body."""
    opset = _opset(model)
    types = _value_types(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    for i, node in enumerate(model.graph.node):
        out.graph.node.extend(_written_out(node, opset, types) if i in targets else [node])
    return out


def _written_out(node: onnx.NodeProto, opset: int, types: dict[str, onnx.TypeProto]) -> list[onnx.NodeProto]:
    """``node``'s function body as plain nodes of the model's opset. onnx's inliner splices the
    body in (fresh value names, the node's attributes substituted) in a one-node model at the
    body's own opset, since it inlines only bodies of the caller's version; the version converter
    then brings the nodes to the model's opset (a body defined at 13 in an opset-17 model)."""
    missing = [i for i in node.input if i and i not in types]
    if missing:   # context-dependent bodies are built from the input types; the call needs them too
        raise ExpansionError(f"node {node.name!r} ({node.op_type}): no type known for input(s) "
                             f"{', '.join(map(repr, missing))}, which its function body needs")
    body = _body(node, opset, types)
    body_opset = next(o.version for o in body.opset_import if o.domain in ("", "ai.onnx"))
    body.name, body.domain = node.op_type, _DOMAIN
    call = onnx.NodeProto()
    call.CopyFrom(node)
    call.op_type, call.domain = body.name, _DOMAIN
    # An attribute the node leaves at its default is absent, and the inliner then drops the body's
    # references to it (Swish's ``alpha`` in its Constant): give the call every default explicitly.
    given = {a.name for a in node.attribute}
    schema_attrs = onnx.defs.get_schema(node.op_type, opset, node.domain or "").attributes
    for name, attr in sorted(schema_attrs.items()):
        if name not in given and attr.default_value.name:
            default = onnx.AttributeProto()
            default.CopyFrom(attr.default_value)
            default.name = name
            call.attribute.append(default)
    graph = helper.make_graph(
        [call], "expand", [helper.make_value_info(i, types[i]) for i in node.input if i],
        [helper.make_value_info(o, types[o]) if o in types else helper.make_empty_tensor_value_info(o)
         for o in node.output if o])
    mini = helper.make_model(graph, opset_imports=[helper.make_opsetid("", body_opset),
                                                   helper.make_opsetid(_DOMAIN, 1)], functions=[body])
    mini.ir_version = onnx.IR_VERSION
    inlined = onnx.inliner.inline_local_functions(mini)
    if any(n.domain == _DOMAIN for n in inlined.graph.node):
        raise ExpansionError(f"node {node.name!r} ({node.op_type}): onnx's inliner left its body uninlined")
    kept = [o for o in inlined.opset_import if o.domain != _DOMAIN]
    del inlined.opset_import[:]
    inlined.opset_import.extend(kept)
    if body_opset != opset:
        try:
            inlined = version_converter.convert_version(inlined, opset)
        except Exception as e:  # noqa: BLE001 - the converter raises RuntimeError and friends
            raise ExpansionError(f"node {node.name!r} ({node.op_type}): its opset-{body_opset} body does not "
                                 f"convert to opset {opset}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    return _scoped(list(inlined.graph.node), node)


def _scoped(nodes: list[onnx.NodeProto], node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The body's own values and nodes renamed under the expanded node's name, so they cannot
    collide with the model's (or another expansion's) names; its inputs and outputs keep theirs.
    Subgraphs (an ``If`` in AffineGrid's body) read the renamed values by their new names."""
    outer = {*node.input, *node.output}
    prefix = f"{node.name or node.op_type}/"
    renamed = {v: prefix + v for n in nodes for v in n.output if v and v not in outer}

    def rename(ns: list[onnx.NodeProto] | Any) -> None:
        for n in ns:
            n.input[:] = [renamed.get(v, v) for v in n.input]
            n.output[:] = [renamed.get(v, v) for v in n.output]
            for a in n.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    rename(g.node)
                    for out in g.output:
                        out.name = renamed.get(out.name, out.name)

    rename(nodes)
    for n in nodes:
        n.name = prefix + (n.name or n.op_type)
    return nodes


def _body(node: onnx.NodeProto, opset: int, types: dict[str, onnx.TypeProto]) -> onnx.FunctionProto:
    # onnx's stubs omit the function accessors the C++ schema binds, hence Any.
    schema: Any = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    body = onnx.FunctionProto()
    if schema.has_context_dependent_function:
        version = max(v for v in schema.context_dependent_function_opset_versions if v <= opset)
        # An omitted optional input is passed as an empty TypeProto, as onnx's own inliner does.
        blob = schema.get_context_dependent_function_with_opset_version(
            version, node.SerializeToString(),
            [(types[i] if i else onnx.TypeProto()).SerializeToString() for i in node.input])
    elif schema.has_function:
        version = max(v for v in schema.function_opset_versions if v <= opset)
        blob = schema.get_function_with_opset_version(version)
    else:
        raise ExpansionError(f"node {node.name!r} ({node.op_type}): opset {opset} defines no function body")
    if not blob:
        raise ExpansionError(f"node {node.name!r} ({node.op_type}): the schema built no function body for "
                             "this node's attributes and input types")
    body.ParseFromString(blob)
    return body


def _opset(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def _value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    g = model.graph
    types = {v.name: v.type for v in (*g.input, *g.value_info, *g.output) if v.type.HasField("tensor_type")}
    for t in g.initializer:
        types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    for n in g.node:   # Constant nodes' outputs are typed by shape inference; be sure anyway
        if n.op_type == "Constant" and n.output[0] not in types:
            value = next((a.t for a in n.attribute if a.name == "value"), None)
            if value is not None:
                types[n.output[0]] = helper.make_tensor_type_proto(value.data_type, list(value.dims))
    return types
