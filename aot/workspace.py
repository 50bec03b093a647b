"""The one place that decides where files go. Stages are handed paths; they never invent them."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from aot.errors import AotError


# A cache shared by every build on the machine (as ccache is): compiled modules and what is
# measured of them, all keyed by content (module text, target, flags, compiler version, machine),
# so builds of different models, or of one model into different folders, reuse each other's work.
# Unset, each build keeps its own cache in its build folder.
SHARED_CACHE_ENV = "AOT_CACHE_DIR"


@dataclass(frozen=True, slots=True)
class Workspace:
    """``artifacts/NAME``: ``bundle/`` (the deliverable), ``build/`` (intermediates, cache)."""

    root: Path
    shared_cache: Path | None = None

    @classmethod
    def at(cls, root: Path) -> "Workspace":
        """The workspace at ``root``, with the shared cache named by ``AOT_CACHE_DIR`` if set."""
        shared = os.environ.get(SHARED_CACHE_ENV)
        return cls(Path(root), Path(shared).expanduser() if shared else None)

    @property
    def bundle(self) -> Path:
        return self.root / "bundle"

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def cache(self) -> Path:
        return self.shared_cache or self.build / "cache"

    @property
    def params(self) -> Path:
        return self.build / "weights.irpa"

    def region_mlir(self, candidate: str, region: str) -> Path:
        """One folder per candidate bundle: the whole-model baseline must not overwrite the
        partition's r0.mlir that a compile error's repro line points at."""
        return self.build / "regions" / candidate / f"{region}.mlir"

    def staging(self, candidate: str) -> Path:
        """A fresh folder beside the bundle to assemble one candidate bundle in."""
        path = self.root / f".bundle.staging-{os.getpid()}-{candidate}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def discard_staging(self) -> None:
        """Remove this process's staging folders (candidates not published, or a failed build),
        and those of builds that were killed (their process is gone)."""
        for path in self.root.glob(".bundle.staging-*"):
            pid = path.name.split("-")[1]
            if pid == str(os.getpid()) or (pid.isdigit() and not _alive(int(pid))):
                shutil.rmtree(path, ignore_errors=True)

    def prepare(self) -> None:
        try:
            for p in (self.build, self.cache):
                p.mkdir(parents=True, exist_ok=True)
        except OSError as e:   # a file where a folder should be, no permission, a full disk
            raise AotError(f"cannot create the build folder {str(e.filename or self.build)!r}: {e.strerror}",
                           hint=f"give -o a directory you can write (not an existing file); if the folder is "
                                f"{SHARED_CACHE_ENV}'s, point it at one you can write or unset it") from e


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process
        return True
    return True


def publish(staging: Path, target: Path) -> None:
    """Replace ``target`` with ``staging`` so that a reader sees the old or the new bundle, never
    a mix and never none, even if the process is killed halfway: on Linux the two folders are
    swapped in one atomic rename (renameat2 RENAME_EXCHANGE) and the old one, now at ``staging``,
    is removed after. Elsewhere the old one is renamed aside first, which leaves a moment without
    a bundle (a SIGKILL there leaves it at ``target.old-PID``)."""
    if target.exists() and _exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)
        return
    old = target.with_name(target.name + f".old-{os.getpid()}")
    if target.exists():
        os.replace(target, old)
    try:
        os.replace(staging, target)
    except OSError:
        if old.exists():
            os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux 3.15+, glibc 2.28+); False where that is not available."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):   # EINVAL / ENOSYS / EOPNOTSUPP: a filesystem or kernel without it
        return False
    raise OSError(err, os.strerror(err), str(b))
