"""How close is close enough: the one tolerance rule for verification and tuning (numpy only, so
the tuner's probe process imports nothing else)."""

from __future__ import annotations

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
