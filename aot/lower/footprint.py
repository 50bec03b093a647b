"""What one run of a staged bundle holds on each device, measured at build time:
- parameters: the weights.irpa entries the device's regions name (each device loads its own copy);
- region outputs: their bytes, from the partition's tensor table (static shapes);
- transients: iree-compile's own static estimate for each module (its scheduling statistics: the
  bytes its submissions allocate, which include load-time hoisted constants such as dequantized
  weights), summed over the device's regions.
Every compile prints those statistics (flags.STATS_FLAGS) and the compile cache keeps each
module's figure by the module's sha256, so this reads them; a module compiled without them
(a cache from an older aot) gets a statistics-only compile that stops after the stream phase."""

from __future__ import annotations

import csv
import io
import re
import subprocess
from pathlib import Path

from aot.errors import CompileError
from aot.lower import flags, packed_conv
from aot.lower.executor import iree_compile_path
from aot.runtime.atomic import write_atomic
from aot.runtime.manifest import Manifest, RegionEntry
from aot.runtime.memory import DeviceMemory

_PARAMETER = re.compile(rb'parameter\.named<"[^"]*"::"((?:[^"\\]|\\.)*)">')
STATS_TIMEOUT_S = 300


def device_memory(manifest: Manifest, sources: Path, weights: Path | None, cache: Path) -> tuple[DeviceMemory, ...]:
    sizes = _parameter_sizes(weights)
    boundary = dict(manifest.boundary_tensors)
    per_driver: dict[str, list[int]] = {}
    for r in manifest.regions:
        text = (sources / f"{r.name}.mlir").read_bytes()
        params = sum(sizes.get(k.decode(), 0) for k in set(_PARAMETER.findall(text)))
        outputs = sum(boundary[v].bytes or 0 for v in r.outputs if v in boundary)
        totals = per_driver.setdefault(manifest.driver(r), [0, 0, 0])
        for i, n in enumerate((params, outputs, _transient_bytes(r, text, cache))):
            totals[i] += n
    return tuple(DeviceMemory(d, *t) for d, t in per_driver.items())


def _parameter_sizes(weights: Path | None) -> dict[str, int]:
    if weights is None or not weights.exists():
        return {}
    import iree.runtime as rt

    index = rt.ParameterIndex()
    index.load(str(weights))
    return {key: entry.length for key, entry in index.items()}


def store_transients(cache: Path, sha256: str, log: str) -> None:
    """Keep a freshly compiled module's transient bytes, read from the statistics in its log."""
    try:
        _keep(cache, sha256, _aggregate(log))
    except ValueError:
        return   # no statistics printed: _transient_bytes compiles for them when asked


def _keep(cache: Path, sha256: str, transient_bytes: int) -> int:
    path = _cached(cache, sha256)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, str(transient_bytes).encode())   # a concurrent reader never sees a half-written number
    return transient_bytes


def _cached(cache: Path, sha256: str) -> Path:
    return cache / "transients" / f"{sha256}.txt"


def _transient_bytes(region: RegionEntry, text: bytes, cache: Path) -> int:
    if _cached(cache, region.sha256).exists():
        return int(_cached(cache, region.sha256).read_text())
    # The compile's own flags and statistics, printed to stdout instead of stderr.
    argv = [iree_compile_path(), "-", *flags.flags_for(region.target, text, region.flags),
            flags.COMPILE_TO_STREAM, *flags.STATS_TO_STDOUT, "-o", "/dev/null"]
    source = packed_conv.module_text(region.target, text, region.flags)   # what the build compiled
    proc = subprocess.run(argv, input=source, capture_output=True, timeout=STATS_TIMEOUT_S)
    if proc.returncode != 0:
        raise CompileError(f"{region.name} (memory statistics)", argv, proc.returncode, proc.stderr.decode(errors="replace"))
    return _keep(cache, region.sha256, _aggregate(proc.stdout.decode(errors="replace")))


def _aggregate(text: str) -> int:
    """The "Transient Size" of the aggregate statistics table (its first header row)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].startswith(";")]
    header = next((i for i, r in enumerate(rows) if "Transient Size" in r), None)
    if header is None or header + 1 >= len(rows):
        raise ValueError("iree-compile printed no aggregate statistics")
    return int(rows[header + 1][rows[header].index("Transient Size")])
