"""Compile regions with ``iree-compile``: parallel subprocesses, content-hash cache, atomic writes,
per-region fallback from the accelerator to llvm-cpu."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from aot.errors import CompileError
from aot.runtime.manifest import file_sha256
from aot.target import Target

COMPILE_TIMEOUT_S = 900          # host compiles: nothing to fall back to, so be patient


@dataclass(frozen=True, slots=True)
class CompileJob:
    region: str
    mlir: Path
    target: Target


@dataclass(frozen=True, slots=True)
class CompiledRegion:
    region: str
    target: Target            # what it was finally compiled for
    vmfb: Path
    sha256: str
    fallback: str | None      # why the accelerator compile failed, when it fell back to the host
    cached: bool
    seconds: float


def iree_compile_path() -> str:
    from iree.compiler.tools import binaries

    return binaries.find_tool("iree-compile")


def compile_argv(tool: str, mlir: Path, out: Path, target: Target, keep_f64: bool = False) -> list[str]:
    """The exact command line for one region (pure: easy to test and to print as a repro)."""
    return [tool, str(mlir), *target.compile_flags(keep_f64), "-o", str(out)]


def compiler_version() -> str:
    from importlib.metadata import version

    return version("iree-base-compiler")


def compile_all(jobs: list[CompileJob], cache: Path, *, accel_timeout: float, workers: int | None = None,
                fallback: Target | None = Target.host()) -> tuple[CompiledRegion, ...]:
    """Compile every job; an accelerator job that fails, or outlasts ``accel_timeout`` seconds
    (some regions take IREE's SPIR-V pipeline many minutes; the host is quicker), is compiled
    again for ``fallback`` (llvm-cpu).

    A host compile failure raises CompileError (there is nothing left to fall back to)."""
    tool = iree_compile_path()
    workers = workers or max(1, min(len(jobs), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        return tuple(pool.map(lambda j: _compile_with_fallback(tool, j, cache, fallback, accel_timeout), jobs))


def _compile_with_fallback(tool: str, job: CompileJob, cache: Path, fallback: Target | None,
                           accel_timeout: float) -> CompiledRegion:
    try:
        return _compile_one(tool, job, cache, COMPILE_TIMEOUT_S if job.target.is_host else accel_timeout)
    except CompileError as e:
        if job.target.is_host or fallback is None:
            raise
        host = _compile_one(tool, CompileJob(job.region, job.mlir, fallback), cache)
        reason = f"{job.target} compile failed, fell back to llvm-cpu: {e.stderr_tail[-600:]}"
        return CompiledRegion(host.region, host.target, host.vmfb, host.sha256, reason, host.cached, host.seconds)


def _compile_one(tool: str, job: CompileJob, cache: Path, timeout: float = COMPILE_TIMEOUT_S) -> CompiledRegion:
    text = job.mlir.read_bytes()
    keep_f64 = b",f64>" in text  # a float64 tensor type in the region (see Target.compile_flags)
    key = hashlib.sha256(b"\0".join([text, str(job.target).encode(), " ".join(job.target.compile_flags(keep_f64)).encode(),
                                     compiler_version().encode()])).hexdigest()[:32]
    out = cache / f"{key}.vmfb"
    if out.exists():
        return CompiledRegion(job.region, job.target, out, file_sha256(out), None, True, 0.0)
    # iree-compile -o is not atomic (a failed run deletes the old file, concurrent runs can swap
    # files): compile to a private temp name and rename into place only on success.
    tmp = cache / f"{key}.{os.getpid()}.{job.region}.tmp"
    argv = compile_argv(tool, job.mlir, tmp, job.target, keep_f64)
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        tmp.unlink(missing_ok=True)
        raise CompileError(job.region, argv, -1, f"error: iree-compile timed out after {timeout:.0f}s") from e
    if proc.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        # A negative return code is a crash (signal); it is a failed region, not a dead build tool.
        raise CompileError(job.region, argv, proc.returncode, proc.stderr or proc.stdout or "no output")
    os.replace(tmp, out)
    return CompiledRegion(job.region, job.target, out, file_sha256(out), None, False, time.perf_counter() - start)
