"""A call's large intermediates kept in the process heap for the next call (glibc).

IREE's CPU devices allocate each call's transient buffers with malloc and free them when the call
ends. glibc serves an allocation over its mmap threshold (adjusted as it goes, at most 32 MiB)
with a fresh ``mmap`` and unmaps it on free, so every call faults in and zeroes its big
intermediates again: CREPE's one-region host bundle took 20,000 minor page faults a call, and ran
249 ms a call where the same module with the memory kept ran 191 (docs/performance.md, stop 68).
Raising the mmap and trim thresholds keeps freed memory in the heap for the next call, as
onnxruntime's arena keeps its own. The cost: the process holds its peak intermediates between
calls (and numpy's large arrays come from the heap too).

Done once per process, at the first session, on glibc only. Left alone when the operator has
tuned malloc (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, or ``GLIBC_TUNABLES`` naming
malloc) or asked not to (``AOT_KEEP_HEAP=0``).

Deployment code: numpy-free, iree-free.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
from typing import Mapping

OPT_OUT_ENV = "AOT_KEEP_HEAP"
# glibc's own environment names for the two thresholds: an operator who set one has tuned malloc
THRESHOLD_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")
TUNABLES_ENV = "GLIBC_TUNABLES"
# Every variable ``wanted`` reads: what a test clears to start from an untuned machine.
SETTINGS_ENV = (OPT_OUT_ENV, *THRESHOLD_ENV, TUNABLES_ENV)
# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Allocations under this stay in the heap; larger ones (a single 1 GiB intermediate) are still
# mapped and returned, so one huge call does not pin its memory for the process's life.
KEEP_BELOW = 1 << 30


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether aot may set malloc's thresholds: not on request, nor over the operator's own."""
    if environ.get(OPT_OUT_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return not any(k in environ for k in THRESHOLD_ENV) and "malloc" not in environ.get(TUNABLES_ENV, "")


@functools.lru_cache(maxsize=1)
def keep_intermediates() -> bool:
    """Set glibc's mmap and trim thresholds to ``KEEP_BELOW`` (above), once; whether they were set."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or not wanted(os.environ):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    # mallopt returns 1 on success; the trim threshold first, so the heap is not trimmed below
    # what the raised mmap threshold starts keeping in it
    return bool(libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(KEEP_BELOW))
                and libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(KEEP_BELOW)))


def runner_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for a runner in another process (``iree-benchmark-module``) that should keep its
    heap as a session does: glibc reads the same two thresholds from the environment. Unchanged
    where ``wanted`` says to leave malloc alone."""
    if not wanted(environ):
        return dict(environ)
    return {**environ, **{name: str(KEEP_BELOW) for name in THRESHOLD_ENV}}
