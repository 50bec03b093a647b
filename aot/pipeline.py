"""The build, as one straight line of stages over frozen values:

    load -> plan -> import -> outline -> compile -> stage -> verify -> tune -> measure -> publish

Verification, tuning and the measured gate do not rebuild: they return a new plan, the pipeline compiles
it again (the content-hash cache makes unchanged regions free) and stages a new candidate. Exactly
one candidate is published, once, atomically.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Union

from aot.bundle.write import Bundle, Staged, describe, publish_bundle, stage, weights_entry
from aot.checks import measure, measured_order, verify
from aot.checks.reference import random_inputs
from aot.errors import PartitionError
from aot import memory_limits
from aot.frontend.graph import GraphView
from aot.frontend.load import ModelSource, load
from aot.frontend.source import region_families
from aot.learn.narrow import learned_chooser
from aot.lower.compile import CompileJob, compile_all
from aot.lower import host_lowering
from aot.lower.executor import Executor, executor_for
from aot.lower.footprint import device_memory
from aot.lower.importer import ImportedModule, import_source
from aot.lower.outline import outline
from aot.options import BuildOptions
from aot.partition import Plan, validate
from aot.partition.plan import Gate, GateMode
from aot.partition.cost import CostModel, region_estimate
from aot.partition import policies
from aot.partition.partitioner import PartitionOptions, Partitioned, partition, single_region_plan, suggestions
from aot.partition.segments import segments
from aot.partition.splitting import SplitOutcome
from aot.partition.support import ACCEL, HOST, SupportTable, coverage
from aot.record import (CoverageRecord, MemoryRecord, Narrowing, PartitionRecord, RegionCheck, Rewrite,
                        SegmentRecord, Tuning, UnsupportedOp, Verification)
from aot.runtime import codec
from aot.runtime.manifest import Weights
from aot.tune.runtime import choose_host_runtime
from aot.tune.search import tune_regions
from aot.tune.segments import Choose, tune_segments
from aot.workspace import Workspace

if TYPE_CHECKING:
    from aot.frontend.torch.export import TorchSource

Progress = Callable[[str], None]
Source = Union[ModelSource, "TorchSource"]   # what a front end hands the partitioner


@dataclass(frozen=True, slots=True)
class Planned:
    """A loaded model and its plan: everything `aot plan` shows, before IREE is involved."""

    source: "Source"
    view: GraphView
    plan: Plan
    options: PartitionOptions
    cost: CostModel              # loaded once: estimates for every candidate and the plan summary
    record: PartitionRecord      # how the plan was made, as the manifest states it
    greedy: Plan | None = None   # --order search: the greedy plan the search replaced (--measure times it)
    candidates: tuple[Plan, ...] = ()   # --order search --measure: plans timed region by region


@dataclass(frozen=True, slots=True)
class BuildResult:
    bundle: Bundle
    plan: Plan
    timings: tuple[tuple[str, float], ...] = ()


def plan_model(model: Path, options: BuildOptions = BuildOptions(), *, suggest: bool = True) -> Planned:
    """Load an ONNX model and partition it (``options.plan_file``: validate and use that plan)."""
    source, split = load_model(model, options)
    return plan_source(source, GraphView.from_onnx(source.model), options, suggest=suggest, split=split)


def load_model(model: Path, options: BuildOptions) -> tuple[ModelSource, SplitOutcome | None]:
    """The ONNX model as a build with ``options`` partitions it, whose tensors its regions pass
    (`aot profile` reads them too): loaded, and its operators split for memory (a plan file's
    splits made again)."""
    # The CPU's convolution rewrites run before partitioning, so only where every node runs on
    # the CPU: an accelerator keeps its convolution kernels (and the partitioner its node counts).
    source = load(model, dict(options.input_shapes), dict(options.constant_inputs), options.index_guards,
                  cpu_conv_rewrites=options.accel is None)
    if options.name:
        source = dataclasses.replace(source, name=options.name)
    split = memory_limits.split(source, options)
    if split is not None:
        source = dataclasses.replace(source, model=split.model)
    return source, split


def plan_torch(source: "TorchSource", options: BuildOptions = BuildOptions(), *, suggest: bool = True) -> Planned:
    """Partition an exported PyTorch module, its graph view read from the exported MLIR."""
    from aot.frontend.torch.view import view_of

    memory_limits.refuse_torch(options)
    if options.name:
        source = dataclasses.replace(source, name=options.name)
    return plan_source(source, view_of(source), options, suggest=suggest)


def plan_source(source: "Source", view: GraphView, options: BuildOptions, *, suggest: bool = True,
                split: SplitOutcome | None = None) -> Planned:
    """Partition either front end's model: the same policies, gate and record for both.
    ``split``: what memory splitting made of the model (``view`` is of the split model)."""
    popts = options.partition_options()
    if split is not None:
        popts = dataclasses.replace(popts, node_labels=split.labels)
    candidates: tuple[Plan, ...]
    if options.plan_file is not None:
        plan = Plan.load(options.plan_file)
        try:
            validate(plan, view)
        except PartitionError as e:
            raise PartitionError(f"--plan {str(options.plan_file)!r} does not fit this model: {e.message}",
                                 hint="a plan replays the graph it was made for; another model, input shape, or "
                                      "aot version (whose front end rewrites some ops differently) gives another "
                                      "graph: build without --plan to plan it again") from None
        searched, greedy, candidates = None, None, ()    # a plan file is replayed: nothing is searched
    else:
        partitioned = (partition(view, popts) if not _learned(popts) else
                       learned_decide(view, popts, options))
        plan, searched, greedy = partitioned.plan, partitioned.order_search, partitioned.greedy
        if split is not None:
            plan = dataclasses.replace(plan, splits=split.splits)
            greedy = greedy and dataclasses.replace(greedy, splits=split.splits)
        candidates = tuple(dataclasses.replace(c, splits=plan.splits) for c in partitioned.candidates)
    segs = segments(view, popts.min_segment_nodes)
    # Suggestions re-partition with other settings: under --policy learned, with the greedy merge it uses.
    tips = suggestions(view, dataclasses.replace(popts, policy="greedy", gate=GateMode.OFF) if _learned(popts)
                       else popts, plan) if suggest and options.plan_file is None else ()
    cov = coverage(view, SupportTable.for_target(popts.accel_target)) if popts.accel_target else None
    cost = CostModel.load(popts.accel_target, popts.cost_params)
    record = PartitionRecord(
        popts.policy, popts.select, popts.min_compute, plan.gate,
        CoverageRecord(cov.target, cov.supported, cov.total, tuple(UnsupportedOp(*u) for u in cov.unsupported))
        if cov is not None else None,
        tips, cost.source,
        tuple(SegmentRecord(s.index, len(s.nodes), s.keys[0] if s.keys else None, s.keys[-1] if s.keys else None)
              for s in segs), searched,
        MemoryRecord(options.memory_limits, plan.splits, tuple((h.node, h.reason) for h in split.hosted))
        if split is not None else None)
    return Planned(source, view, plan, popts, cost, record, greedy, candidates)


def _learned(popts: PartitionOptions) -> bool:
    return popts.policy == policies.LEARNED or popts.gate is GateMode.LEARNED


def learned_decide(view: GraphView, popts: PartitionOptions, options: BuildOptions) -> Partitioned:
    """--policy/--gate learned (aot/learn/decide.py: numpy and SQLite only, imported when asked for)."""
    from aot.learn.decide import decide

    return decide(view, popts, options)


def whole_model(planned: Planned) -> Planned:
    """The same model as one host region (the benchmark's and the measured gate's baseline)."""
    plan = dataclasses.replace(single_region_plan(planned.view), splits=planned.plan.splits)
    # One host module: no accelerator coverage, gate or suggestions to report.
    record = dataclasses.replace(planned.record, gate=None, coverage=None, suggestions=(), order_search=None)
    return dataclasses.replace(planned, plan=plan, record=record)


def all_on_host(planned: Planned) -> Planned:
    """The same partition with every region compiled for the host (isolates partitioning cost)."""
    plan = dataclasses.replace(planned.plan, regions=tuple(dataclasses.replace(r, device=HOST)
                                                           for r in planned.plan.regions))
    return dataclasses.replace(planned, plan=plan)


def build(model: Path, out_dir: Path, options: BuildOptions = BuildOptions(),
          progress: Progress = lambda s: None) -> BuildResult:
    """Build ``model`` into ``out_dir/bundle``; see the module docstring for the stages."""
    clock = _Clock(progress)
    planned = plan_model(model, options)
    clock.done("plan", f"{len(planned.view.nodes)} nodes -> {len(planned.plan.regions)} region(s)")
    return build_planned(planned, out_dir, options, progress, clock)


def build_torch(source: "TorchSource", out_dir: Path, options: BuildOptions = BuildOptions(),
                progress: Progress = lambda s: None) -> BuildResult:
    """Build an exported PyTorch module into ``out_dir/bundle``: the same stages from the plan on."""
    clock = _Clock(progress)
    planned = plan_torch(source, options)
    clock.done("plan", f"{len(planned.view.nodes)} nodes -> {len(planned.plan.regions)} region(s)")
    return build_planned(planned, out_dir, options, progress, clock)


def build_planned(planned: Planned, out_dir: Path, options: BuildOptions = BuildOptions(),
                  progress: Progress = lambda s: None, clock: "_Clock | None" = None,
                  cache: Path | None = None) -> BuildResult:
    """Compile, check and publish exactly ``planned.plan`` (``cache``: a compile cache shared
    with other builds, where ``AOT_CACHE_DIR`` does not name one)."""
    clock = clock or _Clock(progress)
    ws = Workspace.at(Path(out_dir))
    if cache is not None and ws.shared_cache is None:
        ws = dataclasses.replace(ws, shared_cache=cache)
    ws.prepare()
    try:
        staged = stage_planned(planned, ws, options, progress, clock)
        bundle = publish_bundle(staged, ws.bundle)
        clock.done("publish", str(bundle.path))
    finally:
        ws.discard_staging()
    return BuildResult(bundle, staged.plan, clock.timings())


@dataclass(frozen=True, slots=True)
class StagedBuild:
    """A build that stopped short of publishing: its candidate in ``ws``'s staging area, for a
    caller that publishes several together once (shape buckets)."""

    staged: Staged
    timings: tuple[tuple[str, float], ...]


def stage_model(model: Path, ws: Workspace, options: BuildOptions = BuildOptions(),
                progress: Progress = lambda s: None) -> StagedBuild:
    """``build`` up to the published bundle: plan, compile, verify, tune, measure and record
    memory; the candidate stays staged in ``ws`` until the caller publishes or discards it."""
    clock = _Clock(progress)
    planned = plan_model(model, options)
    clock.done("plan", f"{len(planned.view.nodes)} nodes -> {len(planned.plan.regions)} region(s)")
    ws.prepare()
    return StagedBuild(stage_planned(planned, ws, options, progress, clock), clock.timings())


def stage_planned(planned: Planned, ws: Workspace, options: BuildOptions, progress: Progress,
                  clock: "_Clock") -> Staged:
    """Every stage but the publish, for exactly ``planned.plan``: the chosen candidate, staged."""
    if options.tune:   # a search decides the flags and the host runtime anew
        planned = dataclasses.replace(planned, plan=planned.plan.unpinned())
    executor = executor_for(options.cluster)
    try:
        if "plan" in options.dump_after:
            planned.plan.save(ws.build / "01-plan.json")
        imported = import_source(planned.source, ws.params)
        if "import" in options.dump_after:
            (ws.build / "02-import.mlir").write_text(imported.mlir)
        clock.done("import", f"weights in {ws.params.name}")
        compile_ = _Compiler(ws, planned, imported, weights_entry(imported.params_path), options, clock, executor)
        staged = compile_(planned.plan, "built")
        if _should_measure(staged, options) and planned.candidates:   # score the search with measured regions
            rescored = measured_order.rescore(planned.view, planned.options, planned.candidates, staged, compile_,
                                              clock.done)
            staged = rescored.staged
            planned = dataclasses.replace(planned, plan=staged.plan, greedy=rescored.greedy, record=staged.record.partition)
            compile_ = dataclasses.replace(compile_, planned=planned)   # later candidates keep the measured record
        staged = _verification(staged, planned, compile_, options, progress)
        if options.tune:
            staged = _tuned(staged, planned, compile_, options, progress)
            clock.done("tune", f"{len(staged.manifest.regions)} region(s)")
        if _should_measure(staged, options) and planned.greedy is not None:
            staged = measured_order.against_greedy(staged, planned.greedy, compile_, progress)
        if _should_measure(staged, options):
            staged = measure.gate(staged, compile_(whole_model(planned).plan, "whole-host"), progress)
        if options.gate is GateMode.LEARNED and options.measure_prediction and staged.plan.gate is not None:
            staged = measure.prediction(staged, progress)
        staged = _with_memory(staged, ws)
        clock.done("memory", ", ".join(f"{m.driver} {m.text()}" for m in staged.manifest.memory))
        if options.memory_limits and staged.record.partition.memory is not None:
            staged = memory_limits.with_dispatch_check(staged, options, ws.cache)
            checks = staged.record.partition.memory.dispatches if staged.record.partition.memory else ()
            clock.done("dispatch", ", ".join(f"{c.region} largest {c.largest} B, {c.over} over" for c in checks)
                       or "no region on a limited device")
    finally:
        executor.close()
    return staged


@dataclass(frozen=True, slots=True)
class _Compiler:
    """outline -> compile -> stage for any plan of one imported model."""

    ws: Workspace
    planned: Planned
    imported: ImportedModule
    weights: Weights
    options: BuildOptions
    clock: "_Clock"
    executor: Executor

    def __call__(self, plan: Plan, candidate: str, opt: dict[str, tuple[str, ...]] | None = None) -> Staged:
        """``opt``: region -> optimisation flags (tuned); other regions get their target's defaults."""
        host, accel = self.options.host, self.options.accel
        target = {r.name: accel if r.device == ACCEL and accel else host for r in plan.regions}
        on_host = frozenset(r for r, t in target.items() if t is host)
        outlined, rewrites = host_lowering.lower(outline(self.imported, plan, self.planned.view), on_host)
        for o in outlined:
            path = self.ws.region_mlir(candidate, o.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(o.mlir)
        self.clock.done("outline", f"{len(outlined)} module(s) in {path.parent}")
        opt = {**plan.pinned_flags, **(opt or {})}   # a replayed plan's pins, then a search's candidates
        jobs = [CompileJob(r.name, self.ws.region_mlir(candidate, r.name), target[r.name], opt.get(r.name))
                for r in plan.regions]
        compiled = compile_all(jobs, self.ws.cache, fallback=host, accel_timeout=self.options.accel_compile_timeout,
                               executor=self.executor)
        fallbacks = sum(c.fallback is not None for c in compiled)
        self.clock.done("compile", f"{len(compiled)} region(s), {sum(c.cached for c in compiled)} cached, "
                                   f"{fallbacks} fell back")
        estimates = {c.region: region_estimate(plan.region(c.region).nodes, HOST if c.target.is_host else ACCEL,
                                               self.planned.view, self.planned.cost) for c in compiled}
        record = dataclasses.replace(self.planned.record, gate=plan.gate)
        described = describe(self.planned.source, self.planned.view, plan, record, outlined, compiled,
                             estimates, self.weights, codec.encode(self.options),
                             tuple(Rewrite("Conv", count, why) for why, count in rewrites if count))
        path = self.ws.staging(candidate)
        stage(path, compiled, self.imported.params_path, link_modules=self.ws.shared_cache is None)
        return Staged(path, described.manifest, described.record, plan,
                      self.ws.region_mlir(candidate, "r").parent)


def _with_memory(staged: Staged, ws: Workspace) -> Staged:
    """Record what one run holds on each device, for the runtime's preflight (lower/footprint.py)."""
    m = staged.manifest
    weights = None if m.weights is None else staged.path / m.weights.path
    assert staged.sources is not None    # compiled by this build: its region MLIR is at hand
    memory = device_memory(m, staged.sources, weights, ws.cache)
    return dataclasses.replace(staged, manifest=dataclasses.replace(m, memory=memory))


def _verification(staged: Staged, planned: Planned, compile_: _Compiler, options: BuildOptions,
                  progress: Progress) -> Staged:
    """Verify the accelerator regions where their device is here (or ``--verify`` insists);
    otherwise the record says why they were not checked."""
    accel = [r for r in staged.manifest.regions if not r.target.is_host]
    if not accel or options.verify is False:
        return staged
    why = verify.cannot_verify_here(accel)
    if why is None or options.verify:
        return _verified(staged, planned, compile_, progress)
    progress(f"verify   skipped: {why}; run `aot check` on the target machine")
    return dataclasses.replace(staged, record=dataclasses.replace(staged.record,
                                                                  verification=Verification((), (), why)))


def _verified(staged: Staged, planned: Planned, compile_: _Compiler, progress: Progress) -> Staged:
    """Check accelerator regions on their device; move failures to the host and compile the new
    plan, until every remaining accelerator region matches the reference (each round moves at least
    one region to the host, so this ends)."""
    inputs = random_inputs(staged.manifest.inputs, seed=0)
    reference = {**verify.reference_values(planned.source, inputs), **inputs}
    moved: tuple[RegionCheck, ...] = ()
    for round_ in range(1, len(staged.plan.regions) + 2):
        checks = verify.verify_regions(staged.path, staged.manifest, reference)
        for c in checks:
            progress(f"verify   {c.region}: {'ok' if c.ok else 'FAILED: ' + str(c.error)}"
                     + (f" (max abs diff {c.max_abs_diff:.3g})" if c.max_abs_diff is not None else ""))
        bad = tuple(c for c in checks if not c.ok)
        if not bad:
            record = dataclasses.replace(staged.record, verification=Verification(checks, moved))
            return dataclasses.replace(staged, record=record)
        moved += bad
        progress(f"verify   moving {', '.join(c.region for c in bad)} to the host and compiling again")
        staged = compile_(verify.move_to_host(staged.plan, bad), f"verified-{round_}")
    raise AssertionError("verification did not converge")  # unreachable: each round moves a region


def _tuned(staged: Staged, planned: Planned, compile_: _Compiler, options: BuildOptions,
           progress: Progress) -> Staged:
    """Search each region's flags on its device, compile the winners, then choose the host
    runtime for the tuned bundle; with ``--tune-segments``, per-segment flags (tune/segments.py).
    Candidates are checked against the reference like verification does, so the tuned bundle
    keeps the verification record."""
    settings = options.tune_settings()
    inputs = random_inputs(staged.manifest.inputs, seed=0)
    reference = {**verify.reference_values(planned.source, inputs), **inputs}

    def search(cand: Staged, choose: Choose | None = None) -> dict[str, Tuning]:
        sources = cand.sources
        assert sources is not None
        return tune_regions(cand.path, cand.manifest, reference, lambda r: sources / f"{r}.mlir",
                            lambda r: region_families(planned.source, planned.view, cand.plan.region(r).nodes),
                            compile_.ws.cache, compile_.executor, settings, progress, choose)

    made: dict[str, Narrowing] = {}
    narrow, why_not = (learned_chooser(staged.plan, planned.view, options, options.tune_top, made)
                       if options.tune_top else (None, ""))
    if why_not:
        progress(f"tune     --tune-top {options.tune_top}: {why_not}")
    tunings = search(staged, narrow)
    tunings = {r: dataclasses.replace(t, narrowed=made.get(r)) for r, t in tunings.items()}
    for r, n in made.items():
        progress(f"tune     {r}: timed {len(n.kept)} of {len(n.predicted)} candidate(s), the learned model's "
                 f"predicted fastest: {', '.join(n.kept)}")
    winners = {r: next(c.flags for c in t.candidates if c.name == t.winner) for r, t in tunings.items()}
    # A region that fell back to the host was tuned for the host: compile it for the host. The
    # winners are pinned in the plan, so a build of the published plan.json replays them.
    plan = dataclasses.replace(staged.plan, regions=tuple(
        dataclasses.replace(r, device=HOST if staged.manifest.region(r.name).target.is_host else r.device,
                            flags=winners[r.name])
        for r in staged.plan.regions))
    tuned = compile_(plan, "tuned")
    record = dataclasses.replace(tuned.record.with_tuning(tunings), verification=staged.record.verification)
    runtime, measured = choose_host_runtime(tuned.path, tuned.manifest, compile_.ws.cache, settings, progress)
    single = dataclasses.replace(tuned, manifest=dataclasses.replace(tuned.manifest, host_runtime=runtime),
                                 record=dataclasses.replace(record, host_runtime_measured=measured),
                                 plan=dataclasses.replace(plan, host_runtime=runtime))
    if settings.segments and options.plan_file is None:   # a plan file pins its cuts: nothing to search
        # Every key node a cut point (min 1 node): grouping by FLOP share does the merging.
        single, _ = tune_segments(single, planned.view, segments(planned.view), tunings, compile_, search, settings,
                                  compile_.ws.cache, progress)
    return single


def _should_measure(staged: Staged, options: BuildOptions) -> bool:
    """The measured gate times a partition, unless a plan file pinned what it decided."""
    return options.gate is GateMode.MEASURED and options.plan_file is None and len(staged.plan.regions) > 1


class _Clock:
    """Stage timings for the result and the progress line of each stage."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._last = time.perf_counter()
        self._timings: list[tuple[str, float]] = []

    def done(self, stage: str, detail: str) -> None:
        now = time.perf_counter()
        self._timings.append((stage, now - self._last))
        self._last = now
        self._progress(f"{stage:8s} {detail} ({self._timings[-1][1]:.1f}s)")

    def timings(self) -> tuple[tuple[str, float], ...]:
        return tuple(self._timings)
