"""`aot bench-replay`: each accelerator region as built (its command buffer recorded once at load
and replayed every call) against the same region compiled to record its command buffer on every
call, and on Vulkan compiled for the BDA dispatch ABI, side by side in one process: load, first
call and steady-state medians per region.

Why a third mode on Vulkan: IREE 3.13's Vulkan driver runs a replayed (indirect) command buffer
through a deferred command buffer that it translates into a fresh VkCommandBuffer on every
submission, so "replay" saves the VM's recording work but not Vulkan's. Only executables built
with --iree-vulkan-dispatch-abi=bda let the driver keep recorded VkCommandBuffers and patch a
buffer-address table per call (its cached BDA replay instances).

The region MLIR comes from the build directory (`aot build -o OUT` keeps it in OUT/build), so each
variant is the same region with only these flags changed."""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aot.checks import timing
from aot.checks.compare import compare
from aot.checks.reference import random_inputs
from aot.checks.session import CheckSession
from aot.errors import AotError
from aot.lower import flags, packed_conv
from aot.lower.compile import COMPILE_TIMEOUT_S, CompileJob, compile_many
from aot.lower.executor import iree_compile_path
from aot.runtime import manifest as mf
from aot.runtime.manifest import Manifest, RegionEntry


def variants(backend: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The modes compared on ``backend``: (name, flags added to the region's own)."""
    record = (("replay", ()), ("record", flags.RECORD_EVERY_CALL_FLAGS))
    return (*record, ("bda", flags.BDA_FLAGS)) if backend == "vulkan-spirv" else record


@dataclass(frozen=True, slots=True)
class ModeTiming:
    per_call: Counter          # HAL calls the region's function makes on every call (from its VM code)
    load_ms: float             # opening the session: device, modules, initializers (recording included)
    first_us: float
    steady_us: float
    max_abs_diff: float        # its outputs against the bundle's own modules' (replay) outputs


@dataclass(frozen=True, slots=True)
class RegionReplay:
    region: str
    target: str
    modes: tuple[tuple[str, ModeTiming], ...]    # replay (as built) first, then the variants

    def mode(self, name: str) -> ModeTiming:
        return dict(self.modes)[name]


@dataclass(frozen=True, slots=True)
class ReplayBench:
    bundle: str
    trials: int
    calls: int
    regions: tuple[RegionReplay, ...]

    def text(self) -> str:
        lines = [f"{self.bundle}: {self.trials} fresh sessions per mode, interleaved; steady = median of "
                 f"{self.calls} calls after the first (medians over sessions)"]
        for r in self.regions:
            lines.append(f"region {r.region} ({r.target})")
            for name, t in r.modes:
                recorded = t.per_call.get("command_buffer.dispatch", 0)
                how = (f"{recorded} dispatches recorded per call" if recorded else
                       f"replayed ({t.per_call.get('device.queue.execute.indirect', 0)} indirect execute per call)")
                lines.append(f"  {name:7s} load {t.load_ms:8.1f} ms  first call {t.first_us:10.1f} us  "
                             f"steady {t.steady_us:10.1f} us   {how}; max abs diff {t.max_abs_diff:.3g}")
            replay = r.mode("replay")
            for name, t in r.modes[1:]:
                lines.append(f"  {name}/replay: first call {t.first_us / replay.first_us:.2f}, "
                             f"steady {t.steady_us / replay.steady_us:.2f}")
        return "\n".join(lines)


def bench(out: Path, trials: int = 5, calls: int = 30, seed: int = 0) -> ReplayBench:
    bundle, built = out / "bundle", out / "build" / "regions" / "built"
    manifest = mf.read(bundle)
    accel = [r for r in manifest.regions if not r.target.is_host]
    if not accel:
        raise AotError(f"{str(bundle)!r} has no accelerator region: replay concerns accelerator command buffers",
                       hint="build with --accel vulkan (or cuda) first")
    missing = [r.name for r in accel if not (built / f"{r.name}.mlir").exists()]
    if missing or manifest.shapes is not None:
        raise AotError(f"bench-replay needs the region MLIR of a single-shape build in {str(built)!r}"
                       + (f"; missing for {', '.join(missing)}" if missing else ""),
                       hint="pass the directory given to `aot build -o` (not a copied bundle or a bucketed build)")
    modes = variants(accel[0].target.backend)
    where = {name: _variant(out, bundle, built, accel, name, extra) if extra else bundle for name, extra in modes}
    per_call = {name: {r.name: _per_call_hal_ops(built / f"{r.name}.mlir", r, extra) for r in accel}
                for name, extra in modes}
    args = _region_args(bundle, manifest, seed)
    samples: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    results: dict[tuple[str, str], tuple[np.ndarray, ...]] = {}
    for _ in range(trials):
        for mode, _flags in modes:
            load_s, opened = timing.timed(lambda: CheckSession(where[mode], manifest))
            with opened as session:
                load_ms = load_s * 1e3
                for r in accel:
                    first, steady, outputs = _time_region(session, r, args[r.name], calls)
                    results.setdefault((r.name, mode), outputs)
                    samples.setdefault((r.name, mode), []).append((load_ms, first, steady))
    regions = []
    for r in accel:
        timings = []
        for mode, _flags in modes:
            load, first, steady = (statistics.median(col) for col in zip(*samples[(r.name, mode)]))
            diff = max((compare(a, b).max_abs_diff   # inf where NaN/Inf differ
                        for a, b in zip(results[(r.name, mode)], results[(r.name, "replay")])), default=0.0)
            timings.append((mode, ModeTiming(per_call[mode][r.name], load, first, steady, diff)))
        regions.append(RegionReplay(r.name, str(r.target), tuple(timings)))
    return ReplayBench(str(bundle), trials, calls, tuple(regions))


def _variant(out: Path, bundle: Path, built: Path, accel: list[RegionEntry], mode: str,
             extra: tuple[str, ...]) -> Path:
    """A copy of the bundle whose accelerator modules were compiled with ``extra`` flags.
    CheckSession(dir, manifest) opens the copy without checking module hashes (as verification does)."""
    variant = out / "build" / f"replay-{mode}"
    shutil.rmtree(variant, ignore_errors=True)
    shutil.copytree(bundle, variant)
    jobs = [CompileJob(r.name, mlir, r.target, opt=(*r.flags, *extra), label=mode)
            for r in accel for mlir in [built / f"{r.name}.mlir"]]
    cache = out / "build" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    for r, compiled in zip(accel, compile_many(jobs, cache, accel_timeout=COMPILE_TIMEOUT_S)):
        if isinstance(compiled, Exception):
            raise compiled
        shutil.copyfile(compiled.vmfb, mf.safe_member(variant, r.module))
    return variant


def _region_args(bundle: Path, manifest: Manifest, seed: int) -> dict[str, list[np.ndarray]]:
    """Every region's real inputs, from one run of the schedule region by region."""
    values: dict[str, Any] = dict(random_inputs(manifest.inputs, seed=seed))
    args = {}
    with CheckSession(bundle, manifest) as session:
        for r in map(manifest.region, manifest.schedule):
            args[r.name] = [values[v] for v in r.inputs]
            values.update(zip(r.outputs, session.run_region(r.name, args[r.name])))
    return args


def _time_region(session: CheckSession, region: RegionEntry, args: list[np.ndarray],
                 calls: int) -> tuple[float, float, tuple[np.ndarray, ...]]:
    first, steady, outputs = timing.first_and_steady(lambda: session.run_region(region.name, args), calls)
    return first * 1e6, timing.median_us(steady), outputs


def _per_call_hal_ops(mlir: Path, region: RegionEntry, extra: tuple[str, ...]) -> Counter:
    """The HAL calls in the region function's VM code (``FN$async``): what runs on every call.
    Recording shows up as ``command_buffer.dispatch``; replay as one ``device.queue.execute.indirect``."""
    opt = (*region.flags, *extra)   # the manifest records the flags the module got
    text = mlir.read_bytes()
    argv = [iree_compile_path(), "-", *flags.flags_for(region.target, text, opt), flags.COMPILE_TO_VM, "-o", "-"]
    proc = subprocess.run(argv, input=packed_conv.module_text(region.target, text, opt).decode(), capture_output=True,
                          text=True, timeout=COMPILE_TIMEOUT_S)
    if proc.returncode != 0:
        raise AotError(f"iree-compile {flags.COMPILE_TO_VM} failed for region {region.name!r}: "
                       f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}",
                       hint=f"{' '.join(argv)} < {mlir}")
    body = re.search(rf"vm\.func private @{re.escape(region.function)}\$async\(.*?\n    }}\n", proc.stdout, re.S)
    if body is None:
        raise AotError(f"no {region.function}$async function in region {region.name!r}'s VM code",
                       hint="this IREE version lays out its VM module differently; report it")
    return Counter(re.findall(r"@hal\.([a-z_.]+)", body.group(0)))

