"""scripts/gpu_torch_bench.py's own path, run here on the CPU (a dry run): a bundle and eager
PyTorch from the same seeded module agree with the golden outputs, and every contender is timed.
On a GPU machine the same script times CUDA bundles (docs/performance.md)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from aot.options import BuildOptions
from aot.api import build
from conftest import load_script

pytestmark = pytest.mark.device  # compiles with IREE

ROOT = Path(__file__).resolve().parents[1]


def test_a_dry_run_on_the_cpu_checks_and_times_the_bundle_beside_eager_pytorch(tmp_path, monkeypatch):
    pytest.importorskip("torch", reason="the torch extra is not installed")
    monkeypatch.syspath_prepend(str(ROOT))
    bench = load_script("gpu_torch_bench")
    build("tests.torch_models:encoder", tmp_path / "encoder",
          BuildOptions(accel=None, example_inputs=(("tokens", (1, 16), "int64"),)))
    bench.main(["reference", str(tmp_path), "encoder"])
    monkeypatch.setattr(bench, "SCHEDULE", bench.timing.Schedule(warmup=1, iterations=5))
    out = tmp_path / "results.json"
    bench.main(["run", str(tmp_path), "encoder", "--device", "cpu", "--compile", "--tf32", "--json", str(out)])
    (row,) = json.loads(out.read_text())["results"]
    assert set(row["median_ms"]) == {"aot encoder", "torch eager", "torch eager (TF32)",
                                     "torch eager, tensors on the GPU"}
    assert all(math.isfinite(ms) and ms > 0 for ms in row["median_ms"].values())
    assert row["max_abs_error"]["aot encoder"] < 1e-5 and row["max_abs_error"]["torch eager"] == 0.0


def test_the_error_is_infinite_on_nan_or_a_wrong_shape():
    bench = load_script("gpu_torch_bench")
    good = [np.ones((2, 3), np.float32)]
    assert bench._error(good, good) == 0.0
    assert bench._error([np.full((2, 3), np.nan, np.float32)], good) == math.inf
    assert bench._error([np.ones((3, 2), np.float32)], good) == math.inf
    assert bench._error([good[0] + 0.5], good) == 0.5
