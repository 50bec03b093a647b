"""Serving under load: many client threads through one ``Batcher`` over a bucketed bundle, a
share of the requests malformed, and nothing wrong or lost (``aot soak``, ``make soak``).

Every caller must get its own answer or its own error: an answer equal to the same request run
alone (``checks/compare``: NaN inputs give NaN where the single run does; requests stacked into a
padded bucket within the build's padding tolerance), a malformed request a ``RuntimeInputError``.
A watchdog fails the run on a deadlock. Resident memory is read at 20% and at 100% of the
requests: serving must not grow it. Closing the batcher with requests in flight answers each.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aot import runtime
from aot.checks import reference
from aot.checks.compare import within
from aot.errors import AotError, RuntimeInputError
from aot.runtime.shapes import resized

POOL = 48            # distinct valid requests, each run alone once for its expected answer
RTOL = 1e-5          # stacked (and padded) vs alone: bucket modules may tile differently


@dataclass(frozen=True, slots=True)
class SoakResult:
    requests: int
    clients: int
    malformed: int        # requests made malformed on purpose
    refused: int          # ... refused with a RuntimeInputError (must equal malformed)
    wrong: int            # answers that differ from the same request run alone
    lost: int             # requests with no answer and no error
    other_errors: tuple[str, ...]
    rss_mib_20: float
    rss_mib_100: float
    p50_ms: float
    p99_ms: float
    seconds: float

    @property
    def ok(self) -> bool:
        grew = self.rss_mib_100 - self.rss_mib_20
        return (self.wrong == 0 and self.lost == 0 and not self.other_errors and self.refused == self.malformed
                and grew <= max(16.0, 0.05 * self.rss_mib_20))

    def text(self) -> str:
        return (f"{self.requests} requests from {self.clients} threads in {self.seconds:.1f} s "
                f"({self.requests / self.seconds:.0f}/s): {self.malformed} malformed, {self.refused} refused, "
                f"{self.wrong} wrong, {self.lost} lost, {len(self.other_errors)} other errors\n"
                f"latency p50 {self.p50_ms:.2f} ms, p99 {self.p99_ms:.2f} ms; resident memory "
                f"{self.rss_mib_20:.1f} MiB at 20% -> {self.rss_mib_100:.1f} MiB at 100%\n"
                + ("PASS" if self.ok else "FAIL") + (f": {self.other_errors[:3]}" if self.other_errors else ""))


def soak(bundle: Path, requests: int = 10_000, clients: int = 16, malformed_share: float = 0.1,
         max_batch: int = 8, max_wait_ms: float = 2.0, seed: int = 0, watchdog_s: float = 600.0) -> SoakResult:
    with runtime.load(bundle) as session:
        if session.manifest.shapes is None or not any(d.batch for d in session.manifest.shapes.dims):
            raise AotError(f"{str(bundle)!r} has no batch buckets: a batcher has nothing to stack",
                           hint="build a model with a symbolic batch, e.g. --batch-buckets 1,2,4,8")
        pool, expected = _pool(session, seed)
        rng = random.Random(seed)
        plan = [(rng.randrange(len(pool)), rng.random() < malformed_share) for _ in range(requests)]
        answers: list[str | None] = [None] * requests
        latencies = [0.0] * requests
        rss: dict[int, float] = {}
        done = threading.Semaphore(0)
        start = time.monotonic()
        with runtime.Batcher(session, max_batch=max_batch, max_wait_ms=max_wait_ms) as batcher:
            def client(which: range) -> None:
                for i in which:
                    index, bad = plan[i]
                    t0 = time.perf_counter()
                    try:
                        got: Any = batcher(_malformed(pool[index], i) if bad else pool[index])
                    except Exception as e:   # noqa: BLE001 - every outcome is classified
                        got = e
                    latencies[i] = time.perf_counter() - t0
                    # A verdict, not the answer: answers (and errors, whose tracebacks hold the
                    # request's arrays) kept for 10,000 requests would be the memory growth measured.
                    answers[i] = _verdict(got, bad, expected[index])
                    del got
                    done.release()

            threads = [threading.Thread(target=client, args=(range(c, requests, clients),), daemon=True)
                       for c in range(clients)]
            for t in threads:
                t.start()
            for n in range(1, requests + 1):
                if not done.acquire(timeout=max(0.0, start + watchdog_s - time.monotonic())):
                    raise AotError(f"soak: {requests - n + 1} request(s) unanswered after {watchdog_s:.0f} s "
                                   "(a deadlock?)")
                if n in (requests // 5, requests):
                    rss[n] = _rss_mib()
            for t in threads:
                t.join()
        seconds = time.monotonic() - start
    return _result(plan, answers, latencies, rss, requests, clients, seconds)


def close_in_flight(bundle: Path, requests: int = 64, seed: int = 0, within_s: float = 5.0) -> tuple[int, int, float]:
    """Submit ``requests`` and close the batcher at once: (answered, errors, seconds to close).
    Every future must be settled when ``close`` returns."""
    with runtime.load(bundle) as session:
        pool, _ = _pool(session, seed, size=4)
        batcher = runtime.Batcher(session, max_batch=4, max_wait_ms=20)
        futures: list[Future] = [batcher.submit(pool[i % len(pool)]) for i in range(requests)]
        t0 = time.monotonic()
        batcher.close()
        closing = time.monotonic() - t0
        unsettled = [f for f in futures if not f.done()]
        if unsettled or closing > within_s:
            raise AotError(f"closing with {requests} requests in flight left {len(unsettled)} unanswered "
                           f"after {closing:.1f} s")
        errors = sum(1 for f in futures if f.exception() is not None)
    return requests - errors, errors, closing


def _pool(session: Any, seed: int, size: int = POOL) -> tuple[list[dict[str, np.ndarray]], list[tuple]]:
    """Valid requests of batch 1-3 (one in eight holds a NaN: a valid input) and their answers alone."""
    dims = session.manifest.shapes.dims
    pool = []
    for i in range(size):
        specs = resized(session.manifest.inputs, dims, {d.symbol: (1 + i % 3 if d.batch else d.sizes[0]) for d in dims})
        inputs = reference.random_inputs(specs, seed=seed + i)
        if i % 8 == 7:
            first = next(k for k, v in inputs.items() if v.dtype.kind == "f")
            inputs[first].flat[0] = np.nan
        pool.append(inputs)
    return pool, [session.run(x) for x in pool]


def _malformed(inputs: dict[str, np.ndarray], i: int) -> dict[str, Any]:
    """A wrong shape, a wrong dtype or a missing input, in turn."""
    name = next(iter(inputs))
    x = inputs[name]
    kind = i % 3
    if kind == 0:
        return {**inputs, name: np.zeros((*x.shape[:-1], x.shape[-1] + 1), x.dtype)}
    if kind == 1:
        return {**inputs, name: x.astype(np.float64 if x.dtype != np.float64 else np.int32)}
    return {k: v for k, v in inputs.items() if k != name}


def _verdict(got: Any, bad: bool, expected: tuple) -> str:
    """``ok``, ``refused``, ``wrong`` or ``error: ...`` for one answer."""
    if isinstance(got, RuntimeInputError) and bad:
        return "refused"
    if isinstance(got, Exception):
        return f"error: {type(got).__name__}: {got}"[:200]
    if bad or len(got) != len(expected) or not all(
            within(np.asarray(a), np.asarray(e), RTOL)[0] for a, e in zip(got, expected)):
        return "wrong"
    return "ok"


def _result(plan: list[tuple[int, bool]], verdicts: list[str | None], latencies: list[float],
            rss: dict[int, float], requests: int, clients: int, seconds: float) -> SoakResult:
    other = tuple(v for v in verdicts if v is not None and v.startswith("error"))
    ms = sorted(t * 1e3 for t in latencies)
    return SoakResult(requests, clients, sum(bad for _, bad in plan), verdicts.count("refused"), verdicts.count("wrong"),
                      verdicts.count(None), other, rss[min(rss)], rss[max(rss)], ms[len(ms) // 2],
                      ms[min(len(ms) - 1, int(len(ms) * 0.99))], seconds)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
