"""The one comparison (aot/checks/compare.py) and the paths that use it: NaN and signed infinities
must sit where the reference has them, element by element, in whichever output they appear."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from aot import cli
from aot.checks import compare as cmp
from aot.checks import golden, reference
from conftest import small_manifest

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("actual, expected", [
    ([1.0, NAN], [1.0, 2.0]),          # NaN where the reference is finite
    ([1.0, 2.0], [1.0, NAN]),          # a number where the reference is NaN
    ([1.0, INF], [1.0, 2.0]),
    ([1.0, -INF], [1.0, INF]),         # the sign of an infinity matters
    ([INF, 1.0], [NAN, 1.0]),
    ([[0.0, 0.0], [0.0, NAN]], [[0.0, 0.0], [0.0, 0.0]]),
    (np.array([1, 2], np.int64), np.array([1, 3], np.int64)),
])
def test_a_mismatch_fails_and_the_difference_is_never_nan(actual, expected):
    c = cmp.compare(np.asarray(actual, dtype=None), np.asarray(expected), rtol=1e9, atol=1e9)
    special = not np.isfinite(np.asarray(actual, np.float64)).all() or not np.isfinite(np.asarray(expected, np.float64)).all()
    if special:   # no tolerance covers a NaN/Inf mismatch
        assert not c.ok and c.max_abs_diff == INF and c.bad == 1 and "where the reference has" in c.reason
    else:         # a plain difference is a matter of tolerance
        assert c.ok
        assert not cmp.compare(actual, expected).ok
    assert not math.isnan(c.max_abs_diff)


def test_nan_and_infinities_where_the_reference_has_them_pass():
    a = np.array([NAN, INF, -INF, 1.0], np.float32)
    c = cmp.compare(a, a.copy())
    assert c.ok and c.max_abs_diff == 0.0 and c.reason == ""


def test_finite_values_obey_atol_plus_rtol_times_the_reference():
    e = np.array([100.0, 1.0])
    assert cmp.compare(e + [0.5, 0.0], e, rtol=1e-2).ok               # 0.5 <= 0.01 * 100
    assert not cmp.compare(e + [0.0, 0.5], e, rtol=1e-2).ok           # 0.5 > 0.01 * 1
    c = cmp.compare(e + [0.0, 0.5], e, rtol=1e-2, atol=0.5)
    assert c.ok and c.max_abs_diff == pytest.approx(0.5)
    bad = cmp.compare(e + [0.0, 0.5], e, atol=0.1)
    assert bad.bad == 1 and "[1]" in bad.reason and bad.max_abs_diff == pytest.approx(0.5)


def test_shapes_strings_and_complex_values():
    assert not cmp.compare(np.zeros((2, 3)), np.zeros((3, 2))).ok
    assert cmp.compare(np.zeros((2, 3)), np.zeros((3, 2))).max_abs_diff == INF
    assert cmp.compare(np.array(["a", "b"]), np.array(["a", "b"])).ok
    assert not cmp.compare(np.array(["a", "b"]), np.array(["a", "c"])).ok
    assert not cmp.compare(np.array([1 + 1j]), np.array([1 + complex(0, NAN)])).ok
    assert cmp.compare(np.array([1 + 1j]), np.array([1 + 1j])).ok


def test_the_narrow_floats_of_ml_dtypes_compare_as_numbers():
    import ml_dtypes

    a = np.array([1.0, 2.0, NAN], ml_dtypes.bfloat16)
    assert cmp.compare(a, np.array([1.0, 2.001, NAN], np.float32), atol=0.01).ok    # a tolerance, not equality
    assert not cmp.compare(a, np.array([1.0, 2.0, 3.0], np.float32), atol=10).ok
    assert cmp.within(a, a)[0] and not cmp.within(a, np.array([1.0, 2.0, INF], ml_dtypes.bfloat16))[0]


def test_verifications_tolerance_scales_with_the_reference_and_refuses_nan():
    e = np.array([1000.0, 0.0])
    assert cmp.within(np.array([1000.5, 0.5]), e, rtol=1e-3) == (True, pytest.approx(0.5))
    assert cmp.within(np.array([NAN, 0.0]), e) == (False, INF)
    assert cmp.within(np.array([1000.0, -INF]), e) == (False, INF)
    # The scale is the reference's largest FINITE magnitude: an Inf in it does not make everything pass.
    assert not cmp.within(np.array([INF, 5.0]), np.array([INF, 0.0]))[0]


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_a_nan_or_inf_in_any_output_fails_the_whole_run(bad):
    good = [np.ones(3), np.ones(2)]
    for broken in range(2):   # in the first output, then in the second
        got = [g.copy() for g in good]
        got[broken][1] = bad
        c = cmp.compare_outputs(["a", "b"], got, good)
        assert not c.ok and c.worst == "ab"[broken] and c.max_abs_diff == INF and c.reason
    assert cmp.compare_outputs(["a", "b"], good, good).ok
    assert not cmp.compare_outputs(["a", "b"], good[:1], good).ok     # a missing output


def test_assert_close_names_what_it_compared():
    cmp.assert_close(np.array([1.0, NAN]), np.array([1.0, NAN]))
    with pytest.raises(AssertionError, match="logits: nan at \\[1\\]"):
        cmp.assert_close(np.array([1.0, NAN]), np.array([1.0, 1.0]), atol=1.0, what="logits")


def test_the_benchmark_refuses_to_time_answers_that_differ_in_nan():
    from aot.tools import bench

    bench._same_answers([[np.array([1.0, INF])], [np.array([1.0, INF])]])
    with pytest.raises(AssertionError, match="disagree"):
        bench._same_answers([[np.array([1.0, NAN])], [np.array([1.0, 1.0])]])


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_aot_check_exits_1_when_the_bundle_answers_nan_or_inf(bad, tmp_path, monkeypatch, capsys):
    """The bundle's stub answers ``bad`` in one element; onnxruntime answers numbers. Before,
    `aot check` passed NaN (``nan > atol`` is False)."""
    manifest = small_manifest()

    class Stub:
        def __init__(self, *args: object) -> None:
            pass

        def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
            return (np.array([[0.5, bad]], np.float32),)

        def close(self) -> None:
            pass

    monkeypatch.setattr(golden.mf, "read", lambda bundle: manifest)
    monkeypatch.setattr(golden, "load_stub_class", lambda bundle: Stub)
    monkeypatch.setattr(reference, "outputs", lambda *a, **k: [np.array([[0.5, 0.25]], np.float32)])
    assert cli.main(["check", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "ERROR:" in err and "output 'y'" in err and "where the reference has 0.25" in err
    assert "Traceback" not in err
    # The same bundle answering numbers passes: the check can pass, so its failure means something.
    monkeypatch.setattr(Stub, "__call__", lambda self, *i: (np.array([[0.5, 0.25]], np.float32),))
    assert cli.main(["check", str(tmp_path)]) == 0


def test_a_check_result_with_nan_is_not_ok_and_its_error_is_not_nan():
    c = golden.compare((np.array([NAN]),), [np.array([1.0])], ["y"], atol=1.0)
    result = golden.CheckResult(Path("b"), ("r0:llvm-cpu",), c)
    assert not result.ok and result.max_abs_error == INF and result.failures() == ["output 'y': nan at [0] where the reference has 1.0"]


def test_the_check_allows_float32_rounding_relative_to_large_outputs_and_no_more():
    """A detector's boxes in pixels (~37) differ from onnxruntime's by float32 rounding, 1.5e-4 here
    (4e-6 relative, YOLOv8n's bundle): over the absolute 1e-4 alone, within 1e-4 + 1e-5 * |ref|."""
    ref = np.array([36.990814, 0.25], np.float32)
    close = np.array([36.990692, 0.25], np.float32)
    assert golden.compare((close,), [ref], ["boxes"])[0].comparison.ok
    assert not golden.compare((close,), [ref], ["boxes"], rtol=0.0)[0].comparison.ok
    # A real error on the same outputs (1e-3 relative, or 2e-4 on the small one) still fails, and NaN.
    for wrong in ([36.95382, 0.25], [36.990814, 0.2502], [NAN, 0.25]):
        assert not golden.compare((np.array(wrong, np.float32),), [ref], ["boxes"])[0].comparison.ok
