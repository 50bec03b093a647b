"""Side-by-side benchmark in one process, interleaved: the partitioned bundle with every region
compiled for the host, the whole model as one llvm-cpu module, and onnxruntime. Medians and ratios,
because the machines are shared and noisy. Both builds are plans of one planned model, not options."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from aot import runtime
from aot.checks import host_state, reference
from aot.checks.compare import compare
from aot.errors import AotError
from aot.options import BuildOptions
from aot.runtime.invoke import HostCall
from aot.pipeline import all_on_host, build_planned, plan_model, whole_model


BARE = "bare iree.runtime (whole model)"


@dataclass(frozen=True, slots=True)
class BenchResult:
    model: str
    regions: int
    iterations: int
    medians_ms: tuple[tuple[str, float], ...]   # the uncontended turns' (checks/host_state.py)
    state: str = ""                              # how many turns were uncontended

    def median(self, name: str) -> float:
        return dict(self.medians_ms)[name]

    def text(self) -> str:
        lines = [f"model {self.model}: {self.regions} region(s), {self.iterations} interleaved iterations"
                 + (f" ({self.state})" if self.state else "")]
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
    whole = build_planned(whole_model(planned), out / "whole", one_module(options))
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
        # onnxruntime's workers spin after each run and would slow whoever runs next: FAIR idles
        # first; the host-state yardstick in every turn.
        medians = host_state.timed_by_state(contenders, iterations, warmup)
    return BenchResult(manifest.model.name, len(manifest.regions), iterations, tuple(medians.headline.items()),
                       host_state.state_text(medians.state))


def one_module(options: BuildOptions) -> BuildOptions:
    """The whole-model contender's options: ``options`` without per-segment tuning, which would cut
    the one module into groups (CREPE's did, and the bare call, one module's, had none to call);
    its flags and host runtime are still tuned as the bundle's are."""
    return dataclasses.replace(options, tune_segments=0)


def _bare_call(session: runtime.Session | runtime.BucketedSession,
               inputs: dict[str, np.ndarray]) -> Callable[[], object]:
    """The whole model's module called straight through iree.runtime, as a user of IREE would:
    numpy in, numpy out, nothing checked. What a session adds beyond this is its overhead, so the
    call waits for IREE's workers as the session's does (SCHED_BATCH on local-task,
    runtime/invoke.py): a plain wait there stalls up to a scheduler tick, which is not the path's."""
    if not isinstance(session, runtime.Session):
        raise AotError("the whole-model bundle has shape buckets; aot bench times a static one",
                       hint="build with --input-shape to fix the symbolic dimensions")
    (region,) = session.manifest.regions
    import iree.runtime as rt

    lean = session._invokers[region.name]   # the session's own lean call (runtime/invoke.py) on a CPU
    if isinstance(lean, HostCall):
        invoker, wait = rt.FunctionInvoker(lean.context, lean.device, lean.function), lean.wait
    else:
        invoker, wait = lean, None           # an accelerator's FunctionInvoker, waited for plainly
    args = [inputs[s.name] for s in session.manifest.inputs]

    def call() -> list[np.ndarray]:
        results = wait(invoker, *args) if wait else invoker(*args)
        return [r.to_host() for r in (results if isinstance(results, (tuple, list)) else (results,))]

    return call


def _same_answers(results: list) -> None:
    ref = results[-1]
    for res in results[:-1]:
        for a, e in zip(res, ref):
            if not compare(a, e, rtol=1e-3, atol=1e-3).ok:   # NaN/Inf must match too
                raise AssertionError("benchmark contenders disagree; refusing to time wrong answers")
