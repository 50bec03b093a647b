"""Side-by-side benchmark in one process, interleaved: the partitioned bundle with every region
compiled for the host, the whole model as one llvm-cpu module, and onnxruntime. Medians and ratios,
because the machines are shared and noisy. Both builds are plans of one planned model, not options."""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from aot import runtime
from aot.checks import reference
from aot.checks.compare import compare
from aot.errors import AotError
from aot.options import BuildOptions
from aot.pipeline import all_on_host, build_planned, plan_model, whole_model


BARE = "bare iree.runtime (whole model)"


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
        bare = self.median(BARE)
        overhead_us = (w - bare) * 1e3
        lines.append(f"ratio bundle/whole:       {b / w:.3f}")
        lines.append(f"ratio bundle/onnxruntime: {b / o:.3f}")
        lines.append(f"runtime overhead per region call: {overhead_us:.1f} us (whole-model session vs bare "
                     f"iree.runtime call of the same module)")
        lines.append(f"bundle within 3% + {self.regions} x overhead of the whole model: "
                     f"{'yes' if b <= w * 1.03 + self.regions * max(overhead_us, 0) / 1e3 else 'no'}")
        return "\n".join(lines)


def run(model: Path, out: Path, options: BuildOptions = BuildOptions(), iterations: int = 50,
        warmup: int = 3) -> BenchResult:
    planned = plan_model(model, options, suggest=False)
    partitioned = build_planned(all_on_host(planned), out / "partitioned", options)
    whole = build_planned(whole_model(planned), out / "whole", options)
    manifest = partitioned.bundle.manifest
    inputs = reference.random_inputs(manifest.inputs, seed=0)
    names = [o.name for o in manifest.outputs]
    ort_session = reference.session(model)
    with runtime.load(partitioned.bundle.path) as a, runtime.load(whole.bundle.path) as b:
        bare = _bare_call(b, inputs)
        contenders: list[tuple[str, Callable[[], object]]] = [
            ("bundle (all regions on host)", lambda: a.run(inputs)),
            ("whole model (llvm-cpu)", lambda: b.run(inputs)),
            ("onnxruntime (cpu)", lambda: ort_session.run(names, inputs)),
            (BARE, bare),
        ]
        # A fast wrong answer is not a result; onnxruntime's (last) is the reference.
        _same_answers([f() for name, f in contenders if name != "onnxruntime (cpu)"]
                      + [ort_session.run(names, inputs)])
        times = interleaved(contenders, warmup, iterations)
    medians = tuple((name, statistics.median(ts)) for name, ts in times.items())
    return BenchResult(manifest.model.name, len(manifest.regions), iterations, medians)


def _bare_call(session: runtime.Session | runtime.BucketedSession,
               inputs: dict[str, np.ndarray]) -> Callable[[], object]:
    """The whole model's module called straight through iree.runtime, as a user of IREE would:
    numpy in, numpy out, nothing checked. What a session adds beyond this is its overhead."""
    if not isinstance(session, runtime.Session):
        raise AotError("the whole-model bundle has shape buckets; aot bench times a static one",
                       hint="build with --input-shape to fix the symbolic dimensions")
    (region,) = session.manifest.regions
    invoker = session._invokers[region.name]
    args = [inputs[s.name] for s in session.manifest.inputs]

    def call() -> list[np.ndarray]:
        results = invoker(*args)
        return [r.to_host() for r in (results if isinstance(results, (tuple, list)) else (results,))]

    return call


SETTLE_MS = 5.0  # untimed calls of a contender before each timed one (see interleaved)


def interleaved(contenders: list[tuple[str, Callable[[], object]]], warmup: int,
                iterations: int, settle_ms: float = SETTLE_MS) -> dict[str, list[float]]:
    """Milliseconds per call of each contender, measured in turns, each turn in the next of all
    possible orders, each timed call preceded by untimed calls of the same contender (at least
    one, and at least ``settle_ms``).

    Whatever one contender leaves running is charged to the next: onnxruntime's worker threads
    spin after each run, and on this 2-core machine a module run right after it measured up to
    30-70% slower (PP-OCR-det tuned: 18-21 ms alone, 26-35 ms straight after onnxruntime; with
    onnxruntime's spinning off, 18-22 ms either way). All orders spread that evenly but do not
    remove it; the settling calls do, and time every contender as it runs in a deployment, in
    its own steady state."""
    orders = list(itertools.permutations(contenders))
    times: dict[str, list[float]] = {name: [] for name, _ in contenders}
    for i in range(warmup + iterations):
        for name, f in orders[i % len(orders)]:
            settled = time.perf_counter() + settle_ms / 1e3
            f()
            while time.perf_counter() < settled:
                f()
            start = time.perf_counter()
            f()
            if i >= warmup:
                times[name].append((time.perf_counter() - start) * 1e3)
    return times


def _same_answers(results: list) -> None:
    ref = results[-1]
    for res in results[:-1]:
        for a, e in zip(res, ref):
            if not compare(a, e, rtol=1e-3, atol=1e-3).ok:   # NaN/Inf must match too
                raise AssertionError("benchmark contenders disagree; refusing to time wrong answers")
