"""Where compile jobs run: one interface, a local pool by default, a Dask cluster on request.

A ``CompileTask`` is pure and self-contained (the MLIR bytes and the flags, no paths), so any
worker that has the same iree-base-compiler can run it and the result is the same bytes
wherever it ran. The caller owns caching and file placement; executors only run tasks."""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from aot.errors import AotError


@dataclass(frozen=True, slots=True)
class CompileTask:
    label: str                  # region (and tuning candidate) for messages
    mlir: bytes
    flags: tuple[str, ...]
    timeout: float


@dataclass(frozen=True, slots=True)
class CompileOutcome:
    vmfb: bytes | None          # None: the compile failed or timed out
    returncode: int             # -1: timed out; negative otherwise: killed by that signal
    log: str                    # iree-compile's stderr (or stdout)
    seconds: float
    compiler: str               # iree-base-compiler version of the worker that ran it


def compiler_version() -> str:
    from importlib.metadata import version

    return version("iree-base-compiler")


def iree_compile_path() -> str:
    from iree.compiler.tools import binaries

    return binaries.find_tool("iree-compile")


def run_task(task: CompileTask) -> CompileOutcome:
    """Run one task with this machine's iree-compile (a pool thread or a cluster worker)."""
    start = time.perf_counter()
    # The MLIR goes in on stdin: a source file's path ends up in the module's debug locations,
    # and the same region must give the same bytes wherever it compiles. The module comes back
    # on stdout (`-o -`): no temporary file is left behind when a build is killed mid-compile.
    argv = [iree_compile_path(), "-", *task.flags, "-o", "-"]
    try:
        proc = subprocess.run(argv, input=task.mlir, capture_output=True, timeout=task.timeout)
    except subprocess.TimeoutExpired:
        return CompileOutcome(None, -1, f"error: iree-compile timed out after {task.timeout:.0f}s",
                              time.perf_counter() - start, compiler_version())
    ok = proc.returncode == 0 and bool(proc.stdout)
    log = proc.stderr.decode(errors="replace") or ("" if ok else proc.stdout.decode(errors="replace")) or "no output"
    return CompileOutcome(proc.stdout if ok else None, proc.returncode, log,
                          time.perf_counter() - start, compiler_version())


Done = Callable[[int, CompileOutcome], None]   # a task's index and its outcome, as each finishes


class Executor(Protocol):
    description: str

    def run(self, tasks: Sequence[CompileTask], done: Done | None = None) -> list[CompileOutcome]:
        """Run every task; outcomes in task order. A failed compile is an outcome, not an error.
        ``done`` hears of each task as it finishes (from a pool thread: it must be thread-safe)."""

    def close(self) -> None: ...


class LocalPool:
    """Up to ``workers`` iree-compile processes at once on this machine (default: one per core)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.description = f"local pool of {self.workers}"

    def run(self, tasks: Sequence[CompileTask], done: Done | None = None) -> list[CompileOutcome]:
        def one(indexed: tuple[int, CompileTask]) -> CompileOutcome:
            outcome = run_task(indexed[1])
            if done is not None:
                done(indexed[0], outcome)
            return outcome

        if len(tasks) <= 1:
            return [one(t) for t in enumerate(tasks)]
        with ThreadPoolExecutor(min(self.workers, len(tasks))) as pool:
            return list(pool.map(one, enumerate(tasks)))

    def close(self) -> None:
        pass


class DaskCluster:
    """A running Dask distributed scheduler (``tcp://host:8786``). Its workers need aot and the
    same iree-base-compiler installed; a version mismatch is refused (see ``check``)."""

    def __init__(self, address: str, connect_timeout: float = 30.0) -> None:
        try:
            from distributed import Client
        except ImportError as e:
            raise AotError("--cluster needs Dask distributed", hint="pip install 'aot[cluster]'") from e
        try:
            self._client = Client(address, timeout=connect_timeout)
        except (OSError, TimeoutError) as e:
            raise AotError(f"cannot reach the Dask scheduler at {address!r}: {e}",
                           hint="start one with `dask scheduler` and `dask worker ADDRESS`, or drop --cluster") from e
        workers = len(self._client.scheduler_info().get("workers", {}))
        self.description = f"Dask cluster {address} ({workers} worker(s))"

    def run(self, tasks: Sequence[CompileTask], done: Done | None = None) -> list[CompileOutcome]:
        # pure=True: the task's bytes are its key, so a task submitted twice runs once.
        futures = self._client.map(run_task, list(tasks), pure=True)
        outcomes: list[CompileOutcome] = self._client.gather(futures)
        if done is not None:   # after the gather: the cluster reports nothing sooner
            for i, outcome in enumerate(outcomes):
                done(i, outcome)
        return outcomes

    def close(self) -> None:
        self._client.close()


def executor_for(cluster: str | None, workers: int | None = None) -> Executor:
    return DaskCluster(cluster) if cluster else LocalPool(workers)
