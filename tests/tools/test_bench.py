"""The benchmark command runs its three contenders and prints both ratios (speed is not asserted)."""

from __future__ import annotations

import itertools
import re
import time
from collections import Counter

import pytest

from conftest import run_aot

from aot.tools.bench import interleaved


@pytest.mark.device  # compiles with IREE and runs on a real device
def test_bench_prints_medians_and_ratios(example_model, tmp_path):
    out = run_aot("bench", str(example_model), "-o", str(tmp_path / "bench"), "--iterations", "5").stdout
    assert re.search(r"ratio bundle/whole:\s+\d+\.\d+", out)
    assert re.search(r"ratio bundle/onnxruntime:\s+\d+\.\d+", out)
    assert re.search(r"runtime overhead per region call: -?\d+\.\d+ us", out)
    assert out.count("median") == 4 and "2 region(s)" in out


def test_interleaving_lets_every_contender_follow_every_other_equally_often():
    calls: list[str] = []
    contenders = [(name, lambda name=name: calls.append(name)) for name in "abc"]
    times = interleaved(contenders, warmup=0, iterations=12, settle_ms=0)
    assert {k: len(v) for k, v in times.items()} == {"a": 12, "b": 12, "c": 12}
    assert calls[:2] == ["a", "a"] and len(calls) == 2 * 3 * 12   # one settling call before each timed one
    calls = calls[::2]
    turns = [calls[i:i + 3] for i in range(0, len(calls), 3)]
    after = Counter((x, y) for turn in turns for x, y in zip(turn, turn[1:]))
    assert set(after.values()) == {4} and len(after) == 6   # each ordered pair, equally often


def test_each_timed_call_follows_settling_calls_of_the_same_contender():
    calls: list[str] = []
    slow = lambda: (calls.append("slow"), time.sleep(0.004))  # noqa: E731
    fast = lambda: calls.append("fast")  # noqa: E731
    interleaved([("slow", slow), ("fast", fast)], warmup=0, iterations=2, settle_ms=3)
    runs = [(name, len(list(group))) for name, group in itertools.groupby(calls)]
    assert [n for n, _ in runs] == ["slow", "fast", "slow"]     # turns (slow, fast), (fast, slow)
    assert all(count >= 2 for _, count in runs)                 # settled: at least one untimed call
    assert dict(runs)["fast"] > 10                               # ... and at least settle_ms of them
