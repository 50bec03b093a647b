"""The host-state yardstick: turns split by the yardstick's speedup, the wait for uncontended
turns bounded, and the yardstick itself a real onnxruntime model whose threads agree."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aot.checks import host_state, timing
from aot.checks.compare import assert_close
from aot.checks.host_state import CONTENDED_BELOW, YARD, YARD1


def _times(speedups, model_s=None):
    """Per-turn samples: the yardstick at 1 ms on two threads, its one thread ``speedup`` ms."""
    n = len(speedups)
    return {YARD: [1e-3] * n, YARD1: [s * 1e-3 for s in speedups],
            "model": model_s if model_s is not None else [float(k) for k in range(n)]}


def test_turns_are_split_by_the_yardstick_speedup_and_the_yardstick_left_out():
    split = host_state.by_state(_times([1.6, 1.1, CONTENDED_BELOW, 1.0, 1.9]))
    assert split.uncontended == {"model": [0.0, 2.0, 4.0]}        # a speedup at the threshold answers
    assert split.contended == {"model": [1.0, 3.0]}
    assert split.turns == (3, 2) and host_state.median_speedup(split) == pytest.approx(CONTENDED_BELOW)


def test_a_contender_with_turns_missing_cannot_be_split():
    with pytest.raises(ValueError, match="one sample per turn"):
        host_state.by_state(_times([1.6, 1.6], model_s=[1.0]))


def _fake_interleave(states, calls):
    """An interleave that answers chunk by chunk: each chunk's yardstick speedup from ``states``."""
    chunks = iter(states)

    def interleave(contenders, schedule):
        calls.append(schedule)
        speedup = next(chunks)
        return _times([speedup] * schedule.iterations, [speedup] * schedule.iterations)
    return interleave


def test_the_wait_for_uncontended_turns_stops_once_there_are_enough():
    calls = []
    split = host_state.interleaved_by_state([("model", lambda: None)], timing.FAIR.with_counts(3, 10), [],
                                            max_turns=40, interleave=_fake_interleave([1.1, 1.6], calls))
    assert [(s.warmup, s.iterations) for s in calls] == [(3, 10), (0, 10)]   # warm-up once
    assert split.turns == (10, 10) and set(split.uncontended["model"]) == {1.6}


def test_the_wait_is_bounded_by_max_turns():
    calls = []
    split = host_state.interleaved_by_state([("model", lambda: None)], timing.FAIR.with_counts(0, 10), [],
                                            max_turns=25, interleave=_fake_interleave([1.0] * 9, calls))
    assert [s.iterations for s in calls] == [10, 10, 5] and split.turns == (0, 25)


def test_a_pruning_schedule_is_refused():
    pruning = timing.Schedule(prune_after=3, prune_ratio=2.0)
    with pytest.raises(ValueError, match="prunes"):
        host_state.interleaved_by_state([("model", lambda: None)], pruning, [], max_turns=10)


def test_the_yardstick_runs_the_same_answer_on_one_thread_and_on_all():
    model, inputs = host_state.yardstick_model()
    again, inputs_again = host_state.yardstick_model()
    assert again == model and np.array_equal(inputs_again["x"], inputs["x"])           # seeded
    (name, parallel), (name1, single) = host_state.yardstick()
    assert (name, name1) == (YARD, YARD1)
    out, out1 = parallel()[0], single()[0]
    assert np.isfinite(out).all() and 0.05 < float(np.std(out)) < 20      # activations neither vanish nor blow up
    assert_close(out, out1, rtol=1e-4, atol=1e-5, what="the yardstick on one thread against all")
    times = timing.interleaved(host_state.yardstick(), timing.Schedule(1, 5))
    split = host_state.by_state({**times, "model": [0.0] * 5})
    assert all(math.isfinite(s) and s > 0 for s in split.speedups) and sum(split.turns) == 5


def test_the_turn_yardstick_times_both_threads_once_a_turn_and_idles_before_the_next_contender():
    """One yardstick contender a turn: its one-thread then two-thread times become the turn's
    YARD1 and YARD samples (warm-up turns left out), and it sleeps IDLE_S after its runs, before the
    contender after it, so that onnxruntime's spinning workers do not slow that one."""
    now, events = [0.0], []

    def clock():
        now[0] += 1e-3          # every reading a millisecond after the last
        return now[0]

    def sleep(s):
        events.append(("sleep", s))

    yard = host_state.TurnYardstick(clock, sleep)
    assert np.isfinite(yard._single()[0]).all() and np.isfinite(yard._parallel()[0]).all()   # the real one runs
    yard._single, yard._parallel = (lambda: events.append(("one thread", None))), (lambda: events.append(("two", None)))
    contenders = [("model", lambda: events.append(("model", None)))]
    times = yard.interleave([*contenders, (yard.NAME, yard)], timing.Schedule(warmup=2, iterations=3))
    assert set(times) == {"model", YARD, YARD1} and all(len(ts) == 3 for ts in times.values())
    assert len(yard.samples[YARD]) == 5                                    # warm-up turns ran it too
    assert all(t == pytest.approx(1e-3) for t in times[YARD] + times[YARD1])   # one reading apart each
    assert events.count(("sleep", timing.IDLE_S)) == 5 and events.count(("model", None)) == 5
    # one thread first, then two, then the sleep: the model never runs while onnxruntime's workers spin
    turns = [events[i - 1:i + 2] for i, e in enumerate(events) if e == ("two", None)]
    assert len(turns) == 5 and all(t == [("one thread", None), ("two", None), ("sleep", timing.IDLE_S)] for t in turns)
    split = host_state.interleaved_with_turn_yardstick(contenders, timing.Schedule(warmup=0, iterations=4),
                                                       max_turns=8, yard=host_state.TurnYardstick(clock, sleep))
    assert sum(split.turns) >= 4 and all(math.isfinite(s) for s in split.speedups)
    assert len(split.uncontended["model"]) + len(split.contended["model"]) == len(split.speedups)
