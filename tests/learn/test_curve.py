"""``aot learn eval --learning-curve``: every fit trains on K of the other real graphs, never the
held-out one, always on the generated ones; the same database gives the same figures."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from aot.learn import curve, evaluate
from aot.learn.dataset import load_dataset
from aot.learn.train import ModeChoice, TrainingError, fit

sys.path.insert(0, str(Path(__file__).parent))
import synthetic  # noqa: E402
from synthetic import synthetic_db  # noqa: E402,F401 - a fixture


def _four_real_graphs(database: Path):
    """The synthetic database's two real graphs twice over, under other names: four to hold out."""
    data = load_dataset(database, synthetic.VULKAN)
    real = [g for g in data.graphs if not g.generated]
    copies = tuple(dataclasses.replace(g, model=g.model + "-again") for g in real)
    return dataclasses.replace(data, graphs=data.graphs + copies)


@pytest.mark.slow    # builds the synthetic database and fits some 40 small forests
def test_each_fit_trains_on_k_other_graphs_and_the_curve_repeats(synthetic_db, monkeypatch):
    data = _four_real_graphs(synthetic_db[0])
    generated = {g.model for g in data.graphs if g.generated}
    assert len(generated) == 1 and sum(not g.generated for g in data.graphs) == 4
    trained: list[tuple[str, ...]] = []

    def recording_fit(train, *args, **kwargs):
        trained.append(tuple(g.model for g in train.graphs))
        return fit(train, *args, **kwargs)

    monkeypatch.setattr(curve, "fit", recording_fit)
    held_out: list[str] = []
    points = curve.learning_curve(data, (1, 2, 9), draws=2, choice=ModeChoice.PLAN, estimators=20,
                                  progress=held_out.append)
    # 9 is more than the three others: it is not a point of its own; all three are the last point.
    assert [(p.graphs, p.fits) for p in points] == [(1, 8), (2, 8), (3, 4)]
    assert len(trained) == 20 and len(held_out) == 4
    for models, line in zip([trained[i:i + 5] for i in range(0, 20, 5)], held_out):
        model = line.split()[1].rstrip(":")
        for fitted in models:
            real = [m for m in fitted if m not in generated]
            assert model not in real and generated <= set(fitted) and len(set(real)) == len(real)
        assert sorted(len(set(f) - generated) for f in models) == [1, 1, 2, 2, 3]
    for p in points:
        assert np.isfinite(p.tau) and -1 <= p.tau <= 1
        assert np.isfinite(p.regret) and p.regret >= 0 and np.isfinite(p.regret_median) and p.regret_median >= 0
    # Trained on all the others in the database's order, the last point is the plain evaluation.
    plain = evaluate.evaluate(data, ModeChoice.PLAN, estimators=20).mean(evaluate.Predictor.LEARNED)
    assert (points[-1].tau, points[-1].regret) == (plain.tau, plain.regret)
    # Seeded draws: the same database, the same figures.
    assert curve.learning_curve(data, (1, 2, 9), draws=2, choice=ModeChoice.PLAN, estimators=20) == points
    assert "graphs trained on" in curve.render(points) and len(curve.render(points).splitlines()) == 4


@pytest.mark.slow    # builds the synthetic database
def test_one_real_model_is_too_few_for_a_curve(synthetic_db):
    data = load_dataset(synthetic_db[0], synthetic.VULKAN)
    first_real = next(g for g in data.graphs if not g.generated)
    one = dataclasses.replace(data, graphs=tuple(g for g in data.graphs if g.generated) + (first_real,))
    with pytest.raises(TrainingError, match="at least two real models"):
        curve.learning_curve(one, (1,), estimators=20)
