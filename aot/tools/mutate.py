"""Structured mutations of ONNX models, for fuzzing the build (``aot fuzz``).

Pure: a mutant is a function of (seed model, rng). Each mutation breaks one thing a model from
anywhere might get wrong (shapes, attributes, dtypes, node order, names, edges, declared sizes,
external-data paths, op types, opsets, bytes), so the build meets each kind of damage alone and,
applied two or three at a time, in combination."""

from __future__ import annotations

import random
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aot.models import examples

Mutation = Callable[[onnx.ModelProto, random.Random], str]   # edits in place, says what it did

_DIMS = (0, 1, 2, 3, 7, 64, -1, 1 << 31, 1 << 40)
_INTS = (-2, -1, 0, 1, 2, 3, 5, 99, 1 << 31)
_DTYPES = (TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT8, TensorProto.INT32, TensorProto.INT64,
           TensorProto.BOOL, TensorProto.STRING, TensorProto.UINT64, TensorProto.BFLOAT16, 0, 99)
_NAMES = ("", "../../escape", "a" * 300, "名前", "x y\nz", "/abs/path", "r0", "main_graph", "%0", "aot.index_flag.x")
_OPS = ("Conv", "MatMul", "Gather", "NoSuchOp", "LSTM", "If", "Loop", "Relu", "Reshape", "TopK", "Softmax")
_OPSETS = (1, 7, 11, 13, 17, 21, 99)
_LOCATIONS = ("/etc/passwd", "../../outside.bin", "missing.bin", "short.bin")


def seeds() -> dict[str, onnx.ModelProto]:
    """Small models that build in seconds and cover convolutions, matmuls and indexing."""
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    gather = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["ids", "one"], ["next"], name="add"),
         helper.make_node("Gather", ["table", "next"], ["rows"], name="gather"),
         helper.make_node("ReduceSum", ["rows"], ["sums"], name="sum", keepdims=0)],
        "gather", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("sums", TensorProto.FLOAT, [])], [table, one]),
        opset_imports=[helper.make_opsetid("", 17)])
    w = numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), "w")
    b = numpy_helper.from_array(np.linspace(0, 1, 4, dtype=np.float32), "b")
    mlp = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
         helper.make_node("Add", ["xw", "b"], ["h"], name="bias"),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1)],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w, b]),
        opset_imports=[helper.make_opsetid("", 17)])
    return {"tiny_cnn": examples.tiny_cnn(), "gather": gather, "mlp": mlp}


def mutant(model: onnx.ModelProto, rng: random.Random
           ) -> tuple[onnx.ModelProto | bytes, tuple[str, ...], dict[str, bytes]]:
    """One to three mutations of a copy of ``model``; the last may turn it into damaged bytes.
    Returns the mutant, what was done, and side files (name -> bytes) it points at."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    done: list[str] = []
    files: dict[str, bytes] = {}
    for _ in range(rng.choice((1, 1, 2, 3))):
        name = rng.choice(sorted(MUTATIONS))
        if name == "bytes":
            return _damage_bytes(out, rng), (*done, "bytes"), files
        if name == "external_data":
            done.append(_external_data(out, rng, files))
            continue
        done.append(MUTATIONS[name](out, rng))
    return out, tuple(done), files


def _values(m: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    return [*m.graph.input, *m.graph.output]


def _dim(m: onnx.ModelProto, rng: random.Random) -> str:
    values = [v for v in _values(m) if v.type.tensor_type.shape.dim]
    if not values:
        return "dim: none to change"
    v = rng.choice(values)
    d = rng.choice(v.type.tensor_type.shape.dim)
    if rng.random() < 0.2:
        d.Clear()
        d.dim_param = rng.choice(("N", "batch", ""))
        return f"dim of {v.name} made symbolic"
    d.dim_value = rng.choice(_DIMS)
    return f"dim of {v.name} set to {d.dim_value}"


def _attribute(m: onnx.ModelProto, rng: random.Random) -> str:
    attrs = [(n, a) for n in m.graph.node for a in n.attribute if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
    if not attrs:
        return "attribute: none to change"
    node, a = rng.choice(attrs)
    if rng.random() < 0.3:
        node.attribute.remove(a)
        return f"attribute {a.name} of {node.name} removed"
    if a.type == onnx.AttributeProto.INT:
        a.i = rng.choice(_INTS)
    else:
        del a.ints[:]
        a.ints.extend(rng.choice(_INTS) for _ in range(rng.choice((0, 1, 2, 4))))
    return f"attribute {a.name} of {node.name} changed"


def _dtype(m: onnx.ModelProto, rng: random.Random) -> str:
    if rng.random() < 0.5 and m.graph.initializer:
        t = rng.choice(m.graph.initializer)
        t.data_type = rng.choice(_DTYPES)
        return f"initializer {t.name} retyped to {t.data_type}"
    v = rng.choice(_values(m))
    v.type.tensor_type.elem_type = rng.choice(_DTYPES)
    return f"{v.name} retyped to {v.type.tensor_type.elem_type}"


def _order(m: onnx.ModelProto, rng: random.Random) -> str:
    nodes = list(m.graph.node)
    rng.shuffle(nodes)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return "nodes shuffled"


def _dangling(m: onnx.ModelProto, rng: random.Random) -> str:
    node = rng.choice(m.graph.node)
    if rng.random() < 0.5 or not node.input:
        m.graph.node.remove(node)
        return f"node {node.name} removed (its outputs dangle)"
    i = rng.randrange(len(node.input))
    node.input[i] = f"missing_{i}"
    return f"input {i} of {node.name} points at nothing"


def _names(m: onnx.ModelProto, rng: random.Random) -> str:
    node = rng.choice(m.graph.node)
    new = rng.choice(_NAMES)
    if rng.random() < 0.4:
        node.name = rng.choice([n.name for n in m.graph.node] + [new])
        return f"node {node.name!r} renamed"
    if not node.output:
        return "names: nothing to rename"
    old = node.output[0]
    for n in m.graph.node:     # rename the tensor everywhere, consistently
        for field in (n.input, n.output):
            for i, v in enumerate(field):
                if v == old:
                    field[i] = new
    for v in (*m.graph.output, *m.graph.value_info):
        if v.name == old:
            v.name = new
    return f"tensor {old!r} renamed to {new[:20]!r}"


def _op_type(m: onnx.ModelProto, rng: random.Random) -> str:
    node = rng.choice(m.graph.node)
    if rng.random() < 0.2:
        node.domain = rng.choice(("com.microsoft", "custom"))
        return f"node {node.name} moved to domain {node.domain}"
    node.op_type = rng.choice(_OPS)
    return f"node {node.name} became {node.op_type}"


def _opset(m: onnx.ModelProto, rng: random.Random) -> str:
    m.opset_import[0].version = rng.choice(_OPSETS)
    return f"opset {m.opset_import[0].version}"


def _outputs(m: onnx.ModelProto, rng: random.Random) -> str:
    if rng.random() < 0.5:
        del m.graph.output[:]
        return "graph outputs removed"
    m.graph.output.append(m.graph.output[0] if m.graph.output else helper.make_tensor_value_info("x", 1, [1]))
    return "graph output duplicated"


def _external_data(m: onnx.ModelProto, rng: random.Random, files: dict[str, bytes]) -> str:
    inline = [t for t in m.graph.initializer if t.data_location != TensorProto.EXTERNAL]
    if not inline:
        return "external data: no initializer"
    t = rng.choice(inline)
    location = rng.choice(_LOCATIONS)
    try:
        raw = t.raw_data or numpy_helper.to_array(t).tobytes()
    except Exception:  # noqa: BLE001 - a tensor an earlier mutation retyped: any bytes will do
        raw = bytes(16)
    t.ClearField("raw_data")
    for field in ("float_data", "int64_data", "int32_data", "double_data"):
        t.ClearField(field)
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    t.external_data.add(key="location", value=location)
    if location == "short.bin":
        files[location] = raw[: len(raw) // 2]
    return f"initializer {t.name} moved to external data {location}"


def _damage_bytes(m: onnx.ModelProto, rng: random.Random) -> bytes:
    raw = bytearray(m.SerializeToString())
    if rng.random() < 0.4:
        return bytes(raw[: rng.randrange(len(raw))])
    for _ in range(rng.choice((1, 4, 16))):
        raw[rng.randrange(len(raw))] = rng.randrange(256)
    return bytes(raw)


MUTATIONS: dict[str, Mutation] = {
    "dim": _dim, "attribute": _attribute, "dtype": _dtype, "order": _order, "dangling": _dangling,
    "names": _names, "op_type": _op_type, "opset": _opset, "outputs": _outputs,
    "external_data": lambda m, rng: "", "bytes": lambda m, rng: "",   # handled in mutant()
}
