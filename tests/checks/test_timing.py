"""The one timing harness (aot/checks/timing.py): turn orders, settling, idle gaps, warm-up, and
what a sample measures. A fake clock makes every figure exact."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from aot.checks import timing


class FakeClock:
    """Time advances only when a contender runs (by its cost) or the harness sleeps."""

    def __init__(self) -> None:
        self.now, self.slept = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def contender(self, log: list[str], name: str, cost: float):
        def call() -> None:
            log.append(name)
            self.now += cost
        return call


def test_permuted_turns_let_every_contender_follow_every_other_equally_often():
    clock, calls = FakeClock(), []
    contenders = [(n, clock.contender(calls, n, 0.001)) for n in "abc"]
    schedule = timing.Schedule(warmup=0, iterations=12, settle_calls=1, order=timing.Order.PERMUTE)
    times = timing.interleaved(contenders, schedule, clock, clock.sleep)
    assert {k: len(v) for k, v in times.items()} == {"a": 12, "b": 12, "c": 12}
    assert calls[:2] == ["a", "a"] and len(calls) == 2 * 3 * 12   # one settling call before each timed one
    timed = calls[1::2]
    turns = [timed[i:i + 3] for i in range(0, len(timed), 3)]
    after = Counter((x, y) for turn in turns for x, y in zip(turn, turn[1:]))
    assert set(after.values()) == {4} and len(after) == 6   # each ordered pair, equally often


def test_rotated_turns_start_at_each_contender_in_turn():
    clock, calls = FakeClock(), []
    contenders = {n: clock.contender(calls, n, 0.001) for n in "abcd"}
    timing.interleaved(contenders, timing.Schedule(warmup=0, iterations=4), clock, clock.sleep)
    assert [calls[i] for i in range(0, 16, 4)] == ["a", "b", "c", "d"]


def test_a_sample_is_one_call_of_its_contender_and_warmup_turns_are_dropped():
    clock = FakeClock()
    contenders = [("slow", clock.contender([], "slow", 0.004)), ("fast", clock.contender([], "fast", 0.001))]
    times = timing.interleaved(contenders, timing.Schedule(warmup=2, iterations=5, settle_calls=3), clock, clock.sleep)
    assert times == {"slow": [pytest.approx(0.004)] * 5, "fast": [pytest.approx(0.001)] * 5}
    assert timing.medians_ms(times) == {"slow": pytest.approx(4.0), "fast": pytest.approx(1.0)}


def test_fair_idles_before_every_contender_and_settles_it():
    """Where onnxruntime shares the process its workers spin after a run: FAIR sleeps before each
    contender's turn, then one untimed call of the same contender, then the timed one."""
    clock, calls = FakeClock(), []
    contenders = [(n, clock.contender(calls, n, 0.002)) for n in ("ort", "bundle")]
    timing.interleaved(contenders, timing.FAIR.with_counts(1, 3), clock, clock.sleep)
    assert clock.slept == [timing.IDLE_S] * (2 * 4) and timing.IDLE_S >= 0.05
    # Each turn: k settling calls (at least one, and at least settle_s of them) then the timed one,
    # per contender; a contender that ends one turn and starts the next (orders ort-bundle,
    # bundle-ort) runs 2(k+1) times in a row.
    runs = [(name, len(list(group))) for name, group in itertools.groupby(calls)]
    per_turn = min(count for _, count in runs)
    assert (per_turn - 1) * 0.002 >= timing.FAIR.settle_s - 1e-9 and per_turn >= 2
    assert len(calls) == 2 * per_turn * 4 and {count for _, count in runs} <= {per_turn, 2 * per_turn}
    assert calls.count("ort") == calls.count("bundle") and len(runs) >= 4


def test_settling_lasts_at_least_settle_s():
    clock, calls = FakeClock(), []
    timing.interleaved([("x", clock.contender(calls, "x", 0.001))],
                       timing.Schedule(warmup=0, iterations=1, settle_s=0.0105), clock, clock.sleep)
    assert len(calls) == 12   # 11 settling calls reach 10.5 ms, then the timed one


def test_repeat_and_first_and_steady_time_one_contender():
    clock, calls = FakeClock(), []
    costs = iter([0.05] + [0.002] * 10)

    def call() -> str:
        calls.append("c")
        clock.now += next(costs)
        return "result"

    first, steady, result = timing.first_and_steady(call, 4, clock)
    assert (first, result) == (pytest.approx(0.05), "result") and steady == [pytest.approx(0.002)] * 4
    assert timing.median_us(timing.repeat(call, 3, warmup=2, clock=clock)) == pytest.approx(2000.0)
    assert len(calls) == 1 + 4 + 5


def test_bad_schedules_and_repeated_names_are_refused():
    with pytest.raises(ValueError):
        timing.Schedule(iterations=0)
    with pytest.raises(ValueError):
        timing.Schedule(idle_s=-1)
    with pytest.raises(ValueError, match="repeat"):
        timing.interleaved([("a", lambda: None), ("a", lambda: None)])


def test_a_contender_far_behind_after_the_pruning_turns_is_timed_no_more():
    clock, calls = FakeClock(), []
    contenders = [("fast", clock.contender(calls, "fast", 0.001)), ("close", clock.contender(calls, "close", 0.0014)),
                  ("slow", clock.contender(calls, "slow", 0.002))]
    schedule = timing.Schedule(warmup=1, iterations=10, prune_after=3, prune_ratio=1.5)
    times = timing.interleaved(contenders, schedule, clock, clock.sleep)
    # slow (2x the best) keeps its three samples and is not called again; close (1.4x) runs to the end
    assert len(times["slow"]) == 3 and len(times["fast"]) == 10 and len(times["close"]) == 10
    assert calls.count("slow") == 1 + 3 and calls.count("fast") == 1 + 10
    assert timing.median_ms(times["slow"]) > 1.5 * timing.median_ms(times["fast"])


def test_without_pruning_every_contender_runs_every_turn_and_a_ratio_must_exceed_one():
    clock, calls = FakeClock(), []
    contenders = [("fast", clock.contender(calls, "fast", 0.001)), ("slow", clock.contender(calls, "slow", 0.01))]
    times = timing.interleaved(contenders, timing.Schedule(warmup=0, iterations=6), clock, clock.sleep)
    assert len(times["slow"]) == 6
    with pytest.raises(ValueError):
        timing.Schedule(prune_after=2, prune_ratio=1.0)
    assert timing.FAIR.with_counts(1, 2).prune_after == 0 and timing.FAIR.with_counts(1, 2).idle_s == timing.IDLE_S


@pytest.mark.parametrize("n", [4, 5, 6, 7])
def test_permuted_turns_balance_places_and_predecessors_within_a_few_turns(n):
    clock, calls = FakeClock(), []
    names = "abcdefg"[:n]
    contenders = [(x, clock.contender(calls, x, 0.001)) for x in names]
    cycle = n if n % 2 == 0 else 2 * n        # a benchmark times 30 turns: far fewer than n! for n > 4
    timing.interleaved(contenders, timing.Schedule(warmup=0, iterations=cycle, order=timing.Order.PERMUTE),
                       clock, clock.sleep)
    turns = [calls[i:i + n] for i in range(0, len(calls), n)]
    places = Counter((x, k) for turn in turns for k, x in enumerate(turn))
    after = Counter((x, y) for turn in turns for x, y in zip(turn, turn[1:]))
    assert all(sorted(turn) == list(names) for turn in turns)
    assert len(places) == n * n and len(set(places.values())) == 1       # every place, equally often
    assert len(after) == n * (n - 1) and len(set(after.values())) == 1   # every predecessor, equally often
