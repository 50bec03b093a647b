"""What ``--tune-top K`` would have lost on a held-out model, from its measured host decisions.

The tuner's candidates for a whole-model host build are the model's one-region plans with pinned
flags on the default runtime (``host_plans.py`` collects every set the tuner offers). A full
search times them all and keeps the fastest; ``--tune-top K`` times the default and K-1 others.
A choice's regret is the best of its K over the best of all, minus one. Three choices on the same
plans: the untuned build (the default alone), the cost model's prediction alone (the K-1
predicted fastest), and what ``--tune-top`` does (the K-1 sets that won most often on the
training graphs, the prediction ordering equal counts: ``narrow.fastest`` with the wins)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from aot.learn.dataset import GraphData, MeasuredPlan
from aot.learn.features import local_sync
from aot.learn.model import LearnedModel, flag_key
from aot.learn.narrow import fastest, in_turn
from aot.learn.neighbours import GraphEffects, signature
from aot.lower.flags import LEGACY_HOST_DEFAULT
from aot.partition.support import HOST
from aot.tune.candidates import RETIRED_HOST_SETS

TOP = 3


@dataclass(frozen=True, slots=True)
class NarrowScore:
    candidates: int        # flag sets measured for the whole model on the default runtime
    untuned: float         # regret of the default flags alone
    predicted: float       # regret of the default + the model's K-1 predicted fastest
    tune_top: float        # regret of what --tune-top times: most training wins, then prediction
    in_turn: float         # regret of the two orders in turn, the prediction's best first


_RETIRED = frozenset(flag_key(s.flags) for s in RETIRED_HOST_SETS)


def offered(p: MeasuredPlan) -> bool:
    """Whether a build can still make ``p``: no region pinned to a set the tuner no longer offers
    (``RETIRED_HOST_SETS``). A database keeps such plans, and they still train a model (what a
    flag does to a graph), but no search can choose them, so no choice is scored on them."""
    return not any(r.flags is not None and flag_key(r.flags) in _RETIRED for r in p.plan.regions)


def tuner_plans(g: GraphData) -> dict[tuple[str, ...], MeasuredPlan]:
    """The plans a whole-model flag search would time, by ``narrow.flag_key``: a set it no
    longer offers is not among them."""
    out = {}
    for p in g.plans:
        regions = p.plan.regions
        if len(regions) == 1 and regions[0].device == HOST and regions[0].flags is not None \
                and p.plan.host_runtime is None and offered(p):
            out[flag_key(regions[0].flags)] = p
    return out


def _default_key() -> tuple[str, ...]:
    """The set every flag effect and risk is measured against, as ``flag_key`` names it: the
    untuned build's until 2026-11-28, im2col alone (``LEGACY_HOST_DEFAULT``; on a conv-free graph,
    no flags at all). A conv-free region's default has been data tiling since; the databases and
    the shipped models keep their reference, so their figures mean what they meant."""
    return flag_key(LEGACY_HOST_DEFAULT)


def tuner_wins(graphs: Iterable[GraphData]) -> tuple[tuple[tuple[str, ...], int], ...]:
    """How many of ``graphs`` each whole-model flag set was fastest on, most first (then by flags):
    what a model trained on them ships (``LearnedModel.tuner_wins``). A set the tuner no longer
    offers (``RETIRED_HOST_SETS``) wins nothing (``tuner_plans`` leaves it out); the fastest of
    the others wins."""
    wins = Counter(min(tp, key=lambda k: tp[k].total_us) for tp in map(tuner_plans, graphs) if tp)
    return tuple(sorted(wins.items(), key=lambda kv: (-kv[1], kv[0])))


def flag_risk(graphs: Iterable[GraphData]) -> tuple[tuple[tuple[str, ...], float], ...]:
    """Each whole-model flag set's downside over ``graphs``: the root mean square, over the graphs
    that measured it and the default, of max(0, log(its time / the default's)). What a model
    trained on them ships (``LearnedModel.flag_risk``); sorted by flags."""
    default = _default_key()
    losses: dict[tuple[str, ...], list[float]] = {}
    for plans in map(tuner_plans, graphs):
        if default not in plans:
            continue
        for key, p in plans.items():
            losses.setdefault(key, []).append(max(float(np.log(p.total_us / plans[default].total_us)), 0.0))
    return tuple(sorted((k, round(float(np.sqrt(np.mean(np.square(v)))), 6)) for k, v in losses.items()))


def graph_effects(graphs: Iterable[GraphData]) -> tuple[GraphEffects, ...]:
    """Each real graph's measured effects (``neighbours.GraphEffects``): every whole-model flag
    set against the default, and local-sync against local-task with the same flags (the median
    over the sets measured both ways). Generated graphs are random: their flag effects say
    nothing about a model's. Graphs without a measured default are left out."""
    default, out = _default_key(), []
    for g in graphs:
        plans = tuner_plans(g)
        if g.generated or default not in plans:
            continue
        base = plans[default].total_us
        flags = tuple(sorted((k, round(math.log(p.total_us / base), 6)) for k, p in plans.items()))
        by_runtime: dict[tuple[str, ...], dict[float, float]] = {}
        for p in g.plans:
            r = p.plan.regions[0]
            if len(p.plan.regions) == 1 and r.device == HOST and r.flags is not None:
                by_runtime.setdefault(flag_key(r.flags), {})[local_sync(p.plan)] = p.total_us
        ratios = [math.log(t[1.0] / t[0.0]) for t in by_runtime.values() if len(t) == 2]
        runtime = round(float(np.median(ratios)), 6) if ratios else None
        out.append(GraphEffects(tuple(round(float(x), 6) for x in signature(g.codes)), flags, runtime))
    return tuple(out)


def narrowing(g: GraphData, model: LearnedModel, top: int = TOP) -> NarrowScore | None:
    """None where the held-out model has no measured default or fewer than ``top`` + 1 sets.
    ``model`` was trained without ``g``: its wins and predictions never saw it."""
    plans = tuner_plans(g)
    default = _default_key()
    if default not in plans or len(plans) <= top:
        return None
    times = {k: p.total_us for k, p in plans.items()}
    best = min(times.values())
    others = [k for k in plans if k != default]
    predicted = model.plans_us([plans[k].shape for k in others])
    wins = [model.wins(k) for k in others]

    def regret(kept: list[int]) -> float:
        return float(min(times[k] for k in [default, *(others[i] for i in kept)]) / best - 1.0)

    return NarrowScore(len(plans), regret([]), regret(fastest(predicted, top - 1)),
                       regret(fastest(predicted, top - 1, wins)), regret(in_turn(predicted, top - 1, wins)))


def mean(scores: list[NarrowScore]) -> NarrowScore:
    regrets = [f.name for f in dataclasses.fields(NarrowScore)][1:]     # every field after the count
    return NarrowScore(int(np.sum([s.candidates for s in scores])),
                       *(float(np.mean([getattr(s, name) for s in scores])) for name in regrets))
