"""onnxruntime as the oracle: one place that opens it, and the inputs every check feeds it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from aot.runtime.manifest import Manifest, TensorSig, thaw


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
        dtype = np.dtype(s.dtype)
        if dtype.kind == "f":
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
    return session(model).run(names, feeds)
