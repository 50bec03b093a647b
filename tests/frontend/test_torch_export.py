"""The torch front end: turbine export, FX-named ops, the graph view read from MLIR, bad input."""

from __future__ import annotations

import re

import pytest
import torch

import torch_models as tm
from aot.errors import AotError, ImporterError, ModelError
from aot.frontend.torch import factory
from aot.frontend.torch.export import export
from aot.frontend.torch.view import view_of
from aot.options import parse_example_input


@pytest.fixture(scope="module")
def sources():
    return {name: export(getattr(tm, name)(), tm.example_inputs(name), path=f"tests.torch_models:{name}")
            for name in tm.EXAMPLES}


def test_every_aten_op_is_located_by_its_fx_node_name(sources):
    src = sources["resnet_like"]
    program_nodes = [n.name for n in src.program.graph.nodes if n.op == "call_function" and "getitem" not in n.name]
    assert [n.name for n in src.nodes] == program_nodes
    located = re.findall(r'loc\("([^"]+)"\(', src.mlir)
    assert set(program_nodes) <= set(located)
    assert src.frontend == "torch" and dict(src.versions)["torch"].startswith("2.13.0")


def test_the_view_has_typed_values_parameters_as_constants_and_origins(sources):
    src = sources["resnet_like"]
    view = view_of(src)
    conv = view.node("conv2d")
    assert conv.op_type == "aten.conv2d" and conv.inputs == ("x",) and conv.is_compute
    assert conv.const_inputs == ("param:stem.0.weight",)
    assert view.values["param:stem.0.weight"].shape == (32, 3, 3, 3)
    assert view.values["conv2d"].shape == (1, 32, 64, 64) and view.values["conv2d"].dtype == "float32"
    assert conv.origin.startswith("stem.0 (torch_models.py:")
    # Batch norm's frozen statistics are computed from parameters only: constants, not nodes.
    assert len(view.nodes) < len(src.nodes)
    assert all(n.inputs for n in view.nodes)
    topk = next(n for n in view.nodes if n.op_type == "aten.topk")
    assert view.values[topk.outputs[1]].dtype == "int64"


def test_outputs_take_public_names_and_inputs_keep_forward_argument_names(sources):
    src = sources["resnet_like"]
    assert [o.name for o in src.outputs] == ["output_0", "output_1"]
    assert [(o.dtype, o.shape) for o in src.outputs] == [("float32", (1, 100)), ("int64", (1, 5))]
    assert view_of(src).outputs == ("output_0", "output_1")
    assert [i.name for i in sources["encoder"].inputs] == ["tokens"]
    assert sources["encoder"].inputs[0].dtype == "int64"


def test_a_tensor_list_belongs_to_the_op_that_reads_it(sources):
    src = sources["topk_pool"]
    cat = next(n for n in src.nodes if n.op_type == "aten.cat")
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse(src.mlir)   # kept alive while its ops are read
        func = next(op for op in module.body.operations if op.operation.name == "func.func")
        ops = func.regions[0].blocks[0].operations
        lists = [op for op in ops if op.operation.name == "torch.prim.ListConstruct" and "vtensor" in str(op.results[0].type)]
        assert [op.location.name_str for op in lists] == [cat.name]
    view = view_of(src)
    assert len(view.node(cat.name).inputs) == 2   # both concatenated tensors, through the list


def test_attention_is_written_as_matmuls_only_when_asked():
    model, x = tm.encoder(), tm.example_inputs("encoder")
    fused = {n.op_type for n in export(model, x).nodes}
    unfused = {n.op_type for n in export(model, x, attention_as_matmuls=True).nodes}
    assert "aten.scaled_dot_product_attention" in fused
    assert "aten.scaled_dot_product_attention" not in unfused and "aten.matmul" in unfused


def test_the_callers_module_is_left_as_it_was():
    model = tm.topk_pool().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export(model, tm.example_inputs("topk_pool"))
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    from iree.turbine.aot import ExternalTensorTrait

    assert all(ExternalTensorTrait.get(p) is None for p in model.parameters())


class _DataDependent(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x - 1


@pytest.mark.parametrize("module, args, match", [
    ("not a module", {"x": torch.zeros(1)}, "expected a torch.nn.Module"),
    (tm.topk_pool(), {}, "no example inputs"),
    (tm.topk_pool(), {"x": 3.0}, "are not tensors"),
    (tm.topk_pool(), {"image": torch.zeros(1, 3, 32, 32)}, "forward takes \\['x'\\]"),
    (_DataDependent(), {"x": torch.zeros(2)}, "torch.export could not trace _DataDependent"),
])
def test_bad_modules_and_inputs_are_typed_errors_with_a_hint(module, args, match):
    with pytest.raises(ModelError, match=match) as e:
        export(module, args)
    assert e.value.hint


def test_factories_by_module_and_by_file(tmp_path, monkeypatch):
    assert factory.is_factory("tests.torch_models:resnet_like")
    assert not factory.is_factory("zoo:minilm") and not factory.is_factory("model.onnx")
    model = factory.load("tests.torch_models:encoder")
    assert type(model).__name__ == "Encoder"
    path = tmp_path / "mine.py"
    path.write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 2)\n")
    assert isinstance(factory.load(f"{path}:make"), torch.nn.Linear)


@pytest.mark.parametrize("spec, match", [
    ("no_such_module_xyz:make", "cannot import 'no_such_module_xyz'"),
    ("tests.torch_models:no_such_factory", "has no callable 'no_such_factory'"),
    ("/nonexistent/file.py:make", "does not exist"),
    ("tests.torch_models:EXAMPLES", "has no callable"),
])
def test_bad_factories_are_typed_errors(spec, match):
    with pytest.raises(ModelError, match=match):
        factory.load(spec)


def test_example_inputs_parse_with_a_default_dtype():
    assert parse_example_input("x=1x3x64x64") == ("x", (1, 3, 64, 64), "float32")
    assert parse_example_input("tokens=1x16:int64") == ("tokens", (1, 16), "int64")
    tensors = factory.example_tensors((("tokens", (1, 16), "int64"), ("x", (2, 3), "float32")))
    assert tensors["tokens"].dtype == torch.int64 and tensors["x"].shape == (2, 3)
    for bad in ("x", "x=1xq", "x=1x3:", "=1x3", "x=1x3:not a dtype"):
        with pytest.raises(AotError):
            parse_example_input(bad)
    with pytest.raises(ModelError, match="unknown dtype"):
        factory.example_tensors((("x", (1,), "float99"),))


def _turbine(module: torch.nn.Module, x: torch.Tensor):
    import iree.turbine.aot as turbine

    program = torch.export.export(module, (x,))
    return turbine.export(program).mlir_module, program


def test_an_import_that_does_not_pair_with_the_program_is_an_importer_error():
    """Should a torch/turbine pair import FX nodes other than one op each, in order, the
    pairing check refuses to guess which op is which node."""
    from aot.frontend.torch.export import _located

    x = torch.zeros(2, 3)
    relu, relu_program = _turbine(torch.nn.ReLU(), x)
    sigmoid, _ = _turbine(torch.nn.Sigmoid(), x)
    two, _ = _turbine(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Sigmoid()), x)
    assert _located(relu, relu_program, {})[1][0].op_type == "aten.relu"
    with pytest.raises(ImporterError, match="was imported as torch.aten.sigmoid"):
        _located(sigmoid, relu_program, {})
    with pytest.raises(ImporterError, match="has 1 ATen calls but the MLIR 2 ops"):
        _located(two, relu_program, {})
