"""Open the device a driver names and check it can run the regions compiled for it.

Deployment code, as session.py: ``iree.runtime`` (passed in as ``rt``) and the runtime's own modules."""

from __future__ import annotations

from typing import Any

from . import manifest as mf
from .errors import DeviceError
from .manifest import Manifest, RegionEntry


class Devices:
    """One VM instance and one device per driver, opened on first use and shared by every session
    created with it: a process serving several models opens each device once."""

    def __init__(self) -> None:
        import iree.runtime as rt

        self.instance = rt.VmInstance()
        self._devices: dict[str, Any] = {}
        self.opened: list[str] = []   # drivers, in the order their device was opened

    def device(self, rt: Any, driver: str, regions: list[RegionEntry], manifest: Manifest) -> Any:
        """``driver``'s device, opened for the first session that asks; each session checks it."""
        if driver not in self._devices:
            self._devices[driver] = open_device(rt, driver, regions, manifest)
            self.opened.append(driver)
        return self._devices[driver]

    def close(self) -> None:
        """Drop the devices; close every session using them first."""
        self._devices.clear()


def open_device(rt: Any, driver: str, regions: list[RegionEntry], manifest: Manifest) -> Any:
    host_runtime = manifest.host_runtime
    if host_runtime is not None and driver == host_runtime.driver and host_runtime.flags:
        # Process-wide, and read when the process opens its first CPU device of this driver
        # (IREE caches drivers): a bundle loaded after another one in the same process runs
        # with the first one's worker topology.
        rt.flags.parse_flags(*host_runtime.flags)
    try:
        return rt.get_driver(driver).create_default_device()
    except Exception as e:
        raise DeviceError(f"cannot open the {driver!r} device needed by region(s) "
                          f"{', '.join(r.name for r in regions)}: {e}",
                          hint=_DEVICE_HINTS.get(driver, "rebuild with --accel none to run on the CPU")) from e


def check_device(rt: Any, driver: str, regions: list[RegionEntry], manifest: Manifest) -> None:
    """The device can run these regions: the CPU has the build's features, the Vulkan device is
    the kind the SPIR-V was compiled for."""
    if driver in mf.HOST_DRIVERS:
        _check_cpu(regions, manifest.cpu_flags)
    if driver == "vulkan":
        name = vulkan_device_name(rt)
        for r in vulkan_mismatches(regions, name):
            # A SPIR-V module built for another subgroup size returns silently wrong results.
            raise DeviceError(f"region {r.name!r} was compiled for Vulkan target {r.target.arch!r} but the "
                              f"Vulkan device here is {name!r}",
                              hint="rebuild with --vulkan-target matching this device "
                                   "(llvmpipe for Mesa lavapipe)")


def vulkan_mismatches(regions: list[RegionEntry], device_name: str) -> list[RegionEntry]:
    """The Vulkan regions compiled for another kind of device than the one named: a module for a
    real GPU on Mesa lavapipe, or one for lavapipe on a real GPU."""
    on_lavapipe = "llvmpipe" in device_name.lower()
    return [r for r in regions if r.target.driver == "vulkan" and (r.target.arch == "llvmpipe") != on_lavapipe]


def _check_cpu(regions: list[RegionEntry], build_flags: tuple[str, ...]) -> None:
    native = [r.name for r in regions if r.target.arch == "host"]
    here = set(mf.cpu_flags())
    missing = [f for f in build_flags if f not in here] if native and here else []
    if missing:
        raise DeviceError(f"region(s) {', '.join(native)} were compiled for the build machine's CPU, which has "
                          f"{', '.join(missing)}; this CPU does not",
                          hint="rebuild with --host-cpu x86-64-v3 (or this machine's CPU) to run here")


def vulkan_device_name(rt: Any) -> str:
    try:
        infos = rt.get_driver("vulkan").query_available_devices()
        return str(infos[0]["name"]) if infos else ""
    except Exception:
        return ""


_DEVICE_HINTS = {
    "vulkan": "install a Vulkan driver (apt-get install mesa-vulkan-drivers libvulkan1) or rebuild with --accel none",
    "cuda": "run on a machine with an NVIDIA GPU and driver, or rebuild with --accel none",
}


def to_host(arr: Any) -> Any:
    """``arr.to_host()`` for a device array that may not be mappable (a region's output that IREE
    placed in device-local memory: an input passed through, a constant). For those iree.runtime
    3.13 imports a fresh numpy array as host memory, which Vulkan refuses unless its address is
    4096-byte aligned (``minImportedHostPointerAlignment``) and numpy's is not; such a copy goes
    through a staging buffer the device allocates instead (the path IREE takes where import is not
    offered). The result is the host's own memory either way."""
    try:
        return arr.to_host()
    except ValueError as e:
        if "minImportedHostPointerAlignment" not in str(e):
            raise
    import iree.runtime as rt
    import numpy as np

    view, device = arr._buffer_view, arr._device   # iree.runtime.DeviceArray's own, as its copy uses them
    source = view.get_buffer()
    staging = host_buffer(rt, device, source.byte_length(), rt.BufferUsage.TRANSFER_TARGET)
    copy_and_wait(rt, device, source, staging)
    mapped = staging.map()
    return np.array(mapped.asarray(tuple(view.shape), arr._get_raw_dtype()), copy=True)


def host_buffer(rt: Any, device: Any, nbytes: int, usage: Any) -> Any:
    """A buffer in host memory the device reaches (pinned, on CUDA), mappable, for ``usage``
    (a transfer's source or target)."""
    return device.allocator.allocate_buffer(
        memory_type=int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
        allowed_usage=int(usage | rt.BufferUsage.MAPPING), allocation_size=nbytes)


def copy_and_wait(rt: Any, device: Any, source: Any, target: Any) -> None:
    """Copy ``source`` into ``target`` on the device's queue and wait until it is done. The wait
    is the semaphore's own: on lavapipe a fence's wait (``HalFence.wait``) on a queue that had
    been idle took 4-8 ms for a 256 KiB copy, the semaphore's 24 us (docs/calibrate.md)."""
    done = device.create_semaphore(0)
    device.queue_copy(source, target, wait_semaphores=rt.HalFence.create_at(done, 0),
                      signal_semaphores=rt.HalFence.create_at(done, 1))
    done.wait(1)
