"""How close is close enough: the one comparison for every check, tool and test helper (numpy
only, so the tuner's probe process imports nothing else).

``compare`` is the rule: same shape; NaN exactly where the reference has NaN; each infinity
where the reference has the same signed infinity; every other element within
``atol + rtol * |expected|``. A NaN or an infinity where the reference is finite fails, in
whichever output it appears, and the largest difference is then infinite, so a caller that only
reads ``max_abs_diff`` cannot pass it either (``nan > tol`` is False; ``inf > tol`` is True).
Nothing else in aot/ or tests/ compares arrays numerically (tests/test_layout.py holds to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

VERIFY_RTOL = 1e-3


@dataclass(frozen=True, slots=True)
class Comparison:
    """One output against its reference."""

    ok: bool
    max_abs_diff: float    # over elements finite on both sides; inf when shapes or NaN/Inf positions differ
    max_rel_diff: float    # the same, relative to |expected| (floored at 1e-12)
    bad: int               # elements out of tolerance or whose NaN/Inf does not match
    reason: str            # why not ok, naming the first bad element; "" when ok

    def describe(self) -> str:
        return self.reason or f"max abs diff {self.max_abs_diff:.3g}, max rel diff {self.max_rel_diff:.3g}"


def compare(actual: object, expected: object, *, rtol: float = 0.0, atol: float = 0.0) -> Comparison:
    """``actual`` against the reference ``expected``, element by element (the rule above).
    Integer, bool and narrow-float (ml_dtypes) arrays compare as float64; anything that is not a
    number (strings) must be equal."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape:
        return Comparison(False, float("inf"), float("inf"), max(a.size, e.size),
                          f"shape {list(a.shape)} where the reference has {list(e.shape)}")
    if np.iscomplexobj(a) or np.iscomplexobj(e):   # real and imaginary parts, each by the same rule
        a = np.stack([a.real, a.imag]) if np.iscomplexobj(a) else np.stack([a, np.zeros_like(a)])
        e = np.stack([e.real, e.imag]) if np.iscomplexobj(e) else np.stack([e, np.zeros_like(e)])
    fa, fe = _floats(a), _floats(e)
    if fa is None or fe is None:
        same = np.asarray(a == e)
        bad = int(same.size - np.count_nonzero(same))
        return Comparison(not bad, 0.0 if not bad else float("inf"), 0.0 if not bad else float("inf"), bad,
                          _first(~same, a, e, "where") if bad else "")
    a, e = fa, fe
    a_fin, e_fin = np.isfinite(a), np.isfinite(e)
    # Special values must match exactly: NaN with NaN, +inf with +inf, -inf with -inf.
    special = ~(a_fin & e_fin)
    mismatch = special & ~((np.isnan(a) & np.isnan(e)) | (a == e))
    both = a_fin & e_fin
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(both, np.abs(a - e), 0.0)
        rel = diff / np.maximum(np.abs(np.where(both, e, 0.0)), 1e-12)
        over = both & (diff > atol + rtol * np.abs(np.where(both, e, 0.0)))
    n_mismatch, n_over = int(np.count_nonzero(mismatch)), int(np.count_nonzero(over))
    if n_mismatch:
        return Comparison(False, float("inf"), float("inf"), n_mismatch + n_over, _first(mismatch, a, e, "where"))
    max_abs, max_rel = float(diff.max(initial=0.0)), float(rel.max(initial=0.0))
    if n_over:
        return Comparison(False, max_abs, max_rel, n_over,
                          f"{n_over} element(s) beyond atol {atol:g} + rtol {rtol:g} * |expected|, max abs diff "
                          f"{max_abs:.3g}; first {_first(over, a, e, 'where')}")
    return Comparison(True, max_abs, max_rel, 0, "")


def within(actual: np.ndarray, expected: np.ndarray, rtol: float = VERIFY_RTOL) -> tuple[bool, float]:
    """Verification's tolerance (``verified``) as (ok, max abs diff)."""
    c = verified(actual, expected, rtol)
    return c.ok, c.max_abs_diff


def verified(actual: object, expected: object, rtol: float = VERIFY_RTOL) -> Comparison:
    """Verification's tolerance: every element within ``rtol`` times the reference's scale (its
    largest finite magnitude, at least 1), NaN/Inf matching as ``compare`` says."""
    e = np.asarray(expected)
    fe = _floats(e.real if np.iscomplexobj(e) else e)
    scale = 0.0 if fe is None else float(np.abs(fe[np.isfinite(fe)]).max(initial=0.0))
    return compare(actual, e, atol=rtol * max(1.0, scale))


@dataclass(frozen=True, slots=True)
class OutputsCompared:
    ok: bool              # every output within tolerance
    max_abs_diff: float   # over all outputs (inf when any output's NaN/Inf or shape differs)
    worst: str            # the output to name in an error: a failing one first, then the largest difference
    worst_diff: float
    reason: str = ""      # why the worst output fails; "" when all pass


def compare_outputs(names: Sequence[str], actual: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                    rtol: float = VERIFY_RTOL) -> OutputsCompared:
    """``verified`` over a run's outputs, summed up for a build check's message. A missing or
    extra output fails too."""
    if not (len(names) == len(actual) == len(expected)):
        return OutputsCompared(False, float("inf"), "<outputs>", float("inf"),
                               f"{len(actual)} outputs where the reference has {len(expected)}")
    results = [(n, verified(a, e, rtol)) for n, a, e in zip(names, actual, expected)]
    if not results:
        return OutputsCompared(True, 0.0, "", 0.0)
    name, worst = max(results, key=lambda r: (not r[1].ok, r[1].max_abs_diff))
    return OutputsCompared(all(c.ok for _, c in results), max(c.max_abs_diff for _, c in results), name,
                           worst.max_abs_diff, "" if worst.ok else f"output {name!r}: {worst.reason}")


def _floats(arr: np.ndarray) -> np.ndarray | None:
    """``arr`` as float64, or None for values that are not numbers (strings, objects). The narrow
    floats of ml_dtypes (bfloat16, float8) are numpy kind 'V' but cast."""
    if arr.dtype.kind in "biuf":
        return arr.astype(np.float64)
    if arr.dtype.kind == "V":
        try:
            return arr.astype(np.float64)
        except (TypeError, ValueError):
            return None
    return None


def _first(mask: np.ndarray, a: np.ndarray, e: np.ndarray, verb: str) -> str:
    """The first element ``mask`` marks, as 'got X at [i, j] where the reference has Y'."""
    pos = tuple(int(i) for i in np.argwhere(mask)[0]) if mask.ndim else ()
    return f"{a[pos]} at {list(pos)} {verb} the reference has {e[pos]}"


def assert_close(actual: object, expected: object, *, rtol: float = 0.0, atol: float = 0.0, what: str = "") -> Comparison:
    """``compare`` for tests and scripts: raises AssertionError with the reason (naming ``what``)."""
    c = compare(actual, expected, rtol=rtol, atol=atol)
    if not c.ok:
        raise AssertionError(f"{what + ': ' if what else ''}{c.reason}")
    return c
