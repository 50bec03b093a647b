"""Wire the stages: load -> view -> plan -> import -> outline -> compile -> bundle."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from aot.frontend import load as load_mod
from aot.bundle.write import Bundle, write_bundle
from aot.lower.compile import CompileJob, compile_all
from aot.frontend.graph import GraphView
from aot.lower.importer import import_model
from aot.lower.outline import outline
from aot.partition import Plan, make_plan, validate
from aot.partition.partitioner import PartitionOptions, single_region_plan, suggestions
from aot.partition.support import ACCEL, Coverage, Overrides, SupportTable, coverage
from aot.target import Target, accel_target
from aot.checks.verify import device_present
from aot.workspace import Workspace

@dataclass(frozen=True, slots=True)
class BuildOptions:
    accel: str = "vulkan"                    # vulkan | cuda | none
    vulkan_target: str = "llvmpipe"
    cuda_target: str = "sm_80"
    name: str | None = None                  # model name in the manifest and stub (default: graph name)
    host_cpu: str = "host"                   # llvm-cpu target CPU; name one (x86-64-v3) to deploy elsewhere
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    constant_inputs: tuple[tuple[str, Any], ...] = ()  # (input name, number or nested list) baked in
    min_compute: int = 2
    policy: str = "greedy"                   # greedy | depth
    select: str = "all"                      # all | largest | threshold | largest+threshold | cost
    threshold: int = 0
    gate: bool = True
    accel_compile_timeout: float = 300.0     # past this an accelerator region falls back to the host
    measure: bool = False                    # time regions on the real devices; gate on measurements
    verify: bool | None = None               # check accelerator regions on their device (None: when present)
    plan: Plan | None = None                 # build exactly this plan (verification repairs use it)
    cost_params: Path | None = None
    overrides: Overrides = Overrides()
    plan_file: Path | None = None
    all_host: bool = False                   # compile every region for llvm-cpu (benchmarks)
    whole: bool = False                      # one region, no partitioning (benchmarks)
    dump_after: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class BuildResult:
    bundle: Bundle
    plan: Plan
    timings: tuple[tuple[str, float], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Planned:
    source: load_mod.ModelSource
    view: GraphView
    plan: Plan
    options: PartitionOptions
    coverage: Coverage | None
    suggestions: tuple[str, ...]


def plan_model(model: Path, options: BuildOptions, *, suggest: bool = True) -> Planned:
    """Load and partition without compiling (what `aot build` does before IREE is involved)."""
    source = load_mod.load(model, dict(options.input_shapes), dict(options.constant_inputs))
    if options.name:
        source = dataclasses.replace(source, name=options.name)
    view = GraphView.from_onnx(source.model)
    target = None if options.whole else accel_target(options.accel, vulkan_target=options.vulkan_target,
                                                       cuda_target=options.cuda_target)
    popts = PartitionOptions(target.backend if target else None, options.min_compute, options.overrides,
                             options.policy, options.select, options.threshold, options.gate, options.cost_params)
    if options.whole:
        plan = single_region_plan(view)
    elif options.plan is not None:
        plan = options.plan
        validate(plan, view)
    elif options.plan_file is not None:
        plan = Plan.load(options.plan_file)
        validate(plan, view)
    else:
        plan = make_plan(view, popts)
    cov = coverage(view, SupportTable.for_target(target.backend)) if target else None
    fixed = options.plan_file is not None or options.plan is not None or options.whole
    tips = suggestions(view, popts, plan) if suggest and not fixed else ()
    return Planned(source, view, plan, popts, cov, tips)


def build(model: Path, out_dir: Path, options: BuildOptions = BuildOptions(),
          progress: Callable[[str], None] = lambda s: None) -> BuildResult:
    ws = Workspace(Path(out_dir))
    timings: list[tuple[str, float]] = []
    clock = time.perf_counter()

    def done(stage: str, detail: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings.append((stage, now - clock))
        clock = now
        progress(f"{stage:8s} {detail} ({timings[-1][1]:.1f}s)")

    planned = plan_model(model, options)
    source, view, plan = planned.source, planned.view, planned.plan
    done("plan", f"{len(view.nodes)} nodes -> {len(plan.regions)} region(s)")
    ws.prepare()
    if "plan" in options.dump_after:
        plan.save(ws.build / "01-plan.json")
    imported = import_model(source, ws.params)
    if "import" in options.dump_after:
        (ws.build / "02-import.mlir").write_text(imported.mlir)
    done("import", f"weights in {ws.params.name}")
    outlined = outline(imported, plan, view)
    for o in outlined:
        ws.region_mlir(o.name).write_text(o.mlir)
    done("outline", f"{len(outlined)} module(s) in {ws.build / 'regions'}")
    accel = None if options.all_host else accel_target(options.accel, vulkan_target=options.vulkan_target,
                                                        cuda_target=options.cuda_target)
    host = Target("llvm-cpu", options.host_cpu)
    jobs = [CompileJob(r.name, ws.region_mlir(r.name), accel if (r.device == ACCEL and accel is not None) else host)
            for r in plan.regions]
    compiled = compile_all(jobs, ws.cache, fallback=host, accel_timeout=options.accel_compile_timeout)
    fallbacks = sum(c.fallback is not None for c in compiled)
    done("compile", f"{len(compiled)} region(s), {sum(c.cached for c in compiled)} cached, {fallbacks} fell back")
    bundle = write_bundle(ws, planned, imported, outlined, compiled)
    done("bundle", str(bundle.path))
    result = BuildResult(bundle, plan, tuple(timings))
    drivers = {r["driver"] for r in bundle.manifest["regions"] if r["target"] != "llvm-cpu"}
    if drivers and (options.verify or (options.verify is None and all(device_present(d) for d in drivers))):
        result = _verified(model, ws, options, planned, result, progress)
    if options.measure and len(result.plan.regions) > 1:
        return _measured_gate(model, ws, options, result, progress)
    return result


def _verified(model: Path, ws: Workspace, options: BuildOptions, planned: Planned, result: BuildResult,
              progress: Callable[[str], None], moved: tuple[dict, ...] = ()) -> BuildResult:
    """Verify accelerator regions on their device; move failures to the host and rebuild until
    every remaining accelerator region matches onnxruntime."""
    from aot.runtime import manifest as mf
    from aot.checks import verify
    from aot.checks.golden import random_inputs

    checks = verify.verify_bundle(result.bundle.path, planned.source.model,
                                  random_inputs(result.bundle.manifest["inputs"], seed=0))
    bad = [c for c in checks if not c.ok]
    for c in checks:
        progress(f"verify   {c.region}: {'ok' if c.ok else 'FAILED: ' + str(c.error)}"
                 + (f" (max abs diff {c.max_abs_diff:.3g})" if c.max_abs_diff is not None else ""))
    if not bad:
        record = {"checked": [c.to_json() for c in checks], "moved_to_host": list(moved)}
        manifest = mf.amend(result.bundle.path, {}, None, verification=record)
        return BuildResult(dataclasses.replace(result.bundle, manifest=manifest), result.plan, result.timings)
    failed = {c.region: c for c in bad}
    plan = result.plan
    regions = tuple(dataclasses.replace(r, device="host") if r.name in failed else r for r in plan.regions)
    reasons = dict(plan.reasons)
    for r in plan.regions:
        if r.name in failed:
            reasons.update({n: f"verification moved region {r.name} to the host: {failed[r.name].error}" for n in r.nodes})
    repaired = Plan(regions, plan.schedule, tuple(sorted(reasons.items())), plan.gate)
    progress(f"verify   moving {', '.join(failed)} to the host and rebuilding")
    again = build(model, ws.root, dataclasses.replace(options, plan=repaired, verify=False, measure=False))
    planned_again = dataclasses.replace(planned, plan=repaired)
    return _verified(model, ws, options, planned_again, again, progress,
                     moved + tuple(c.to_json() for c in bad))


def _measured_gate(model: Path, ws: Workspace, options: BuildOptions, result: BuildResult,
                   progress: Callable[[str], None]) -> BuildResult:
    """Time the partitioned bundle and the whole model on the host; keep whichever is faster."""
    from aot.runtime import manifest as mf
    from aot.checks import measure

    whole = build(model, ws.build / "whole-host", dataclasses.replace(options, whole=True, measure=False))
    part_us, per_region = measure.profile_bundle(result.bundle.path, ws.cache)
    host_us, host_regions = measure.profile_bundle(whole.bundle.path, ws.cache)
    accepted = part_us < host_us
    detail = f"measured partitioned {part_us:.1f} us vs whole model on the host {host_us:.1f} us (medians)"
    gate = {"accepted": accepted, "partitioned_us": part_us, "all_host_us": host_us, "all_accel_us": None,
            "detail": detail, "measured": True}
    progress(f"measure  {detail}: partition {'kept' if accepted else 'rejected'}")
    if accepted:
        manifest = mf.amend(result.bundle.path, per_region, gate)
        return BuildResult(dataclasses.replace(result.bundle, manifest=manifest), result.plan, result.timings)
    # The gate rejects the partition: ship the single host module (already compiled and cached).
    single = build(model, ws.root, dataclasses.replace(options, whole=True, measure=False))
    manifest = mf.amend(single.bundle.path, host_regions, gate)
    return BuildResult(dataclasses.replace(single.bundle, manifest=manifest), single.plan, result.timings)
