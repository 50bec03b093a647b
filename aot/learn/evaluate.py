"""``aot learn eval``: leave one real model out at a time, fit on the rest (generated graphs,
when the data holds them, only ever train: the command leaves them out unless --with-generated),
and score the held-out model's measured plans.

Per held-out model: Kendall's tau-b between predicted and measured plan times, and the top-1
regret (measured time of the predicted-best plan over the measured best, minus one), for the
learned model and three baselines on the same plans: the roofline's terms (FLOPs and bytes per
device, regions per device, transfers and bytes crossing) fitted by non-negative least squares to
the training plans; "rank by the accelerator's share of FLOPs" (more is predicted faster); and
always-all-host (the untuned whole-model host build first, then other all-host plans: on host
decisions, its regret is what a build without tuning loses). A tau where every prediction ties
is 0 (no ranking information), never NaN. Top-3 regret: what a search that times only the three
predicted best would lose.

The labels' own noise, where every plan of a model was timed side by side in several rounds
(``aot learn retime --rounds``): each round's times scored as if they were a prediction, against
the median of the other rounds, averaged over the rounds. That is what timing every plan once
and keeping the fastest (a tuner's way) loses to the labels' spread alone: a floor under the
regret no predictor can be relied on to beat on that model.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from aot.frontend.graph import GraphView
from aot.learn.dataset import Dataset, GraphData, MeasuredPlan
from aot.learn.features import PLAN_SCALARS, accel_share
from aot.learn.key import compiled_flags
from aot.learn.model import PREDICTION_ALONE, ChoiceWeights
from aot.learn.narrow_eval import TOP, NarrowScore, mean, narrowing, offered
from aot.learn.train import ModeChoice, TrainingError, choose_mode, fit
from aot.lower.flags import LEGACY_HOST_DEFAULT
from aot.partition.plan import Plan
from aot.partition.support import ACCEL, HOST

MIN_PLANS = 20     # the floor for a held-out model's score to mean much


class Predictor(enum.Enum):
    LEARNED = "learned"                  # its choice: the prediction weighed by its ChoiceWeights
    LEARNED_COST = "learned, cost alone"   # the prediction alone
    ROOFLINE = "fitted roofline"
    ACCEL_SHARE = "accel FLOP share"
    ALL_HOST = "always all-host"


@dataclass(frozen=True, slots=True)
class Score:
    tau: float
    regret: float        # 0.0: the predicted-best plan is the measured best
    regret_top3: float   # the best of the three predicted best, as a search that times only those would pick


@dataclass(frozen=True, slots=True)
class HeldOut:
    model: str
    plans: int
    scores: tuple[tuple[Predictor, Score], ...]
    narrowed: NarrowScore | None = None    # --tune-top on its whole-model flag sets (narrow_eval.py)
    one_timing: Score | None = None        # the labels' own noise (module docstring); None: one round

    def score(self, p: Predictor) -> Score:
        return dict(self.scores)[p]


@dataclass(frozen=True, slots=True)
class Evaluation:
    held_out: tuple[HeldOut, ...]
    best_classes: tuple[tuple[str, int], ...]    # ("all-host" | "all-accel" | "mixed", graphs)
    graphs: int
    plans: int
    rows: int
    mode: str

    def mean(self, p: Predictor) -> Score:
        return mean_score([h.score(p) for h in self.held_out])


def mean_score(scores: Sequence[Score]) -> Score:
    """Each measure's mean over ``scores``; zeros for none."""
    if not scores:
        return Score(0.0, 0.0, 0.0)
    return Score(*(float(np.mean([getattr(s, f) for s in scores])) for f in ("tau", "regret", "regret_top3")))


def kendall_tau(predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray) -> float:
    """Kendall's tau-b (ties in either list handled); 0.0 where one list is constant."""
    a, b = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    if len(a) != len(b) or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("kendall_tau needs two finite lists of one length")
    i, j = np.triu_indices(len(a), k=1)
    da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    concordant_minus_discordant = float(np.sum(da * db))
    pairs_a, pairs_b = float(np.sum(da != 0)), float(np.sum(db != 0))
    if pairs_a == 0 or pairs_b == 0:
        return 0.0
    return concordant_minus_discordant / np.sqrt(pairs_a * pairs_b)


def top1_regret(predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray) -> float:
    """Measured time of the predicted-best plan over the measured best, minus one. Where several
    plans tie for predicted-best, the worst of them counts: a tie is not a choice."""
    return topk_regret(predicted, measured, 1)


def topk_regret(predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray, k: int) -> float:
    """The best measured time among the ``k`` predicted best over the measured best, minus one.
    Ties in the prediction are broken against the model (the slower plans of a tie come first)."""
    a, b = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    if len(a) != len(b) or not len(a) or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("a regret needs two finite, non-empty lists of one length")
    order = np.lexsort((-b, a))      # by prediction, then slowest first
    return float(b[order[:k]].min() / b.min() - 1.0)


def score(predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray) -> Score:
    """Kendall's tau, top-1 and top-3 regret of ``predicted`` against ``measured``."""
    p, m = predicted, measured
    return Score(kendall_tau(p, m), top1_regret(p, m), topk_regret(p, m, 3))


def one_timing(plans: Sequence[MeasuredPlan]) -> Score | None:
    """Each side-by-side round of ``plans`` scored against the median of the other rounds, averaged
    over the rounds; None unless every plan has at least two rows."""
    rounds = min((len(p.samples_us) for p in plans), default=0)
    if rounds < 2:
        return None
    times = np.array([p.samples_us[:rounds] for p in plans])
    return mean_score([score(times[:, j], np.median(np.delete(times, j, axis=1), axis=1)) for j in range(rounds)])


def best_class(g: GraphData) -> str:
    devices = {r.device for r in g.best().plan.regions}
    return "all-host" if devices == {HOST} else "all-accel" if devices == {ACCEL} else "mixed"


def leave_one_out(data: Dataset, progress: Callable[[str], None] = lambda s: None,
                  only: tuple[str, ...] = ()) -> Iterator[tuple[GraphData, Dataset]]:
    """Each real model of ``data`` (those in ``only``, if given) and the rest to train on;
    generated graphs only ever train."""
    real = [g for g in data.graphs if not g.generated and (not only or g.model in only)]
    if not real:
        raise TrainingError("the database holds no real (non-generated) model to hold out",
                            hint="collect a zoo model or your own (generated graphs only train)")
    for g in real:
        train = data.without(g.model)
        if train.graphs:
            yield g, train
        else:
            progress(f"eval  {g.model}: nothing left to train on, skipped")


def evaluate(data: Dataset, choice: ModeChoice = ModeChoice.AUTO, progress: Callable[[str], None] = lambda s: None,
             estimators: int = 200, weights: ChoiceWeights = PREDICTION_ALONE) -> Evaluation:
    held = []
    for g, train in leave_one_out(data, progress):
        model = fit(train, choice, estimators, weights)
        plans = [p for p in g.plans if offered(p)]     # the choices a build has today
        measured = np.array([p.total_us for p in plans])
        shapes = [p.shape for p in plans]
        predicted = model.plans_us(shapes)
        predictions = {
            Predictor.LEARNED: model.ranking_us([p.plan for p in plans], predicted, g.codes),
            Predictor.LEARNED_COST: predicted,
            Predictor.ROOFLINE: _fitted_roofline(train)(shapes),
            Predictor.ACCEL_SHARE: np.array([1.0 - accel_share(s) for s in shapes]),
            Predictor.ALL_HOST: np.array([_untuned_host_rank(p.plan, g.view) for p in plans]),
        }
        scores = tuple((k, score(v, measured)) for k, v in predictions.items())
        held.append(HeldOut(g.model, len(plans), scores, narrowing(g, model), one_timing(plans)))
        progress(f"eval  {g.model}: {len(plans)} plan(s), learned tau {held[-1].score(Predictor.LEARNED).tau:.2f}")
    classes: dict[str, int] = {}
    for g in data.graphs:
        classes[best_class(g)] = classes.get(best_class(g), 0) + 1
    return Evaluation(tuple(held), tuple(sorted(classes.items())), len(data.graphs),
                      sum(len(g.plans) for g in data.graphs), data.rows(), choose_mode(data, choice).value)


_ROOFLINE_TERMS = ("host_flops", "host_bytes", "accel_flops", "accel_bytes", "regions", "accel_regions", "hops",
                   "crossing_bytes")   # the log1p scalars of the plan vector the roofline reads


def _untuned_host_rank(plan: Plan, view: GraphView) -> float:
    """The no-partition build first: everything on the host in one region with the default flags
    and runtime (what a build without --tune makes); then any other all-host plan; then the rest.
    Stored plans carry the flags each host region compiled with (``key.as_stored``); the defaults
    were im2col alone for every row measured before 2026-11-28 (``key.as_measured``), and are
    ``key.compiled_flags`` of an unpinned region since."""
    if any(r.device != HOST for r in plan.regions):
        return 2.0
    (region, *more) = plan.regions
    defaults = {None, LEGACY_HOST_DEFAULT, compiled_flags(view, dataclasses.replace(region, flags=None))}
    untuned = not more and region.flags in defaults and plan.host_runtime is None
    return 0.0 if untuned else 1.0


def _roofline_terms(shapes: Sequence) -> np.ndarray:
    """Per plan, in microsecond-scale units: the plan vector's terms back out of log1p."""
    at = {name: i for i, name in enumerate(PLAN_SCALARS)}
    rows = []
    for s in shapes:
        raw = {k: float(np.expm1(s.plan[at[k]])) for k in _ROOFLINE_TERMS}
        rows.append([1.0, raw["host_flops"], raw["host_bytes"], raw["accel_flops"], raw["accel_bytes"],
                     raw["regions"] - raw["accel_regions"], raw["accel_regions"], raw["hops"], raw["crossing_bytes"]])
    return np.array(rows)


def _fitted_roofline(train: Dataset) -> Callable[[Sequence], np.ndarray]:
    from scipy.optimize import nnls     # scikit-learn's own dependency; eval is a training-side command

    plans = [p for g in train.graphs for p in g.plans]
    x = _roofline_terms([p.shape for p in plans])
    scale = np.maximum(np.abs(x).max(axis=0), 1.0)
    coef, _ = nnls(x / scale, np.array([p.total_us for p in plans]))
    return lambda shapes: _roofline_terms(shapes) / scale @ coef


def render(e: Evaluation) -> str:
    """The table ``aot learn eval`` prints."""
    preds = tuple(Predictor)
    lines = [f"dataset: {e.graphs} graph(s), {e.plans} distinct plan(s), {e.rows} row(s); model mode: {e.mode}",
             "best plans: " + ", ".join(f"{k} {n}" for k, n in e.best_classes),
             "held-out model".ljust(34) + "plans  " + "  ".join(f"{p.value:>26}" for p in preds),
             " " * 41 + "  ".join(f"{'tau':>6} {'regret':>9} {'top-3':>9}" for _ in preds)]

    def cells(s: Score) -> str:
        return f"{s.tau:6.2f} {100 * s.regret:8.1f}% {100 * s.regret_top3:8.1f}%"

    for h in e.held_out:
        flag = " (<20 plans)" if h.plans < MIN_PLANS else ""
        lines.append(f"{(h.model + flag)[-33:]:34}{h.plans:5}  " + "  ".join(cells(h.score(p)) for p in preds))
    lines.append("mean".ljust(34) + " " * 7 + "  ".join(cells(e.mean(p)) for p in preds))
    noisy = [(h, h.one_timing) for h in e.held_out if h.one_timing is not None]
    if noisy:
        lines += ["", "the labels' own noise: one side-by-side round against the median of the others",
                  "held-out model".ljust(34) + f"{'tau':>6} {'regret':>9} {'top-3':>9}   learned regret"]
        for h, s in noisy:
            lines.append(f"{h.model[-33:]:34}{cells(s)}   {100 * h.score(Predictor.LEARNED).regret:8.1f}%")
        lines.append("mean".ljust(34) + cells(mean_score([s for _, s in noisy])))
    narrowed = [(h.model, h.narrowed) for h in e.held_out if h.narrowed is not None]
    if narrowed:
        lines += ["", f"--tune-top {TOP} on the whole-model flag sets (regret against timing every set):",
                  "held-out model".ljust(34) + "sets    untuned  predicted top-3  --tune-top (wins, then predicted)  in turn"]
        for model, n in (*narrowed, ("mean", mean([n for _, n in narrowed]))):
            lines.append(f"{model[-33:]:34}{n.candidates:4}  {100 * n.untuned:8.1f}%  {100 * n.predicted:14.1f}%  "
                         f"{100 * n.tune_top:11.1f}%  {100 * n.in_turn:27.1f}%")
    return "\n".join(lines)
