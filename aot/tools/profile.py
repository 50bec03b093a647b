"""Per-dispatch profile of a bundle: where each region's time goes, beside where onnxruntime's goes.

Each region runs in ``iree-benchmark-module`` (IREE's own runner, so nothing of ``aot`` is timed)
on its recorded driver and runtime flags, fed the intermediate tensors onnxruntime computes for
it, with IREE's HAL profiling on: host-execution events on the CPU's local drivers, device
timestamps (dispatch-events) on Vulkan and CUDA. ``iree-profile statistics`` reduces the capture
to one row per dispatch function. onnxruntime's own profiler gives its time per operator type for
the same model and input, so a slow model shows which of its dispatches lose, and to what."""

from __future__ import annotations

import collections
import json
import math
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from aot.checks import reference, timing, verify
from aot.errors import AotError
from aot.runtime import heap, invoke, manifest as mf

# The local drivers record when each dispatch ran on the host; devices timestamp their queues.
_MODES = {"local-task": "host-execution", "local-sync": "host-execution"}
_DEVICE_MODE = "dispatch-events"
_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
_SHAPE_OR_TYPE = re.compile(r"[\dx]*(x?[fiu]\d+)?")   # 12x80x240x5x5, 40x6625xf32, f32, i64
_SIZES = re.compile(r"\d+(x\d+)*")
# Kinds whose root op is a contraction: one multiply-add per point of the loop ranges in the name.
_CONTRACTIONS = frozenset({"matmul", "matmul_like", "matmul_transpose_b", "batch_matmul", "batch_matmul_like",
                          "batch_matmul_transpose_b", "matvec", "matvec_like", "vecmat", "vecmat_like", "conv",
                          "mmt4d", "batch_mmt4d"})


@dataclass(frozen=True, slots=True)
class DispatchTime:
    name: str           # IREE's dispatch function, e.g. r0$async_dispatch_22_conv_12x80x240x5x5_f32
    calls: float        # per run
    us: float           # per run, all calls

    @property
    def kind(self) -> str:
        return dispatch_kind(self.name)

    @property
    def gflop_per_s(self) -> float | None:
        """The rate of the work the name states (``work_flops``), or None where it states none."""
        flops = work_flops(self.name)
        return flops * self.calls / self.us / 1e3 if flops and self.us > 0 else None


@dataclass(frozen=True, slots=True)
class RegionProfile:
    region: str
    target: str
    driver: str
    runs: int
    wall_us: float                          # per profiled call (``_profiled_span_us``)
    dispatches: tuple[DispatchTime, ...]    # slowest first

    @property
    def total_us(self) -> float:
        return sum(d.us for d in self.dispatches)


@dataclass(frozen=True, slots=True)
class Profile:
    model: str
    regions: tuple[RegionProfile, ...]
    onnxruntime_wall_us: float                   # median per run, profiler off
    # (op type, us per run) from onnxruntime's profiler, slowest first. Its per-node bookkeeping
    # inflates small kernels, so only the shares compare; the wall time is measured without it.
    onnxruntime: tuple[tuple[str, float], ...]

    def text(self, top: int = 10) -> str:
        lines = [f"model {self.model}: time per run inside dispatches (IREE) and kernels (onnxruntime)"]
        for r in self.regions:
            lines.append(f"region {r.region} ({r.target} on {r.driver}, {r.runs} runs): {r.wall_us / 1e3:.3f} ms per call, "
                         f"{r.total_us / 1e3:.3f} ms in dispatches ({100 * r.total_us / r.wall_us:.0f}%)")
            lines.append("  by kind: " + _shares(by_kind(r.dispatches), r.total_us))
            lines += [f"  {d.us:9.1f} us {100 * d.us / r.total_us:5.1f}%  x{d.calls:g}  {d.name.split('$')[-1]}"
                      + (f"  {rate:.0f} GFLOP/s" if (rate := d.gflop_per_s) is not None else "")
                      for d in r.dispatches[:top]]
        ort_total = sum(us for _, us in self.onnxruntime)
        lines.append(f"onnxruntime (cpu, default threads): {self.onnxruntime_wall_us / 1e3:.3f} ms per run")
        lines.append("  kernel shares: " + _shares(self.onnxruntime, ort_total, ms=False))
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"model": self.model, "onnxruntime_wall_us": self.onnxruntime_wall_us,
                "onnxruntime_kernel_us": dict(self.onnxruntime),
                "regions": [{"region": r.region, "target": r.target, "driver": r.driver, "runs": r.runs,
                             "wall_us": r.wall_us, "dispatch_us": r.total_us, "by_kind_us": dict(by_kind(r.dispatches)),
                             "dispatches": [{"name": d.name, "calls": d.calls, "us": d.us, "gflop_per_s": d.gflop_per_s}
                                            for d in r.dispatches]}
                            for r in self.regions]}


def dispatch_kind(name: str) -> str:
    """``r0$async_dispatch_22_conv_12x80x240x5x5_f32`` -> ``conv``: IREE names a dispatch after its
    root op and shapes; the kind is the name without its number, sizes and element type."""
    return "_".join(t for t in _root(name) if not _SHAPE_OR_TYPE.fullmatch(t)) or "other"


def _root(name: str) -> list[str]:
    """The words of a dispatch's name that describe its root op: after the dispatch's number,
    before any suffix IREE appends (``_dispatch_tensor_store``)."""
    return re.sub(r"^.*?dispatch_\d+_?", "", name.split("$")[-1]).split("_dispatch")[0].split("_")


def work_flops(name: str) -> int | None:
    """Floating-point operations per call of a contraction dispatch, from its name: two per point
    of the root op's loop ranges (``conv_64x112x112x12x4x4_f32``: output channels, rows, columns,
    input channels and the kernel's taps; IREE leaves unit dims out of names, and out of the
    product they change nothing). The padding data tiling adds is not in it, so a rate read from
    it is the rate of the work the op states. None for any other kind, or sizes not in the name."""
    if dispatch_kind(name) not in _CONTRACTIONS:
        return None
    sizes = [t for t in _root(name) if _SIZES.fullmatch(t)]
    return 2 * math.prod(int(d) for d in sizes[-1].split("x")) if sizes else None


def by_kind(dispatches: tuple[DispatchTime, ...]) -> tuple[tuple[str, float], ...]:
    total: dict[str, float] = {}
    for d in dispatches:
        total[d.kind] = total.get(d.kind, 0.0) + d.us
    return tuple(sorted(total.items(), key=lambda kv: kv[1], reverse=True))   # as Counter.most_common


def profile_bundle(bundle: str | Path, model: Path | None = None, runs: int = 20) -> Profile:
    path = mf.bundle_dir(bundle)
    manifest = mf.read(path)
    if manifest.model.frontend != "onnx":
        raise AotError(f"aot profile times regions on their intermediates and beside onnxruntime; "
                       f"{manifest.model.name!r} was built from PyTorch and has no ONNX model to do either",
                       hint="export the module with torch.onnx.export and build that to profile it")
    source = model or Path(manifest.model.source)
    if not source.is_file():
        raise AotError(f"the bundle's source model {source} is gone",
                       hint="pass the model with --model to compare with onnxruntime")
    feeds = {**reference.random_inputs(manifest.inputs, seed=0), **reference.constant_inputs(manifest)}
    built = _built_model(path, source)
    graph_inputs = {i.name for i in built.graph.input}
    values = {**verify.onnx_values(built, {k: v for k, v in feeds.items() if k in graph_inputs}), **feeds}
    with tempfile.TemporaryDirectory(prefix="aot-profile-") as tmp:
        regions = tuple(_profile_region(path, manifest, r, values, Path(tmp), runs) for r in manifest.regions)
    return Profile(manifest.model.name, regions, *_onnxruntime(source, feeds, runs))


def _built_model(bundle: Path, source: Path) -> onnx.ModelProto:
    """The source as the build loaded it, from the options its record keeps and its pinned plan:
    the front end's rewrites name tensors the source does not have, and regions may pass them (a
    host region cut after a banded convolution's product). Without a record, the source as is."""
    from aot import record as records
    from aot.options import BuildOptions
    from aot.pipeline import load_model

    rec = records.read(bundle)
    if rec is None:
        return onnx.load(str(source))
    options = replace(BuildOptions.from_record(rec.options), plan_file=bundle / records.PLAN)
    return load_model(source, options)[0].model


def _profile_region(bundle: Path, manifest: mf.Manifest, region: mf.RegionEntry,
                    values: dict[str, np.ndarray], tmp: Path, runs: int) -> RegionProfile:
    driver = manifest.driver(region)
    args = [f"--module={mf.safe_member(bundle, region.module)}", f"--function={region.function}",
            f"--device={driver}", f"--benchmark_min_time={runs}x", "--benchmark_format=json",
            f"--device_profiling_mode={_MODES.get(driver, _DEVICE_MODE)}",
            f"--device_profiling_output={tmp / region.name}.ireeprof"]
    if manifest.weights:
        args.append(f"--parameters={manifest.weights.scope}={mf.safe_member(bundle, manifest.weights.path)}")
    if manifest.host_runtime and manifest.host_runtime.driver == driver:
        args += manifest.host_runtime.flags
    for i, name in enumerate(region.inputs):
        np.save(tmp / f"{region.name}.{i}.npy", values[name])
        args.append(f"--input=@{tmp / region.name}.{i}.npy")
    (timed,) = json.loads(_tool("iree-benchmark-module", args))["benchmarks"]
    rows = _tool("iree-profile", ["statistics", "--format=jsonl", f"{tmp / region.name}.ireeprof"])
    stats = _rows(rows)
    span = _profiled_span_us(stats)
    wall_us = span / runs if span else timed["real_time"] * _US[timed["time_unit"]]
    return RegionProfile(region.name, str(region.target), driver, runs, wall_us, _dispatches(stats, runs))


def _rows(jsonl: str) -> list[dict[str, Any]]:
    """``iree-profile statistics --format=jsonl``'s rows, parsed once for every reading of them."""
    return [json.loads(line) for line in jsonl.splitlines() if line.strip()]


def _profiled_span_us(rows: list[dict[str, Any]]) -> float | None:
    """From the first queue operation of the profiled calls to the end of the last, on the host's
    clock; None where the profile has none (a device's events keep their own clock). The wall time
    the profile divides is this, not iree-benchmark-module's mean: that counts the process's first
    call with everything it sets up before its first event (50 ms of AECMOS's 20 calls, 3.1 ms a
    call that no dispatch accounts for), while the dispatches' times cover the profiled calls alone."""
    timed = [r for r in rows if str(r.get("row_type", "")).endswith("queue_operation")
             and r.get("time_domain") == "iree_host_time_ns" and r.get("sample_count")]
    if not timed:
        return None
    return (max(r["last_end_time"] for r in timed) - min(r["first_start_time"] for r in timed)) / 1e3


def _dispatches(rows: list[dict[str, Any]], runs: int) -> tuple[DispatchTime, ...]:
    """One row per dispatch function: ``host_execution_function`` (local drivers) or
    ``dispatch_function`` (devices); each sample is one call."""
    found = [DispatchTime(r["function_name"], r["sample_count"] / runs, r["total_duration_ns"] / runs / 1e3)
             for r in rows if r.get("row_type") in ("host_execution_function", "dispatch_function")]
    return tuple(sorted(found, key=lambda d: -d.us))


def _onnxruntime(model: Path, feeds: dict[str, np.ndarray],
                 runs: int) -> tuple[float, tuple[tuple[str, float], ...]]:
    import onnxruntime as ort  # type: ignore[import-untyped]  # ships no stubs or py.typed

    plain = reference.session(model)
    wanted = {i.name for i in plain.get_inputs()}
    feeds = {k: v for k, v in feeds.items() if k in wanted}
    walls = timing.repeat(lambda: plain.run(None, feeds), runs, warmup=1)
    with tempfile.TemporaryDirectory(prefix="aot-ort-profile-") as tmp:
        options = ort.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    total: collections.Counter[str] = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            total[e["args"]["op_name"]] += e["dur"] / runs     # microseconds
    return timing.median_us(walls), tuple(total.most_common())


def _tool(name: str, args: list[str]) -> str:
    import iree._runtime_libs as libs

    argv = [str(Path(libs.__file__).parent / name), *args]
    proc = _run(argv)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise AotError(f"{name} failed (exit {proc.returncode}):\n{tail}",
                       hint="reproduce with: " + " ".join(argv))
    return proc.stdout


def _shares(items: tuple[tuple[str, float], ...], total: float, top: int = 6, ms: bool = True) -> str:
    return ", ".join(f"{k} {us / 1e3:.3f} ms ({100 * us / total:.0f}%)" if ms else f"{k} {100 * us / total:.0f}%"
                     for k, us in items[:top]) if total else "-"


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` run as a session runs a region. A call's large intermediates kept, not mapped and
    faulted in anew each call (runtime/heap.py), or a profile blames dispatches for the kernel's
    time. And as SCHED_BATCH, as a session's caller waits for IREE's workers (runtime/invoke.py):
    on the default policy the woken caller preempts the worker that signals it and the call stalls
    a scheduler tick, time the session does not lose (AECMOS: 83-91% of a call in dispatches, 96%
    as SCHED_BATCH). The whole tool runs so, its workers too: the caller is the one thread a tool
    can be started with."""
    return subprocess.run(argv, capture_output=True, text=True, env=heap.runner_environment(os.environ),
                          preexec_fn=invoke.batch_from_here)
