"""Arrays between host memory and an accelerator through staging buffers kept for the session.

Given a numpy argument, iree.runtime allocates device-local memory and has IREE copy the array in
(``allocate_buffer_copy``); given a device-local result, ``to_host`` imports a fresh numpy array
as host memory and copies into it. IREE's CUDA driver does either by pinning the array's own
pages for the transfer and unpinning them after, on every call: staging saved 2.6 ms of a
10.3 ms call with a 4.8 MB input on an H100, where the copy itself takes 0.1 ms (docs/cuda.md).
Here each (shape, dtype) gets a host-local, device-visible buffer per direction once, mapped for
good: a call copies an input into it (one memcpy) and the device copies it on into fresh
device-local memory (one DMA); a result comes back by one DMA into its buffer and one memcpy out
into memory the caller owns. Host drivers take numpy arrays as they are, and results the host
can map (Vulkan's) are read in place: this module is for the rest.

Deployment code: numpy and ``iree.runtime`` (passed in as ``rt``)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .devices import copy_and_wait, host_buffer

# Smaller arrays go the implicit way: pinning a few pages costs little, and a staged copy adds a
# host-side wait. Below this size the H100 could not tell the two ways apart (docs/cuda.md).
MIN_STAGED_BYTES = 64 * 1024

Key = tuple[tuple[int, ...], str, str]   # shape, dtype, direction ("in" or "out")


class StagingBuffers:
    """Staging buffers of one device, reused call after call. A lock keeps two threads calling
    the same session from filling one staging buffer at once."""

    def __init__(self, rt: Any, device: Any, min_bytes: int = MIN_STAGED_BYTES) -> None:
        self._rt, self._device, self.min_bytes = rt, device, min_bytes
        self._buffers: dict[Key, tuple[Any, Any, np.ndarray]] = {}
        self._lock = threading.Lock()

    def upload(self, arr: np.ndarray) -> Any:
        """``arr`` as an argument for a function on this device: itself when small, else a
        ``DeviceArray`` in device-local memory holding a copy."""
        if arr.nbytes < self.min_bytes:
            return arr
        rt = self._rt
        arr = np.ascontiguousarray(arr)
        element_type = rt.array_interop.map_dtype_to_element_type(arr.dtype)
        if element_type is None:
            return arr   # a dtype IREE has no element type for: let iree.runtime refuse it as before
        with self._lock:
            staging, _, view = self._buffer(arr.shape, arr.dtype, "in")
            np.copyto(view, arr)
            target = self._device.allocator.allocate_buffer(
                memory_type=int(rt.MemoryType.DEVICE_LOCAL), allowed_usage=int(rt.BufferUsage.DEFAULT),
                allocation_size=arr.nbytes)
            copy_and_wait(rt, self._device, staging, target)   # then the staging buffer is free again
        return rt.DeviceArray(self._device, rt.HalBufferView(target, arr.shape, element_type),
                              override_dtype=arr.dtype)

    def download(self, result: Any) -> np.ndarray | None:
        """A device result as a fresh numpy array; None when the result is small or the host can
        map it, for the caller's usual ``to_host``."""
        view = result._buffer_view   # iree.runtime.DeviceArray's own, as its to_host uses it
        source = view.get_buffer()
        if source.byte_length() < self.min_bytes or result._is_mappable():
            return None
        raw = result._get_raw_dtype()
        # The dtype the array stands for (bool for IREE's i8), as its own to_host converts to.
        wanted = raw if result._override_dtype is None else result._override_dtype
        with self._lock:
            staging, _, host = self._buffer(tuple(view.shape), raw, "out")
            copy_and_wait(self._rt, self._device, source, staging)
            return np.array(host, dtype=wanted, copy=True)

    def _buffer(self, shape: tuple[int, ...], dtype: np.dtype, direction: str) -> tuple[Any, Any, np.ndarray]:
        key = (shape, np.dtype(dtype).str, direction)
        if key not in self._buffers:
            rt = self._rt
            usage = rt.BufferUsage.TRANSFER_SOURCE if direction == "in" else rt.BufferUsage.TRANSFER_TARGET
            buffer = host_buffer(rt, self._device, int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize,
                                 usage)
            mapping = buffer.map()   # kept with the buffer: the view below reads through it
            self._buffers[key] = (buffer, mapping, mapping.asarray(shape, np.dtype(dtype)))
        return self._buffers[key]

    def close(self) -> None:
        """Drop the staging buffers (before their device goes)."""
        self._buffers.clear()
