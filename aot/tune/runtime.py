"""Choose how the runtime drives the CPU: IREE's local-task driver (a pool of worker threads;
how many is ``--task_topology_max_group_count``) or local-sync (work runs on the calling
thread). Small models lose more to waking workers than they gain from them; large ones gain.
Chosen by timing whole runs of the bundle under each configuration, one probe process per
configuration (runtime flags are process-wide), in rounds whose order rotates; the configurations
close to the fastest are timed again in a run-off, as the flag search's are."""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from aot.checks.reference import random_inputs
from aot.runtime import codec
from aot.runtime.codec import field
from aot.runtime.manifest import HostRuntime, Manifest
from aot.tune.search import MIN_GAIN, TuneSettings, device_identity, run_probe, runoff
from aot.runtime.atomic import write_json

ROUNDS = 3
# Configurations within search.RUNOFF_MARGIN of the fastest after ROUNDS rounds are timed in
# RUNOFF_ROUNDS more, and their medians are taken over all their rounds. A small model's probe
# times about 10 ms of calls per process, so one moment of the shared host can decide it: MTCNN-
# ONet's record put local-sync 5% ahead (420 against 440 us), and local-task then ran 12-14% faster
# in two corpus runs and won four fresh probes (docs/performance.md, stop 75).
RUNOFF_ROUNDS = 2 * ROUNDS
# Part of the cached choice's key: bump when what a probe measures changes (never back: stop 61
# tried a v3 rule and took it back, its records still in caches). v4 (stop 63): a
# local-task call no longer stalls a scheduler tick now and then (runtime/invoke.py). v5 (stop
# 75): the run-off, and the default kept unless beaten by search.MIN_GAIN.
CHOICE_VERSION = "choice-v5"


def configurations(cores: int) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(driver, runtime flags): IREE's default topology, fewer worker groups, the caller's thread."""
    groups = sorted({n for n in (1, 2, 4, 8, cores // 2) if 0 < n < cores})
    return (("local-task", ()),
            *(("local-task", (f"--task_topology_max_group_count={n}",)) for n in groups),
            ("local-sync", ()))


@dataclass(frozen=True, slots=True)
class HostRuntimeChoice:
    """The configuration the deploy contract gets, and the measurements behind it (build record)."""

    runtime: HostRuntime
    measured: tuple[tuple[str, float], ...] = field(as_map=True)   # (configuration, median us of a whole run)


def choose_host_runtime(staged_dir: Path, manifest: Manifest, cache: Path, settings: TuneSettings,
                        progress: Callable[[str], None] = lambda s: None
                        ) -> tuple[HostRuntime | None, tuple[tuple[str, float], ...]]:
    """The fastest configuration for the bundle (``_decide``) and every configuration's median;
    (None, ()) when no region runs on the CPU or none ran."""
    if not any(r.target.is_host for r in manifest.regions):
        return None, ()
    configs = configurations(os.cpu_count() or 1)
    labels = [" ".join((driver, *flags)) for driver, flags in configs]
    parts = [*(r.sha256 for r in manifest.regions), json.dumps(configs), device_identity("local-task"),
             f"{settings.repeats}/{settings.warmup}/{ROUNDS}", CHOICE_VERSION]
    record = cache / "runtime" / f"{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:32]}.json"
    if record.exists():
        cached = codec.decode(HostRuntimeChoice, json.loads(record.read_text()))
        progress(f"runtime  cached: {cached.runtime.label}")
        return cached.runtime, cached.measured
    samples: dict[int, list[float]] = {i: [] for i in range(len(configs))}
    with tempfile.TemporaryDirectory(prefix="aot-runtime-") as tmp:
        data, spec = Path(tmp, "inputs.npz"), Path(tmp, "manifest.json")
        arrays: dict[str, Any] = random_inputs(manifest.inputs, seed=0)   # Any: see tune/search.py
        np.savez(data, **arrays)
        spec.write_text(json.dumps(manifest.to_json()))

        def time_rounds(which: list[int], rounds: int) -> None:
            for round_ in range(rounds):
                for i in which[round_ % len(which):] + which[:round_ % len(which)]:
                    driver, flags = configs[i]
                    events, error = run_probe({"kind": "bundle", "bundle": str(staged_dir), "manifest": str(spec),
                                               "driver": driver, "flags": list(flags), "data": str(data),
                                               "warmup": settings.warmup, "repeats": settings.repeats})
                    if error is None:
                        samples[i].append(next(e for e in events if e["event"] == "timed")["medians_us"]["run"])
                    else:
                        progress(f"runtime  {labels[i]} failed: {error}")

        time_rounds(list(range(len(configs))), ROUNDS)
        # the flag search's rule for a run-off (search.runoff), in configuration order
        close = sorted(labels.index(n) for n in runoff({labels[i]: us for i, us in _medians(samples).items()}, {}))
        if len(close) > 1:
            progress(f"runtime  run-off of {', '.join(labels[i] for i in close)}")
            time_rounds(close, RUNOFF_ROUNDS)
    measured = _medians(samples)
    if not measured:
        return None, ()
    # Only the run-off's configurations compete: the rest were over RUNOFF_MARGIN behind in the
    # same rounds, and the run-off's rounds may fall in a slower moment of the host (the fault
    # search.in_first_round_terms mends for the flag search).
    best = _decide({i: measured[i] for i in close})
    chosen = HostRuntimeChoice(HostRuntime(configs[best][0], configs[best][1]),
                               tuple((labels[i], round(us, 1)) for i, us in measured.items()))
    record.parent.mkdir(parents=True, exist_ok=True)
    write_json(record, codec.encode(chosen))
    progress(f"runtime  {chosen.runtime.label} ({', '.join(f'{k} {v:.0f} us' for k, v in chosen.measured)})")
    return chosen.runtime, chosen.measured


def _medians(samples: dict[int, list[float]]) -> dict[int, float]:
    return {i: statistics.median(s) for i, s in samples.items() if s}


def _decide(measured: dict[int, float]) -> int:
    """The fastest configuration, unless IREE's default topology (``configurations``' first) is
    within ``MIN_GAIN`` of it: the rule the flag search keeps its default by."""
    best = min(measured, key=measured.__getitem__)
    if 0 in measured and measured[best] > measured[0] * (1 - MIN_GAIN):
        return 0
    return best
