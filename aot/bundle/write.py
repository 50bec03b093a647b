"""Assemble a bundle in a staging folder and publish it atomically.

A build stages one or more candidates (modules and weights in a staging folder, plus the manifest
that describes them, still in memory), verifies and measures them there, and publishes exactly
one: its manifest, plan and stubs are written and checked, then the folder replaces the bundle in
one rename. A failed build never leaves a partial bundle or destroys the previous good one.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import aot
from aot.frontend.graph import GraphView
from aot.frontend.load import ModelSource, TensorSpec
from aot.lower.compile import CompiledRegion
from aot.lower.importer import PARAMS_SCOPE
from aot.lower.outline import OutlinedRegion
from aot.partition.cost import RegionEstimate
from aot.partition.plan import Plan
from aot.runtime import codec, lanes
from aot.runtime import manifest as mf
from aot.record import PLAN, BuildRecord, GraphNode, Machine, PartitionRecord, RegionRecord, Rewrite
from aot.runtime.manifest import BoundaryTensor, ConstantInput, Manifest, ModelInfo, RegionEntry, TensorSig, Weights
from aot.workspace import publish

if TYPE_CHECKING:
    from aot.frontend.torch.export import TorchSource


@dataclass(frozen=True, slots=True)
class Staged:
    """A candidate bundle: its files in ``path``, described by ``manifest`` (the deploy contract)
    and ``record`` (how it was built), neither written yet."""

    path: Path
    manifest: Manifest
    record: BuildRecord
    plan: Plan
    sources: Path | None = None   # the folder of region MLIR it was compiled from (region.mlir)


@dataclass(frozen=True, slots=True)
class Bundle:
    """A published bundle."""

    path: Path
    manifest: Manifest
    record: BuildRecord
    stub: Path


@dataclass(frozen=True, slots=True)
class Described:
    manifest: Manifest
    record: BuildRecord


def describe(source: "ModelSource | TorchSource", view: GraphView, plan: Plan, partition: PartitionRecord,
             outlined: tuple[OutlinedRegion, ...], compiled: tuple[CompiledRegion, ...],
             estimates: Mapping[str, RegionEstimate], weights: Weights, options: Any,
             lowered: tuple[Rewrite, ...] = ()) -> Described:
    """The deploy contract and the build record of a compiled plan (pure: everything they state
    is handed in). ``options``: the resolved build options as JSON; ``lowered``: the rewrites made
    to the outlined regions' IR (``lower/depthwise.py``, ``lower/direct_conv.py``), after the front end's."""
    by_name = {c.region: c for c in compiled}
    regions, records = [], []
    boundary: dict[str, BoundaryTensor] = {}
    for o in outlined:
        c, r, e = by_name[o.name], plan.region(o.name), estimates[o.name]
        regions.append(RegionEntry(name=o.name, target=c.target, module=f"modules/{o.name}.vmfb",
                                   function=o.function, inputs=o.inputs, outputs=o.outputs, sha256=c.sha256,
                                   flags=c.opt_flags))
        records.append(RegionRecord(name=o.name, planned_device=r.device, nodes=r.nodes,
                                    compute_nodes=e.compute_nodes, flops=e.flops, estimated_us=e.estimated_us,
                                    fallback=c.fallback))
        for v in (*o.inputs, *o.outputs):
            val = view.values[v]
            boundary[v] = BoundaryTensor(val.dtype, val.shape, val.nbytes)
    record = BuildRecord(
        opset=source.opset, folded_nodes=source.folded_nodes, options=options, partition=partition,
        host_reasons=plan.reasons,
        graph=tuple(GraphNode(n.name, n.op_type, n.inputs, n.outputs) for n in view.nodes),
        regions=tuple(records), machine=Machine.this(),
        rewrites=(*(Rewrite(e.op_type, e.count, e.reason) for e in source.expanded), *lowered))
    manifest = Manifest(
        model=ModelInfo(name=source.name, sha256=source.sha256, source=str(source.path), frontend=source.frontend),
        inputs=tuple(map(_sig, source.inputs)),
        outputs=tuple(map(_sig, source.outputs)),
        constant_inputs=tuple(ConstantInput(n, v.dtype.name, tuple(v.shape), codec.freeze(v.tolist()))
                              for n, v in source.constants),
        weights=weights,
        regions=tuple(regions),
        schedule=plan.schedule,
        boundary_tensors=tuple(boundary.items()),
        cpu_flags=mf.cpu_flags(),
        toolchain=(("aot", aot.__version__), ("iree-base-compiler", version("iree-base-compiler")),
                   ("iree-base-runtime", version("iree-base-runtime")), ("onnx", version("onnx")),
                   *source.versions),
        index_ops=source.index_ops,
        host_runtime=plan.host_runtime,   # pinned by a replayed plan; a tuning build sets it after timing
        overlap=lanes.overlapping(plan.schedule, lanes.waits({o.name: o.inputs for o in outlined},
                                                             {o.name: o.outputs for o in outlined}),
                                  {c.region: c.target.driver for c in compiled}),
    )
    return Described(manifest, record)


def weights_entry(params: Path) -> Weights:
    """The contract's entry for the one weights archive every region module reads."""
    return Weights("weights.irpa", PARAMS_SCOPE, mf.file_sha256(params), params.stat().st_size)


def stage(staging: Path, compiled: tuple[CompiledRegion, ...], weights: Path, link_modules: bool = True) -> None:
    """Put the modules and the weights where the manifest says they are. ``link_modules=False``
    where the modules come from the machine's shared cache (``workspace.SHARED_CACHE_ENV``)."""
    (staging / "modules").mkdir()
    for c in compiled:
        link_or_copy(c.vmfb, staging / "modules" / f"{c.region}.vmfb", link_modules)
    link_or_copy(weights, staging / "weights.irpa")


def publish_bundle(staged: Staged, target: Path) -> Bundle:
    """Write the deploy contract, the build record, the plan and the stubs into the staged folder,
    check it as the runtime will, and make it ``target`` in one rename."""
    from aot.bundle import stubs

    staged.manifest.write(staged.path)
    staged.record.write(staged.path)
    staged.plan.save(staged.path / PLAN)
    stub = stubs.write_stubs(staged.manifest, staged.path)
    mf.read(staged.path)  # the bundle must satisfy the same checks the runtime applies
    publish(staged.path, target)
    return Bundle(target, staged.manifest, staged.record, target / stub.relative_to(staged.path))


def _sig(spec: TensorSpec) -> TensorSig:
    return TensorSig(spec.name, spec.dtype, spec.shape, spec.carrier)


def link_or_copy(src: Path, dst: Path, link: bool = True) -> None:
    """Hard links keep a build's own cache and its bundle from doubling disk use (cross-device
    falls back to a copy). A module from the machine's shared cache is copied: one bundle damaged
    in place must not damage every later build that reuses the module."""
    if link:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copyfile(src, dst)
