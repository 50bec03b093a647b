"""This machine's devices, coarsely named: what a learned model's timings and a stored calibration
belong to (``learn.key.device_fingerprint``, ``partition/calibrations.py``). A leaf module: it
reads /proc/cpuinfo once per process and imports nothing of aot but the runtime's own pieces."""

from __future__ import annotations

import os
import platform
from functools import cache
from pathlib import Path

from aot.runtime.manifest import cpu_flags
from aot.runtime.target import Target


@cache
def host_class() -> str:
    """The host's ISA class and core count (``host=x86-64-v4 cores=2``)."""
    flags = set(cpu_flags())
    isa = "x86-64-v4" if "avx512f" in flags else "x86-64-v3" if "avx2" in flags else "baseline"
    return f"host={isa} cores={os.cpu_count() or 1}"


def devices(accel: Target | None) -> str:
    """The accelerator's backend and arch, and the host's class (``vulkan-spirv:llvmpipe host=x86-64-v4 cores=2``)."""
    return f"{f'{accel.backend}:{accel.arch}' if accel else 'none'} {host_class()}"


@cache
def cpu_model() -> str:
    """The host CPU's model name (two machines of one ISA class and core count still differ)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
