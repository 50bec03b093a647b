"""Compile regions with ``iree-compile``: jobs through an executor (local pool or cluster), a
content-hash cache, atomic writes, per-region fallback from the accelerator to llvm-cpu."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from aot.errors import AotError, CompileError, UsageError
from aot.lower import flags, footprint, packed_conv
from aot.lower.executor import (CompileOutcome, CompileTask, Executor, LocalPool, compiler_version,
                                iree_compile_path)
from aot.runtime.atomic import write_atomic
from aot.runtime.manifest import file_sha256
from aot.runtime.target import Target

COMPILE_TIMEOUT_S = 900          # host compiles: nothing to fall back to, so be patient

# iree-compile's words for an accelerator arch it does not know (IREE 3.13: --accel cuda:sm_90,
# vulkan:foo). No region can build for such a target, so falling back region by region would
# quietly put the whole model on the host: the build stops instead.
UNKNOWN_TARGET = ("Unknown CUDA target", "Unknown Vulkan target", "missing GPU target in #hal.executable.target")
TARGET_HINTS = {
    "cuda": "pick an arch this IREE knows (3.13: sm_60 to sm_89, sm_120, or names such as ampere and ada). "
            "It has no Hopper (sm_90) target: build for sm_80, whose PTX the driver compiles for Hopper "
            "when the bundle loads (measured on an H100, docs/cuda.md)",
    "vulkan-spirv": "pick a --vulkan-target this IREE knows (llvmpipe for Mesa lavapipe, or a GPU family "
                    "such as ampere, rdna3, valhall)",
}


@dataclass(frozen=True, slots=True)
class CompileJob:
    region: str
    mlir: Path
    target: Target
    opt: tuple[str, ...] | None = None   # optimisation flags (None: flags.default_opt_flags)
    label: str = ""                      # e.g. the tuning candidate, for messages

    @property
    def opt_flags(self) -> tuple[str, ...]:
        if self.opt is not None:
            return self.opt
        return flags.region_defaults(self.target, self.mlir.read_bytes())


@dataclass(frozen=True, slots=True)
class CompiledRegion:
    region: str
    target: Target            # what it was finally compiled for
    vmfb: Path
    sha256: str
    fallback: str | None      # why the accelerator compile failed, when it fell back to the host
    cached: bool
    seconds: float
    opt_flags: tuple[str, ...] = ()


def compile_argv(tool: str, mlir: Path, out: Path, target: Target, keep_f64: bool = False,
                 opt: tuple[str, ...] | None = None) -> list[str]:
    """The exact command line for one region (pure: easy to test and to print as a repro)."""
    return [tool, str(mlir), *flags.compile_flags(target, keep_f64, opt), "-o", str(out)]


def compile_all(jobs: list[CompileJob], cache: Path, *, accel_timeout: float, executor: Executor | None = None,
                fallback: Target | None = Target.host()) -> tuple[CompiledRegion, ...]:
    """Compile every job; an accelerator job that fails, or outlasts ``accel_timeout`` seconds
    (some regions take IREE's SPIR-V pipeline many minutes; the host is quicker), is compiled
    again for ``fallback`` (llvm-cpu) with the host's default flags.

    A region that fails with its target's default optimisation flags is compiled again with the
    next set of ``flags.default_fallbacks`` in turn (IREE refuses some data-tiled convolutions;
    im2col breaks PP-OCR-det's workgroup distribution on llvm-cpu); the defaults at a finer work
    split only where IREE refused the set before at its split, as nothing else changes with it.
    A host compile failure after the last raises its CompileError (there is nothing left to fall
    back to)."""
    def with_fallbacks(batch: Sequence[CompileJob]) -> list[CompiledRegion | CompileError]:
        done = compile_many(batch, cache, accel_timeout=accel_timeout, executor=executor)
        _refuse_unknown_target(batch, done)
        chains = {i: flags.region_fallbacks(j.target, j.mlir.read_bytes())
                  for i, (j, r) in enumerate(zip(batch, done)) if isinstance(r, CompileError) and j.opt is None}
        for step in range(1, max(map(len, chains.values()), default=0)):
            again = {i: replace(batch[i], opt=chain[step]) for i, chain in chains.items()
                     if step < len(chain) and _worth_trying(chain[step], chain[0], done[i])}
            for i, r in zip(again, compile_many(list(again.values()), cache, accel_timeout=accel_timeout,
                                                executor=executor)):
                done[i] = r
        return done

    results = with_fallbacks(jobs)
    retry = {i: CompileJob(j.region, j.mlir, fallback) for i, (j, r) in enumerate(zip(jobs, results))
             if isinstance(r, CompileError) and not j.target.is_host and fallback is not None}
    if retry:
        redone = dict(zip(retry, with_fallbacks(list(retry.values()))))
        for i, host in redone.items():
            failed = results[i]
            if isinstance(host, CompiledRegion) and isinstance(failed, CompileError):
                reason = f"{jobs[i].target} compile failed, fell back to llvm-cpu: {failed.stderr_tail[-600:]}"
                host = replace(host, fallback=reason)
            results[i] = host
    compiled = []
    for r in results:
        if isinstance(r, CompileError):
            raise r
        compiled.append(r)
    return tuple(compiled)


def _worth_trying(opt: tuple[str, ...], first: tuple[str, ...], last: CompiledRegion | CompileError) -> bool:
    """A region's next fallback ``opt`` after ``last``: only while it has not compiled, and a finer
    split of its defaults ``first`` only where IREE refused the last at its split."""
    return isinstance(last, CompileError) and (
        not flags.at_a_finer_split_of(opt, first) or flags.refused_at_this_split(last.stderr_tail))


def _refuse_unknown_target(jobs: Sequence[CompileJob], results: Sequence[CompiledRegion | CompileError]) -> None:
    for job, result in zip(jobs, results):
        if isinstance(result, CompileError) and any(words in result.stderr_tail for words in UNKNOWN_TARGET):
            raise UsageError(f"iree-compile {compiler_version()} has no {job.target.backend} target "
                             f"{job.target.arch!r}: {result.stderr_tail.splitlines()[0][:200]}",
                             hint=TARGET_HINTS.get(job.target.backend, "pick a target this IREE knows"))


def compile_many(jobs: Sequence[CompileJob], cache: Path, *, accel_timeout: float,
                 executor: Executor | None = None,
                 compiled: Callable[[CompileJob, float | None, bool], None] | None = None
                 ) -> list[CompiledRegion | CompileError]:
    """Each job's module from ``cache`` or compiled through ``executor``; a failure is returned as
    its CompileError (the tuner rejects such a candidate, the build raises it). ``compiled`` hears
    of each job as it is done: the job, its compile seconds (None: from the cache) and whether it
    compiled (from a pool thread)."""
    version = compiler_version()
    results: list[CompiledRegion | CompileError | None] = []
    pending: list[tuple[int, CompileJob, CompileTask, Path]] = []
    for i, job in enumerate(jobs):
        text = job.mlir.read_bytes()
        if job.opt is None:   # the defaults for what the region holds, from the text read here, once
            job = replace(job, opt=flags.region_defaults(job.target, text))
        # Every compile also prints IREE's static scheduling statistics (on stderr): the bundle's
        # memory record reads each module's transient bytes from them (lower/footprint.py).
        job_flags = (*flags.flags_for(job.target, text, job.opt), *flags.STATS_FLAGS)
        source = packed_conv.module_text(job.target, text, job.opt)   # what these flags compile
        key = hashlib.sha256(b"\0".join([source, str(job.target).encode(), " ".join(job_flags).encode(),
                                         version.encode()])).hexdigest()[:32]
        out = cache / f"{key}.vmfb"
        if out.exists():
            results.append(CompiledRegion(job.region, job.target, out, file_sha256(out), None, True, 0.0, job.opt_flags))
            if compiled is not None:
                compiled(job, None, True)
            continue
        results.append(None)
        timeout = COMPILE_TIMEOUT_S if job.target.is_host else accel_timeout
        pending.append((i, job, CompileTask(f"{job.region}{job.label and ' ' + job.label}", source, job_flags, timeout), out))
    if pending:
        executor = executor or LocalPool()
        def done(k: int, outcome: CompileOutcome) -> None:
            if compiled is not None:
                compiled(pending[k][1], outcome.seconds, outcome.vmfb is not None)

        for (i, job, task, out), outcome in zip(pending, executor.run([p[2] for p in pending], done)):
            results[i] = _store(job, task, outcome, out, version)
    return results  # type: ignore[return-value]


def _repro_source(job: CompileJob, task: CompileTask) -> Path:
    """The file a failed compile's repro reads: the region's own, or the text its flags rewrote it
    to (lower/packed_conv.py), written beside it."""
    if task.mlir == job.mlir.read_bytes():
        return job.mlir
    path = job.mlir.with_name(f"{job.mlir.stem}.packed-conv.mlir")
    write_atomic(path, task.mlir)
    return path


def _store(job: CompileJob, task: CompileTask, outcome: CompileOutcome, out: Path,
           version: str) -> CompiledRegion | CompileError:
    if outcome.compiler != version:
        raise AotError(f"a compile worker has iree-base-compiler {outcome.compiler}; this build uses {version}",
                       hint=f"install iree-base-compiler=={version} on every cluster worker")
    if outcome.vmfb is None:
        # The repro names this machine's files, not the worker's temporary ones.
        argv = compile_argv(iree_compile_path(), _repro_source(job, task), out, job.target, flags.keeps_f64(task.mlir),
                            job.opt_flags)
        return CompileError(task.label, argv, outcome.returncode, outcome.log)
    # Write to a private name and rename: a reader never sees half a module, and concurrent
    # builds sharing the cache write identical bytes.
    write_atomic(out, outcome.vmfb)
    sha = file_sha256(out)
    footprint.store_transients(out.parent, sha, outcome.log)
    return CompiledRegion(job.region, job.target, out, sha, None, False, outcome.seconds, job.opt_flags)
