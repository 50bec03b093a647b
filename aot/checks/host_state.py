"""Is the host's second core answering? A yardstick timed in every turn beside the contenders.

This machine's two vCPUs have two states that flip every 10-60 s, from outside the process
(measured in stop 62, `docs/performance.md`). onnxruntime on one thread and IREE's local-sync do
not move between them; what runs on both cores and hands work between them often does:
onnxruntime's two threads on the openWakeWord embedding 0.44 -> 0.76 ms (its one thread 0.67
in both), the aot bundle on IREE's local-task 0.47 -> 1.05 ms, the ResNet-50's 6.5 -> 9.2 ms
(onnxruntime's 4.6 -> 5.2). Two threads hashing their own buffers run 1.94-1.98x one thread in
both states: the cores are there, passing work between them is what turns slow.

So a benchmark times a yardstick in every turn beside its contenders: onnxruntime at its default
threads and at one thread on a fixed, seeded chain of small convolutions (0.08 ms). A turn whose
yardstick ran under ``CONTENDED_BELOW`` times faster on the default threads than on one is
*contended*; a contender's medians are taken over the uncontended turns, the contended ones are
reported beside. Both are the same contenders in the same turns: the state picks turns, not
contenders."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aot.checks import reference, timing

YARD, YARD1 = "yardstick", "yardstick 1 thread"
# The yardstick's speedup on two threads, on this host (stop 62, 150 s of turns): 1.64-1.65 in the
# answering state, 1.09-1.13 in the other. The threshold sits between them.
CONTENDED_BELOW = 1.35
CHANNELS, SIDE, LAYERS, SEED = 16, 16, 16, 0
# Turns timed at most, as a multiple of the iterations, waiting for that many uncontended ones.
MAX_TURNS_FACTOR = 3
# Fewer uncontended turns than half the iterations: the medians are every turn's, and say so.
# Fewer contended turns than this: no contended medians beside.
MIN_CONTENDED_TURNS = 5


def yardstick_model() -> tuple[bytes, dict[str, np.ndarray]]:
    """(the ONNX model, its input): ``LAYERS`` 3x3 convolutions with ReLU over a CHANNELS x SIDE x
    SIDE map, seeded weights at He's scale, which keeps the activations near unit size through the
    ReLUs (smaller ones decay towards denormals, which would time something else). Small on purpose:
    each convolution is a few microseconds of work per thread, so the threads hand work over
    often, which is what the contended state slows."""
    rng = np.random.default_rng(SEED)
    nodes, weights, x = [], [], "x"
    for i in range(LAYERS):
        w = rng.standard_normal((CHANNELS, CHANNELS, 3, 3)) * (2 / (9 * CHANNELS)) ** 0.5
        weights.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    shape = [1, CHANNELS, SIDE, SIDE]
    graph = helper.make_graph(nodes, "yardstick", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), {"x": rng.standard_normal(shape).astype(np.float32)}


def yardstick() -> list[tuple[str, timing.Call]]:
    """The yardstick's two contenders, to time interleaved with a benchmark's own."""
    model, inputs = yardstick_model()
    parallel, single = reference.session(model), reference.session(model, threads=1)
    return [(YARD, lambda: parallel.run(None, inputs)), (YARD1, lambda: single.run(None, inputs))]


class TurnYardstick:
    """The yardstick as one contender of a turn, for harnesses whose own contenders do not spin
    (IREE modules timed against each other, ``timing.Schedule()``): its one thread, then its two,
    each timed, then ``timing.IDLE_S`` asleep so that onnxruntime's spinning workers are quiet
    before the next contender runs. One idle gap a turn instead of ``FAIR``'s one per contender.
    ``interleave`` is a ``timing.interleaved`` that answers with the yardstick's two samples per
    turn in place of this contender's, as ``by_state`` reads them."""

    NAME = "host state"

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        yard = dict(yardstick())
        self._parallel, self._single = yard[YARD], yard[YARD1]
        self._clock, self._sleep = clock, sleep
        self.samples: dict[str, list[float]] = {YARD: [], YARD1: []}     # every call's, warm-up turns too

    def __call__(self) -> None:
        start = self._clock()
        self._single()
        middle = self._clock()
        self._parallel()
        self.samples[YARD1].append(middle - start)
        self.samples[YARD].append(self._clock() - middle)
        self._sleep(timing.IDLE_S)

    def interleave(self, contenders: Sequence[tuple[str, timing.Call]], schedule: timing.Schedule
                   ) -> dict[str, list[float]]:
        times = timing.interleaved(contenders, schedule, self._clock, self._sleep)
        del times[self.NAME]
        return {**times, **{name: samples[-schedule.iterations:] for name, samples in self.samples.items()}}


@dataclass(frozen=True, slots=True)
class ByState:
    """A benchmark's samples split by the state of the turn they were timed in (the yardstick's
    own samples left out)."""
    uncontended: dict[str, list[float]]
    contended: dict[str, list[float]]
    speedups: tuple[float, ...]          # the yardstick's, one per turn

    @property
    def turns(self) -> tuple[int, int]:
        """(uncontended, contended) turns."""
        return (sum(s >= CONTENDED_BELOW for s in self.speedups),
                sum(s < CONTENDED_BELOW for s in self.speedups))


def by_state(times: Mapping[str, Sequence[float]]) -> ByState:
    """Split samples timed interleaved with ``yardstick()`` (no pruning: sample k of every
    contender is turn k's) by each turn's yardstick speedup."""
    speedups = tuple(one / parallel for parallel, one in zip(times[YARD], times[YARD1]))
    rest = {name: list(samples) for name, samples in times.items() if name not in (YARD, YARD1)}
    if any(len(samples) != len(speedups) for samples in rest.values()):
        raise ValueError("every contender needs one sample per turn to be split by state")
    answering = [s >= CONTENDED_BELOW for s in speedups]
    return ByState({n: [t for t, a in zip(s, answering) if a] for n, s in rest.items()},
                   {n: [t for t, a in zip(s, answering) if not a] for n, s in rest.items()}, speedups)


def interleaved_by_state(contenders: Sequence[tuple[str, timing.Call]], schedule: timing.Schedule,
                         yard: Sequence[tuple[str, timing.Call]], max_turns: int,
                         interleave: Callable[..., dict[str, list[float]]] = timing.interleaved) -> ByState:
    """Time ``contenders`` with the yardstick ``schedule.iterations`` turns at a time until
    ``schedule.iterations`` turns were uncontended or ``max_turns`` were timed; the warm-up turns
    run once, before the first."""
    if schedule.prune_after:
        raise ValueError("a schedule that prunes drops turns: it cannot be split by state")
    times: dict[str, list[float]] = {}
    chunk = schedule
    while True:
        for name, samples in interleave([*contenders, *yard], chunk).items():
            times.setdefault(name, []).extend(samples)
        split = by_state(times)
        if split.turns[0] >= schedule.iterations or len(split.speedups) >= max_turns:
            return split
        chunk = schedule.with_counts(0, min(schedule.iterations, max_turns - len(split.speedups)))


def interleaved_with_turn_yardstick(contenders: Sequence[tuple[str, timing.Call]], schedule: timing.Schedule,
                                    max_turns: int, yard: TurnYardstick | None = None) -> ByState:
    """``interleaved_by_state`` for contenders that do not spin, the yardstick timed once a turn
    (``TurnYardstick``)."""
    yard = yard or TurnYardstick()
    return interleaved_by_state(contenders, schedule, [(yard.NAME, yard)], max_turns, interleave=yard.interleave)


def median_speedup(split: ByState) -> float:
    return statistics.median(split.speedups)


@dataclass(frozen=True, slots=True)
class Medians:
    """A benchmark's medians (ms per contender) by the host's state."""
    headline: dict[str, float]               # the uncontended turns' (every turn's where too few were)
    state: dict[str, Any]                    # turns in each state, the yardstick's median speedup
    contended: dict[str, float] | None       # the contended turns', where there were enough


def medians_by_state(split: ByState, iterations: int) -> Medians:
    uncontended, contended = split.turns
    answered = uncontended >= max(1, iterations // 2)
    headline = split.uncontended if answered else {n: split.uncontended[n] + split.contended[n] for n in split.uncontended}
    state = {"timed_in": "uncontended" if answered else "every turn (the second core mostly contended)",
             "turns_uncontended": uncontended, "turns_contended": contended,
             "yardstick_speedup": round(median_speedup(split), 3)}
    return Medians(timing.medians_ms(headline), state,
                   timing.medians_ms(split.contended) if contended >= MIN_CONTENDED_TURNS else None)


def timed_by_state(contenders: Sequence[tuple[str, timing.Call]], iterations: int, warmup: int) -> Medians:
    """``contenders`` timed on the ``FAIR`` schedule with the yardstick in every turn (onnxruntime
    spins: idle first), waiting for uncontended turns up to ``MAX_TURNS_FACTOR`` times the
    iterations."""
    split = interleaved_by_state(contenders, timing.FAIR.with_counts(warmup, iterations), yardstick(),
                                 MAX_TURNS_FACTOR * iterations)
    return medians_by_state(split, iterations)


def state_text(state: Mapping[str, Any]) -> str:
    text = f"{state['turns_uncontended']} of {state['turns_uncontended'] + state['turns_contended']} turns uncontended"
    return text + (", every turn counted" if state["timed_in"] != "uncontended" else "")
