"""Gradient-boosted trees as plain JSON and their evaluation with numpy: what a build reads.

scikit-learn fits them (``aot learn train``, the ``[learn]`` extra); a build never imports it and
never unpickles anything. A forest's raw output is ``base + rate * sum(tree(x))``: a regressor's
prediction, or a binary classifier's log-odds. Each tree is five parallel arrays as sklearn's
``tree_`` holds them (``feature``, ``threshold``, ``left``, ``right``, ``value``; a leaf has
``left == -1``); ``x[feature] <= threshold`` goes left. sklearn compares in float32 (it casts
its input), so the evaluator does too: the same inputs take the same branches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from aot.errors import AotError


class ModelFileError(AotError):
    """A learned model file cannot be read, or is not one this aot evaluates."""


@dataclass(frozen=True, slots=True)
class Tree:
    feature: np.ndarray     # int, per node
    threshold: np.ndarray   # float64, per node
    left: np.ndarray        # int, per node; -1 at a leaf
    right: np.ndarray
    value: np.ndarray       # float64, per node (leaves' are used)

    def apply(self, x32: np.ndarray) -> np.ndarray:
        """Each row's leaf value (``x32``: the inputs cast to float32 and back)."""
        node = np.zeros(len(x32), dtype=np.int64)
        rows = np.arange(len(x32))
        for _ in range(len(self.feature)):     # depth <= node count: the loop always ends
            inner = self.left[node] >= 0
            if not inner.any():
                break
            go_left = x32[rows, np.maximum(self.feature[node], 0)] <= self.threshold[node]
            node = np.where(inner, np.where(go_left, self.left[node], self.right[node]), node)
        return self.value[node]


@dataclass(frozen=True, slots=True)
class Forest:
    base: float
    rate: float
    features: int            # the input width it was fitted on
    trees: tuple[Tree, ...]

    def raw(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.features:
            raise ModelFileError(f"the model expects {self.features} features per row, got shape {x.shape}",
                                 hint="the model file was trained by another aot version: retrain it")
        x32 = x.astype(np.float32).astype(np.float64)
        out = np.full(len(x), self.base, dtype=np.float64)
        for t in self.trees:
            out += self.rate * t.apply(x32)
        return out

    def probability(self, x: np.ndarray) -> np.ndarray:
        """A binary classifier's P(class 1)."""
        return 1.0 / (1.0 + np.exp(-self.raw(x)))

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "rate": self.rate, "features": self.features,
                "trees": [{"feature": t.feature.tolist(), "threshold": t.threshold.tolist(), "left": t.left.tolist(),
                           "right": t.right.tolist(), "value": t.value.tolist()} for t in self.trees]}

    @classmethod
    def from_json(cls, data: Any, where: str) -> "Forest":
        try:
            trees = []
            for t in data["trees"]:
                arrays = [np.asarray(t[k], dtype=dt) for k, dt in (("feature", np.int64), ("threshold", np.float64),
                                                                     ("left", np.int64), ("right", np.int64),
                                                                     ("value", np.float64))]
                n = len(arrays[0])
                if n == 0 or any(len(a) != n or a.ndim != 1 for a in arrays):
                    raise ValueError("a tree's arrays differ in length")
                feature, threshold, left, right, value = arrays
                inner = left >= 0
                if (np.any(left[inner] >= n) or np.any(right[inner] < 0) or np.any(right[inner] >= n)
                        or np.any(feature[inner] >= int(data["features"])) or np.any(feature[inner] < 0)
                        or not np.all(np.isfinite(value)) or np.any(np.isnan(threshold[inner]))):
                    raise ValueError("a tree points outside itself or holds a non-finite value")
                trees.append(Tree(feature, threshold, left, right, value))
            forest = cls(float(data["base"]), float(data["rate"]), int(data["features"]), tuple(trees))
        except (KeyError, TypeError, ValueError) as e:
            raise ModelFileError(f"{where}: malformed trees ({e})",
                                 hint="retrain it with `aot learn train`") from e
        if not (math.isfinite(forest.base) and math.isfinite(forest.rate)):
            raise ModelFileError(f"{where}: non-finite base or rate", hint="retrain it with `aot learn train`")
        return forest


def from_sklearn(model: Any, x_reference: np.ndarray) -> Forest:
    """A fitted ``GradientBoostingRegressor`` or binary ``GradientBoostingClassifier`` as a Forest.

    The constant term is what the raw output holds beyond the trees on one reference row (sklearn
    keeps it in its ``init_`` estimator, whose form differs per loss): public API only."""
    trees = []
    for est in model.estimators_[:, 0]:
        t = est.tree_
        trees.append(Tree(t.feature.astype(np.int64), t.threshold.astype(np.float64),
                          t.children_left.astype(np.int64), t.children_right.astype(np.int64),
                          t.value[:, 0, 0].astype(np.float64)))
    x0 = np.asarray(x_reference[:1], dtype=np.float64)
    raw = (model.decision_function(x0) if hasattr(model, "decision_function") else model.predict(x0))
    rate = float(model.learning_rate)
    partial = Forest(0.0, rate, x0.shape[1], tuple(trees)).raw(x0)
    return Forest(float(np.ravel(raw)[0] - partial[0]), rate, x0.shape[1], tuple(trees))
