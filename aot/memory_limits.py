"""``--memory-limit`` around the pipeline: before partitioning, the operators over a device's
limit are split (``partition/splitting.py``; a plan file's splits are made again instead); after
compiling, what each dispatch on a limited device binds is recorded (``lower/dispatches.py``), the
check that the splits really shrank the dispatches. Both are in-memory steps of the plan and
memory stages: nothing is written to the bundle until its one atomic publish."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from aot.bundle.write import Staged
from aot.errors import UsageError
from aot.frontend.load import ModelSource
from aot.lower.dispatches import Dispatch, region_dispatches
from aot.options import BuildOptions
from aot.partition.plan import Plan
from aot.partition.splitting import SplitOutcome, replay, split_for_memory
from aot.partition.support import ACCEL, HOST, SupportTable
from aot.record import DispatchCheck


def split(source: ModelSource, options: BuildOptions) -> SplitOutcome | None:
    """Operators split to fit ``--memory-limit`` (partition/splitting.py), or a plan file's
    splits made again; None when there is neither."""
    if options.plan_file is not None:
        pinned = Plan.load(options.plan_file).splits
        return replay(source.model, pinned) if pinned else None
    if not options.memory_limits:
        return None
    limits = _limits(options)
    used = {HOST: options.host.driver, **({ACCEL: options.accel.driver} if options.accel else {})}
    if unused := sorted(set(limits) - set(used.values()) - {"local-sync"}):
        raise UsageError(f"--memory-limit names {', '.join(unused)}, which this build does not use",
                         hint=f"its devices' drivers are {', '.join(used.values())}")
    popts = options.partition_options()
    table = SupportTable.for_target(popts.accel_target) if popts.accel_target else None
    return split_for_memory(source.model, table, options.overrides, limits, used)


def _limits(options: BuildOptions) -> dict[str, int]:
    """``--memory-limit`` per driver; the host runs on either CPU driver, so one limit covers both."""
    limits = dict(options.memory_limits)
    host = [limits.pop(d) for d in ("local-task", "local-sync") if d in limits]
    return {**limits, "local-task": min(host), "local-sync": min(host)} if host else limits


def refuse_torch(options: BuildOptions) -> None:
    """Operator splitting rewrites ONNX nodes: a PyTorch module (ATen ops in MLIR) has none."""
    if options.memory_limits:
        raise UsageError("--memory-limit splits operators of an ONNX model; a PyTorch module is exported to "
                         "MLIR, which aot does not split",
                         hint="export the module to ONNX (torch.onnx.export) and build the .onnx file, "
                              "or build without --memory-limit")


def with_dispatch_check(staged: Staged, options: BuildOptions, cache: Path) -> Staged:
    """Record what each region's dispatches bind on a limited device (iree-compile's stream phase,
    lower/dispatches.py): whether the splits shrank them, or IREE fused them back."""
    m, record, limits = staged.manifest, staged.record, _limits(options)
    assert staged.sources is not None and record.partition.memory is not None
    checks = []
    for r in m.regions:
        limit = limits.get(m.driver(r))
        if limit is None:
            continue
        found = region_dispatches(r, (staged.sources / f"{r.name}.mlir").read_bytes(), cache)
        largest = max(found, key=lambda d: d.bytes, default=Dispatch("-", 0, 0))
        checks.append(DispatchCheck(r.name, m.driver(r), limit, len(found), largest.bytes, largest.name,
                                    sum(d.bytes > limit for d in found), max((d.bound for d in found), default=0)))
    memory = dataclasses.replace(record.partition.memory, dispatches=tuple(checks))
    return dataclasses.replace(staged, record=dataclasses.replace(
        record, partition=dataclasses.replace(record.partition, memory=memory)))
