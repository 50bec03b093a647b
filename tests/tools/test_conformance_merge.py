"""`aot conformance --filter F --merge`: a re-run of some cases replaces just those cases in the
last full run's results, and the results say which filters were re-run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aot.tools import conformance


def _run(target, statuses):
    return {"target": target, "total": len(statuses), "counts": {},
            "cases": [{"name": n, "status": s, "detail": "", "seconds": 0.1} for n, s in statuses.items()]}


def test_a_merge_replaces_the_rerun_cases_and_recounts():
    full = _run("llvm-cpu", {"test_a": "pass", "test_b": "compile error", "test_c": "wrong result"})
    fresh = _run("llvm-cpu", {"test_b": "pass"})
    merged = conformance.merge(full, fresh, "^test_b")
    assert [c["status"] for c in merged["cases"]] == ["pass", "pass", "wrong result"]
    assert merged["counts"]["pass"] == 2 and merged["counts"]["compile error"] == 0 and merged["total"] == 3
    again = conformance.merge(merged, _run("llvm-cpu", {"test_c": "pass"}), "^test_c")
    assert again["reruns"] == ["^test_b", "^test_c"] and again["counts"]["pass"] == 3


def test_results_of_another_target_are_not_merged():
    with pytest.raises(ValueError, match="vulkan-spirv"):
        conformance.merge(_run("llvm-cpu", {"test_a": "pass"}), _run("vulkan-spirv", {"test_a": "pass"}), "a")


def test_merge_without_a_filter_is_a_usage_error(tmp_path):
    out = tmp_path / "conformance-llvm-cpu.json"
    out.write_text(json.dumps(_run("llvm-cpu", {"test_a": "pass"})))
    r = subprocess.run([sys.executable, "-m", "aot.cli", "conformance", "--merge", "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "--merge needs --filter" in r.stderr and "Traceback" not in r.stderr
    assert json.loads(out.read_text())["cases"][0]["name"] == "test_a"   # nothing lost
