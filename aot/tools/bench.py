"""Side-by-side benchmark in one process, interleaved: the partitioned bundle with every region
compiled for the host, the whole model as one llvm-cpu module, and onnxruntime. Medians and ratios,
because the machines are shared and noisy."""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from aot import runtime
from aot.checks.golden import random_inputs
from aot.pipeline import BuildOptions, build


@dataclass(frozen=True, slots=True)
class BenchResult:
    model: str
    regions: int
    iterations: int
    medians_ms: tuple[tuple[str, float], ...]

    def median(self, name: str) -> float:
        return dict(self.medians_ms)[name]

    def text(self) -> str:
        lines = [f"model {self.model}: {self.regions} region(s), {self.iterations} interleaved iterations"]
        lines += [f"  {name:28s} median {ms:9.3f} ms" for name, ms in self.medians_ms]
        b, w, o = self.median("bundle (all regions on host)"), self.median("whole model (llvm-cpu)"), self.median("onnxruntime (cpu)")
        lines.append(f"ratio bundle/whole:       {b / w:.3f}")
        lines.append(f"ratio bundle/onnxruntime: {b / o:.3f}")
        return "\n".join(lines)


def run(model: Path, out: Path, options: BuildOptions = BuildOptions(), iterations: int = 50,
        warmup: int = 3) -> BenchResult:
    partitioned = build(model, out / "partitioned", dataclasses.replace(options, all_host=True))
    whole = build(model, out / "whole", dataclasses.replace(options, whole=True, plan_file=None))
    manifest = partitioned.bundle.manifest
    inputs = random_inputs(manifest["inputs"], seed=0)
    names = [o["name"] for o in manifest["outputs"]]
    import onnxruntime as ort

    sess_options = ort.SessionOptions()
    sess_options.log_severity_level = 3
    ort_session = ort.InferenceSession(manifest["model"]["source"], sess_options, providers=["CPUExecutionProvider"])
    with runtime.load(partitioned.bundle.path) as a, runtime.load(whole.bundle.path) as b:
        contenders: list[tuple[str, Callable[[], object]]] = [
            ("bundle (all regions on host)", lambda: a.run(inputs)),
            ("whole model (llvm-cpu)", lambda: b.run(inputs)),
            ("onnxruntime (cpu)", lambda: ort_session.run(names, inputs)),
        ]
        _same_answers([f() for _, f in contenders])  # a fast wrong answer is not a result
        times: dict[str, list[float]] = {name: [] for name, _ in contenders}
        for i in range(warmup + iterations):
            for name, f in contenders:
                start = time.perf_counter()
                f()
                if i >= warmup:
                    times[name].append((time.perf_counter() - start) * 1e3)
    medians = tuple((name, statistics.median(ts)) for name, ts in times.items())
    return BenchResult(manifest["model"]["name"], len(manifest["regions"]), iterations, medians)


def _same_answers(results: list) -> None:
    ref = results[-1]
    for res in results[:-1]:
        for a, e in zip(res, ref):
            if not np.allclose(np.asarray(a, np.float64), np.asarray(e, np.float64), rtol=1e-3, atol=1e-3):
                raise AssertionError("benchmark contenders disagree; refusing to time wrong answers")
