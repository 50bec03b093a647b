"""Choose how the runtime drives the CPU: IREE's local-task driver (a pool of worker threads;
how many is ``--task_topology_max_group_count``) or local-sync (work runs on the calling
thread). Small models lose more to waking workers than they gain from them; large ones gain.
Chosen by timing whole runs of the bundle under each configuration, one probe process per
configuration (runtime flags are process-wide), in rounds whose order rotates."""

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
from aot.tune.search import TuneSettings, device_identity, run_probe
from aot.runtime.atomic import write_json

ROUNDS = 3
# Part of the cached choice's key: bump when what a probe measures changes (never back: stop 61
# tried a v3 rule and took it back, its records still in caches). v4 (stop 63): a
# local-task call no longer stalls a scheduler tick now and then (runtime/invoke.py).
CHOICE_VERSION = "choice-v4"


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
    """The fastest configuration for the bundle and every configuration's median; (None, ())
    when no region runs on the CPU or none ran."""
    if not any(r.target.is_host for r in manifest.regions):
        return None, ()
    configs = configurations(os.cpu_count() or 1)
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
        for round_ in range(ROUNDS):
            order = list(range(len(configs)))
            for i in order[round_ % len(order):] + order[:round_ % len(order)]:
                driver, flags = configs[i]
                events, error = run_probe({"kind": "bundle", "bundle": str(staged_dir), "manifest": str(spec),
                                           "driver": driver, "flags": list(flags), "data": str(data),
                                           "warmup": settings.warmup, "repeats": settings.repeats})
                if error is None:
                    samples[i].append(next(e for e in events if e["event"] == "timed")["medians_us"]["run"])
                else:
                    progress(f"runtime  {' '.join((driver, *flags))} failed: {error}")
    measured = {i: statistics.median(s) for i, s in samples.items() if s}
    if not measured:
        return None, ()
    best = min(measured, key=measured.__getitem__)
    chosen = HostRuntimeChoice(HostRuntime(configs[best][0], configs[best][1]),
                               tuple((" ".join((configs[i][0], *configs[i][1])), round(us, 1))
                                     for i, us in measured.items()))
    record.parent.mkdir(parents=True, exist_ok=True)
    write_json(record, codec.encode(chosen))
    progress(f"runtime  {chosen.runtime.label} ({', '.join(f'{k} {v:.0f} us' for k, v in chosen.measured)})")
    return chosen.runtime, chosen.measured
