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


@pytest.mark.device  # runs a compiled bundle
def test_bench_harness_times_each_contender_in_process_and_alone(host_bundle):
    from aot.tools import harness_check

    result = harness_check.check(host_bundle.bundle.path, iterations=3, warmup=1)
    assert [n for n, _ in result.in_process_ms] == [n for n, _ in result.alone_ms] == ["bundle", "onnxruntime"]
    for name, ms in (*result.in_process_ms, *result.alone_ms):
        assert 0 < ms < 10_000, (name, ms)       # NaN fails both comparisons
    assert "deviation" in result.text() and result.deviation("bundle") > -1


def test_the_whole_model_contender_stays_one_module_under_segment_tuning(example_model, tmp_path, monkeypatch):
    # `aot bench --tune --tune-segments 4` on CREPE kept a mixed plan for the whole-model build too,
    # and the bare call (one module's) failed on its several regions.
    from aot.options import BuildOptions
    from aot.tools import bench

    built: dict[str, BuildOptions] = {}

    class Stop(Exception):
        pass

    def build_planned(planned, out, options):
        built[out.name] = options
        if out.name == "whole":
            raise Stop
        return None

    monkeypatch.setattr(bench, "build_planned", build_planned)
    options = BuildOptions(tune=True, tune_segments=4)
    with pytest.raises(Stop):
        bench.run(example_model, tmp_path, options)
    assert built["partitioned"].tune_segments == 4
    assert built["whole"].tune_segments == 0 and built["whole"].tune
    assert bench.one_module(options) == BuildOptions(tune=True)
