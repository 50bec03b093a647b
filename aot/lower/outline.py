"""Cut each region of a plan out of the imported MLIR into a module of its own.

With ``lower/depthwise.py`` and ``lower/direct_conv.py`` (convolutions of host regions kept out
of im2col), the only code that rewrites IR. Each region becomes ``func.func @<region>`` whose arguments and
results are the region's boundary tensors; weights stay ``util.global`` parameter references into
the shared archive, and inline constants are copied into every region that reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aot.errors import OutlineError
from aot.frontend.graph import GraphView
from aot.frontend.torch.export import UNPACK
from aot.lower.importer import ImportedModule
from aot.partition.plan import Plan, boundaries

# Ops that only materialise constants: copied into each region that needs them, never boundaries.
_CONSTANT_OPS = ("util.global.load", "torch_c.from_builtin_tensor", "torch.constant.none")
# The ops a graph node imports as: ONNX nodes as torch.operator, PyTorch's as ATen/prims ops.
_NODE_OPS = ("torch.operator", "torch.aten.", "torch.prims.")


@dataclass(frozen=True, slots=True)
class OutlinedRegion:
    name: str
    function: str
    mlir: str
    inputs: tuple[str, ...]   # graph-view value names, in argument order
    outputs: tuple[str, ...]  # graph-view value names, in result order


def outline(imported: ImportedModule, plan: Plan, view: GraphView) -> tuple[OutlinedRegion, ...]:
    from iree.compiler import ir

    bounds = boundaries(plan, view)
    # Parse into a fresh context: handing an importer-built module straight on segfaulted (DESIGN §3).
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(imported.mlir)
        func = next((op for op in module.body.operations
                     if op.operation.name == "func.func" and _sym(op) == imported.func_name), None)
        if func is None:
            raise OutlineError(f"imported module has no function @{imported.func_name}")
        ctx = _FuncIndex(func, view)
        if len(plan.regions) == 1:
            return (_whole(module, func, plan.regions[0].name, view),)
        return tuple(_outline_region(ctx, module, func, r.name, bounds[r.name].inputs,
                                     bounds[r.name].outputs, r.nodes)
                     for r in plan.regions)


def _sym(op: Any) -> str:   # MLIR Python objects: iree.compiler ships no stubs
    from iree.compiler import ir

    return ir.StringAttr(op.operation.attributes["sym_name"]).value


class _FuncIndex:
    """Maps graph-view node and value names onto the ops and SSA values of the imported function.

    A node's ops carry its name as their location (the ONNX importer names ``torch.operator`` ops
    after the ONNX node; the torch front end names each ATen op after its FX node and a tensor
    list after the op that reads it). Ops that only compute from constants are copied, not cut."""

    def __init__(self, func: Any, view: GraphView) -> None:
        block = func.regions[0].blocks[0]
        self.ops = list(block.operations)
        self.value: dict[str, Any] = dict(zip(view.inputs, block.arguments))
        self.node_ops: dict[str, list[Any]] = {}
        self.producer: dict[Any, Any] = {}
        nodes = {n.name for n in view.nodes}
        self.constant: set[int] = set()   # ids of ops that compute from constants only
        for op in self.ops:
            for r in op.results:
                self.producer[r] = op
            if op.operation.name == "func.return":
                continue
            name = _loc_name(op)
            from_constants = all(id(self.producer.get(v)) in self.constant for v in op.operands)
            primary = op.operation.name.startswith(_NODE_OPS) and not _is_constant(op)
            # A node's own op, or a helper of it that reads tensors (a tensor list); a helper that
            # reads constants only (the ONNX importer's ``torch.constant.none``) is a constant.
            if name is None or name not in nodes or not (primary or not from_constants):
                if from_constants:
                    self.constant.add(id(op))
                continue
            ops = self.node_ops.setdefault(name, [])
            if primary and any(o.operation.name.startswith(_NODE_OPS) for o in ops):
                raise OutlineError(f"node {name!r} imported as more than one op; cannot outline it")
            ops.append(op)
            if op.operation.name == UNPACK:   # the elements of the tensor list the node returned
                self.value.update(zip(view.node(name).outputs, op.results))
            elif primary and not _returns_list(op):
                outs = view.node(name).outputs
                if len(outs) > len(op.results):
                    raise OutlineError(f"node {name!r} has {len(outs)} outputs but its op has {len(op.results)}")
                self.value.update(zip(outs, op.results))
        if missing := nodes - self.node_ops.keys():
            raise OutlineError(f"{len(missing)} node(s) not found in the imported MLIR, e.g. {sorted(missing)[:3]}",
                               hint="the importer renamed or expanded them; report this model")
        self.has_nested = any(len(op.operation.regions) for op in self.ops)


def _whole(module: Any, func: Any, name: str, view: GraphView) -> OutlinedRegion:
    """A one-region plan is the imported function itself, renamed: no cloning, so control flow
    with implicitly captured values survives."""
    from iree.compiler import ir

    func.operation.attributes["sym_name"] = ir.StringAttr.get(name)
    return OutlinedRegion(name, name, str(module), view.inputs, view.outputs)


def _returns_list(op: Any) -> bool:
    return len(op.results) == 1 and str(op.results[0].type).startswith("!torch.list")


def _loc_name(op: Any) -> str | None:
    loc = op.location
    try:
        return loc.name_str
    except Exception:
        return None


def _is_constant(op: Any) -> bool:
    name = op.operation.name
    if name in _CONSTANT_OPS:
        return True
    return name == "torch.operator" and str(op.operation.attributes["name"]) == '"onnx.Constant"'


def _outline_region(ix: _FuncIndex, module: Any, func: Any, name: str, inputs: tuple[str, ...],
                    outputs: tuple[str, ...], nodes: tuple[str, ...]) -> OutlinedRegion:
    from iree.compiler import ir
    from iree.compiler.dialects import func as func_d

    if ix.has_nested and len(nodes) != len(ix.node_ops):
        # Nested regions (If/Loop) capture outer values implicitly; cloning them op by op would
        # leave dangling references, so such models are built as one region for now.
        raise OutlineError("the model has control flow (If/Loop/Scan); it can only be built as one region",
                           hint="build it with --accel none")
    selected = {id(op) for n in nodes for op in ix.node_ops[n]}
    args = [ix.value[v] for v in inputs]
    needed = _constant_closure(ix, [op for n in nodes for op in ix.node_ops[n]], set(args))
    body_ops = [op for op in ix.ops if id(op) in selected or id(op) in needed]
    globals_needed = {ir.FlatSymbolRefAttr(op.operation.attributes["global"]).value
                      for op in body_ops if op.operation.name == "util.global.load"}

    new = ir.Module.create()
    with ir.InsertionPoint(new.body):
        for op in module.body.operations:
            if op.operation.name == "util.global" and _sym(op) in globals_needed:
                op.operation.clone()
        ftype = ir.FunctionType.get([a.type for a in args], [ix.value[v].type for v in outputs])
        fn = func_d.FuncOp(name, ftype)
        for attr in func.operation.attributes:
            # The torch lowering reads the opset from these; without them lowering fails.
            if attr.startswith("torch.onnx_meta."):
                fn.attributes[attr] = func.operation.attributes[attr]
        entry = fn.add_entry_block()
    mapping = {a: b for a, b in zip(args, entry.arguments)}
    with ir.InsertionPoint(entry):
        for op in body_ops:
            clone = op.operation.clone()
            for i, operand in enumerate(clone.operands):
                if operand not in mapping:
                    raise OutlineError(f"region {name!r}: an op reads a value defined outside the region")
                clone.operands[i] = mapping[operand]
            for old, fresh in zip(op.results, clone.results):
                mapping[old] = fresh
        func_d.ReturnOp([mapping[ix.value[v]] for v in outputs])
    try:
        new.operation.verify()
    except Exception as e:
        raise OutlineError(f"region {name!r} does not verify after outlining: {e}") from e
    return OutlinedRegion(name, name, str(new), tuple(inputs), tuple(outputs))


def _constant_closure(ix: _FuncIndex, ops: list[Any], args: set[Any]) -> set[int]:
    """ids of the constant ops that the given ops depend on (transitively)."""
    needed: set[int] = set()
    stack = [v for op in ops for v in op.operands]
    while stack:
        v = stack.pop()
        if v in args:
            continue
        producer = ix.producer.get(v)
        if producer is None or id(producer) in needed:
            continue
        if id(producer) in ix.constant:
            needed.add(id(producer))
            stack.extend(producer.operands)
    return needed
