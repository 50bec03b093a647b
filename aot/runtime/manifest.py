"""The manifest: the contract between build and deploy. Stubs and the runtime read nothing else.

This module is pure data (json + hashlib); the runtime imports it, so it must not import onnx,
jinja2 or iree.compiler.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from aot.errors import BundleError

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
_DRIVERS = {"llvm-cpu": "local-task", "vulkan-spirv": "vulkan", "cuda": "cuda"}


def read(bundle: Path) -> dict[str, Any]:
    """Load and check ``bundle/manifest.json``: schema, fields, files present, hashes match."""
    path = Path(bundle) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise BundleError(f"{str(bundle)!r} is not a bundle: no {MANIFEST}",
                          hint="point at artifacts/NAME/bundle built by `aot build`") from e
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BundleError(f"{str(path)!r} is corrupt: {e}", hint="rebuild the bundle with `aot build`") from e
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else None
        raise BundleError(f"{str(path)!r} has schema_version {found!r}; this aot reads {SCHEMA_VERSION}",
                          hint="rebuild the bundle with this version of aot")
    try:
        _check(data, Path(bundle))
    except (KeyError, TypeError, ValueError) as e:
        raise BundleError(f"{str(path)!r} is malformed: {type(e).__name__}: {e}",
                          hint="rebuild the bundle with `aot build`") from e
    return data


def _check(data: dict[str, Any], bundle: Path) -> None:
    for io in (*data["inputs"], *data["outputs"]):
        str(io["name"]); str(io["dtype"]); [int(d) for d in io["shape"]]
    names = set()
    for r in data["regions"]:
        if r["target"] not in _DRIVERS or r["driver"] != _DRIVERS[r["target"]]:
            raise ValueError(f"region {r.get('name')!r} has target {r['target']!r} / driver {r['driver']!r}")
        names.add(r["name"])
        module = safe_member(bundle, r["module"])
        if not module.is_file():
            raise BundleError(f"bundle {str(bundle)!r} lacks module {r['module']!r} of region {r['name']!r}",
                              hint="the bundle is incomplete; rebuild it")
        if file_sha256(module) != r["sha256"]:
            raise BundleError(f"module {r['module']!r} of region {r['name']!r} does not match its sha256 "
                              "in the manifest (corrupt or replaced)", hint="rebuild the bundle")
    if sorted(data["schedule"]) != sorted(names):
        raise ValueError("schedule does not list every region once")
    weights = data["weights"]
    if weights is not None and not safe_member(bundle, weights["path"]).is_file():
        raise BundleError(f"bundle {str(bundle)!r} lacks its weights {weights['path']!r}", hint="rebuild it")


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


def cpu_flags() -> list[str]:
    """This machine's ISA flags that matter for llvm-cpu code (Linux /proc/cpuinfo; [] elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
    have = set(line.partition(":")[2].split())
    return [f for f in _ISA_FLAGS if f in have]


def amend(bundle: Path, per_region: dict[str, float], gate: dict[str, Any] | None,
             verification: dict[str, Any] | None = None) -> dict[str, Any]:
    """Add measured times, a measured gate decision and the verification record to a published
    bundle's manifest (atomic rename; the stub and runtime ignore these fields)."""
    path = bundle / MANIFEST
    data = json.loads(path.read_text())
    for r in data["regions"]:
        if r["name"] in per_region:
            r["measured_us"] = round(per_region[r["name"]], 3)
    if gate is not None:
        data["partition"]["gate"] = gate
    if verification is not None:
        data["verification"] = verification
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=True) + "\n")
    os.replace(tmp, path)
    return data
