"""The search's bookkeeping without a device: a crashing candidate is rejected and the rest are
measured again; a mismatch or compile failure rejects; the fastest correct candidate wins."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from aot.errors import CompileError
from aot.lower.compile import CompiledRegion
from aot.options import BuildOptions
from aot.record import TuneCandidate
from aot.runtime.manifest import Manifest
from aot.runtime.target import Target
from aot.tune import search
from aot.tune.candidates import FlagSet
from conftest import small_manifest


def _setup(monkeypatch, probe_runs):
    calls = []

    def fake_probe(request, on_event=lambda e: None):
        calls.append([c["name"] for c in request["candidates"]])
        events, error = probe_runs[len(calls) - 1](request)
        for e in events:
            on_event(e)
        return events, error

    monkeypatch.setattr(search, "run_probe", fake_probe)
    monkeypatch.setattr(search, "device_identity", lambda driver: "test cpu")
    return calls


def _compiled(name: str, module: str = "") -> CompiledRegion:
    """A compiled candidate; its module's digest is its name's, or ``module``'s (the same bytes)."""
    sha = hashlib.sha256((module or name).encode()).hexdigest()
    return CompiledRegion("r0", Target.host(), Path(f"/nowhere/{name}.vmfb"), sha, None, False, 0.1)


def test_a_candidate_that_compiles_to_an_earlier_ones_module_is_not_timed_again(monkeypatch):
    sets = (FlagSet("default", ()), FlagSet("O2", ("--o2",)), FlagSet("O3", ("--o3",)), FlagSet("other", ("--x",)))
    run = lambda req: ([*({"event": "checked", "name": c["name"], "ok": True, "max_abs_diff": 0.25, "error": None}
                          for c in req["candidates"]),
                        {"event": "timed", "medians_us": {"default": 100.0, "O2": 80.0, "other": 90.0}}], None)
    calls = _setup(monkeypatch, [run])
    manifest = _host_manifest()
    outcomes = [_compiled("default"), _compiled("O2"), _compiled("O3", module="O2"), _compiled("other")]
    tuning = search._measure(Path("/nowhere"), manifest, manifest.regions[0], sets, outcomes,
                             {"x": np.zeros((1, 2), np.float32), "y": np.zeros((1, 2), np.float32)},
                             BuildOptions(tune_repeats=3).tune_settings())
    assert calls == [["default", "O2", "other"]]   # O3's module is O2's: the probe never sees it
    by = {c.name: c for c in tuning.candidates}
    assert by["O3"].same_as == "O2" and by["O3"].median_us == 80.0 and by["O3"].max_abs_diff == 0.25
    assert by["O3"].rejected is None and by["O2"].same_as is None
    assert tuning.winner == "O2"   # the first of equals


def test_a_crashing_candidate_is_rejected_and_the_others_are_measured_again(monkeypatch):
    sets = (FlagSet("default", ()), FlagSet("fast", ("--x",)), FlagSet("crash", ("--y",)), FlagSet("late", ("--z",)))
    first = lambda req: ([{"event": "start", "name": "default"},
                          {"event": "checked", "name": "default", "ok": True, "max_abs_diff": 0.0, "error": None},
                          {"event": "start", "name": "fast"},
                          {"event": "checked", "name": "fast", "ok": True, "max_abs_diff": 0.0, "error": None},
                          {"event": "start", "name": "crash"}], "exit -11: Segmentation fault")
    second = lambda req: ([*({"event": "checked", "name": c["name"], "ok": c["name"] != "late",
                             "max_abs_diff": 0.5 if c["name"] == "late" else 0.0,
                             "error": "outputs differ from onnxruntime by up to 0.5" if c["name"] == "late" else None}
                             for c in req["candidates"]),
                           {"event": "timed", "medians_us": {"default": 100.0, "fast": 60.0}}], None)
    calls = _setup(monkeypatch, [first, second])
    manifest = _host_manifest()
    outcomes = [_compiled(s.name) for s in sets]
    tuning = search._measure(Path("/nowhere"), manifest, manifest.regions[0], sets, outcomes,
                             {"x": np.zeros((1, 2), np.float32), "y": np.zeros((1, 2), np.float32)},
                             BuildOptions(tune_repeats=3).tune_settings())
    assert calls == [["default", "fast", "crash", "late"], ["default", "fast", "late"]]
    by = {c.name: c for c in tuning.candidates}
    assert "crashed" in by["crash"].rejected and "Segmentation fault" in by["crash"].rejected
    assert "differ" in by["late"].rejected and by["late"].median_us is None
    assert tuning.winner == "fast" and tuning.best_us == 60.0 and tuning.default_us == 100.0


def test_a_compile_failure_rejects_without_running_and_no_correct_candidate_keeps_the_default(monkeypatch):
    sets = (FlagSet("default", ()), FlagSet("broken", ("--no-such-flag",)))
    bad = CompileError("r0", ["iree-compile", "--no-such-flag"], 1, "iree-compile: Unknown command line argument")
    mismatch = lambda req: ([{"event": "checked", "name": "default", "ok": False, "max_abs_diff": 3.0,
                              "error": "outputs differ from onnxruntime by up to 3"},
                             {"event": "timed", "medians_us": {}}], None)
    calls = _setup(monkeypatch, [mismatch])
    manifest = _host_manifest()
    tuning = search._measure(Path("/nowhere"), manifest, manifest.regions[0], sets, [_compiled("default"), bad],
                             {"x": np.zeros((1, 2), np.float32), "y": np.zeros((1, 2), np.float32)},
                             BuildOptions(tune_repeats=3).tune_settings())
    assert calls == [["default"]]  # the broken one never reached the probe
    by = {c.name: c for c in tuning.candidates}
    assert by["broken"].rejected.startswith("compile failed (exit 1)")
    assert tuning.winner == "default" and tuning.best_us is None and tuning.speedup is None


def test_a_near_tie_is_timed_again_head_to_head_for_longer_and_that_decides(monkeypatch):
    from aot.tune.progress import Steps

    sets = (FlagSet("default", ()), FlagSet("a", ("--a",)), FlagSet("b", ("--b",)), FlagSet("slow", ("--s",)))
    checked = lambda req: [{"event": "checked", "name": c["name"], "ok": True, "max_abs_diff": 0.0, "error": None}
                           for c in req["candidates"]]
    first = lambda req: ([*checked(req), {"event": "timed", "medians_us": {"default": 100.0, "a": 80.0, "b": 83.0,
                                                                          "slow": 120.0},
                                          "calls": {"default": 3, "a": 3, "b": 3, "slow": 3}}], None)
    repeats = []
    again = lambda req: (repeats.append(req["repeats"]) or [*checked(req), {"event": "timed", "medians_us": {"a": 90.0, "b": 70.0},
                                                                    "calls": {"a": 9, "b": 9}}], None)
    calls = _setup(monkeypatch, [first, again])
    lines: list[str] = []
    steps = Steps(5, lines.append)
    manifest = _host_manifest()
    tuning = search._measure(Path("/nowhere"), manifest, manifest.regions[0], sets, [_compiled(s.name) for s in sets],
                             {"x": np.zeros((1, 2), np.float32), "y": np.zeros((1, 2), np.float32)},
                             BuildOptions(tune_repeats=3).tune_settings(), search._Reporter("r0", steps))
    # b was within RUNOFF_MARGIN of a (83 against 80): the two again, fastest first, for longer;
    # their run-off medians in the first round's terms (b, the run-off's fastest, at a's 80)
    assert calls == [["default", "a", "b", "slow"], ["a", "b"]] and repeats == [3 * search.RUNOFF_TURNS]
    by = {c.name: c for c in tuning.candidates}
    assert tuning.winner == "b" and by["b"].median_us == 80.0 and by["a"].median_us == pytest.approx(90.0 * 80 / 70)
    assert by["b"].timed_calls == 12 and by["slow"].median_us == 120.0 and by["slow"].timed_calls == 3
    # one more step (the runoff's timing), its candidates not checked twice in the progress
    assert steps.total == 6 and len(lines) == 6 and "r0 timed: b 0.07 ms, a 0.09 ms" in lines[-1]
    assert search.runoff({"x": 100.0, "y": 105.0, "z": 105.1, "bad": 50.0}, {"bad": "mismatch"}) == ["x", "y"]
    assert search.runoff({}, {}) == []


def _host_manifest() -> Manifest:
    import dataclasses

    m = small_manifest()
    return dataclasses.replace(m, regions=(dataclasses.replace(m.regions[0], target=Target.host()),))


def test_each_candidate_is_a_progress_step_with_an_eta_and_pruned_ones_say_so(monkeypatch):
    """Compiled, checked, timed: one line each, counted against the run's steps with an ETA from
    the pace so far; the timing line names the candidates the probe pruned; the record keeps
    their timed calls and the report marks them."""
    from aot.tune.progress import Steps, eta_text

    now = iter([0.0, 10.0, 20.0, 50.0])     # the clock: start, then each step
    lines: list[str] = []
    steps = Steps(4, lines.append, clock=lambda: next(now))
    reporter = search._Reporter("r0", steps)
    steps.done("r0 compiled data-tiling in 9.5s")
    reporter({"event": "checked", "name": "data-tiling", "ok": True, "max_abs_diff": 3e-7})
    reporter({"event": "timed", "medians_us": {"default": 8000.0, "data-tiling": 6000.0, "direct-conv": 13000.0},
              "calls": {"default": 20, "data-tiling": 20, "direct-conv": 5}})
    assert lines == ["tune     [1/4, ETA 30s] r0 compiled data-tiling in 9.5s",
                     "tune     [2/4, ETA 20s] r0 checked data-tiling: ok (max abs diff 3e-07)",
                     "tune     [3/4, ETA 17s] r0 timed: data-tiling 6 ms, default 8 ms, direct-conv 13 ms (pruned after 5)"]
    assert eta_text(80.4) == "1m20s" and eta_text(4.6) == "5s"

    table = (TuneCandidate("default", (), 8000.0, 0.0, None, 20), TuneCandidate("direct-conv", (), 13000.0, 0.0, None, 5))
    tuning = search.decide(table, "test cpu")
    assert [c.pruned(tuning) for c in tuning.candidates] == [False, True]


def test_a_new_packed_conv_rewrite_times_the_sets_it_rewrites_again_and_only_those(monkeypatch):
    """Tuning results are cached by the region's text and the sets' flags; a data-tiled-conv set
    compiles from text lower/packed_conv.py rewrote, so a rewrite that writes other text must miss
    the cache for it (stop 49's timings of the old modules were reused for the new ones) and for
    nothing else; a new version of the rewrites that leaves this region's text as it was hits."""
    import dataclasses

    from aot.lower import packed_conv
    from aot.lower.flags import CONV_DATA_TILING, DATA_TILING, IM2COL
    from aot.tune.search import TuneSettings

    monkeypatch.setattr(search, "device_identity", lambda driver: "test cpu")
    host = dataclasses.replace(small_manifest().regions[0], target=Target.host())
    tiled, plain = FlagSet("data-tiled-conv", (DATA_TILING, *CONV_DATA_TILING)), FlagSet("data-tiling", (DATA_TILING, IM2COL))
    settings = TuneSettings(repeats=5, accel_timeout=60.0, segments=0)
    module = "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x : tensor<4xf32>\n}"

    def keys() -> list[str]:
        return [search._key(module, host, "local-task", (s,), settings) for s in (tiled, plain)]

    before = keys()
    monkeypatch.setattr(packed_conv, "PACKED_CONV_VERSION", packed_conv.PACKED_CONV_VERSION + 1)
    assert keys() == before                      # nothing of this region rewritten differently
    rewrite = packed_conv.module_text
    monkeypatch.setattr(packed_conv, "module_text",
                        lambda target, text, opt: rewrite(target, text, opt) + b"\n// rewritten otherwise")
    after = keys()
    assert after[0] != before[0] and after[1] == before[1]


def test_a_set_iree_refuses_at_its_work_split_is_compiled_again_split_finer_and_pinned_so():
    from aot.lower import flags
    from aot.lower.flags import FINER_SPLITS
    from aot.tune.progress import Steps

    manifest = _host_manifest()
    region = manifest.regions[0]
    sets = (FlagSet("default", ()), FlagSet("tiled", ("--tile",)), FlagSet("split=2", ("--tile", flags.threads(2))),
            FlagSet("unknown", ("--no-such-flag",)))
    large = "<stdin>:9:1: error: One or more operations with large vector sizes (32768 bytes) were found:"
    compiles: list[tuple[str, tuple[str, ...]]] = []

    def compile_(batch):
        # IREE's refusal until the split is for the last of FINER_SPLITS' thread counts
        out = []
        for job in batch:
            compiles.append((job.label, job.opt))
            if "--no-such-flag" in job.opt:
                out.append(CompileError("r0", ["iree-compile"], 1, "error: Unknown command line argument"))
            elif "--tile" in job.opt and flags.threads(FINER_SPLITS[-1]) not in job.opt:
                out.append(CompileError("r0", ["iree-compile"], 1, large))
            else:
                out.append(_compiled(job.label))
        return out

    todo = [(region, sets, Path("/nowhere/record.json"))]
    steps = Steps(10, lambda line: None)
    jobs = [search.CompileJob("r0", Path("/nowhere"), region.target, s.flags, s.name) for s in sets]
    regrouped, results = search._split_finer_where_refused(todo, jobs, compile_(jobs), compile_, steps)
    (_, kept, _), = regrouped
    last = FINER_SPLITS[-1]
    # each refused set is tried at every finer split in turn; the failure IREE would give at any
    # split (an unknown flag) is not retried, and the default compiled as it was
    retried = [label for label, _ in compiles[len(sets):]]
    assert retried == [f"{s}+split={n}" for n in FINER_SPLITS for s in ("tiled", "split=2")]
    assert [s.name for s in kept] == ["default", f"tiled+split={last}", f"split=2+split={last}", "unknown"]
    # the split replaces the one a set named, so the pinned flags hold one split, the finest tried
    assert kept[1].flags == ("--tile", flags.threads(last)) and kept[2].flags == ("--tile", flags.threads(last))
    assert [isinstance(o, CompiledRegion) for o in results] == [True, True, True, False]
    assert steps.total == 10 + 2 * len(FINER_SPLITS)


def test_a_run_off_in_a_slower_moment_still_ranks_its_own_candidates_first():
    """LCNet at stop 74: the two sets of the run-off timed again in a slower moment of the host;
    set raw against the first round's figures, a set left out over 5% behind beat them both."""
    first = {"default": 100.0, "a": 80.0, "b": 83.0, "left-out": 86.0}
    assert search.runoff(first, {}) == ["a", "b"]
    again = search.in_first_round_terms(first, {"a": 120.0, "b": 115.0})
    assert again == {"b": 80.0, "a": pytest.approx(120.0 * 80 / 115)}
    table = tuple(TuneCandidate(n, (), us, 0.0, None, 3) for n, us in {**first, **again}.items())
    assert search.decide(table, "test cpu").winner == "b"
    raw = tuple(TuneCandidate(n, (), us, 0.0, None, 3) for n, us in {**first, "a": 120.0, "b": 115.0}.items())
    assert search.decide(raw, "test cpu").winner == "left-out"       # the fault: rounds compared raw
    assert search.in_first_round_terms(first, {}) == {}
