"""`aot build --tune` and `aot tune` on real compiles and real devices (the CPU, lavapipe):
the fastest correct candidate wins and is what ships, a second run is free, and a Dask cluster
builds the same bytes as the local pool."""

from __future__ import annotations

import dataclasses
import json

import pytest

from aot import runtime
from aot.options import BuildOptions
from aot.pipeline import build
from aot import record
from aot.runtime import manifest as mf
from aot.runtime.target import Target
from aot.tune.search import MIN_GAIN
from aot.workspace import SHARED_CACHE_ENV
from conftest import golden, run_aot

pytestmark = pytest.mark.device   # tests/conftest.py runs this module first: one worker builds `tuned`
FAST = BuildOptions(accel=None, tune=True, tune_repeats=5)


@pytest.fixture(scope="module", autouse=True)
def own_tuning_cache(tmp_path_factory):
    """This module's builds keep their tuning records to themselves. The session's shared cache
    (AOT_CACHE_DIR) holds tuning records too, and under xdist the other worker tunes the same
    example model into it: a rebuild here then read that worker's winner, not this one's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SHARED_CACHE_ENV, str(tmp_path_factory.mktemp("tuning-cache")))
        yield


@pytest.fixture(scope="module")
def tuned(own_tuning_cache, example_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("tuned") / "tiny_cnn"
    return out, build(example_model, out, FAST)


def test_the_fastest_correct_candidate_ships_with_its_record(tuned, example_model):
    _, result = tuned
    m, rec = result.bundle.manifest, result.bundle.record
    for r in m.regions:
        t = rec.region(r.name).tuning
        correct = [c for c in t.candidates if c.rejected is None]
        assert t.candidates[0].name == "default" and len(t.candidates) >= 5
        fastest = min(c.median_us for c in correct)
        # The fastest ships only when it beats the default by MIN_GAIN; within that, the default stays.
        if t.winner == "default":
            assert t.best_us == t.default_us and fastest > t.default_us * (1 - MIN_GAIN)
        else:
            assert t.best_us == fastest < t.default_us * (1 - MIN_GAIN) and t.winner in {c.name for c in correct}
        assert r.flags == next(c.flags for c in t.candidates if c.name == t.winner)
        assert all(c.max_abs_diff is not None and c.max_abs_diff < 1e-2 for c in correct)
    assert m.host_runtime is not None and m.host_runtime.driver in mf.HOST_DRIVERS
    assert len(rec.host_runtime_measured) >= 3
    golden(result.bundle.path, example_model)          # what ships still matches onnxruntime
    assert mf.read(result.bundle.path) == m            # and the manifest says so on disk


def test_the_runtime_opens_the_host_driver_the_tuning_chose(tuned):
    _, result = tuned
    with runtime.load(result.bundle.path) as session:
        assert set(session._devices) == {result.bundle.manifest.host_runtime.driver}


def test_tuning_an_unchanged_model_again_compiles_and_times_nothing(tuned, example_model, monkeypatch):
    out, first = tuned

    def forbidden(*args, **kwargs):
        raise AssertionError("a second tuning run compiled or timed something")

    monkeypatch.setattr("aot.lower.executor.run_task", forbidden)
    monkeypatch.setattr("aot.tune.search.run_probe", forbidden)
    monkeypatch.setattr("aot.tune.runtime.run_probe", forbidden)
    again = build(example_model, out, FAST)
    assert again.bundle.manifest == first.bundle.manifest


def test_the_report_shows_every_candidate_and_the_host_runtime(tuned):
    out, result = tuned
    text = run_aot("report", str(out)).stdout
    assert "tuning (warm medians" in text and "host runtime:" in text
    candidates = result.bundle.record.regions[0].tuning.candidates
    assert all(c.name in text for c in candidates)
    # IREE 3.13 gives the example CNN the same module at O3 as at O2: it was timed once.
    twins = [c for c in candidates if c.same_as]
    assert [(c.name, c.same_as) for c in twins] == [("O3", "O2")]
    assert all(f"the same module as {c.same_as}" in text for c in twins)


@pytest.mark.full   # 45 s; the tuner's device handling is the same for the host regions tuned above
def test_vulkan_regions_are_tuned_on_the_vulkan_device(example_model, tmp_path):
    from conftest import _require_vulkan

    _require_vulkan()
    result = build(example_model, tmp_path / "vk", dataclasses.replace(FAST, accel=Target.parse("vulkan")))
    accel = [result.bundle.record.region(r.name) for r in result.bundle.manifest.regions if not r.target.is_host]
    assert accel, "the example CNN has an accelerator region"
    for r in accel:
        assert "llvmpipe" in r.tuning.device.lower() and {"O2", "O3"} <= {c.name for c in r.tuning.candidates}
    golden(result.bundle.path, example_model)


@pytest.mark.full   # 28 s; the tuned builds above go through the same search
def test_aot_tune_tunes_an_existing_build(example_model, tmp_path):
    out = tmp_path / "later"
    build(example_model, out, BuildOptions(accel=None))
    assert all(r.tuning is None for r in record.read(out).regions)
    text = run_aot("tune", str(out), "--tune-repeats", "3").stdout
    assert "tuning (warm medians" in text
    assert all(r.tuning is not None for r in record.read(out).regions)
    assert record.read(out).options["tune"] is True   # what the tuned build stored


def test_aot_tune_refuses_a_bare_bundle(tuned):
    out, _ = tuned
    proc = run_aot("tune", str(out / "bundle"), check=False)
    assert proc.returncode == 1 and "needs the build directory" in proc.stderr


def test_a_replayed_plan_of_a_tuned_bundle_times_nothing_and_gives_the_same_bytes(tuned, example_model,
                                                                                 tmp_path, monkeypatch):
    """Every decision the tuning build made by timing is pinned in its plan.json: a build of that
    plan searches and times nothing and ships the same bundle (only the record differs: it has no
    search to report)."""
    from aot import pipeline
    from aot.checks import measure

    out, result = tuned
    plan = json.loads((out / "bundle" / "plan.json").read_text())
    assert all(r["flags"] is not None for r in plan["regions"]) and plan["host_runtime"]["driver"]

    def no_timing(*args, **kwargs):
        raise AssertionError("a replayed plan must not time anything")

    for module, name in ((pipeline, "tune_regions"), (pipeline, "choose_host_runtime"), (measure, "side_by_side")):
        monkeypatch.setattr(module, name, no_timing)
    replay = build(example_model, tmp_path / "replay", BuildOptions(accel=None, plan_file=out / "bundle" / "plan.json"))
    files = {p.relative_to(out / "bundle").as_posix() for p in (out / "bundle").rglob("*") if p.is_file()}
    assert files == {p.relative_to(replay.bundle.path).as_posix() for p in replay.bundle.path.rglob("*") if p.is_file()}
    differing = sorted(f for f in files if (out / "bundle" / f).read_bytes() != (replay.bundle.path / f).read_bytes())
    assert differing == ["record.json"]
    assert replay.bundle.manifest.host_runtime == result.bundle.manifest.host_runtime is not None
    assert all(r.tuning is None for r in replay.bundle.record.regions)


def test_a_dask_cluster_builds_the_same_bundle_bytes_as_the_local_pool(example_model, tmp_path):
    import distributed  # the test extra installs it

    options = BuildOptions(accel=Target.parse("vulkan"))
    local = build(example_model, tmp_path / "local", options)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = build(example_model, tmp_path / "cluster", dataclasses.replace(options, cluster=cluster.scheduler_address))
        workers = len(cluster.scheduler_info["workers"])
    assert workers == 2
    files = sorted(p.relative_to(local.bundle.path) for p in local.bundle.path.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(remote.bundle.path) for p in remote.bundle.path.rglob("*") if p.is_file())
    for f in files:
        if f.name != "record.json":   # the record says where the compiles ran: compared below
            assert (local.bundle.path / f).read_bytes() == (remote.bundle.path / f).read_bytes(), f
    local_options, remote_options = local.bundle.record.options, remote.bundle.record.options
    assert remote_options.pop("cluster") == cluster.scheduler_address and local_options.pop("cluster") is None
    assert dataclasses.replace(local.bundle.record, options=local_options, machine=remote.bundle.record.machine) == \
        dataclasses.replace(remote.bundle.record, options=remote_options)
    assert json.loads((remote.bundle.path / "manifest.json").read_text())["regions"]
