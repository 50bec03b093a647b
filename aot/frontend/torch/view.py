"""The graph view of an exported module, read from its torch-dialect MLIR.

One node per ``torch.aten.*``/``torch.prims.*`` op that reads the model's inputs (found by the
location name ``export.py`` gave it), values typed from the ``!torch.vtensor`` types. As in the
ONNX view, constants are values, not nodes: parameters (``util.global.load``), literals, and ops
that compute from constants only (a weight's dtype conversion) are copied into every region that
reads them, which is exactly what the outliner's constant closure does with the same ops.
"""

from __future__ import annotations

import re
from typing import Any

from aot.errors import ModelError
from aot.frontend.graph import GraphView, Node, Value
from aot.frontend.torch.export import FUNC_NAME, UNPACK, TorchSource

_VTENSOR = re.compile(r"!torch\.vtensor<\[([^\]]*)\],([a-z0-9]+)>")
_ELEMENT = {"f32": "float32", "f16": "float16", "f64": "float64", "bf16": "bfloat16", "si64": "int64",
            "si32": "int32", "si16": "int16", "si8": "int8", "ui8": "uint8", "i1": "bool"}
_PARAMETER = re.compile(r"@(?:__auto\.)?([^\s:]+)")


def view_of(source: TorchSource) -> GraphView:
    from iree.compiler import ir

    meta = {n.name: n for n in source.nodes}
    outputs = {o.name for o in source.outputs}
    with ir.Context():
        module = ir.Module.parse(source.mlir)
        func = next(op for op in module.body.operations if op.operation.name == "func.func"
                    and ir.StringAttr(op.operation.attributes["sym_name"]).value == FUNC_NAME)
        block = func.regions[0].blocks[0]
        name_of: dict[object, str] = dict(zip(block.arguments, (i.name for i in source.inputs)))
        values = {i.name: Value(i.name, i.dtype, i.shape) for i in source.inputs}
        constant: set[str] = set()
        lists: dict[Any, list[Any]] = {}   # tensor lists (aten.cat's operand) -> their elements
        nodes = []
        for i, op in enumerate(block.operations):
            kind = op.operation.name
            if kind == "func.return":
                continue
            if kind == "util.global.load":   # a parameter in the archive
                found = _PARAMETER.search(str(op.operation.attributes["global"]))
                if found is None:
                    raise ModelError(f"a parameter load of the exported program names no global: {op}",
                                     hint="report this module")
                name_of[op.results[0]] = "param:" + found.group(1)
                constant.add(name_of[op.results[0]])
                continue
            if kind == "torch_c.from_builtin_tensor":   # the same tensor, typed as a torch value
                name = name_of[op.results[0]] = name_of[op.operands[0]]
                values[name] = _value(name, op.results[0].type) or Value(name)
                continue
            tensors = _tensor_operands(op, lists)
            if kind == "torch.prim.ListConstruct":
                lists[op.results[0]] = tensors
                continue
            location = _location_name(op)
            node = meta.get(location) if location is not None else None
            if kind == UNPACK and node is not None:   # the elements of the list `node` returned: its outputs
                for value, rname in zip(op.results, node.results):
                    name_of[value] = rname
                    values[rname] = _value(rname, value.type) or Value(rname)
                if name_of[op.operands[0]] in constant:
                    constant.update(node.results)
                continue
            results = node.results if node else tuple(f"%{i}:{j}" for j in range(len(op.results)))
            for value, rname in zip(op.results, results):
                name_of[value] = rname
                if (v := _value(rname, value.type)) is not None:
                    values[rname] = v
            if all(name_of[t] in constant for t in tensors) and not outputs & set(results):
                constant.update(results)   # a literal, or computed from constants only
                continue
            if node is None:
                raise ModelError(f"op {kind} of the exported program reads the model's tensors but is no ATen op",
                                 hint="aot places torch.aten/torch.prims ops only; report this module")
            ins = [name_of[v] for v in tensors]
            nodes.append(Node(node.name, node.op_type, tuple(dict.fromkeys(i for i in ins if i not in constant)),
                              results, (), tuple(dict.fromkeys(i for i in ins if i in constant)),
                              origin=" ".join(p for p in (node.module, f"({node.source})" if node.source else "") if p)))
    missing = outputs - {r for n in nodes for r in n.outputs}
    if missing:
        raise ModelError(f"output(s) {sorted(missing)} are not computed by any op of the exported program",
                         hint="return tensors computed from the inputs (not parameters or inputs themselves)")
    return GraphView.build(nodes, [i.name for i in source.inputs], [o.name for o in source.outputs], values, constant)


# MLIR objects (iree.compiler.ir: no type stubs) are Any below.
def _tensor_operands(op: Any, lists: dict[Any, list[Any]]) -> list[Any]:
    out = []
    for v in op.operands:
        if v in lists:
            out.extend(lists[v])
        elif "vtensor" in str(v.type):
            out.append(v)
    return out


def _location_name(op: Any) -> str | None:
    try:
        return op.location.name_str
    except Exception:
        return None


def _value(name: str, mlir_type: Any) -> Value | None:
    m = _VTENSOR.search(str(mlir_type))
    if m is None:
        return None
    dims = [d.strip() for d in m.group(1).split(",") if d.strip()]
    shape = None if any(not d.lstrip("-").isdigit() or int(d) < 0 for d in dims) else tuple(int(d) for d in dims)
    return Value(name, _ELEMENT.get(m.group(2), ""), shape)
