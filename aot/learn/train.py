"""``aot learn train``: fit the cost model and the proposer on a ``Dataset`` with scikit-learn
(the ``[learn]`` extra) and export them as JSON trees (``trees.py``) a build evaluates with numpy.

Targets are ``log1p`` of microseconds: plans of one model differ by orders of magnitude here
(a host plan in milliseconds, a lavapipe one in a second), and a squared error on raw times
would fit only the slowest plans. Ranking objectives (TpuGraphs) are not used: a pairwise
classifier over plan pairs was tried on the host database and ranked worse than these trees
(docs/learned.md).
"""

from __future__ import annotations

import enum
from importlib.metadata import version
from typing import Any

import numpy as np

from aot.errors import AotError
from aot.learn.dataset import Dataset
from aot.learn.features import FEATURE_VERSION, lane_time
from aot.learn.model import PREDICTION_ALONE, ChoiceWeights, LearnedModel, Mode
from aot.learn.narrow_eval import flag_risk, graph_effects, tuner_wins
from aot.learn.trees import Forest, from_sklearn

MIN_REGION_ROWS = 40     # fewer region rows than this: predict plan times directly (Mode.PLAN)
SEED = 0
# The cost model averages this many boosted forests, each on its own seeded subsample. With a
# dozen real models, one forest's picks moved with its seed alone (host eval: top-1 regret
# 72-128%, --tune-top regret 6-9% over seeds 0-2); the average moves less. Five, not three, since
# stop 61: held out, 1 -> 3 -> 5 -> 9 forests took the top-1 regret 18.7 -> 17.4 -> 15.3 -> 15.1% on
# the side-by-side labels and 30.5 -> 28.9 -> 26.5% (3, 5, 9) on the separately timed ones; five
# keep the shipped file under 1 MB (docs/learned.md).
BAG = 5


class ModeChoice(enum.Enum):
    AUTO = "auto"
    REGIONS = "regions"
    PLAN = "plan"


class TrainingError(AotError):
    """The data cannot train a model (too little of it, or the learning library is missing)."""


def _sklearn() -> Any:
    try:
        import sklearn.ensemble as ensemble
    except ImportError as e:
        raise TrainingError("training needs scikit-learn, which is not installed",
                            hint="pip install 'aot[learn]' (a build only reads the model and needs none)") from e
    return ensemble


def region_rows(data: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """(features, log1p us) of every region with a measured time."""
    xs: list[np.ndarray] = []
    ys: list[float] = []
    for g in data.graphs:
        for p in g.plans:
            if p.region_us is not None:
                xs.append(p.shape.regions)
                ys.extend(p.region_us)
    if not xs:
        return np.zeros((0, 0)), np.zeros(0)
    return np.concatenate(xs), np.log1p(np.array(ys))


def choose_mode(data: Dataset, choice: ModeChoice) -> Mode:
    if choice is ModeChoice.REGIONS:
        return Mode.REGIONS
    if choice is ModeChoice.PLAN:
        return Mode.PLAN
    return Mode.REGIONS if len(region_rows(data)[1]) >= MIN_REGION_ROWS else Mode.PLAN


def fit(data: Dataset, choice: ModeChoice = ModeChoice.AUTO, estimators: int = 200,
        weights: ChoiceWeights = PREDICTION_ALONE) -> LearnedModel:
    """The cost model (and the proposer) fitted on every plan of ``data``, choosing among plans
    with ``weights``."""
    ensemble = _sklearn()
    plans = [p for g in data.graphs for p in g.plans]
    if len(plans) < 3:
        raise TrainingError(f"the training set holds {len(plans)} measured plan(s); at least 3 are needed",
                            hint="collect more with `aot learn collect`")
    mode = choose_mode(data, choice)
    hop_us = per_byte = 0.0
    if mode is Mode.REGIONS:
        x, y = region_rows(data)
        if len(y) < 3:
            raise TrainingError(f"only {len(y)} region time(s) in the training set",
                                hint="use --mode plan, or collect more")
        cost = _regressor(ensemble, x, y, estimators)
        hop_us, per_byte = _transfer_fit(data)
    else:
        x = np.stack([p.shape.plan for p in plans])
        cost = _regressor(ensemble, x, np.log1p([p.total_us for p in plans]), estimators)
    summary = (("graphs", str(len(data.graphs))), ("generated", str(sum(g.generated for g in data.graphs))),
               ("plans", str(len(plans))), ("rows", str(data.rows())),
               ("region_rows", str(len(region_rows(data)[1]))), ("mode", mode.value))
    return LearnedModel(mode, cost, hop_us, per_byte, _proposer(ensemble, data, estimators), data.fingerprint,
                        data.digest(), _versions(), summary, tuner_wins(data.graphs), flag_risk(data.graphs),
                        graph_effects(data.graphs), weights)


def _regressor(ensemble: Any, x: np.ndarray, y: np.ndarray, estimators: int) -> Forest:
    """``BAG`` seeded forests as one: their mean is the mean base plus every tree at rate / BAG."""
    bag = BAG if len(y) >= 20 else 1      # without subsampling every seed fits the same forest
    forests = [from_sklearn(ensemble.GradientBoostingRegressor(
        n_estimators=estimators, max_depth=3, learning_rate=0.05, subsample=0.8 if bag > 1 else 1.0,
        random_state=SEED + i).fit(x, y), x) for i in range(bag)]
    return Forest(float(np.mean([f.base for f in forests])), forests[0].rate / bag, forests[0].features,
                  tuple(t for f in forests for t in f.trees))


def _transfer_fit(data: Dataset) -> tuple[float, float]:
    """Per-value and per-byte crossing cost: what the measured end-to-end time holds beyond the
    lane simulation over the measured region times, fitted by least squares, kept >= 0 (a
    negative cost per transfer would reward cutting)."""
    rows, residual = [], []
    for g in data.graphs:
        for p in g.plans:
            if p.region_us is not None and p.shape.hops:
                rows.append([p.shape.hops, p.shape.crossing_bytes])
                residual.append(p.total_us - lane_time(p.shape, p.region_us))
    if not rows:
        return 0.0, 0.0
    from scipy.optimize import nnls     # scikit-learn's own dependency

    scale = np.array([1.0, max(max(r[1] for r in rows), 1.0)])
    coef, _ = nnls(np.array(rows) / scale, np.maximum(np.array(residual), 0.0))
    return float(coef[0] / scale[0]), float(coef[1] / scale[1])


def _proposer(ensemble: Any, data: Dataset, estimators: int) -> Forest:
    """Per node: did the graph's best measured plan put it on the accelerator? Where every label
    is the same (here, often: every best plan all on the host) no tree can split: the forest is
    that class's smoothed log-odds alone."""
    xs: list[np.ndarray] = []
    ys: list[bool] = []
    for g in data.graphs:
        best = g.best().plan
        accel = {n for r in best.regions if r.device.value == "accel" for n in r.nodes}
        xs.append(g.nodes)
        ys.extend(name in accel for name in g.codes.names)
    x, y = np.concatenate(xs), np.array(ys, dtype=np.bool_)
    if y.all() or not y.any():
        p = (y.sum() + 1.0) / (len(y) + 2.0)
        return Forest(float(np.log(p / (1 - p))), 1.0, x.shape[1], ())
    model = ensemble.GradientBoostingClassifier(n_estimators=estimators // 2, max_depth=3, learning_rate=0.1,
                                                random_state=SEED)
    return from_sklearn(model.fit(x, y), x)


def _versions() -> tuple[tuple[str, str], ...]:
    import aot

    def v(p: str) -> str:
        try:
            return version(p)
        except Exception:  # noqa: BLE001 - a missing package is recorded, not an error
            return "none"

    return (("aot", aot.__version__), ("features", str(FEATURE_VERSION)), ("scikit-learn", v("scikit-learn")),
            ("numpy", v("numpy")), ("networkx", v("networkx")), ("iree-base-compiler", v("iree-base-compiler")))
