"""Per-region verification: run every accelerator region on its real device with the intermediate
tensors onnxruntime computes for the same model input, and compare its outputs with onnxruntime's.
IREE can return silently wrong results (a module compiled for another GPU's subgroup size runs
and returns garbage), so a region is trusted only after it matched on the device it will use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from aot.runtime import manifest as mf
from aot import runtime
from aot.errors import DeviceError


@dataclass(frozen=True, slots=True)
class RegionCheck:
    region: str
    ok: bool
    max_abs_diff: float | None   # None when it did not run
    error: str | None

    def to_json(self) -> dict:
        return {"region": self.region, "ok": self.ok, "max_abs_diff": self.max_abs_diff, "error": self.error}


def reference_values(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor of ``model`` as onnxruntime computes it for ``inputs``."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for v in node.output:
            if v and v not in known:
                probe.graph.output.append(onnx.ValueInfoProto(name=v))
                known.add(v)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep every tensor
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


def within(actual: np.ndarray, expected: np.ndarray, rtol: float) -> tuple[bool, float]:
    """Outputs match when no element differs by more than rtol times the reference's scale."""
    if actual.shape != expected.shape:
        return False, float("inf")
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    if np.isnan(a).any() != np.isnan(e).any():
        return False, float("nan")
    diff = float(np.nanmax(np.abs(a - e), initial=0.0))
    return diff <= rtol * max(1.0, float(np.nanmax(np.abs(e), initial=0.0))), diff


def verify_bundle(bundle: Path, model: onnx.ModelProto, inputs: dict[str, np.ndarray],
                  rtol: float = 1e-3) -> tuple[RegionCheck, ...]:
    accel = [r for r in mf.read(bundle)["regions"] if r["target"] != "llvm-cpu"]
    if not accel:  # nothing to check (e.g. every region was just moved to the host)
        return ()
    try:
        session = runtime.load(bundle, check_device=False)
    except DeviceError as e:
        # Its initializers never ran through: no region of the bundle can be trusted on the device.
        return tuple(RegionCheck(r["name"], False, None, _describe(e)) for r in accel)
    checks = []
    with session:
        ref = reference_values(model, inputs)
        ref.update(inputs)
        for r in accel:
            try:
                outs = session.run_region(r["name"], [ref[v] for v in r["inputs"]])
            except Exception as e:  # a region that cannot run is as untrustworthy as a wrong one
                checks.append(RegionCheck(r["name"], False, None, _describe(e)))
                continue
            results = [within(a, ref[v], rtol) for a, v in zip(outs, r["outputs"])]
            diffs = [d for _, d in results]
            finite = all(np.isfinite(d) for d in diffs)
            worst = max(diffs, default=0.0) if finite else None
            ok = all(good for good, _ in results)
            why = (f"outputs differ from onnxruntime by up to {worst:.3g}" if finite
                   else "outputs are NaN/inf or mis-shaped where onnxruntime's are not")
            checks.append(RegionCheck(r["name"], ok, worst, None if ok else why))
    return tuple(checks)


def _describe(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"


def device_present(driver: str) -> bool:
    try:
        import iree.runtime as rt

        return bool(rt.get_driver(driver).query_available_devices())
    except Exception:
        return False
