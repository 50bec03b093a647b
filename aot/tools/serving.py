"""`aot bench-batch`: requests served one by one against the same requests in one ``run_batch``,
interleaved in one process (the machine's noise hits both alike), medians per request."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aot import runtime
from aot.checks import timing
from aot.checks.compare import compare
from aot.checks.reference import random_inputs
from aot.errors import AotError
from aot.runtime.shapes import resized


@dataclass(frozen=True, slots=True)
class BatchBench:
    requests: int
    single_us: float        # median time per request, each run on its own
    batched_us: float       # median time per request, all in one run_batch
    max_abs_diff: float     # largest difference of a batched result from its own single run
    iterations: int

    def text(self) -> str:
        return (f"{self.requests} requests of batch 1, {self.iterations} interleaved turns (medians per request):\n"
                f"  one by one   {self.single_us:10.1f} us\n"
                f"  run_batch    {self.batched_us:10.1f} us   (one by one / run_batch = {self.single_us / self.batched_us:.2f})\n"
                f"  every batched result vs its own single run: max abs diff {self.max_abs_diff:.3g}")


def batch_vs_single(bundle: Path, requests: int = 8, iterations: int = 30, seed: int = 0) -> BatchBench:
    with runtime.load(bundle) as session:
        shapes = session.manifest.shapes
        if shapes is None or not any(d.batch for d in shapes.dims):
            raise AotError(f"{str(bundle)!r} has no batch buckets: its requests cannot share a run",
                           hint="build a model with a symbolic batch, e.g. with --batch-buckets 1,2,4,8")
        specs = resized(session.manifest.inputs, shapes.dims, {d.symbol: 1 for d in shapes.dims if d.batch})
        batch = [random_inputs(specs, seed=seed + i) for i in range(requests)]
        singles = [session.run(r) for r in batch]
        diff = max(compare(a, b).max_abs_diff   # inf where NaN/Inf differ
                   for s, r in zip(singles, session.run_batch(batch)) for a, b in zip(r, s))
        times = timing.interleaved([("one", lambda: [session.run(r) for r in batch]),
                                    ("many", lambda: session.run_batch(batch))], timing.Schedule(0, iterations))
    one, many = (timing.median_us(times[k]) / requests for k in ("one", "many"))
    return BatchBench(requests, one, many, diff, iterations)

