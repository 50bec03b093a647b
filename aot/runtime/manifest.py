"""The deploy contract: what a deployment reads of a bundle (inputs, outputs, regions with their
modules, targets and hashes, weights and their digests, schedule, boundary tensors, shapes, memory,
index guards, the host runtime). The stubs and the runtime read nothing else.

What the build decided and measured (partition reasons, gate, coverage, verification, tuning,
estimates) is the build record (``aot/record.py``, ``record.json``): the runtime never parses it.

Typed, frozen records written and read by one codec (``codec.py``) from their fields. Pure data
(json, hashlib): the runtime imports this module, so it must not import onnx, jinja2 or iree.compiler.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from . import codec
from .atomic import write_json
from .codec import Inline, field
from .errors import BundleError
from .integrity import check_file, file_sha256   # file_sha256: the build hashes what it writes with it
from .memory import DeviceMemory
from .shapes import Bucket, Fallback, Shapes
from .signature import TensorSig
from .target import Target

# 2: the build record moved out to record.json. Schema-1 manifests (which held it inline) still
# read: their extra keys are ignored, and the report says they have no build record.
SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
MANIFEST = "manifest.json"
FRONTENDS = ("onnx", "torch")
HOST_DRIVERS = ("local-task", "local-sync")


@dataclass(frozen=True, slots=True)
class ConstantInput:
    """An input baked in at build time: not a stub argument, but onnxruntime needs it to run the
    original model, so golden checks read it from here."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    value: Any                # nested tuples of numbers (JSON lists, frozen)


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    sha256: str               # of the source file (torch: of the exported MLIR)
    source: str               # its path at build time (torch: the factory, ``pkg.module:factory``)
    # "onnx" or "torch": which reference the bundle's checks compare with. Written only for torch,
    # so an ONNX bundle's manifest reads the same as before the torch front end.
    frontend: str = field(default="onnx", omit_default=True)

    def __post_init__(self) -> None:
        if self.frontend not in FRONTENDS:
            raise BundleError(f"manifest: unknown front end {self.frontend!r}", hint=f"expected one of {FRONTENDS}")

    @property
    def reference(self) -> str:
        """What the bundle's outputs were checked against."""
        return "PyTorch eager" if self.frontend == "torch" else "onnxruntime"


@dataclass(frozen=True, slots=True)
class Weights:
    path: str                 # inside the bundle
    scope: str                # the parameter scope region modules name
    sha256: str
    size: int | None = field(default=None, omit_default=True)   # bytes; None in bundles from before it


def _write_target(t: Target) -> dict[str, Any]:
    return {"target": t.backend, "arch": t.arch, "driver": t.driver}


def _read_target(d: dict[str, Any]) -> Target:
    target = Target(str(d["target"]), str(d["arch"]))
    if target.backend not in Target.backends() or d["driver"] != target.driver:
        raise ValueError(f"region {d.get('name')!r} has target {d['target']!r} / driver {d['driver']!r}")
    return target


@dataclass(frozen=True, slots=True)
class RegionEntry:
    """One compiled region: its module, the device it was compiled for, the tensors it reads and
    writes. How it came to be (its nodes, estimates, tuning) is in the build record."""

    name: str
    target: Target = field(inline=Inline(_write_target, _read_target))   # backend, arch; the driver follows
    module: str = field()     # path inside the bundle
    function: str = field()
    inputs: tuple[str, ...] = field()
    outputs: tuple[str, ...] = field()
    sha256: str = field()     # of the module
    flags: tuple[str, ...] = field(default=(), omit_default=True)   # optimisation flags beyond the target's


@dataclass(frozen=True, slots=True)
class HostRuntime:
    """How the runtime opens the CPU device (chosen by measuring whole runs; the measurements are
    in the build record)."""

    driver: str                               # local-task (a worker pool) or local-sync (the caller's thread)
    flags: tuple[str, ...]                    # iree.runtime flags set before the device opens

    def __post_init__(self) -> None:
        if self.driver not in HOST_DRIVERS:
            raise ValueError(f"host_runtime driver {self.driver!r} is not one of {HOST_DRIVERS}")

    @property
    def label(self) -> str:
        return " ".join((self.driver, *self.flags))


@dataclass(frozen=True, slots=True)
class BoundaryTensor:
    """A tensor a region reads or writes, as the partitioner saw it."""

    dtype: str
    shape: tuple[int, ...] | None
    bytes: int | None


class IndexStatus(codec.TextEnum):
    """How a bundle keeps an index op's positions inside the tensor (``IndexOp.status``). A
    TextEnum: ``op.status == "checked"`` holds for ``IndexStatus.CHECKED``, and the manifest
    holds the bare string."""

    PROVED = "proved"          # interval analysis bounds the indices inside the axis
    CHECKED = "checked"        # a model input, checked by the runtime before it runs anything
    GUARDED = "guarded"        # computed in the graph: clamped, and a flag output counts the bad ones
    DEFINED = "defined"        # the op's spec gives out-of-range indices a meaning (OneHot)
    UNGUARDED = "unguarded"    # --no-index-guards


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
    status: IndexStatus
    input: str | None = None
    flag: str | None = None

    @property
    def valid(self) -> str:
        return ", ".join(f"[{-d}, {d - 1}]" for d in self.dims)

    def codec_validate(self) -> None:
        """A checked op names the input it checks, a guarded one its guard's flag output."""
        if self.status == IndexStatus.CHECKED and self.input is None:
            raise ValueError(f"index op {self.node!r} is checked but names no input")
        if self.status == IndexStatus.GUARDED and self.flag is None:
            raise ValueError(f"index op {self.node!r} is guarded but names no flag output")


def _write_cpu_flags(flags: tuple[str, ...]) -> dict[str, Any]:
    return {"build_machine": {"cpu_flags": list(flags)}}


def _read_cpu_flags(d: dict[str, Any]) -> tuple[str, ...]:
    return codec.decode(tuple[str, ...], d.get("build_machine", {}).get("cpu_flags", []))


@dataclass(frozen=True, slots=True)
class Manifest:
    model: ModelInfo
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    weights: Weights | None
    regions: tuple[RegionEntry, ...]
    schedule: tuple[str, ...]
    boundary_tensors: tuple[tuple[str, BoundaryTensor], ...] = field(as_map=True)
    toolchain: tuple[tuple[str, str], ...] = field(as_map=True)     # (package, version)
    constant_inputs: tuple[ConstantInput, ...] = ()
    # The build machine's ISA flags: llvm-cpu code for "host" may use them (the runtime checks).
    cpu_flags: tuple[str, ...] = field(default=(), inline=Inline(_write_cpu_flags, _read_cpu_flags))
    host_runtime: HostRuntime | None = field(default=None, omit_default=True)  # None: local-task, IREE's topology
    index_ops: tuple[IndexOp, ...] = field(default=(), omit_default=True)
    shapes: Shapes | None = field(default=None, omit_default=True)     # symbolic dims and buckets (shapes.py)
    memory: tuple[DeviceMemory, ...] = field(default=(), omit_default=True)   # per device (memory.py)
    overlap: tuple[tuple[str, str], ...] = field(default=(), omit_default=True)  # may run at once (lanes.py)
    extra_weights: tuple[Weights, ...] = field(default=(), omit_default=True)  # the dynamic fallback's own

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

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **codec.encode_fields(self)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Manifest":
        """Parse a manifest dict; raises KeyError/TypeError/ValueError on a malformed one
        (``read`` turns those into a BundleError naming the file)."""
        found = d.get("schema_version") if isinstance(d, dict) else None
        if found not in READABLE_SCHEMAS:
            raise BundleError(f"manifest has schema_version {found!r}; this aot reads {READABLE_SCHEMAS}",
                              hint="rebuild the bundle with this version of aot")
        m = codec.decode_fields(cls, d)
        if sorted(m.schedule) != sorted(r.name for r in m.regions):
            raise ValueError("schedule does not list every region once")
        if {r for pair in m.overlap for r in pair} - set(m.schedule):
            raise ValueError("overlap names a region the schedule does not")
        return m

    def validate(self, bundle: Path) -> None:
        """The files the manifest names are inside ``bundle``, present, and match their size
        (weights) and sha256 (integrity.check_file; a digest verified before is remembered)."""
        for r in self.regions:
            checked_member(bundle, r.module, r.sha256, f"module {r.module!r} of region {r.name!r}")
        for w in self.archives:
            check_file(safe_member(bundle, w.path), w.sha256, w.size, f"weights archive {w.path!r}")
        for bucket in self.shapes.buckets[1:] if self.shapes else ():
            read_bucket(bundle, bucket)
        if self.shapes is not None and self.shapes.fallback is not None:
            read_fallback(bundle, self.shapes.fallback)

    def write(self, bundle: Path, name: str = MANIFEST) -> Path:
        """Write ``bundle/manifest.json`` (or another ``name``) atomically: a reader never sees half a manifest."""
        return write_json(Path(bundle) / name, self.to_json())


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
    manifest = parse_file(path)
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
    manifest = parse_file(path)
    manifest.validate(bundle)
    return manifest


def parse_file(path: Path) -> Manifest:
    """The manifest at ``path``, parsed and its fields checked, without looking at the files it
    names (``read`` does that too; ``aot check --integrity`` checks each and reports all)."""
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
    check_file(path, sha256, None, what)
    return path


def safe_member(bundle: Path, rel: str) -> Path:
    """A path inside the bundle; refuses absolute paths and '..' so a manifest cannot point away."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise BundleError(f"manifest path {rel!r} leaves the bundle", hint="rebuild the bundle")
    return Path(bundle, *p.parts)


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


def thaw(value: Any) -> Any:
    return [thaw(v) for v in value] if isinstance(value, tuple) else value
