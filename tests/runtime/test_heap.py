"""runtime/heap.py: a loaded session keeps a call's large freed buffers in the heap, so the next
call does not fault them in again; the operator's own malloc settings and the opt-out win."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from aot.runtime import heap

# In a fresh process (malloc's thresholds are per process): load the bundle, then malloc, touch
# and free 64 MiB twice, counting the page faults of the second touch.
_CHILD = r"""
import ctypes, json, resource, sys
from aot import runtime
size = 64 << 20
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
with runtime.load(sys.argv[1]):
    pass
def touch():
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)
    libc.free(p)
touch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
touch()
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
"""


def _faults_of_a_second_64_mib_buffer(bundle, **env: str) -> int:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(bundle)], capture_output=True, text=True, check=True,
                         env={k: v for k, v in {**os.environ, **env}.items() if k not in _settings_dropped(env)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def _settings_dropped(env: dict[str, str]) -> set[str]:
    """The operator's malloc settings this machine may have, dropped unless the test sets them."""
    return set(heap.SETTINGS_ENV) - env.keys()


@pytest.mark.device   # builds the example for the CPU (host_bundle)
def test_a_session_keeps_a_freed_64_mib_buffer_for_the_next_one(host_bundle):
    pages = (64 << 20) // 4096
    kept = _faults_of_a_second_64_mib_buffer(host_bundle.bundle.path)
    assert kept < pages // 20, kept                  # the memory was still mapped: no fault per page
    mapped_anew = _faults_of_a_second_64_mib_buffer(host_bundle.bundle.path, **{heap.OPT_OUT_ENV: "0"})
    assert mapped_anew > pages // 2, mapped_anew     # glibc's default: a fresh mapping, faulted in again


@pytest.mark.parametrize(("env", "expected"), [
    ({}, True),
    ({heap.OPT_OUT_ENV: "0"}, False),
    ({heap.OPT_OUT_ENV: "off"}, False),
    ({heap.OPT_OUT_ENV: "1"}, True),
    ({"MALLOC_MMAP_THRESHOLD_": "131072"}, False),
    ({"MALLOC_TRIM_THRESHOLD_": "0"}, False),
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, False),
    ({"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=512"}, True),
])
def test_the_operators_malloc_settings_and_the_opt_out_are_left_alone(env, expected):
    assert heap.wanted(env) is expected


@pytest.mark.parametrize(("env", "set_here"), [
    ({"PATH": "/bin"}, True),
    ({"PATH": "/bin", heap.OPT_OUT_ENV: "0"}, False),
    ({"PATH": "/bin", "MALLOC_MMAP_THRESHOLD_": "131072"}, False),
])
def test_a_runner_in_another_process_gets_the_same_thresholds_through_its_environment(env, set_here):
    got = heap.runner_environment(env)
    assert got["PATH"] == "/bin"          # the rest of the environment passes through
    if set_here:
        assert got["MALLOC_MMAP_THRESHOLD_"] == got["MALLOC_TRIM_THRESHOLD_"] == str(heap.KEEP_BELOW)
    else:
        assert got == env                 # the operator's own settings, or the opt-out, are kept as they are


def test_aot_profile_runs_iree_benchmark_module_with_the_heap_kept(monkeypatch, malloc_untuned):
    import subprocess

    from aot.tools import profile

    seen: list[dict] = []

    def run(argv, **kwargs):
        seen.append(kwargs["env"])
        return subprocess.CompletedProcess(argv, 0, stdout="{}", stderr="")

    monkeypatch.setattr(profile.subprocess, "run", run)
    assert profile._tool("iree-benchmark-module", ["--help"]) == "{}"
    assert seen[0]["MALLOC_MMAP_THRESHOLD_"] == str(heap.KEEP_BELOW)
