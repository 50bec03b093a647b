"""onnxruntime as the oracle: one place that opens it, and the inputs every check feeds it (onnx's
reference evaluator where onnxruntime's numpy API cannot take the model's element types)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from aot.runtime.dtypes import numpy_dtype
from aot.runtime.manifest import Manifest, TensorSig, thaw

# Element types onnxruntime's Python API cannot exchange as numpy arrays ("Numpy_type 260 can't be
# converted to MLDataType"): a model that carries one anywhere is evaluated by onnx's reference
# evaluator instead, which computes them through ml_dtypes (slower, and only such models pay it).
_NOT_FOR_ORT_NUMPY = frozenset({
    onnx.TensorProto.FLOAT8E4M3FN, onnx.TensorProto.FLOAT8E4M3FNUZ, onnx.TensorProto.FLOAT8E5M2,
    onnx.TensorProto.FLOAT8E5M2FNUZ, onnx.TensorProto.UINT4, onnx.TensorProto.INT4,
    *(getattr(onnx.TensorProto, n) for n in ("FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2") if hasattr(onnx.TensorProto, n))})


def onnxruntime_cannot_feed(model: onnx.ModelProto) -> bool:
    """Whether ``model`` carries, anywhere, an element type onnxruntime's numpy API cannot take."""
    g = model.graph
    values = [*g.input, *g.output, *g.value_info]
    return (any(v.type.tensor_type.elem_type in _NOT_FOR_ORT_NUMPY for v in values)
            or any(t.data_type in _NOT_FOR_ORT_NUMPY for t in g.initializer)
            or any(a.t.data_type in _NOT_FOR_ORT_NUMPY for n in g.node for a in n.attribute if a.HasField("t"))
            or any(n.op_type == "Cast" and a.name == "to" and a.i in _NOT_FOR_ORT_NUMPY
                   for n in g.node for a in n.attribute))


def session(model: Path | bytes, *, optimize: bool = True, threads: int = 0) -> Any:
    """A quiet CPU onnxruntime session for ``model`` (a path or serialized bytes).
    ``optimize=False`` keeps every intermediate tensor as the graph names it; ``threads``: intra-op
    threads (0: onnxruntime's default, one per core)."""
    import onnxruntime as ort  # type: ignore[import-untyped]  # ships no stubs or py.typed

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), options,
                                providers=["CPUExecutionProvider"])


def random_inputs(specs: tuple[TensorSig, ...], seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal floats; 0/1 integers, which are in range for any index, mask or token input."""
    rng = np.random.default_rng(seed)
    out = {}
    for s in specs:
        dtype = numpy_dtype(s.dtype)
        if dtype.kind == "f" or (s.carrier and numpy_dtype(s.carrier).kind == "f"):
            out[s.name] = rng.standard_normal(s.shape).astype(dtype)
        else:
            out[s.name] = rng.integers(0, 2, s.shape).astype(dtype)
    return out


def constant_inputs(manifest: Manifest) -> dict[str, np.ndarray]:
    """The inputs the bundle was built with baked in (the original model still takes them)."""
    return {c.name: np.array(thaw(c.value), dtype=c.dtype).reshape(c.shape) for c in manifest.constant_inputs}


def outputs(model: Path, inputs: dict[str, np.ndarray], names: list[str],
            manifest: Manifest | None = None) -> list[np.ndarray]:
    """onnxruntime's outputs for the original model; ``manifest`` supplies baked-in inputs."""
    feeds = {**inputs, **(constant_inputs(manifest) if manifest else {})}
    stat = model.stat()
    if _file_cannot_feed(str(model), stat.st_mtime_ns, stat.st_size):
        from onnx.reference import ReferenceEvaluator

        return list(ReferenceEvaluator(onnx.load(str(model))).run(names, feeds))
    return session(model).run(names, feeds)


@functools.lru_cache(maxsize=64)
def _file_cannot_feed(path: str, mtime_ns: int, size: int) -> bool:
    """``onnxruntime_cannot_feed`` for a model file, decided once per file version: bucket padding
    checks call ``outputs`` once per bucket, and external weights are not needed to decide."""
    return onnxruntime_cannot_feed(onnx.load(path, load_external_data=False))
