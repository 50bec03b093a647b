"""``aot learn eval --learning-curve 5,11,17``: how the held-out scores grow with the number of
graphs trained on, to tell whether collecting more models would help.

Each real model is held out as in ``evaluate``, and the model is fitted on seeded draws of K of
the others, for each K asked (plus all of them, as the plain evaluation). If tau still rises at
the largest K, more collected graphs should help; if it has flattened, more graphs of the same
kinds are unlikely to, and the features or the target are what to change. The draws are seeded
by the held-out model, K and the draw's number, so a rerun on the same database prints the same
figures.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from aot.learn.dataset import Dataset
from aot.learn.evaluate import leave_one_out, score
from aot.learn.model import PREDICTION_ALONE, ChoiceWeights
from aot.learn.narrow_eval import offered
from aot.learn.train import ModeChoice, TrainingError, fit


@dataclass(frozen=True, slots=True)
class CurvePoint:
    graphs: int             # real graphs trained on, each fit
    fits: int               # held-out models x draws
    tau: float              # mean Kendall's tau of the learned ranking over the fits
    regret: float           # mean top-1 regret
    regret_median: float    # a few large regrets move the mean; the median shows the typical fit


def learning_curve(data: Dataset, sizes: Sequence[int], draws: int = 2, choice: ModeChoice = ModeChoice.AUTO,
                   estimators: int = 200, weights: ChoiceWeights = PREDICTION_ALONE,
                   progress: Callable[[str], None] = lambda s: None) -> tuple[CurvePoint, ...]:
    """One point per size under the number of other real graphs, and one for all of them."""
    if sum(not g.generated for g in data.graphs) < 2:
        raise TrainingError("a learning curve needs at least two real models in the database",
                            hint="collect more models with `aot learn collect`")
    scores: dict[int, list[tuple[float, float]]] = {}
    for g, train in leave_one_out(data, progress):
        others = [h for h in train.graphs if not h.generated]
        generated = tuple(h for h in train.graphs if h.generated)    # these always train, as in eval
        plans = [p for p in g.plans if offered(p)]
        measured = np.array([p.total_us for p in plans])
        counts = sorted({k for k in sizes if k < len(others)} | {len(others)})
        for k in counts:
            for d in range(draws if k < len(others) else 1):
                # All of them in the database's order: the plain evaluation's fit (the seeded subsamples
                # of train.fit take rows by position, so the order of the graphs moves the trees).
                subset = train if k == len(others) else dataclasses.replace(
                    train, graphs=tuple(random.Random(f"{g.model}/{k}/{d}").sample(others, k)) + generated)
                model = fit(subset, choice, estimators, weights)
                s = score(model.ranking_us([p.plan for p in plans], model.plans_us([p.shape for p in plans]),
                                           g.codes), measured)
                scores.setdefault(k, []).append((s.tau, s.regret))
        progress(f"curve  {g.model}: held out, trained on " + ", ".join(map(str, counts)) + " graph(s)")
    return tuple(CurvePoint(k, len(v), float(np.mean([t for t, _ in v])), float(np.mean([r for _, r in v])),
                            float(np.median([r for _, r in v]))) for k, v in sorted(scores.items()))


def render(points: Sequence[CurvePoint]) -> str:
    lines = ["graphs trained on   fits   mean tau   top-1 regret (mean)   (median)"]
    lines += [f"{p.graphs:>17}  {p.fits:>5}   {p.tau:>8.3f}   {100 * p.regret:>18.1f}%   {100 * p.regret_median:>7.1f}%"
              for p in points]
    return "\n".join(lines)
