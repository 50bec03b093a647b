"""``--tune-top K``: the learned model picks which flag sets the tuner compiles and times.

A full flag search compiles every candidate (12 on a convolution region) and times each; on a
large model that is minutes. Only the default (the baseline every winner is measured against)
and K-1 others are compiled and timed: the sets that won most often on the model's training
graphs (``LearnedModel.tuner_wins``, from measured host decisions: ``aot learn collect
--host-decisions``, ``aot learn train``) first, and among sets that won equally often (or never)
the ones the cost model predicts fastest. On held-out models the prediction alone and the wins
alone each lost the best set where the other found it, and over the host database's label sets
the two traded places by a few points; on the most complete labels (stop 66) the wins lost
least: 5.3% of the best set's time, against 8.0% for the prediction and 6.0% for the two in turn
(``in_turn``; docs/learned.md). The measurement still
decides: a wrong choice costs speed the search could have found, never correctness. Numpy only,
like every build-side use of the model.

The model must have been trained on this build's devices (``LearnedModel.mismatch``); otherwise,
or without a model, the search is not narrowed and the progress line says why.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

import numpy as np

from aot.frontend.graph import GraphView
from aot.learn.features import encode, shape_of
from aot.learn.key import device_fingerprint
from aot.learn.model import LearnedModel, flag_key, shipped_model
from aot.learn.trees import ModelFileError
from aot.partition.plan import Plan
from aot.partition.support import HOST
from aot.record import Narrowing
from aot.tune.candidates import FlagSet
from aot.tune.segments import Choose

if TYPE_CHECKING:
    from aot.options import BuildOptions


def learned_chooser(plan: Plan, view: GraphView, options: "BuildOptions", top: int,
                    made: dict[str, Narrowing]) -> tuple[Choose | None, str]:
    """(choose, "") narrowing each host region's candidates to ``top`` (filling ``made``), or
    (None, why not)."""
    fingerprint = device_fingerprint(options)
    path = options.cost_model or shipped_model(fingerprint)
    if path is None:
        return None, f"no learned model (--cost-model) and none shipped for {fingerprint!r}: every candidate is timed"
    model = LearnedModel.load(path)
    if (why := model.mismatch(fingerprint)) is not None:
        return None, f"learned model {str(path)!r} not used: {why}; every candidate is timed"
    codes = encode(view, options.accel.backend if options.accel else None)

    def choose(region: str, offered: tuple[FlagSet, ...]) -> tuple[FlagSet, ...]:
        if plan.region(region).device != HOST or len(offered) <= top:
            return offered
        shapes = [shape_of(_with_flags(plan, region, s), view, codes) for s in offered]
        us = model.plans_us(shapes)
        if not np.all(np.isfinite(us)):   # a NaN would sort anywhere: no choice is made on it
            raise ModelFileError(f"learned model {str(path)!r} predicts a non-finite time for region {region!r}",
                                 hint="retrain it with `aot learn train`, or leave --tune-top out")
        wins = [model.wins(flag_key(s.flags)) for s in offered]
        kept = (offered[0], *(offered[1 + i] for i in fastest(us[1:], top - 1, wins[1:])))
        made[region] = Narrowing(model.training_set, tuple((s.name, float(u)) for s, u in zip(offered, us)),
                                 tuple(s.name for s in kept), tuple((s.name, n) for s, n in zip(offered, wins)))
        return kept

    return choose, ""


def fastest(predicted: "Sequence[float] | np.ndarray", count: int, wins: Sequence[int] | None = None) -> list[int]:
    """The positions of the ``count`` sets to time, in order: the most ``wins`` first (none given:
    all equal), then the lowest prediction; a tie keeps the offered order. A NaN would sort
    anywhere, so a non-finite prediction is refused."""
    if not np.all(np.isfinite(np.asarray(predicted, dtype=float))):
        raise ValueError("a prediction to choose from is not finite")
    won = wins if wins is not None else [0] * len(predicted)
    return sorted(range(len(predicted)), key=lambda i: (-won[i], predicted[i], i))[:count]


def in_turn(predicted: "Sequence[float] | np.ndarray", count: int, wins: Sequence[int]) -> list[int]:
    """The positions of the ``count`` sets to time: the two orders of ``fastest`` in turn, the
    prediction's first (its best, then the most wins not yet taken, then its second, ...)."""
    pairs = zip(fastest(predicted, len(predicted)), fastest(predicted, len(predicted), wins))
    return list(dict.fromkeys(i for pair in pairs for i in pair))[:count]


def _with_flags(plan: Plan, region: str, flag_set: FlagSet) -> Plan:
    return dataclasses.replace(plan, regions=tuple(
        dataclasses.replace(r, flags=flag_set.flags) if r.name == region else r for r in plan.regions))
