"""Device memory: what a bundle needs on each device (recorded at build time), what a device
offers, and the preflight that compares them before anything is loaded.

Deployment code: numpy-free, iree-free (ctypes for the Vulkan and CUDA queries)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
from dataclasses import dataclass
from typing import Callable, Mapping

from .errors import DeviceError

# A limit set by the operator wins over what the device reports: `AOT_DEVICE_MEMORY=vulkan=2GiB,cuda=10GiB`.
LIMIT_ENV = "AOT_DEVICE_MEMORY"
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30}


class DeviceMemoryError(DeviceError):
    """A device has less memory than the bundle needs on it."""


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """What one run of one bucket holds on one device (bytes)."""

    driver: str
    parameters: int    # the weights its regions read: each device loads its own copy
    outputs: int       # every region output on this device, all alive at the end of a run
    transients: int    # iree-compile's static estimate per module (hoisted constants + scratch), summed

    @property
    def total(self) -> int:
        return self.parameters + self.outputs + self.transients

    def text(self) -> str:
        return (f"{size_text(self.total)} (parameters {size_text(self.parameters)}, region outputs "
                f"{size_text(self.outputs)}, transients {size_text(self.transients)})")

def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise DeviceError(f"cannot read the memory size {text!r}", hint="write it as 512MiB, 2GiB or a byte count")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def configured_limits(text: str | None = None) -> dict[str, int]:
    """``vulkan=2GiB,local-task=8GiB`` (default: the AOT_DEVICE_MEMORY environment variable)."""
    text = os.environ.get(LIMIT_ENV, "") if text is None else text
    limits = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        driver, sep, size = item.partition("=")
        if not sep:
            raise DeviceError(f"{LIMIT_ENV} item {item!r} is not DRIVER=SIZE", hint="e.g. vulkan=2GiB,cuda=10GiB")
        limits[driver.strip()] = parse_size(size)
    return limits


def offered(driver: str, limits: Mapping[str, int]) -> tuple[int | None, str]:
    """The bytes ``driver``'s device offers and where that figure comes from (None: unknown)."""
    if driver in limits:
        return limits[driver], f"the limit set for it ({LIMIT_ENV} or device_memory=)"
    query = _QUERIES.get(driver)
    try:
        found = query() if query else None
    except (OSError, AttributeError, ValueError):
        found = None   # no driver library: opening the device reports that more clearly
    return (found, _SOURCES[driver]) if found else (None, "unknown")


def preflight(needs: Mapping[str, tuple[int, str]], limits: Mapping[str, int] | None = None) -> None:
    """Raise DeviceMemoryError for the first device that offers less than ``needs[driver]``
    (bytes, and their description starting with the total), before any device is opened."""
    limits = configured_limits() if limits is None else limits
    for driver, (need, what) in needs.items():
        have, source = offered(driver, limits)
        if have is not None and need > have:
            raise DeviceMemoryError(
                f"the bundle needs {what} on the {driver!r} device; the device offers "
                f"{size_text(have)}, from {source}",
                hint=f"free memory on that device, raise its limit ({LIMIT_ENV}={driver}=SIZE), or rebuild with "
                     "fewer or smaller shape buckets (--batch-buckets) or with that device's regions on the host")


def _cpu_available() -> int | None:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


class _VkMemoryHeap(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint64), ("flags", ctypes.c_uint32)]


class _VkMemoryProperties(ctypes.Structure):
    _fields_ = [("typeCount", ctypes.c_uint32), ("types", ctypes.c_uint32 * 64),
                ("heapCount", ctypes.c_uint32), ("heaps", _VkMemoryHeap * 16)]


class _VkInstanceCreateInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("pApplicationInfo", ctypes.c_void_p), ("layerCount", ctypes.c_uint32),
                ("layers", ctypes.c_void_p), ("extensionCount", ctypes.c_uint32), ("extensions", ctypes.c_void_p)]


@functools.cache   # a heap's size does not change; one Vulkan instance per process is enough
def _vulkan_device_local() -> int | None:
    """The largest DEVICE_LOCAL heap of the first physical device, the one IREE's default device
    opens (vkGetPhysicalDeviceMemoryProperties)."""
    vk = ctypes.CDLL(ctypes.util.find_library("vulkan") or "libvulkan.so.1")
    instance = ctypes.c_void_p()
    info = _VkInstanceCreateInfo(sType=1)   # VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO
    if vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance)) != 0:
        return None
    try:
        count = ctypes.c_uint32(0)
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        if not count.value:
            return None
        devices = (ctypes.c_void_p * count.value)()
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), devices)
        props = _VkMemoryProperties()
        vk.vkGetPhysicalDeviceMemoryProperties(ctypes.c_void_p(devices[0]), ctypes.byref(props))
        local = [props.heaps[i].size for i in range(props.heapCount) if props.heaps[i].flags & 1]
        return max(local, default=0) or None
    finally:
        vk.vkDestroyInstance(instance, None)


@functools.cache
def _cuda_total() -> int | None:
    cuda = ctypes.CDLL("libcuda.so.1")
    device, total = ctypes.c_int(), ctypes.c_size_t()
    if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), 0):
        return None
    return total.value if not cuda.cuDeviceTotalMem_v2(ctypes.byref(total), device) else None


_QUERIES: dict[str, Callable[[], int | None]] = {"local-task": _cpu_available, "local-sync": _cpu_available, "vulkan": _vulkan_device_local,
            "cuda": _cuda_total}
_SOURCES = {"local-task": "MemAvailable in /proc/meminfo", "local-sync": "MemAvailable in /proc/meminfo",
            "vulkan": "its largest device-local heap (vkGetPhysicalDeviceMemoryProperties)",
            "cuda": "cuDeviceTotalMem"}


def needs(records: "list[tuple[DeviceMemory, ...]]") -> dict[str, tuple[int, str]]:
    """Bytes per driver for manifests loaded side by side (a bucketed bundle loads every bucket,
    each with its own modules and weights on the device), and what they are for."""
    out: dict[str, tuple[int, str]] = {}
    for driver in dict.fromkeys(m.driver for record in records for m in record):
        parts = [m for record in records for m in record if m.driver == driver]
        total = sum(m.total for m in parts)
        what = parts[0].text() if len(parts) == 1 else (
            f"{size_text(total)} for {len(parts)} shape buckets loaded together; the largest: "
            f"{max(parts, key=lambda m: m.total).text()}")
        out[driver] = (total, what)
    return out

