"""Static shapes from the inputs the user pins: the checks on ``--input-shape``, the annotations
shape inference must be free to fill in, and the promise later stages rely on (every output has a
static shape)."""

from __future__ import annotations

from pathlib import Path

import onnx

from aot.errors import ModelError


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in inits]


def pin_input_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], path: Path) -> None:
    inputs = {v.name: v for v in real_inputs(model)}
    for name in shapes:
        if name not in inputs:
            raise ModelError(f"--input-shape names {name!r}, which is not an input of the model",
                             hint=f"inputs are: {', '.join(map(repr, inputs))}")
    for name, value in inputs.items():
        dims = value.type.tensor_type.shape.dim
        if name in shapes:
            if len(shapes[name]) != len(dims):
                raise ModelError(f"--input-shape {name}: rank {len(shapes[name])} given, model input has rank {len(dims)}")
            for dim, size in zip(dims, shapes[name]):
                if dim.HasField("dim_value") and dim.dim_value > 0 and dim.dim_value != size:
                    raise ModelError(f"--input-shape {name}: dim {dim.dim_value} is fixed by the model, {size} given")
                dim.dim_value = size
        elif not value.type.tensor_type.HasField("shape") or any(not is_fixed(d) for d in dims):
            shown = "x".join(str(d.dim_value) if is_fixed(d) else (d.dim_param or "?") for d in dims)
            raise ModelError(f"input {name!r} has a dynamic shape [{shown}]; aot compiles static shapes",
                             hint=f"pass --input-shape {name}=" + "x".join(
                                 str(d.dim_value) if is_fixed(d) else "1" for d in dims))


def forget_placeholder_dims(model: onnx.ModelProto) -> None:
    """Turn -1/0 and symbolic dims in intermediate and output annotations into unknown dims, so
    that shape inference fills them in from the pinned input shapes instead of reporting a
    conflict or keeping the symbol; an output annotated with one takes the rank inference finds.
    A value_info entry that repeats a graph output is dropped: the output's own annotation is the
    one inference updates, and IREE's importer types the value by the stale copy (YOLOv8's torch
    export: ``output0`` as ``[?,22,?]`` against ``[1,22,2100]``)."""
    outputs = {v.name for v in model.graph.output}
    kept = [vi for vi in model.graph.value_info if vi.name not in outputs]
    if len(kept) < len(model.graph.value_info):
        del model.graph.value_info[:]
        model.graph.value_info.extend(kept)
    guessed = [vi for vi in model.graph.output if any(_placeholder(d) for d in vi.type.tensor_type.shape.dim)]
    for vi in (*model.graph.value_info, *model.graph.output):
        for dim in vi.type.tensor_type.shape.dim:
            if _placeholder(dim):
                dim.Clear()
    if guessed:
        _rank_from_inference(model, guessed)


def _rank_from_inference(model: onnx.ModelProto, guessed: list[onnx.ValueInfoProto]) -> None:
    """An output annotated with a placeholder is a guess whose rank can be stale too (ddddocr's
    recogniser declares [1, seqlen] for a rank-3 value, and the checker then refuses the model):
    where inference, given no shape for it, finds another rank, the annotation takes the inferred
    shape."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    names = {vi.name for vi in guessed}
    for vi in probe.graph.output:
        if vi.name in names:
            vi.type.tensor_type.ClearField("shape")
    try:
        inferred = {vi.name: vi.type.tensor_type for vi in onnx.shape_inference.infer_shapes(probe).graph.output}
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError, TypeError):
        return   # the check after this reports what is wrong with the model
    for vi in guessed:
        found = inferred.get(vi.name)
        if found is not None and found.HasField("shape") and len(found.shape.dim) != len(vi.type.tensor_type.shape.dim):
            vi.type.tensor_type.shape.CopyFrom(found.shape)
            for dim in vi.type.tensor_type.shape.dim:
                if not is_fixed(dim):
                    dim.Clear()


def _placeholder(dim: onnx.TensorShapeProto.Dimension) -> bool:
    return dim.HasField("dim_param") or (dim.HasField("dim_value") and dim.dim_value <= 0)


def is_fixed(dim: onnx.TensorShapeProto.Dimension) -> bool:
    # Some exporters write -1 for "any size"; only a positive dim_value is a fixed size.
    return dim.HasField("dim_value") and dim.dim_value > 0


def require_static_outputs(model: onnx.ModelProto) -> None:
    for v in model.graph.output:
        t = v.type.tensor_type
        if not t.HasField("shape") or any(not d.HasField("dim_value") for d in t.shape.dim):
            raise ModelError(f"output {v.name!r} has no static shape after shape inference",
                             hint="pin the inputs with --input-shape or bake shape-deciding inputs "
                                  "in with --const-input")
