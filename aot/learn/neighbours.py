"""What similar training graphs measured: a prior on a plan's flag sets and host runtime.

The cost model's trees see a plan's flags as features beside the graph's, and with a dozen real
graphs they learn little of how the two interact: held out, they picked flag sets that won on
other graphs and ran several times slower than the best on the graph at hand (docs/learned.md). The
measured effects themselves carry that interaction: on each real training graph, how much each
whole-model flag set changed the time against the default flags, log(t / t_default), and how much
the local-sync runtime changed it against local-task with the same flags. For a new graph, each
training graph's effects count by how alike the two graphs are (their FLOP shares per op class,
which is what the flags act on, and their size), in a Gaussian kernel: a graph of convolutions
learns from graphs of convolutions. A plan's prior is its regions' effects weighted by their
share of the FLOPs, plus its runtime's; the model ranks by prediction x exp(risk) x exp(prior)
(``LearnedModel.ranking_us``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, TypeVar

import numpy as np

from aot.learn.features import GraphCodes, local_sync
from aot.learn.geometry import OpClass
from aot.lower.flags import flag_key
from aot.partition.plan import Plan

# The kernel's width in signature units (a share of FLOPs moves 0..1, the size a third per decade).
# Held out on the host database, widths of 1 and 3 ranked alike and 0.3 (nearest graph alone)
# worse (docs/learned.md).
BANDWIDTH = 1.0
SIGNATURE_DIM = len(OpClass) + 1


def signature(codes: GraphCodes) -> np.ndarray:
    """Each op class's share of the graph's FLOPs, then log10(FLOPs) / 3."""
    total = max(float(codes.flops.sum()), 1.0)
    shares = [float(codes.flops[codes.op_class == c].sum()) / total for c in OpClass]
    return np.array([*shares, math.log10(total) / 3.0])


@dataclass(frozen=True, slots=True)
class GraphEffects:
    """One training graph's measured effects, as the model file keeps them."""

    signature: tuple[float, ...]
    flags: tuple[tuple[tuple[str, ...], float], ...]   # flag_key -> log(t / t_default), whole model
    runtime: float | None                              # log(t local-sync / t local-task), or unmeasured

    def to_json(self) -> dict[str, Any]:
        return {"signature": list(self.signature), "flags": [[list(k), e] for k, e in self.flags],
                "runtime": self.runtime}

    @classmethod
    def from_json(cls, data: Any) -> "GraphEffects":
        """A malformed entry is a ValueError (``LearnedModel.from_json`` names the file)."""
        sig = tuple(finite(x, "neighbour signature") for x in data["signature"])
        if len(sig) != SIGNATURE_DIM:
            raise ValueError(f"neighbour signature {data['signature']!r} is not {SIGNATURE_DIM} numbers")
        flags = flag_rows(data["flags"], "neighbour flag effect", lambda e: finite(e, "neighbour flag effect"))
        runtime = data["runtime"]
        return cls(sig, flags, None if runtime is None else finite(runtime, "neighbour runtime effect"))


V = TypeVar("V")


def flag_rows(rows: Any, what: str, value: Callable[[Any], V]) -> tuple[tuple[tuple[str, ...], V], ...]:
    """``[[[flag, ...], value], ...]`` as a model file keeps a per-flag-set table (the tuner's wins,
    the risks, a neighbour's effects); ``value`` checks each value. A malformed row is a
    ValueError naming ``what`` (``LearnedModel.from_json`` names the file)."""
    out = []
    for row in rows:
        if not isinstance(row, list) or len(row) != 2 or not isinstance(row[0], list) \
                or not all(isinstance(f, str) for f in row[0]):
            raise ValueError(f"{what} {row!r} is not [[flag, ...], value]")
        out.append((tuple(row[0]), value(row[1])))
    return tuple(out)


def finite(value: Any, what: str) -> float:
    """A JSON number that is finite (not a bool, a string or NaN/Inf), else a ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} {value!r} is not a finite number")
    return float(value)


@dataclass(frozen=True, slots=True)
class Prior:
    """The kernel-weighted effects for one graph; ``of(plan)`` is a plan's prior in log time."""

    flops: Mapping[str, float]                     # node -> its share of the graph's FLOPs
    flag_effect: Mapping[tuple[str, ...], float]   # flag_key -> weighted mean log(t / t_default)
    runtime_effect: float                          # weighted mean log(t local-sync / t local-task)

    def of(self, plan: Plan) -> float:
        prior = local_sync(plan) * self.runtime_effect
        for r in plan.regions:
            if r.flags is not None:
                share = sum(self.flops.get(n, 0.0) for n in r.nodes)
                prior += share * self.flag_effect.get(flag_key(r.flags), 0.0)
        return prior


def prior(neighbours: Iterable[GraphEffects], codes: GraphCodes, bandwidth: float = BANDWIDTH) -> Prior:
    """Each effect averaged over the neighbours that measured it, weighted by exp(-d^2 / h^2)."""
    me = signature(codes)
    flag_sums: dict[tuple[str, ...], list[float]] = {}
    runtime = [0.0, 0.0]
    for n in neighbours:
        w = math.exp(-float(np.sum((np.array(n.signature) - me) ** 2)) / bandwidth ** 2)
        for k, e in n.flags:
            s = flag_sums.setdefault(k, [0.0, 0.0])
            s[0] += w * e
            s[1] += w
        if n.runtime is not None:
            runtime[0] += w * n.runtime
            runtime[1] += w
    mean = {k: s[0] / s[1] for k, s in flag_sums.items() if s[1] > 0}
    total = max(float(codes.flops.sum()), 1.0)
    shares = {n: float(f) / total for n, f in zip(codes.names, codes.flops)}
    return Prior(shares, mean, runtime[0] / runtime[1] if runtime[1] > 0 else 0.0)
