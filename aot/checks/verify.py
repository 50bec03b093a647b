"""Per-region verification: run every accelerator region on its real device with the intermediate
tensors the reference computes for the same model input (onnxruntime for an ONNX model, PyTorch
eager for a torch module: ``reference_values``), and compare its outputs with the reference's.
IREE can return silently wrong results (a module compiled for another GPU's subgroup size runs
and returns garbage), so a region is trusted only after it matched on the device it will use."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from aot.checks import reference
from aot.checks.compare import VERIFY_RTOL, within
from aot.checks.session import CheckSession
from aot.errors import DeviceError
from aot.partition.plan import Plan
from aot.partition.support import HOST
from aot.record import RegionCheck
from aot.runtime import devices
from aot.runtime.manifest import Manifest, RegionEntry


def reference_values(source: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor of the loaded ``source`` (either front end's) as its reference computes it."""
    if source.frontend == "torch":
        from aot.checks import eager

        return eager.values(source.program, inputs, source.renamed)
    return onnx_values(source.model, inputs)


def onnx_values(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor of ``model`` as onnxruntime computes it for ``inputs`` (as onnx's reference
    evaluator does, for a model carrying an element type onnxruntime's numpy API cannot take)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for v in node.output:
            if v and v not in known:
                probe.graph.output.append(onnx.ValueInfoProto(name=v))
                known.add(v)
    if reference.onnxruntime_cannot_feed(model):
        from onnx.reference import ReferenceEvaluator

        names = [o.name for o in probe.graph.output]
        return dict(zip(names, ReferenceEvaluator(model).run(names, inputs)))
    session = reference.session(probe.SerializeToString(), optimize=False)  # keep every tensor
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


def verify_regions(bundle: Path, manifest: Manifest, reference: dict[str, np.ndarray],
                   rtol: float = VERIFY_RTOL) -> tuple[RegionCheck, ...]:
    """Check every accelerator region of the (staged) bundle at ``bundle`` on its device;
    ``reference``: the model's inputs and every tensor the reference computes from them."""
    accel = [r for r in manifest.regions if not r.target.is_host]
    if not accel:  # nothing to check (e.g. every region was just moved to the host)
        return ()
    try:
        session = CheckSession(bundle, manifest, check_device=False)
    except DeviceError as e:
        # Its initializers never ran through: no region of the bundle can be trusted on the device.
        return tuple(RegionCheck(r.name, False, None, _describe(e)) for r in accel)
    checks = []
    with session:
        for r in accel:
            try:
                outs = session.run_region(r.name, [reference[v] for v in r.inputs])
            except Exception as e:  # a region that cannot run is as untrustworthy as a wrong one
                checks.append(RegionCheck(r.name, False, None, _describe(e)))
                continue
            results = [within(a, reference[v], rtol) for a, v in zip(outs, r.outputs)]
            diffs = [d for _, d in results]
            finite = all(np.isfinite(d) for d in diffs)
            worst = max(diffs, default=0.0) if finite else None
            ok = all(good for good, _ in results)
            oracle = manifest.model.reference
            why = (f"outputs differ from {oracle} by up to {worst:.3g}" if finite
                   else f"outputs are NaN/inf or mis-shaped where {oracle}'s are not")
            checks.append(RegionCheck(r.name, ok, worst, None if ok else why))
    return tuple(checks)


def move_to_host(plan: Plan, failed: tuple[RegionCheck, ...]) -> Plan:
    """The plan with the failed regions on the host, each node's reason naming the failure."""
    why = {c.region: c.error for c in failed}
    regions = tuple(replace(r, device=HOST) if r.name in why else r for r in plan.regions)
    reasons = dict(plan.reasons)
    for r in plan.regions:
        if r.name in why:
            reasons.update({n: f"verification moved region {r.name} to the host: {why[r.name]}" for n in r.nodes})
    # replace, not a new Plan: the plan's other decisions (its splits) stay with it
    return replace(plan, regions=regions, reasons=tuple(sorted(reasons.items())))


def _describe(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"


def device_present(driver: str) -> bool:
    try:
        import iree.runtime as rt

        return bool(rt.get_driver(driver).query_available_devices())
    except Exception:
        return False


def cannot_verify_here(regions: list[RegionEntry]) -> str | None:
    """Why this machine cannot check ``regions`` on the device they were built for (None: it
    can). A module built for another GPU runs on the one here and returns wrong numbers (subgroup
    sizes differ), so checking it here would move a good region to the host: a bundle built on
    CI (lavapipe) for a deployment GPU would ship all-host."""
    for driver in sorted({r.target.driver for r in regions}):
        if not device_present(driver):
            return f"no {driver} device on this machine"
    if any(r.target.driver == "vulkan" for r in regions):
        import iree.runtime as rt

        name = devices.vulkan_device_name(rt)
        other = devices.vulkan_mismatches(regions, name)
        if other:
            return (f"region {other[0].name} is built for Vulkan target {other[0].target.arch!r} and the Vulkan "
                    f"device here is {name!r}")
    return None
