"""What ``--tune-top K`` would have lost on a held-out model, from its measured host decisions.

The tuner's candidates for a whole-model host build are the model's one-region plans with pinned
flags on the default runtime (``host_plans.py`` collects every set the tuner offers). A full
search times them all and keeps the fastest; ``--tune-top K`` times the default and the K-1 the
model predicts fastest. Its regret is the best of those K over the best of all, minus one. Beside
it, on the same plans: the untuned build (the default alone) and a static choice that needs no
model (the default and the K-1 sets that won most often on the training graphs)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from aot.learn.dataset import Dataset, GraphData, MeasuredPlan
from aot.learn.model import LearnedModel
from aot.learn.narrow import fastest
from aot.lower.flags import IM2COL, default_opt_flags
from aot.partition.support import HOST
from aot.runtime.target import Target

TOP = 3


@dataclass(frozen=True, slots=True)
class NarrowScore:
    candidates: int        # flag sets measured for the whole model on the default runtime
    untuned: float         # regret of the default flags alone
    learned: float         # regret of the default + the model's K-1 predicted fastest
    static: float          # regret of the default + the K-1 sets that won most often in training


def tuner_plans(g: GraphData) -> dict[frozenset[str], MeasuredPlan]:
    """The plans a whole-model flag search would time, by their flags (without the convolution
    base, so one set has one key on any model)."""
    out = {}
    for p in g.plans:
        regions = p.plan.regions
        if len(regions) == 1 and regions[0].device == HOST and regions[0].flags is not None \
                and p.plan.host_runtime is None:
            out[_set(regions[0].flags)] = p
    return out


def narrowing(g: GraphData, model: LearnedModel, train: Dataset, top: int = TOP) -> NarrowScore | None:
    """None where the held-out model has no measured default or fewer than ``top`` + 1 sets."""
    plans = tuner_plans(g)
    default = _set(default_opt_flags(Target.host()))
    if default not in plans or len(plans) <= top:
        return None
    times = {k: p.total_us for k, p in plans.items()}
    best = min(times.values())
    others = [k for k in plans if k != default]
    predicted = model.plans_us([plans[k].shape for k in others])
    learned = fastest(predicted, top - 1)
    wins = Counter(min(tp, key=lambda k: tp[k].total_us) for tp in map(tuner_plans, train.graphs) if tp)
    static = [k for k, _ in sorted(wins.items(), key=lambda kv: (-kv[1], sorted(kv[0]))) if k in times and k != default]

    def regret(kept: list[frozenset[str]]) -> float:
        return float(min(times[k] for k in [default, *kept]) / best - 1.0)

    return NarrowScore(len(plans), regret([]), regret([others[i] for i in learned]), regret(static[:top - 1]))


def mean(scores: list[NarrowScore]) -> NarrowScore:
    return NarrowScore(int(np.sum([s.candidates for s in scores])),
                       *(float(np.mean([getattr(s, f) for s in scores])) for f in ("untuned", "learned", "static")))


def _set(flags: tuple[str, ...]) -> frozenset[str]:
    # Every default holds IM2COL (a no-op without convolutions); no flags at all is its own set.
    return frozenset(flags) - {IM2COL} if flags else frozenset({"(no optimisation flags)"})
