"""Bad input gets a typed error that names the problem, and no partial or lost bundle."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.frontend import load
from aot.errors import ModelError
from aot.frontend.graph import GraphView
from conftest import run_aot


def small_model(opset: int = 17, domain: str = "", dynamic: bool = False) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4] if dynamic else [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4] if dynamic else [1, 4])
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"], domain=domain)]
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(helper.make_graph(nodes, "small", [x], [y], [w]), opset_imports=opsets)


def test_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(ModelError, match="is empty"):
        load.load(p)


def test_truncated_file(tmp_path, example_model):
    p = tmp_path / "cut.onnx"
    p.write_bytes(example_model.read_bytes()[:1000])
    with pytest.raises(ModelError, match="not an ONNX model|no graph nodes|checker"):
        load.load(p)


def test_text_file_is_not_a_model(tmp_path):
    p = tmp_path / "notes.onnx"
    p.write_text("this is not a model\n" * 20)
    with pytest.raises(ModelError, match="not an ONNX model|no graph nodes"):
        load.load(p)


def test_unknown_op_domain_is_named(tmp_path):
    p = tmp_path / "custom.onnx"
    onnx.save(small_model(domain="com.example.custom"), p)
    with pytest.raises(ModelError, match="com.example.custom.*Relu"):
        load.load(p)


def test_dynamic_input_needs_a_shape_and_the_hint_says_how(tmp_path):
    p = tmp_path / "dyn.onnx"
    onnx.save(small_model(dynamic=True), p)
    with pytest.raises(ModelError, match=r"--input-shape x=1x4"):
        load.load(p)
    source = load.load(p, {"x": (3, 4)})
    assert source.inputs[0].shape == (3, 4) and source.outputs[0].shape == (3, 4)


def test_a_stale_symbolic_annotation_of_an_output_is_forgotten_and_the_import_is_static(tmp_path):
    """torch's exporter with dynamic axes annotates every value, the outputs too, in value_info
    with its symbols; with the inputs pinned IREE's importer typed the output by that stale copy
    ([?,4] against the function's [3,4]) and failed (NudeNet's YOLOv8n)."""
    from aot.lower.importer import import_onnx

    m = small_model(dynamic=True)
    m.graph.value_info.extend([helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
                               helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 4])])
    p = tmp_path / "dynamic.onnx"
    onnx.save(m, str(p))
    source = load.load(p, {"x": (3, 4)})
    assert "y" not in {v.name for v in source.model.graph.value_info}
    assert [(v.name, v.shape) for v in source.outputs] == [("y", (3, 4))]
    hidden = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in source.model.graph.value_info}
    assert hidden["h"] == [3, 4]
    mlir = import_onnx(source.model, "m", tmp_path, tmp_path / "w.irpa").mlir
    assert "!torch.vtensor<[3,4],f32>" in mlir and "[?,4]" not in mlir


def test_an_output_annotated_with_a_stale_rank_takes_the_inferred_one(tmp_path):
    """ddddocr's recogniser declares its output [1, seqlen] for a rank-3 value: the checker
    refused the model once the input was pinned. A placeholder makes the whole annotation a guess,
    so the output takes what inference finds; a wrong rank without a placeholder still fails."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n", 4])
    shape = numpy_helper.from_array(np.array([-1, 1, 4], np.int64), "shape")
    reshape = helper.make_node("Reshape", ["x", "shape"], ["y"])
    for declared, ok in (([1, "seqlen"], True), ([1, 8], False)):
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)
        p = tmp_path / f"stale{ok}.onnx"
        onnx.save(helper.make_model(helper.make_graph([reshape], "g", [x], [y], [shape]),
                                    opset_imports=[helper.make_opsetid("", 17)]), str(p))
        if ok:
            assert [(v.name, v.shape) for v in load.load(p, {"x": (1, 6, 4)}).outputs] == [("y", (6, 1, 4))]
        else:
            with pytest.raises(ModelError, match="checker"):
                load.load(p, {"x": (1, 6, 4)})


def test_input_shape_for_unknown_input(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(small_model(), p)
    with pytest.raises(ModelError, match="not an input"):
        load.load(p, {"nope": (1, 4)})


def test_old_opset_is_upgraded_and_nodes_get_unique_names(tmp_path):
    p = tmp_path / "old.onnx"
    onnx.save(small_model(opset=11), p)
    source = load.load(p)
    assert source.opset == 17
    names = [n.name for n in source.model.graph.node]
    assert all(names) and len(set(names)) == len(names)
    assert source.model.graph.name == "main_graph" and source.name == "small"
    view = GraphView.from_onnx(source.model)
    assert [n.op_type for n in view.nodes] == ["MatMul", "Relu"] and "w" in view.constants


def test_external_data_outside_model_folder_is_refused(tmp_path):
    model = small_model()
    tensor = model.graph.initializer[0]
    tensor.ClearField("float_data"); tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="../../etc/passwd")
    p = tmp_path / "ext.onnx"
    p.write_bytes(model.SerializeToString())
    with pytest.raises(ModelError, match="outside the model's folder"):
        load.load(p)


@pytest.mark.device
@pytest.mark.parametrize("payload", [b"", b"garbage" * 10, "truncate", "custom_domain"])
def test_cli_failed_build_keeps_the_previous_bundle(tmp_path, example_model, payload):
    out = tmp_path / "art"
    run_aot("build", str(example_model), "--accel", "none", "-o", str(out))
    manifest_before = (out / "bundle" / "manifest.json").read_bytes()
    bad = tmp_path / "bad.onnx"
    if payload == "truncate":
        bad.write_bytes(example_model.read_bytes()[:2000])
    elif payload == "custom_domain":
        onnx.save(small_model(domain="ai.onnx.ml"), bad)
    else:
        bad.write_bytes(payload)
    proc = run_aot("build", str(bad), "--accel", "none", "-o", str(out), check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("ERROR: ") and "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert (out / "bundle" / "manifest.json").read_bytes() == manifest_before
    assert sorted(p.name for p in out.iterdir()) == ["build", "bundle"]  # no staging left behind


def _model_bytes(nodes, inputs, outputs, inits=()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_million_node_graph_is_refused_before_it_is_checked(tmp_path):
    one = _model_bytes([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    # Protobuf appends repeated fields when messages are concatenated: each chunk adds one node.
    extra = onnx.ModelProto(graph=onnx.GraphProto(node=[helper.make_node("Relu", ["x"], ["y"])])).SerializeToString()
    path = tmp_path / "million.onnx"
    path.write_bytes(one + extra * 999_999)
    with pytest.raises(ModelError, match=r"has 1,000,000 nodes, more than aot's budget of 200,000"):
        load.load(path)


@pytest.mark.parametrize("declared", [[1 << 40], [1 << 20, 1 << 20]])
def test_a_declared_2_40_element_tensor_is_refused(tmp_path, declared):
    path = tmp_path / "bomb.onnx"
    path.write_bytes(_model_bytes([helper.make_node("Relu", ["x"], ["y"])],
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, declared)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)]))
    with pytest.raises(ModelError, match="1,099,511,627,776 elements, more than aot's budget"):
        load.load(path)


def test_an_inferred_2_40_element_intermediate_is_refused_without_allocating_it(tmp_path):
    """ConstantOfShape asks for 2^40 floats: shape inference knows the size, folding must not try."""
    path = tmp_path / "bomb.onnx"
    path.write_bytes(_model_bytes(
        [helper.make_node("ConstantOfShape", ["s"], ["big"]), helper.make_node("ReduceMax", ["big"], ["y"], keepdims=0)],
        [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "s")]))
    with pytest.raises(ModelError, match=r"tensor 'big' of shape \[1048576x1048576\]"):
        load.load(path)


def _relu_model(**graph_kw) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_fuzzer_findings_are_model_errors(tmp_path):
    """Three models `aot fuzz` found: each is a ModelError now, not a traceback or an empty bundle."""
    no_outputs = _relu_model()
    del no_outputs.graph.output[:]
    (tmp_path / "no_outputs.onnx").write_bytes(no_outputs.SerializeToString())
    with pytest.raises(ModelError, match="declares no graph outputs"):
        load.load(tmp_path / "no_outputs.onnx")

    raw = _relu_model().SerializeToString().replace(b"relu", b"r\xb1lu")   # the node name, damaged
    (tmp_path / "utf8.onnx").write_bytes(raw)
    with pytest.raises(ModelError, match="NodeProto.name that is not valid UTF-8"):
        load.load(tmp_path / "utf8.onnx")

    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    old = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1])], [one]), opset_imports=[helper.make_opsetid("", 1)])
    (tmp_path / "opset1.onnx").write_bytes(old.SerializeToString())   # Add-1 takes floats only
    with pytest.raises(ModelError, match="not valid at its own opset 1"):
        load.load(tmp_path / "opset1.onnx")


def _data_prop_calls(monkeypatch) -> list[bool]:
    """Records, for each onnx shape inference `load` runs, whether it asked for data propagation."""
    calls: list[bool] = []
    real = load.shape_inference.infer_shapes

    def recorded(model, **kw):
        calls.append(bool(kw.get("data_prop", False)))
        return real(model, **kw)

    monkeypatch.setattr(load.shape_inference, "infer_shapes", recorded)
    return calls


def test_a_graph_whose_shapes_plain_inference_fixes_skips_data_propagation(tmp_path, monkeypatch):
    calls = _data_prop_calls(monkeypatch)
    inferred = load._check_and_infer(small_model(), tmp_path / "small.onnx")
    assert calls == [False]
    h = next(v for v in inferred.graph.value_info if v.name == "h")
    assert [d.dim_value for d in h.type.tensor_type.shape.dim] == [1, 4]


def test_a_shape_computed_from_shape_still_gets_data_propagation(tmp_path, monkeypatch):
    """Reshape(w, Shape(x)): plain inference knows the rank only; propagating Shape's value fixes it."""
    calls = _data_prop_calls(monkeypatch)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32), "w")
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["w", "s"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "shaped", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    inferred = load._check_and_infer(model, tmp_path / "shaped.onnx")
    assert calls == [False, True]
    r = next(v for v in inferred.graph.value_info if v.name == "r")
    assert [d.dim_value for d in r.type.tensor_type.shape.dim] == [3, 4]
