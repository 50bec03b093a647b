"""The one timing harness: every benchmark, build measurement and tuning probe times calls here.

Machines are shared and noisy (two cores here), so contenders are timed in one process,
interleaved turn by turn, and compared by their medians. What one contender leaves running is
charged to the next: onnxruntime's intra-op workers spin after each run (its default) and keep
both cores busy well past its return. Measured on this 2-core machine: a MobileNetV3 bundle took
25.3 ms right after onnxruntime even with one settling call, 13.6 ms after 50 ms idle or alone in
its own process (onnxruntime: 5.6 ms either way). So where a spinning runtime shares the process
the schedule is ``FAIR``: idle before each contender's turn, one untimed settling call of the same
contender, then the timed call (DESIGN.md section 9).

numpy-free and stdlib only: the tuner's probe process imports it."""

from __future__ import annotations

import dataclasses
import enum
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, TypeVar

Call = Callable[[], object]
T = TypeVar("T")


class Order(enum.Enum):
    ROTATE = "rotate"     # turn i starts at contender i mod n: none always follows the same one
    PERMUTE = "permute"   # balanced orders: each contender in each place, after each other, equally often


@dataclass(frozen=True, slots=True)
class Schedule:
    """How contenders take turns. Defaults time IREE modules against each other (no spinning
    runtime in the process): rotate, no idle, no settling beyond the warm-up turns."""
    warmup: int = 3           # whole turns run and discarded first (caches, lazy loads, JIT)
    iterations: int = 30      # timed turns: one sample per contender each
    idle_s: float = 0.0       # sleep before each contender's turn: spinning threads go to sleep
    settle_calls: int = 0     # untimed calls of the same contender right before each timed one
    settle_s: float = 0.0     # ... repeated until at least this long has passed
    order: Order = Order.ROTATE
    # Pruning (tuning): after ``prune_after`` timed turns, a contender whose median is over
    # ``prune_ratio`` times the best one's is timed no more; its samples so far stay. 0: never.
    prune_after: int = 0
    prune_ratio: float = 0.0

    def __post_init__(self) -> None:
        if (self.warmup < 0 or self.iterations < 1 or self.idle_s < 0 or self.settle_calls < 0 or self.settle_s < 0
                or self.prune_after < 0 or (self.prune_after and self.prune_ratio <= 1.0)):
            raise ValueError(f"invalid timing schedule {self}")

    def with_counts(self, warmup: int, iterations: int) -> "Schedule":
        return dataclasses.replace(self, warmup=warmup, iterations=iterations)


IDLE_S = 0.05   # long enough for onnxruntime's spinning workers to stop (they spin ~10-20 ms)

# Where onnxruntime (or any runtime whose workers spin) shares the process with the contenders.
# Settling for 30 ms of the contender's own calls, not one call: with one, `aot bench-harness` on
# three corpus models (2-core EPYC, 30 calls) put in-process medians 0.8-16.6% from each
# contender's alone-in-its-own-process median (mean 11.9%); with 30 ms, 0.4-9.3% (mean 4.3%), and
# with 100 calls 0.0-4.8% except onnxruntime on the 4 ms classifier (+14.4%).
FAIR = Schedule(idle_s=IDLE_S, settle_calls=1, settle_s=0.03, order=Order.PERMUTE)


def interleaved(contenders: Mapping[str, Call] | Sequence[tuple[str, Call]], schedule: Schedule = Schedule(),
                clock: Callable[[], float] = time.perf_counter,
                sleep: Callable[[float], None] = time.sleep) -> dict[str, list[float]]:
    """Seconds per timed call of each contender, ``schedule.iterations`` each, in the given
    order of names. ``clock`` and ``sleep`` are the real ones outside tests."""
    pairs = list(contenders.items()) if isinstance(contenders, Mapping) else list(contenders)
    if len({name for name, _ in pairs}) != len(pairs):
        raise ValueError(f"contender names repeat: {[name for name, _ in pairs]}")
    times: dict[str, list[float]] = {name: [] for name, _ in pairs}
    turns = _turns(pairs, schedule.order)   # computed once: nothing between the timed calls but the calls
    for i in range(schedule.warmup + schedule.iterations):
        if schedule.prune_after and i == schedule.warmup + schedule.prune_after:
            kept = _not_far_behind(times, schedule.prune_ratio)
            if len(kept) < len(pairs):
                pairs = [(name, call) for name, call in pairs if name in kept]
                turns = _turns(pairs, schedule.order)
        for name, call in turns[i % len(turns)]:
            if schedule.idle_s:
                sleep(schedule.idle_s)
            _settle(call, schedule, clock)
            start = clock()
            call()
            elapsed = clock() - start
            if i >= schedule.warmup:
                times[name].append(elapsed)
    return times


def _not_far_behind(times: Mapping[str, Sequence[float]], ratio: float) -> set[str]:
    """The contenders whose median so far is within ``ratio`` of the best median."""
    medians = {name: statistics.median(samples) for name, samples in times.items() if samples}
    best = min(medians.values(), default=0.0)
    return {name for name, m in medians.items() if m <= best * ratio}


def repeat(call: Call, iterations: int, warmup: int = 0,
           clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Seconds of each of ``iterations`` calls of one contender, after ``warmup`` untimed ones."""
    return interleaved([("call", call)], Schedule(warmup, iterations), clock)["call"]


def timed(call: Callable[[], T], clock: Callable[[], float] = time.perf_counter) -> tuple[float, T]:
    """(seconds, result) of one call: a cold call, or a load, that cannot be repeated in place."""
    start = clock()
    result = call()
    return clock() - start, result


def first_and_steady(call: Callable[[], T], iterations: int,
                     clock: Callable[[], float] = time.perf_counter) -> tuple[float, list[float], T]:
    """(seconds of the first call, seconds of each of ``iterations`` calls after it, the first
    call's result): what a cold call costs beside the steady state."""
    first, result = timed(call, clock)
    return first, repeat(call, iterations, clock=clock), result


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1e3


def median_us(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1e6


def medians_ms(times: Mapping[str, Sequence[float]]) -> dict[str, float]:
    return {name: median_ms(samples) for name, samples in times.items() if samples}


def _turns(pairs: list[tuple[str, Call]], order: Order) -> list[list[tuple[str, Call]]]:
    """The orders turn i takes in turn: the n rotations, or for ``PERMUTE`` a Williams design:
    within every n turns (2n where n is odd) each contender runs once in each place and right
    after each other contender once (twice). All n! orders did that only over all n! turns, more
    than a benchmark times past four contenders: its first 30 of 720 all began with the same one."""
    n = len(pairs)
    if order is Order.ROTATE or n < 3:
        return [pairs[k:] + pairs[:k] for k in range(n)]
    first, low, high = [0], 1, n - 1      # 0, 1, n-1, 2, n-2, ...: every difference mod n once
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(k + shift) % n for k in first] for shift in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return [[pairs[k] for k in row] for row in rows]


def _settle(call: Call, schedule: Schedule, clock: Callable[[], float]) -> None:
    settled = clock() + schedule.settle_s
    for _ in range(schedule.settle_calls):
        call()
    while clock() < settled:
        call()
