"""Export an ``nn.Module`` with iree-turbine and name every op of the MLIR after its FX node.

``torch.export`` traces the module; turbine's decomposition table runs on the program; turbine's
importer turns each FX ``call_function`` node into exactly one ``torch.aten.*``/``torch.prims.*``
op, in graph order. That one-to-one order is checked op by op (the packet must match), and each
op's location becomes ``loc("<fx node name>"(<source location>))``: the name the ONNX importer's
locations carry too, so the outliner finds a node's op the same way for both front ends, and the
FX name is how PyTorch eager values map onto graph values for verification (``checks/eager.py``).
"""

from __future__ import annotations

import copy
import hashlib
import operator
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from aot.frontend.source import TORCH_FAMILIES, OpFamily
from aot.errors import ImporterError, ModelError
from aot.frontend.load import TensorSpec
from aot.frontend.torch import decompose
from aot.frontend.torch.attention import sdpa_as_matmuls
from aot.frontend.torch.ops import op_type

PARAMS_SCOPE = "model"   # the same scope as the ONNX importer's archive: one runtime provider
UNPACK = "torch.prim.ListUnpack"
FUNC_NAME = "main"
_NUMPY_DTYPE = {"float32": "float32", "float16": "float16", "float64": "float64", "bfloat16": "bfloat16",
                "int64": "int64", "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8",
                "bool": "bool"}


@dataclass(frozen=True, slots=True)
class TorchNode:
    """One ATen/prims op of the exported program, as the graph view needs it."""

    name: str                  # the FX node's name (unique), and the op's MLIR location name
    op_type: str               # ``aten.conv2d``
    results: tuple[str, ...]   # value names: the node's name, or its ``getitem`` users' names
    module: str                # the nn.Module path that ran it ("layer1.conv1"; "" for the top module)
    source: str                # where the model's code calls it ("models.py:42")


@dataclass(frozen=True, slots=True)
class TorchSource:
    """An exported module, ready to partition: the counterpart of the ONNX ``ModelSource``."""

    name: str
    path: str                          # the factory it came from (``pkg.mod:factory``), or "<Class object>"
    sha256: str                        # of the exported MLIR (structure and shapes; weights are hashed apart)
    mlir: str                          # turbine's module, ops located by FX node name
    nodes: tuple[TorchNode, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    module: Any                        # the eval-mode copy that was exported; its tensors are the weights
    program: Any                       # the decomposed ``torch.export.ExportedProgram`` turbine imported
    versions: tuple[tuple[str, str], ...]   # torch and iree-turbine
    renamed: tuple[tuple[str, str], ...] = ()  # (FX name, public name) of each model output
    frontend: str = "torch"
    opset: int = 0                     # ONNX-only fields, so the manifest treats both sources alike
    folded_nodes: int = 0
    expanded: tuple = ()
    constants: tuple = ()
    index_ops: tuple = ()

    def op_families(self, op_type: str) -> frozenset[OpFamily]:
        return TORCH_FAMILIES.get(op_type, frozenset())


def export(module: Any, example_args: Mapping[str, Any], *, path: str = "",
           attention_as_matmuls: bool = False) -> TorchSource:
    """Export ``module`` (an ``nn.Module``) for the named example tensors, in its ``forward``'s
    argument order. The caller's module is not touched: a deep copy in eval mode is exported.
    ``attention_as_matmuls``: write fused attention out (``attention.py``; Vulkan builds)."""
    import torch
    import iree.turbine.aot as turbine
    from iree.turbine.aot import decompositions

    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"expected a torch.nn.Module, got {type(module).__name__}",
                         hint="the factory must return the model (an nn.Module instance)")
    name = type(module).__name__
    args = _example_tensors(name, example_args)
    model = copy.deepcopy(module).eval()   # aot builds inference: dropout off, batch norm frozen
    # Marks every parameter and persistent buffer as a named external parameter: the MLIR then
    # references them in the archive `save_params` writes instead of inlining their data.
    turbine.externalize_module_parameters(model, external_scope=PARAMS_SCOPE)
    try:
        with warnings.catch_warnings():
            # torch 2.13's own export internals trip this deprecation; it says nothing about the model.
            warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\)", category=FutureWarning)
            # nn.LSTM/GRU/RNN keep their weights as a flattened list torch.export reads as attributes.
            warnings.filterwarnings("ignore", message="The tensor attributes .*_flat_weights", category=UserWarning)
            program = torch.export.export(model, tuple(args.values()))
            table = {**decompositions.current_aot_decompositions(), **decompose.table()}
            if attention_as_matmuls:
                table[torch.ops.aten.scaled_dot_product_attention.default] = sdpa_as_matmuls
            program = program.run_decompositions(table)
    except Exception as e:
        raise ModelError(f"torch.export could not trace {name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}",
                         hint="the module must be traceable by torch.export with these example inputs "
                              "(no data-dependent Python control flow)") from e
    sig = program.graph_signature
    if tuple(sig.user_inputs) != tuple(args):
        raise ModelError(f"{name}.forward takes {list(sig.user_inputs)}, but the example inputs are {list(args)}",
                         hint="name one --example-input per tensor argument of forward, in order")
    try:
        exported = turbine.export(program, function_name=FUNC_NAME)
        renamed = tuple((n, f"output_{i}") for i, n in enumerate(program.graph_signature.user_outputs))
        mlir, nodes = _located(exported.mlir_module, program, dict(renamed))
    except (ModelError, ImporterError):   # ours, already naming what is wrong
        raise
    except Exception as e:
        raise ImporterError(f"iree-turbine could not import {name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}",
                            hint="an op of the exported program has no torch-dialect import; "
                                 "look for it in the error, or export the module to ONNX instead") from e
    outputs = tuple(TensorSpec(public, o.dtype, o.shape) for (_, public), o in zip(renamed, _output_specs(program)))
    inputs = tuple(TensorSpec(k, _dtype(v.dtype), tuple(v.shape)) for k, v in args.items())
    versions = (("torch", torch.__version__), ("iree-turbine", _version("iree-turbine")))
    return TorchSource(name, path or f"<{name} object>", hashlib.sha256(mlir.encode()).hexdigest(), mlir,
                       nodes, inputs, outputs, model, program, versions, renamed)


def save_params(source: TorchSource, path: Path) -> None:
    """Write the module's parameters and persistent buffers to ``path`` (an ``.irpa``), under
    the names the exported MLIR's ``#flow.parameter.named`` references use."""
    import iree.turbine.aot as turbine

    builder = turbine.ParameterArchiveBuilder()
    builder.add_module(source.module)
    builder.save(path)


def _example_tensors(name: str, example_args: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    if not example_args:
        raise ModelError(f"no example inputs for {name}", hint="pass --example-input NAME=1x3x224x224 per input")
    bad = [k for k, v in example_args.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ModelError(f"example input(s) {bad} of {name} are not tensors",
                         hint="every forward argument aot exports must be a tensor")
    return dict(example_args)


def _located(module_op: Any, program: Any, public: Mapping[str, str]) -> tuple[str, tuple[TorchNode, ...]]:
    """Pair FX nodes with MLIR ops, check the pairing, name each op's location after its node.
    Values the model returns take their ``public`` names (``output_0``...), not FX's."""
    from iree.compiler import ir

    fx = [n for n in program.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    func = next(op for op in module_op.regions[0].blocks[0].operations if op.operation.name == "func.func")
    block = func.regions[0].blocks[0]
    ops = [op for op in block.operations if op.operation.name.startswith(("torch.aten.", "torch.prims."))]
    if len(fx) != len(ops):
        raise ImporterError(f"the exported program has {len(fx)} ATen calls but the MLIR {len(ops)} ops",
                            hint="this torch/iree-turbine pair imports ops differently than aot expects; "
                                 "use the pinned versions (pip install .[torch])")
    nodes = []
    consumer: dict[Any, str] = {}
    # An op that returns a tensor list (aten.unbind, aten.split) is followed by the ListUnpack of
    # its elements: the unpack belongs to the op, and the elements are the op's outputs.
    unpacks = {op.operands[0]: op for op in block.operations if op.operation.name == UNPACK}
    for node, op in zip(fx, ops):
        packet = str(getattr(node.target, "overloadpacket", node.target))
        mlir_name = op.operation.name
        if mlir_name != f"torch.{packet}" and not mlir_name.startswith(f"torch.{packet}."):
            raise ImporterError(f"FX node {node.name} ({packet}) was imported as {mlir_name}",
                                hint="this torch/iree-turbine pair imports ops differently than aot expects")
        op.location = ir.Location.name(node.name, childLoc=op.location, context=module_op.context)
        for operand in op.operands:
            consumer.setdefault(operand, node.name)
        unpack = unpacks.get(op.results[0]) if len(op.results) == 1 else None
        if unpack is not None:
            unpack.location = ir.Location.name(node.name, childLoc=unpack.location, context=module_op.context)
        count = len(unpack.results) if unpack is not None else len(op.results)
        results = tuple(public.get(r, r) for r in _result_names(node, count))
        nodes.append(TorchNode(node.name, op_type(mlir_name, packet), results,
                               _module_path(node), _source(str(op.location))))
    for op in block.operations:
        # A list of tensors (aten.cat's operand) is built right before its consumer and belongs to it.
        if op.operation.name == "torch.prim.ListConstruct" and "vtensor" in str(op.results[0].type):
            if (owner := consumer.get(op.results[0])) is not None:
                op.location = ir.Location.name(owner, childLoc=op.location, context=module_op.context)
    return module_op.get_asm(enable_debug_info=True), tuple(nodes)


def _result_names(node: Any, count: int) -> tuple[str, ...]:
    picked = {u.args[1]: u.name for u in node.users if u.target is operator.getitem}
    if count == 1 and not picked:
        return (node.name,)
    return tuple(picked.get(i, f"{node.name}:{i}") for i in range(count))


def _module_path(node: Any) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return next(reversed(stack.values()))[0] if stack else ""


_FILE_LINE = re.compile(r'"([^"]+)":(\d+):\d+')


def _source(location: str) -> str:
    """``file.py:LINE`` of the innermost frame outside torch itself: the model code's call
    (``self.conv(x)``), not ``Conv2d.forward`` inside torch."""
    found = _FILE_LINE.findall(location)
    own = [f for f in found if "/torch/" not in f[0]] or found
    return f"{Path(own[0][0]).name}:{own[0][1]}" if own else ""


def _output_specs(program: Any) -> tuple[TensorSpec, ...]:
    out = next(n for n in program.graph.nodes if n.op == "output")
    specs = []
    for name, value in zip(program.graph_signature.user_outputs, out.args[0]):
        val = value.meta.get("val")
        if val is None or not hasattr(val, "shape"):
            raise ModelError(f"output {name!r} is not a tensor", hint="forward must return tensors only")
        specs.append(TensorSpec(name, _dtype(val.dtype), tuple(int(d) for d in val.shape)))
    return tuple(specs)


def _dtype(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in _NUMPY_DTYPE:
        raise ModelError(f"tensor type {name} is not supported at a model boundary",
                         hint=f"use one of {sorted(_NUMPY_DTYPE)}")
    return _NUMPY_DTYPE[name]


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)
