"""scripts/kernel_floor.py on a small product: the tuned set pinned on both host drivers, every
contender timed, the product's share of the dispatch time read from the profile."""

from __future__ import annotations

import math

import pytest

from aot.runtime import manifest as mf
from conftest import load_script

pytestmark = pytest.mark.device  # compiles with IREE


def test_a_product_is_tuned_pinned_on_both_drivers_and_timed_beside_onnxruntime(tmp_path, monkeypatch):
    floor = load_script("kernel_floor")
    monkeypatch.setattr(floor, "SCHEDULE", floor.timing.FAIR.with_counts(1, 3))
    chosen, times, share = floor.measure("64x48x40", tmp_path, rounds=1)
    assert chosen and "," not in chosen       # one region, one tuner's winner
    assert set(times) == {"aot local-task", "aot local-sync", "onnxruntime", "onnxruntime 1 thread"}
    assert all(math.isfinite(ms) and ms > 0 for ms in times.values()), times
    assert 0 < share <= 1
    for driver in ("local-task", "local-sync"):
        manifest = mf.read(mf.bundle_dir(tmp_path / "64x48x40" / driver / "bundle"))
        assert manifest.host_runtime is not None and manifest.host_runtime.driver == driver
