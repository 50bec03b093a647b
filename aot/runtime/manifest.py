"""The manifest: the contract between build and deploy. Stubs, the runtime, the report and the
checks read nothing else.

Typed, frozen records; dicts exist only in ``to_json``/``from_json``. Pure data (json, hashlib):
the runtime imports this module, so it must not import onnx, jinja2 or iree.compiler.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from .errors import BundleError
from .memory import DeviceMemory
from .shapes import Bucket, Fallback, Shapes
from .signature import TensorSig
from .target import Target

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True)
class ConstantInput:
    """An input baked in at build time: not a stub argument, but onnxruntime needs it to run the
    original model, so golden checks read it from here."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    value: Any                # nested tuples of numbers (JSON lists, frozen)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "value": thaw(self.value)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ConstantInput":
        return cls(str(d["name"]), str(d["dtype"]), tuple(int(x) for x in d["shape"]), freeze(d["value"]))


FRONTENDS = ("onnx", "torch")


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    sha256: str               # of the source file (torch: of the exported MLIR)
    source: str               # its path at build time (torch: the factory, ``pkg.module:factory``)
    opset: int                # ONNX opset; 0 for a PyTorch module
    folded_nodes: int
    frontend: str = "onnx"    # "onnx" or "torch": which reference the bundle's checks compare with

    def to_json(self) -> dict[str, Any]:
        d = {"name": self.name, "sha256": self.sha256, "source": self.source, "opset": self.opset,
             "folded_nodes": self.folded_nodes}
        # Written only for torch: an ONNX bundle's manifest reads the same as before the torch front end.
        return d if self.frontend == "onnx" else {**d, "frontend": self.frontend}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ModelInfo":
        frontend = str(d.get("frontend", "onnx"))   # bundles from before the torch front end
        if frontend not in FRONTENDS:
            raise BundleError(f"manifest: unknown front end {frontend!r}", hint=f"expected one of {FRONTENDS}")
        return cls(str(d["name"]), str(d["sha256"]), str(d["source"]), int(d["opset"]), int(d["folded_nodes"]),
                   frontend)

    @property
    def reference(self) -> str:
        """What the bundle's outputs were checked against."""
        return "PyTorch eager" if self.frontend == "torch" else "onnxruntime"


@dataclass(frozen=True, slots=True)
class Weights:
    path: str                 # inside the bundle
    scope: str                # the parameter scope region modules name
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "scope": self.scope, "sha256": self.sha256}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Weights":
        return cls(str(d["path"]), str(d["scope"]), str(d["sha256"]))


@dataclass(frozen=True, slots=True)
class RegionEntry:
    """One compiled region: its module, its device and the tensors it reads and writes."""

    name: str
    target: Target            # what it was compiled for (backend, arch; the driver follows)
    planned_device: str       # the partitioner's label: "accel" or "host"
    module: str               # path inside the bundle
    function: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[str, ...]
    compute_nodes: int
    flops: int
    estimated_us: float
    sha256: str               # of the module
    fallback: str | None      # why the accelerator compile failed, when it fell back to the host
    measured_us: float | None = None
    flags: tuple[str, ...] = ()       # optimisation flags it was compiled with (beyond the target's)
    tuning: "Tuning | None" = None    # the flag search that chose ``flags``, when it was tuned

    def to_json(self) -> dict[str, Any]:
        d = {"name": self.name, "target": self.target.backend, "arch": self.target.arch,
             "driver": self.target.driver, "planned_device": self.planned_device, "module": self.module,
             "function": self.function, "inputs": list(self.inputs), "outputs": list(self.outputs),
             "nodes": list(self.nodes), "compute_nodes": self.compute_nodes, "flops": self.flops,
             "estimated_us": self.estimated_us, "sha256": self.sha256, "fallback": self.fallback}
        if self.measured_us is not None:
            d["measured_us"] = self.measured_us
        if self.flags:
            d["flags"] = list(self.flags)
        if self.tuning is not None:
            d["tuning"] = self.tuning.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RegionEntry":
        target = Target(str(d["target"]), str(d["arch"]))
        if target.backend not in Target.backends() or d["driver"] != target.driver:
            raise ValueError(f"region {d.get('name')!r} has target {d['target']!r} / driver {d['driver']!r}")
        return cls(str(d["name"]), target, str(d["planned_device"]), str(d["module"]), str(d["function"]),
                   _strs(d["inputs"]), _strs(d["outputs"]), _strs(d["nodes"]), int(d["compute_nodes"]),
                   int(d["flops"]), float(d["estimated_us"]), str(d["sha256"]), _opt_str(d["fallback"]),
                   _opt_float(d.get("measured_us")),
                   _strs(d.get("flags", [])), _optional(Tuning.from_json, d.get("tuning")))


@dataclass(frozen=True, slots=True)
class TuneCandidate:
    """One flag set tried for a region, and what became of it."""

    name: str
    flags: tuple[str, ...]
    median_us: float | None       # warm median on the region's device; None: rejected before timing
    max_abs_diff: float | None    # against onnxruntime's output for the region
    rejected: str | None          # why (compile failure, crash, timeout, mismatch); None: it ran correctly

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "flags": list(self.flags), "median_us": self.median_us,
                "max_abs_diff": self.max_abs_diff, "rejected": self.rejected}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TuneCandidate":
        return cls(str(d["name"]), _strs(d["flags"]), _opt_float(d["median_us"]), _opt_float(d["max_abs_diff"]),
                   _opt_str(d["rejected"]))


@dataclass(frozen=True, slots=True)
class Tuning:
    """A region's flag search: the fastest candidate that matched onnxruntime wins."""

    winner: str
    best_us: float | None         # the winner's median; None when no candidate ran correctly
    default_us: float | None      # the default flags' median; None when the default was rejected
    device: str                   # where the candidates were timed
    candidates: tuple[TuneCandidate, ...]

    @property
    def speedup(self) -> float | None:
        return self.default_us / self.best_us if self.default_us and self.best_us else None

    def to_json(self) -> dict[str, Any]:
        return {"winner": self.winner, "best_us": self.best_us, "default_us": self.default_us,
                "device": self.device, "candidates": [c.to_json() for c in self.candidates]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Tuning":
        return cls(str(d["winner"]), _opt_float(d["best_us"]), _opt_float(d["default_us"]), str(d["device"]),
                   tuple(map(TuneCandidate.from_json, d["candidates"])))


@dataclass(frozen=True, slots=True)
class HostRuntime:
    """How the runtime opens the CPU device, chosen by measuring whole runs of the bundle."""

    driver: str                               # local-task (a worker pool) or local-sync (the caller's thread)
    flags: tuple[str, ...]                    # iree.runtime flags set before the device opens
    measured: tuple[tuple[str, float], ...]   # (configuration, median us of a whole run)

    @property
    def label(self) -> str:
        return " ".join((self.driver, *self.flags))

    def to_json(self) -> dict[str, Any]:
        return {"driver": self.driver, "flags": list(self.flags), "measured_us": dict(self.measured)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "HostRuntime":
        if d["driver"] not in HOST_DRIVERS:
            raise ValueError(f"host_runtime driver {d['driver']!r} is not one of {HOST_DRIVERS}")
        return cls(str(d["driver"]), _strs(d["flags"]),
                   tuple((str(k), float(v)) for k, v in d.get("measured_us", {}).items()))


HOST_DRIVERS = ("local-task", "local-sync")


@dataclass(frozen=True, slots=True)
class BoundaryTensor:
    """A tensor a region reads or writes, as the partitioner saw it."""

    dtype: str
    shape: tuple[int, ...] | None
    bytes: int | None

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": None if self.shape is None else list(self.shape), "bytes": self.bytes}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "BoundaryTensor":
        return cls(str(d["dtype"]), None if d["shape"] is None else tuple(int(x) for x in d["shape"]),
                   None if d["bytes"] is None else int(d["bytes"]))


@dataclass(frozen=True, slots=True)
class GateRecord:
    """The gate's decision and the numbers behind it (estimated, or measured with --measure)."""

    accepted: bool
    partitioned_us: float
    all_host_us: float
    all_accel_us: float | None
    detail: str
    measured: bool = False

    def to_json(self) -> dict[str, Any]:
        d = {"accepted": self.accepted, "partitioned_us": self.partitioned_us, "all_host_us": self.all_host_us,
             "all_accel_us": self.all_accel_us, "detail": self.detail}
        return {**d, "measured": True} if self.measured else d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "GateRecord":
        return cls(bool(d["accepted"]), float(d["partitioned_us"]), float(d["all_host_us"]),
                   _opt_float(d["all_accel_us"]), str(d["detail"]),
                   bool(d.get("measured", False)))


@dataclass(frozen=True, slots=True)
class UnsupportedOp:
    op: str
    count: int
    reason: str


@dataclass(frozen=True, slots=True)
class CoverageRecord:
    """Operator coverage of the accelerator target before any merging or selection."""

    target: str
    supported: int
    total: int
    unsupported: tuple[UnsupportedOp, ...]

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "supported": self.supported, "total": self.total,
                "unsupported": [{"op": u.op, "count": u.count, "reason": u.reason} for u in self.unsupported]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CoverageRecord":
        return cls(str(d["target"]), int(d["supported"]), int(d["total"]),
                   tuple(UnsupportedOp(str(u["op"]), int(u["count"]), str(u["reason"])) for u in d["unsupported"]))


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    policy: str
    select: str
    min_compute: int
    gate: GateRecord | None
    coverage: CoverageRecord | None
    suggestions: tuple[str, ...]
    cost_model: str

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "select": self.select, "min_compute": self.min_compute,
                "gate": None if self.gate is None else self.gate.to_json(),
                "coverage": None if self.coverage is None else self.coverage.to_json(),
                "suggestions": list(self.suggestions), "cost_model": self.cost_model}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "PartitionRecord":
        return cls(str(d["policy"]), str(d["select"]), int(d["min_compute"]),
                   _optional(GateRecord.from_json, d["gate"]), _optional(CoverageRecord.from_json, d["coverage"]),
                   _strs(d["suggestions"]), str(d["cost_model"]))


@dataclass(frozen=True, slots=True)
class GraphNode:
    """A node of the model as partitioned (for the report's picture; the runtime ignores it)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "inputs": list(self.inputs), "outputs": list(self.outputs)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "GraphNode":
        return cls(str(d["name"]), str(d["op"]), _strs(d["inputs"]), _strs(d["outputs"]))


@dataclass(frozen=True, slots=True)
class RegionCheck:
    """One accelerator region run on its device against onnxruntime's tensors."""

    region: str
    ok: bool
    max_abs_diff: float | None   # None when it did not run
    error: str | None

    def to_json(self) -> dict[str, Any]:
        return {"region": self.region, "ok": self.ok, "max_abs_diff": self.max_abs_diff, "error": self.error}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RegionCheck":
        return cls(str(d["region"]), bool(d["ok"]), None if d["max_abs_diff"] is None else float(d["max_abs_diff"]),
                   _opt_str(d["error"]))


@dataclass(frozen=True, slots=True)
class Verification:
    checked: tuple[RegionCheck, ...]          # the regions that passed, in the shipped bundle
    moved_to_host: tuple[RegionCheck, ...]    # the failures that moved their region to the host

    def to_json(self) -> dict[str, Any]:
        return {"checked": [c.to_json() for c in self.checked],
                "moved_to_host": [c.to_json() for c in self.moved_to_host]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Verification":
        return cls(tuple(map(RegionCheck.from_json, d["checked"])), tuple(map(RegionCheck.from_json, d["moved_to_host"])))


@dataclass(frozen=True, slots=True)
class IndexOp:
    """An op that reads or writes at positions given by a tensor (Gather, ScatterND, ...), and how
    the bundle keeps those positions inside the tensor. IREE's generated code does not
    bounds-check data-dependent indices, so an index outside its axis reads or writes memory.

    ``status``: "proved" (interval analysis bounds the indices inside the axis), "checked" (they
    are model input ``input``, checked by the runtime before it runs anything) or "guarded"
    (computed in the graph: clamped before the op, and ``flag`` counts the ones out of range; the
    runtime raises instead of returning the clamped result), "defined" (the op's spec gives
    out-of-range indices a meaning without reading there, as OneHot's all-off row) or "unguarded"
    (``--no-index-guards``). ``dims``: the sizes of the indexed
    axes; an index ``i`` into a dim ``d`` is valid in [-d, d-1]. GatherND/ScatterND index several
    axes with the last axis of their indices: one dim per position along it."""

    node: str
    op: str
    indices: str
    dims: tuple[int, ...]
    status: str
    input: str | None = None
    flag: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "op": self.op, "indices": self.indices, "dims": list(self.dims),
                "status": self.status, "input": self.input, "flag": self.flag}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "IndexOp":
        return cls(str(d["node"]), str(d["op"]), str(d["indices"]), tuple(int(x) for x in d["dims"]),
                   str(d["status"]), _opt_str(d.get("input")), _opt_str(d.get("flag")))

    @property
    def valid(self) -> str:
        return ", ".join(f"[{-d}, {d - 1}]" for d in self.dims)


@dataclass(frozen=True, slots=True)
class Manifest:
    model: ModelInfo
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    constant_inputs: tuple[ConstantInput, ...]
    weights: Weights | None
    regions: tuple[RegionEntry, ...]
    schedule: tuple[str, ...]
    boundary_tensors: tuple[tuple[str, BoundaryTensor], ...]
    host_reasons: tuple[tuple[str, str], ...]    # (node, why it runs on the host)
    partition: PartitionRecord
    graph: tuple[GraphNode, ...]
    cpu_flags: tuple[str, ...]                   # the build machine's; llvm-cpu code for "host" may use them
    toolchain: tuple[tuple[str, str], ...]       # (package, version)
    verification: Verification | None = None
    host_runtime: HostRuntime | None = None      # None: local-task with IREE's default topology
    index_ops: tuple[IndexOp, ...] = ()
    shapes: Shapes | None = None                 # symbolic dimensions and their buckets (runtime/shapes.py)
    memory: tuple[DeviceMemory, ...] = ()        # per device, what one run holds (runtime/memory.py)
    overlap: tuple[tuple[str, str], ...] = ()    # regions on different devices that may run at once (lanes.py)
    extra_weights: tuple[Weights, ...] = ()      # archives of further scopes (the dynamic fallback's own)

    def region(self, name: str) -> RegionEntry:
        return next(r for r in self.regions if r.name == name)

    @property
    def archives(self) -> tuple[Weights, ...]:
        """Every parameter archive the modules read, one per scope."""
        return (*(() if self.weights is None else (self.weights,)), *self.extra_weights)

    def boundary(self, tensor: str) -> BoundaryTensor:
        return dict(self.boundary_tensors)[tensor]

    def driver(self, region: RegionEntry) -> str:
        """The runtime driver that runs ``region``: the host runtime's choice for llvm-cpu code."""
        if region.target.is_host and self.host_runtime is not None:
            return self.host_runtime.driver
        return region.target.driver

    @property
    def drivers(self) -> tuple[str, ...]:
        """The runtime drivers the bundle opens, in schedule order."""
        return tuple(dict.fromkeys(self.driver(self.region(n)) for n in self.schedule))

    def with_measurements(self, per_region: dict[str, float], gate: GateRecord) -> "Manifest":
        regions = tuple(replace(r, measured_us=round(per_region[r.name], 3)) if r.name in per_region else r
                        for r in self.regions)
        return replace(self, regions=regions, partition=replace(self.partition, gate=gate))

    def to_json(self) -> dict[str, Any]:
        d = {
            "schema_version": SCHEMA_VERSION,
            "model": self.model.to_json(),
            "inputs": [t.to_json() for t in self.inputs],
            "constant_inputs": [c.to_json() for c in self.constant_inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "weights": None if self.weights is None else self.weights.to_json(),
            "regions": [r.to_json() for r in self.regions],
            "schedule": list(self.schedule),
            "boundary_tensors": {k: v.to_json() for k, v in self.boundary_tensors},
            "host_reasons": dict(self.host_reasons),
            "partition": self.partition.to_json(),
            "graph": [n.to_json() for n in self.graph],
            "build_machine": {"cpu_flags": list(self.cpu_flags)},
            "toolchain": dict(self.toolchain),
        }
        if self.verification is not None:
            d["verification"] = self.verification.to_json()
        if self.host_runtime is not None:
            d["host_runtime"] = self.host_runtime.to_json()
        if self.index_ops:
            d["index_ops"] = [i.to_json() for i in self.index_ops]
        if self.shapes is not None:
            d["shapes"] = self.shapes.to_json()
        if self.memory:
            d["memory"] = [m.to_json() for m in self.memory]
        if self.overlap:
            d["overlap"] = [list(pair) for pair in self.overlap]
        if self.extra_weights:
            d["extra_weights"] = [w.to_json() for w in self.extra_weights]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Manifest":
        """Parse a manifest dict; raises KeyError/TypeError/ValueError on a malformed one
        (``read`` turns those into a BundleError naming the file)."""
        found = d.get("schema_version") if isinstance(d, dict) else None
        if found != SCHEMA_VERSION:
            raise BundleError(f"manifest has schema_version {found!r}; this aot reads {SCHEMA_VERSION}",
                              hint="rebuild the bundle with this version of aot")
        m = cls(
            ModelInfo.from_json(d["model"]),
            tuple(map(TensorSig.from_json, d["inputs"])),
            tuple(map(TensorSig.from_json, d["outputs"])),
            tuple(map(ConstantInput.from_json, d.get("constant_inputs", []))),
            _optional(Weights.from_json, d["weights"]),
            tuple(map(RegionEntry.from_json, d["regions"])),
            _strs(d["schedule"]),
            tuple((str(k), BoundaryTensor.from_json(v)) for k, v in d["boundary_tensors"].items()),
            tuple((str(k), str(v)) for k, v in d["host_reasons"].items()),
            PartitionRecord.from_json(d["partition"]),
            tuple(map(GraphNode.from_json, d["graph"])),
            _strs(d.get("build_machine", {}).get("cpu_flags", [])),
            tuple((str(k), str(v)) for k, v in d["toolchain"].items()),
            _optional(Verification.from_json, d.get("verification")),
            _optional(HostRuntime.from_json, d.get("host_runtime")),
            tuple(map(IndexOp.from_json, d.get("index_ops", []))),
            _optional(Shapes.from_json, d.get("shapes")),
            tuple(map(DeviceMemory.from_json, d.get("memory", []))),
            tuple((str(a), str(b)) for a, b in d.get("overlap", [])),
            tuple(map(Weights.from_json, d.get("extra_weights", []))),
        )
        if sorted(m.schedule) != sorted(r.name for r in m.regions):
            raise ValueError("schedule does not list every region once")
        if {r for pair in m.overlap for r in pair} - set(m.schedule):
            raise ValueError("overlap names a region the schedule does not")
        return m

    def validate(self, bundle: Path) -> None:
        """The files the manifest names are inside ``bundle``, present, and match their sha256."""
        for r in self.regions:
            checked_member(bundle, r.module, r.sha256, f"module {r.module!r} of region {r.name!r}")
        for w in self.archives:
            if not safe_member(bundle, w.path).is_file():
                raise BundleError(f"bundle {str(bundle)!r} lacks its weights {w.path!r}", hint="rebuild it")
        for bucket in self.shapes.buckets[1:] if self.shapes else ():
            read_bucket(bundle, bucket)
        if self.shapes is not None and self.shapes.fallback is not None:
            read_fallback(bundle, self.shapes.fallback)

    def write(self, bundle: Path, name: str = MANIFEST) -> Path:
        """Write ``bundle/manifest.json`` (or another ``name``) atomically: a reader never sees half a manifest."""
        path = Path(bundle) / name
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.to_json(), indent=2, ensure_ascii=True) + "\n")
        os.replace(tmp, path)
        return path


def bundle_dir(path: str | Path) -> Path:
    """The bundle at ``path``: the bundle directory itself, or the build directory given to
    ``aot build -o`` (which holds it as ``bundle/``)."""
    path = Path(path)
    if not (path / MANIFEST).exists() and (path / "bundle" / MANIFEST).exists():
        return path / "bundle"
    return path


def read(bundle: str | Path) -> Manifest:
    """Load and check a bundle's manifest: schema, fields, files present, hashes match (each
    bucket's manifest and modules too)."""
    bundle = bundle_dir(bundle)
    path = bundle / MANIFEST
    if not path.exists():
        raise BundleError(f"{str(bundle)!r} is not a bundle: no {MANIFEST}",
                          hint="point at the directory given to `aot build -o`, or its bundle/")
    manifest = _parse_file(path)
    manifest.validate(bundle)
    return manifest


def read_bucket(bundle: Path, bucket: Bucket) -> Manifest:
    """The manifest of one bucket's region modules, checked like the bundle's own."""
    return _read_member(bundle, bucket.manifest, bucket.sha256 or "", f"bucket {bucket.label}")


def read_fallback(bundle: Path, fallback: Fallback) -> Manifest:
    """The manifest of the dynamic fallback module, checked like the bundle's own."""
    return _read_member(bundle, fallback.manifest, fallback.sha256, "the dynamic fallback")


def _read_member(bundle: Path, rel: str, sha256: str, what: str) -> Manifest:
    path = checked_member(bundle, rel, sha256, f"{rel!r}, the manifest of {what},")
    manifest = _parse_file(path)
    manifest.validate(bundle)
    return manifest


def _parse_file(path: Path) -> Manifest:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BundleError(f"{str(path)!r} is corrupt: {e}", hint="rebuild the bundle with `aot build`") from e
    try:
        return Manifest.from_json(data)
    except BundleError as e:
        raise BundleError(f"{str(path)!r}: {e.message}", hint=e.hint) from e
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BundleError(f"{str(path)!r} is malformed: {type(e).__name__}: {e}",
                          hint="rebuild the bundle with `aot build`") from e


def checked_member(bundle: Path, rel: str, sha256: str, what: str) -> Path:
    """``rel`` inside the bundle, present and matching ``sha256``; ``what`` names it in errors."""
    path = safe_member(bundle, rel)
    if not path.is_file():
        raise BundleError(f"bundle {str(bundle)!r} lacks {what}", hint="the bundle is incomplete; rebuild it")
    if file_sha256(path) != sha256:
        raise BundleError(f"{what} does not match its sha256 in the manifest (corrupt or replaced)",
                          hint="rebuild the bundle")
    return path


def safe_member(bundle: Path, rel: str) -> Path:
    """A path inside the bundle; refuses absolute paths and '..' so a manifest cannot point away."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise BundleError(f"manifest path {rel!r} leaves the bundle", hint="rebuild the bundle")
    return Path(bundle, *p.parts)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# x86 features that llvm-cpu code compiled for "host" may use; a machine lacking one of the build
# machine's would hit an illegal instruction instead of an error message.
_ISA_FLAGS = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512vl",
              "avx512dq", "avx512cd", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile")


def cpu_flags() -> tuple[str, ...]:
    """This machine's ISA flags that matter for llvm-cpu code (Linux /proc/cpuinfo; () elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ()
    line = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
    have = set(line.partition(":")[2].split())
    return tuple(f for f in _ISA_FLAGS if f in have)


def _strs(items: Any) -> tuple[str, ...]:
    if isinstance(items, (str, bytes)):
        raise TypeError(f"expected a list of strings, got {type(items).__name__}")
    return tuple(str(x) for x in items)


def _optional(parse: Callable[[dict[str, Any]], Any], value: Any) -> Any:
    """None stays None; anything else must parse (an empty or wrong record is malformed)."""
    return None if value is None else parse(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def freeze(value: Any) -> Any:
    return tuple(freeze(v) for v in value) if isinstance(value, list) else value


def thaw(value: Any) -> Any:
    return [thaw(v) for v in value] if isinstance(value, tuple) else value
