"""How close is close enough: the one tolerance rule for verification and tuning (numpy only, so
the tuner's probe process imports nothing else)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

VERIFY_RTOL = 1e-3


def within(actual: np.ndarray, expected: np.ndarray, rtol: float = VERIFY_RTOL) -> tuple[bool, float]:
    """Outputs match when no element differs by more than rtol times the reference's scale."""
    if actual.shape != expected.shape:
        return False, float("inf")
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    if np.isnan(a).any() != np.isnan(e).any():
        return False, float("nan")
    diff = float(np.nanmax(np.abs(a - e), initial=0.0))
    return diff <= rtol * max(1.0, float(np.nanmax(np.abs(e), initial=0.0))), diff


@dataclass(frozen=True, slots=True)
class OutputsCompared:
    ok: bool              # every output within tolerance
    max_abs_diff: float   # over all outputs
    worst: str            # the output to name in an error: a failing one first, then the largest difference
    worst_diff: float


def compare_outputs(names: Sequence[str], actual: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                    rtol: float = VERIFY_RTOL) -> OutputsCompared:
    """``within`` over a run's outputs, summed up for a build check's message."""
    results = [(n, *within(np.asarray(a), e, rtol)) for n, a, e in zip(names, actual, expected)]
    worst = max(results, key=lambda r: (not r[1], r[2]))
    return OutputsCompared(all(r[1] for r in results), max(r[2] for r in results), worst[0], worst[2])
