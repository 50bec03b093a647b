"""The benchmark command runs its three contenders and prints both ratios (speed is not asserted)."""

from __future__ import annotations

import re

import pytest

from conftest import run_aot


@pytest.mark.device  # compiles with IREE and runs on a real device
def test_bench_prints_medians_and_ratios(example_model, tmp_path):
    out = run_aot("bench", str(example_model), "-o", str(tmp_path / "bench"), "--iterations", "5").stdout
    assert re.search(r"ratio bundle/whole:\s+\d+\.\d+", out)
    assert re.search(r"ratio bundle/onnxruntime:\s+\d+\.\d+", out)
    assert re.search(r"runtime overhead per region call: -?\d+\.\d+ us", out)
    assert out.count("median") == 4 and "2 region(s)" in out
