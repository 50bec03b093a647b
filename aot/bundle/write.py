"""Assemble a bundle (modules, weights, manifest, plan, stubs) in a staging folder and publish it
atomically, so a failed build never leaves a partial bundle or destroys the previous good one."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aot
from aot.runtime import manifest as mf
from aot.lower.compile import CompiledRegion

from aot.lower.importer import PARAMS_SCOPE, ImportedModule
from aot.frontend.load import TensorSpec
from aot.lower.outline import OutlinedRegion
from aot.workspace import Workspace, publish

if TYPE_CHECKING:
    from aot.pipeline import Planned


@dataclass(frozen=True, slots=True)
class Bundle:
    path: Path
    manifest: dict[str, Any]
    stub: Path


def build_manifest(planned: "Planned", outlined: tuple[OutlinedRegion, ...], compiled: tuple[CompiledRegion, ...],
                   weights_sha256: str) -> dict[str, Any]:
    from aot.partition.cost import CostModel, node_bytes, node_flops

    source, plan, view = planned.source, planned.plan, planned.view
    cost = CostModel.load(planned.options.accel_target, planned.options.cost_params)
    by_name = {c.region: c for c in compiled}
    regions = []
    boundary: dict[str, dict[str, Any]] = {}
    for o in outlined:
        c = by_name[o.name]
        r = plan.region(o.name)
        flops = sum(node_flops(view.node(n), view) for n in r.nodes)
        nbytes = sum(node_bytes(view.node(n), view) for n in r.nodes)
        device = "host" if c.target.is_host else "accel"
        regions.append({
            "name": o.name, "target": c.target.backend, "arch": c.target.arch, "driver": c.target.driver,
            "planned_device": r.device, "module": f"modules/{o.name}.vmfb", "function": o.function,
            "inputs": list(o.inputs), "outputs": list(o.outputs), "nodes": list(r.nodes),
            "compute_nodes": sum(view.node(n).is_compute for n in r.nodes), "flops": flops,
            "estimated_us": round(cost.device(device).time_us(flops, nbytes), 3),
            "sha256": c.sha256, "fallback": c.fallback,
        })
        for v in (*o.inputs, *o.outputs):
            val = view.values[v]
            boundary[v] = {"dtype": val.dtype, "shape": list(val.shape) if val.shape is not None else None,
                           "bytes": val.nbytes}
    return {
        "schema_version": mf.SCHEMA_VERSION,
        "model": {"name": source.name, "sha256": source.sha256, "source": str(source.path), "opset": source.opset,
                  "folded_nodes": source.folded_nodes},
        "inputs": [_io(s) for s in source.inputs],
        # Inputs baked in at build time: not stub arguments, but onnxruntime needs them for the
        # original model, so golden checks read them from here.
        "constant_inputs": [{"name": n, "dtype": v.dtype.name, "shape": list(v.shape), "value": v.tolist()}
                            for n, v in source.constants],
        "outputs": [_io(s) for s in source.outputs],
        "weights": {"path": "weights.irpa", "scope": PARAMS_SCOPE, "sha256": weights_sha256},
        "regions": regions,
        "schedule": list(plan.schedule),
        "boundary_tensors": boundary,
        "host_reasons": dict(plan.reasons),
        "partition": {
            "policy": planned.options.policy, "select": planned.options.select,
            "min_compute": planned.options.min_compute,
            "gate": plan.to_json()["gate"],
            "coverage": planned.coverage.to_json() if planned.coverage else None,
            "suggestions": list(planned.suggestions),
            "cost_model": cost.source,
        },
        # Node list for the report's picture; the stub and the runtime ignore it.
        "graph": [{"name": n.name, "op": n.op_type, "inputs": list(n.inputs), "outputs": list(n.outputs)}
                  for n in view.nodes],
        # llvm-cpu code compiled for "host" may use any of these; the runtime checks them.
        "build_machine": {"cpu_flags": mf.cpu_flags()},
        "toolchain": {"aot": aot.__version__, "iree-base-compiler": version("iree-base-compiler"),
                      "iree-base-runtime": version("iree-base-runtime"), "onnx": version("onnx")},
    }


def _io(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "dtype": spec.dtype, "shape": list(spec.shape)}


def write_bundle(ws: Workspace, planned: "Planned", imported: ImportedModule,
                 outlined: tuple[OutlinedRegion, ...], compiled: tuple[CompiledRegion, ...]) -> Bundle:
    import json

    from aot.bundle import stubs

    staging = ws.staging()
    try:
        (staging / "modules").mkdir()
        for c in compiled:
            _link_or_copy(c.vmfb, staging / "modules" / f"{c.region}.vmfb")
        _link_or_copy(imported.params_path, staging / "weights.irpa")
        manifest = build_manifest(planned, outlined, compiled, mf.file_sha256(staging / "weights.irpa"))
        (staging / mf.MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=True) + "\n")
        planned.plan.save(staging / "plan.json")
        stub = stubs.write_stubs(manifest, staging)
        mf.read(staging)  # the bundle must satisfy the same checks the runtime applies
        publish(staging, ws.bundle)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Bundle(ws.bundle, manifest, ws.bundle / stub.relative_to(staging))


def _link_or_copy(src: Path, dst: Path) -> None:
    # Hard links keep cached modules and the bundle from doubling disk use; cross-device falls back.
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
