"""What each compiled dispatch binds, from iree-compile's own stream phase: the check that memory
splitting really shrank the dispatches. IREE may fuse slice -> op -> concat back into one
dispatch over the whole tensors, and only the compiler knows; its scheduling statistics
(``footprint.py``) give whole-module totals only, so this reads the dispatch functions of the
stream-phase IR: every ``stream.binding.subspan`` of a dispatch is one buffer it reads or writes,
typed with its static shape. The sum of a dispatch's bindings is its working set on the device
(what Vulkan's ``maxStorageBufferRange`` bounds binding by binding).

Each module's figures are cached by its sha256 beside the transients (``footprint.py``)."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aot.errors import CompileError
from aot.lower import flags, packed_conv
from aot.lower.executor import iree_compile_path
from aot.runtime.atomic import write_atomic
from aot.runtime.manifest import RegionEntry

_FUNC = re.compile(r"^\s*func\.func @(\S+?)\(")
_SUBSPAN = re.compile(r"stream\.binding\.subspan .*-> !iree_tensor_ext\.dispatch\.tensor<\w+:tensor<([^>]*)>>")
_LOAD = re.compile(r"iree_tensor_ext\.dispatch\.tensor\.load .*-> tensor<([^>]*)>\s*$")
_STORE = re.compile(r"iree_tensor_ext\.dispatch\.tensor\.store .*: tensor<([^>]*)> ->")
_BITS = {"i1": 8, "i8": 8, "i16": 16, "f16": 16, "bf16": 16, "i32": 32, "f32": 32, "i64": 64, "f64": 64,
         "ui8": 8, "si8": 8, "ui32": 32, "si32": 32, "ui64": 64, "si64": 64, "f8E4M3FN": 8, "f8E5M2": 8}
TIMEOUT_S = 300


@dataclass(frozen=True, slots=True)
class Dispatch:
    """One dispatch function of a module: the bytes it loads and stores (its working set) and
    the bytes its bindings span (more when it reads a slice of a larger buffer: a binding covers
    the whole tensor, which is what a device's binding range bounds)."""

    name: str
    bytes: int      # loaded + stored
    bound: int      # the bindings' tensors


def region_dispatches(region: RegionEntry, text: bytes, cache: Path) -> tuple[Dispatch, ...]:
    """The dispatches of one compiled region (its MLIR ``text``, compiled as the build did)."""
    path = cache / "dispatches" / f"{region.sha256}.json"
    if path.exists():
        return tuple(Dispatch(*d) for d in json.loads(path.read_text()))
    argv = [iree_compile_path(), "-", *flags.flags_for(region.target, text, region.flags),
            flags.COMPILE_TO_STREAM, "-o", "-"]
    source = packed_conv.module_text(region.target, text, region.flags)   # what the build compiled
    proc = subprocess.run(argv, input=source, capture_output=True, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise CompileError(f"{region.name} (dispatch sizes)", argv, proc.returncode, proc.stderr.decode(errors="replace"))
    found = parse(proc.stdout.decode(errors="replace"))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps([[d.name, d.bytes, d.bound] for d in found]).encode())   # readers never see half
    return found


def parse(ir: str) -> tuple[Dispatch, ...]:
    """Each function with bindings in stream-phase IR (dispatches are whole-tensor loads and
    stores there, before tiling), with what it loads and stores and what its bindings span (a
    dynamic dimension counts as 0: aot compiles static shapes)."""
    out: list[Dispatch] = []
    name, touched, bound = None, 0, 0
    for line in [*ir.splitlines(), "func.func @end("]:
        if (m := _FUNC.match(line)) is not None:
            if name is not None and bound:
                out.append(Dispatch(name, touched, bound))
            name, touched, bound = m.group(1), 0, 0
        elif name is not None:
            if (s := _SUBSPAN.search(line)) is not None:
                bound += tensor_bytes(s.group(1))
            elif (s := _LOAD.search(line) or _STORE.search(line)) is not None:
                touched += tensor_bytes(s.group(1))
    return tuple(out)


def tensor_bytes(spec: str) -> int:
    """``4x16x64x64xf32`` -> bytes; 0 when a dimension is dynamic or the type unknown."""
    *dims, elem = spec.split("x")
    if any(not d.isdigit() for d in dims) or elem not in _BITS:
        return 0
    n = 1
    for d in dims:
        n *= int(d)
    return n * _BITS[elem] // 8
