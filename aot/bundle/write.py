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
from typing import TYPE_CHECKING, Mapping

import aot
from aot.frontend.graph import GraphView
from aot.frontend.load import ModelSource, TensorSpec
from aot.lower.compile import CompiledRegion
from aot.lower.importer import PARAMS_SCOPE
from aot.lower.outline import OutlinedRegion
from aot.partition.cost import RegionEstimate
from aot.partition.plan import Plan
from aot.runtime import lanes
from aot.runtime import manifest as mf
from aot.runtime.manifest import (BoundaryTensor, ConstantInput, GraphNode, Manifest, ModelInfo, PartitionRecord,
                                  RegionEntry, TensorSig, Weights)
from aot.workspace import publish

if TYPE_CHECKING:
    from aot.frontend.torch.export import TorchSource


@dataclass(frozen=True, slots=True)
class Staged:
    """A candidate bundle: its files in ``path``, described by ``manifest`` (not yet written)."""

    path: Path
    manifest: Manifest
    plan: Plan
    sources: Path | None = None   # the folder of region MLIR it was compiled from (region.mlir)


@dataclass(frozen=True, slots=True)
class Bundle:
    """A published bundle."""

    path: Path
    manifest: Manifest
    stub: Path


def describe(source: "ModelSource | TorchSource", view: GraphView, plan: Plan, partition: PartitionRecord,
             outlined: tuple[OutlinedRegion, ...], compiled: tuple[CompiledRegion, ...],
             estimates: Mapping[str, RegionEstimate], weights_sha256: str) -> Manifest:
    """The manifest of a compiled plan (pure: everything it states is handed in)."""
    by_name = {c.region: c for c in compiled}
    regions = []
    boundary: dict[str, BoundaryTensor] = {}
    for o in outlined:
        c, r, e = by_name[o.name], plan.region(o.name), estimates[o.name]
        regions.append(RegionEntry(o.name, c.target, r.device, f"modules/{o.name}.vmfb", o.function, o.inputs,
                                   o.outputs, r.nodes, e.compute_nodes, e.flops, e.estimated_us, c.sha256,
                                   c.fallback, flags=c.opt_flags))
        for v in (*o.inputs, *o.outputs):
            val = view.values[v]
            boundary[v] = BoundaryTensor(val.dtype, val.shape, val.nbytes)
    return Manifest(
        model=ModelInfo(source.name, source.sha256, str(source.path), source.opset, source.folded_nodes,
                        source.frontend),
        inputs=tuple(map(_sig, source.inputs)),
        outputs=tuple(map(_sig, source.outputs)),
        constant_inputs=tuple(ConstantInput(n, v.dtype.name, tuple(v.shape), mf.freeze(v.tolist()))
                              for n, v in source.constants),
        weights=Weights("weights.irpa", PARAMS_SCOPE, weights_sha256),
        regions=tuple(regions),
        schedule=plan.schedule,
        boundary_tensors=tuple(boundary.items()),
        host_reasons=plan.reasons,
        partition=partition,
        graph=tuple(GraphNode(n.name, n.op_type, n.inputs, n.outputs) for n in view.nodes),
        cpu_flags=mf.cpu_flags(),
        toolchain=(("aot", aot.__version__), ("iree-base-compiler", version("iree-base-compiler")),
                   ("iree-base-runtime", version("iree-base-runtime")), ("onnx", version("onnx")),
                   *source.versions),
        index_ops=source.index_ops,
        overlap=lanes.overlapping(plan.schedule, lanes.waits({o.name: o.inputs for o in outlined},
                                                             {o.name: o.outputs for o in outlined}),
                                  {c.region: c.target.driver for c in compiled}),
    )


def stage(staging: Path, compiled: tuple[CompiledRegion, ...], weights: Path) -> None:
    """Put the modules and the weights where the manifest says they are."""
    (staging / "modules").mkdir()
    for c in compiled:
        link_or_copy(c.vmfb, staging / "modules" / f"{c.region}.vmfb")
    link_or_copy(weights, staging / "weights.irpa")


def publish_bundle(staged: Staged, target: Path) -> Bundle:
    """Write the manifest, plan and stubs into the staged folder, check it as the runtime will,
    and make it ``target`` in one rename."""
    from aot.bundle import stubs

    staged.manifest.write(staged.path)
    staged.plan.save(staged.path / "plan.json")
    stub = stubs.write_stubs(staged.manifest, staged.path)
    mf.read(staged.path)  # the bundle must satisfy the same checks the runtime applies
    publish(staged.path, target)
    return Bundle(target, staged.manifest, target / stub.relative_to(staged.path))


def _sig(spec: TensorSpec) -> TensorSig:
    return TensorSig(spec.name, spec.dtype, spec.shape)


def link_or_copy(src: Path, dst: Path) -> None:
    # Hard links keep cached modules and the bundle from doubling disk use; cross-device falls back.
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
