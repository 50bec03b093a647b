"""The learned cost model and proposer as a build reads them: one JSON file, numpy only.

``Mode.REGIONS``: the trees predict each region's time on its device (log microseconds) from its
features; a plan's time is the lane simulation over those times (``runtime/lanes.finish_time``,
the runtime's own rule for what overlaps) plus a fitted cost per value crossing devices and per
byte crossing. ``Mode.PLAN``: the trees predict the plan's end-to-end time directly from the
plan's features; ``aot learn train`` falls back to it when the database holds too few region rows
to fit the first. The proposer is a second forest: a node's log-odds of running best on the
accelerator. Beside them, how often each whole-model flag set won on the training graphs
(``tuner_wins``: which sets ``--tune-top`` times first, learn/narrow.py), each set's downside
(``flag_risk``) and each real training graph's measured flag and runtime effects (``neighbours``:
the prior a similar graph's plans are ranked with, learn/neighbours.py). The file carries the
device fingerprint its timings came from, its training set's digest and the versions that made
it; a build on other devices does not use it (``mismatch``).
"""

from __future__ import annotations

import enum
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from aot.learn.features import FEATURE_VERSION, WIDTHS, GraphCodes, PlanShape, lane_time
from aot.learn.neighbours import GraphEffects, finite, flag_rows, prior
from aot.learn.trees import Forest, ModelFileError
from aot.lower.flags import flag_key
from aot.partition.plan import Plan

MODEL_FORMAT = "aot-learned-model"
MODEL_VERSION = 1


@dataclass(frozen=True, slots=True)
class ChoiceWeights:
    """How much, in log time, two measured terms weigh beside the predicted time when the model
    chooses among plans (``LearnedModel.ranking_us``): a flag set's downside in training
    (``flag_risk``) and what similar training graphs measured for a plan's flags and runtime
    (``neighbours.Prior``). Set when the model is trained and kept in its file."""
    risk: float
    prior: float

    def __post_init__(self) -> None:
        if not all(math.isfinite(w) and w >= 0.0 for w in (self.risk, self.prior)):
            raise ValueError(f"choice weights must be finite and >= 0, not {self.risk}, {self.prior}")


# What `aot learn train` gives a model: the prediction alone. On the side-by-side labels of two
# hosts (a Xeon's, stop 50; an EPYC's, stop 54) both terms at 0 had the lowest top-1 regret of a
# 3 x 3 sweep (8.0% and 15.4%, against 16.7% and 20.4% with both at 1), at a tau within 0.04; on
# stop 46's earlier labels the prior had helped by 3 points (docs/learned.md).
PREDICTION_ALONE = ChoiceWeights(0.0, 0.0)
# A model file written before the weights were kept in it was trained to be used with both at 1.
BEFORE_WEIGHTS = ChoiceWeights(1.0, 1.0)
# Trained defaults, one per device fingerprint (``key.device_fingerprint``), each shipped only when
# its evaluation justifies it (docs/learned.md); a build on other devices finds none.
SHIPPED = Path(__file__).with_name("shipped")


def shipped_path(fingerprint: str) -> Path:
    """Where the default model for ``fingerprint``'s devices ships (whether or not one does)."""
    return SHIPPED / (re.sub(r"[^A-Za-z0-9.-]+", "_", fingerprint) + ".json")


def shipped_model(fingerprint: str) -> Path | None:
    """The default model trained on ``fingerprint``'s devices, or None when none ships for them."""
    path = shipped_path(fingerprint)
    return path if path.is_file() else None


class Mode(enum.Enum):
    REGIONS = "regions"   # region times per device, combined through the lane simulation
    PLAN = "plan"         # the plan's time directly


@dataclass(frozen=True, slots=True)
class LearnedModel:
    mode: Mode
    cost: Forest                      # features -> log(1 + microseconds)
    hop_us: float                     # REGIONS: per value crossing devices
    us_per_byte: float                # REGIONS: per byte crossing devices
    policy: Forest | None             # node features -> log-odds of "accelerator" (None: no proposer)
    fingerprint: str                  # key.device_fingerprint of the training rows
    training_set: str                 # digest of the rows it was fitted on
    versions: tuple[tuple[str, str], ...]
    summary: tuple[tuple[str, str], ...] = ()   # what it was trained on, for people
    # flag_key of a whole-model flag set -> how many training graphs it was fastest on
    tuner_wins: tuple[tuple[tuple[str, ...], int], ...] = ()
    # flag_key -> its downside over the training graphs: the root mean square of how much slower
    # than the default flags it ran, in log time, where it was slower (0 where it never was).
    flag_risk: tuple[tuple[tuple[str, ...], float], ...] = ()
    # each real training graph's measured flag-set and runtime effects (neighbours.py)
    neighbours: tuple[GraphEffects, ...] = ()
    weights: ChoiceWeights = PREDICTION_ALONE
    # The features it was fitted on: an older version reads the leading columns of today's vectors.
    feature_version: int = FEATURE_VERSION

    def wins(self, key: tuple[str, ...]) -> int:
        return dict(self.tuner_wins).get(key, 0)

    def risk(self, plan: Plan, risks: Mapping[tuple[str, ...], float] | None = None) -> float:
        """The largest downside of the flag sets ``plan`` pins on its regions (0: none pinned,
        or sets that never lost to the default in training). ``risks``: ``dict(flag_risk)``,
        made once by a caller that prices many plans."""
        risks = dict(self.flag_risk) if risks is None else risks
        return max((risks.get(flag_key(r.flags), 0.0) for r in plan.regions if r.flags is not None), default=0.0)

    def ranking_us(self, plans: Sequence[Plan], predicted_us: Sequence[float] | np.ndarray,
                   codes: GraphCodes | None = None) -> np.ndarray:
        """The predicted times, each scaled by exp(weights.risk x its plan's risk) and, given the
        graph's ``codes``, by exp(weights.prior x what similar training graphs measured for its
        flags and runtime): how the model chooses among plans. The risk term is there for a flag
        set that won on one training graph and ran 17x slower than the default on another (the
        data-tiled convolution); a term weighed 0 is not computed (docs/learned.md)."""
        log_scale = np.zeros(len(plans))
        if self.weights.risk:
            risks = dict(self.flag_risk)
            log_scale += self.weights.risk * np.array([self.risk(p, risks) for p in plans])
        if self.weights.prior and codes is not None and self.neighbours:
            near = prior(self.neighbours, codes)
            log_scale += self.weights.prior * np.array([near.of(p) for p in plans])
        return np.asarray(predicted_us, dtype=float) * np.exp(log_scale)

    def plans_us(self, shapes: Sequence[PlanShape], measured: Sequence[Mapping[int, float]] = ()) -> np.ndarray:
        """Predicted end-to-end microseconds of each plan. ``measured`` (REGIONS mode): per plan,
        region position -> a time measured for that region, used in place of its prediction."""
        if not shapes:
            return np.zeros(0)
        if self.mode is Mode.PLAN:
            return np.expm1(self.cost.raw(np.stack([s.plan for s in shapes])[:, :self.cost.features]))
        stacked = np.concatenate([s.regions for s in shapes])
        times = np.maximum(np.expm1(self.cost.raw(stacked[:, :self.cost.features])), 0.0)
        out, at = [], 0
        for i, s in enumerate(shapes):
            n = len(s.names)
            mine = times[at:at + n].copy()
            for j, us in (measured[i] if i < len(measured) else {}).items():
                mine[j] = us
            out.append(lane_time(s, mine) + self.hop_us * s.hops + self.us_per_byte * s.crossing_bytes)
            at += n
        return np.array(out)

    def plan_us(self, shape: PlanShape, measured: Mapping[int, float] | None = None) -> float:
        return float(self.plans_us([shape], [measured or {}])[0])

    def accel_probability(self, nodes: np.ndarray) -> np.ndarray:
        if self.policy is None:
            raise ModelFileError("this learned model has no proposer", hint="retrain it with `aot learn train`")
        return self.policy.probability(nodes[:, :self.policy.features])

    def mismatch(self, fingerprint: str) -> str | None:
        """Why this model does not apply to ``fingerprint``'s devices, or None when it does."""
        if fingerprint != self.fingerprint:
            return f"it was trained on {self.fingerprint!r}, this build targets {fingerprint!r}"
        return None

    def to_json(self) -> dict[str, Any]:
        return {"format": MODEL_FORMAT, "model_version": MODEL_VERSION, "feature_version": self.feature_version,
                "mode": self.mode.value, "fingerprint": self.fingerprint, "training_set": self.training_set,
                "versions": dict(self.versions), "summary": dict(self.summary),
                "transfer": {"hop_us": self.hop_us, "us_per_byte": self.us_per_byte},
                "cost": self.cost.to_json(), "policy": self.policy.to_json() if self.policy else None,
                "tuner_wins": [[list(k), n] for k, n in self.tuner_wins],
                "flag_risk": [[list(k), r] for k, r in self.flag_risk],
                "neighbours": [n.to_json() for n in self.neighbours],
                "choice_weights": {"risk": self.weights.risk, "prior": self.weights.prior}}

    @classmethod
    def from_json(cls, data: Any, where: str) -> "LearnedModel":
        if not isinstance(data, dict) or data.get("format") != MODEL_FORMAT:
            raise ModelFileError(f"{where} is not an aot learned model",
                                 hint="give the file `aot learn train` wrote, or retrain")
        version = data.get("feature_version")
        if data.get("model_version") != MODEL_VERSION or version not in WIDTHS:
            raise ModelFileError(f"{where} has model/feature version {data.get('model_version')}/{version}; this "
                                 f"aot reads {MODEL_VERSION}/{'-'.join(map(str, (min(WIDTHS), max(WIDTHS))))}",
                                 hint="retrain it with `aot learn train`")
        try:
            mode = Mode(data["mode"])
            cost = Forest.from_json(data["cost"], where)
            policy = Forest.from_json(data["policy"], where) if data.get("policy") else None
            widths = WIDTHS[version]
            width = widths.region if mode is Mode.REGIONS else widths.plan
            if cost.features != width or (policy is not None and policy.features != widths.node):
                raise ValueError(f"feature widths {cost.features}/{policy and policy.features} do not match "
                                 f"version {version}'s {width}/{widths.node}")
            hop, per_byte = float(data["transfer"]["hop_us"]), float(data["transfer"]["us_per_byte"])
            if not (math.isfinite(hop) and math.isfinite(per_byte)):
                raise ValueError("non-finite transfer cost")
            return cls(mode, cost, hop, per_byte, policy, str(data["fingerprint"]), str(data["training_set"]),
                       tuple((str(k), str(v)) for k, v in dict(data["versions"]).items()),
                       tuple((str(k), str(v)) for k, v in dict(data.get("summary") or {}).items()),
                       _tuner_wins(data.get("tuner_wins") or []), _flag_risk(data.get("flag_risk") or []),
                       tuple(GraphEffects.from_json(n) for n in data.get("neighbours") or []),
                       _weights(data.get("choice_weights")), version)
        except ModelFileError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise ModelFileError(f"{where}: malformed learned model ({e})",
                                 hint="retrain it with `aot learn train`") from e

    def save(self, path: Path) -> Path:
        """Atomically: a trainer killed while writing leaves the previous model file as it was."""
        from aot.runtime.atomic import write_atomic

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(Path(path), (json.dumps(self.to_json(), sort_keys=True) + "\n").encode())

    @classmethod
    def load(cls, path: Path) -> "LearnedModel":
        where = repr(str(path))
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise ModelFileError(f"cannot read learned model {where}: {e.strerror or e}",
                                 hint="train one with `aot learn train`, or leave --cost-model out") from e
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ModelFileError(f"learned model {where} is not JSON ({e})",
                                 hint="the file is damaged: retrain it with `aot learn train`") from e
        return cls.from_json(data, where)


def _flag_risk(rows: Any) -> tuple[tuple[tuple[str, ...], float], ...]:
    """[[flags, risk], ...] as the model keeps it (a model trained before it has none)."""
    def risk(value: Any) -> float:
        if finite(value, "flag risk") < 0:
            raise ValueError(f"flag risk {value!r} is negative")
        return float(value)

    return flag_rows(rows, "flag_risk row", risk)


def _tuner_wins(rows: Any) -> tuple[tuple[tuple[str, ...], int], ...]:
    """[[flags, count], ...] as the model keeps it."""
    def count(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"tuner_wins count {value!r} is not a whole number >= 0")
        return value

    return flag_rows(rows, "tuner_wins row", count)


def _weights(value: Any) -> ChoiceWeights:
    if value is None:
        return BEFORE_WEIGHTS
    return ChoiceWeights(finite(value["risk"], "choice weight"), finite(value["prior"], "choice weight"))
