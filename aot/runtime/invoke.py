"""Calling one region's function on a CPU device with as few Python steps as the call needs.

``iree.runtime.FunctionInvoker`` calls any function: it packs each argument by its kind, wraps
each result in a ``DeviceArray`` that finds out on first use whether its memory maps to the host.
A region's function takes and returns only tensors, and a CPU device's memory is the host's, so
``HostCall`` packs numpy arrays and buffer views and hands back the buffer views, and ``to_numpy``
copies one out through a mapping. On the openWakeWord melspectrogram's tuned bundle (one region,
a ~0.15 ms call) the two took 19 us a call off the invoker's path, alternated call by call:
FunctionInvoker and ``DeviceArray.to_host`` 161 us, this path 142 us (docs/performance.md,
"The runtime's per-call overhead"). Accelerator regions keep FunctionInvoker and DeviceArray,
whose transfers they need.

**A local-task call runs its caller as SCHED_BATCH** (``BatchWhileWaiting``). The caller sleeps
on a fence while IREE's workers, pinned one to a core, run the dispatches; the worker that
signals the fence wakes it. Under Linux's default policy the woken caller preempts that worker
on its core before the worker has finished the semaphore's callback, and IREE's wait then spins
(a ``pause`` loop in its timepoint clean-up) until the callback is done: the worker runs again
only at the next scheduler tick, 4 ms later. ddddocr's recogniser took 7.2 ms or 8-12 ms call by
call, PP-OCR-det 8.2 or 12.0, every call 16.0 with the caller on the first worker's core. A
woken SCHED_BATCH thread does not preempt: the worker finishes and sleeps, then the caller runs
(ddddocr 5.7-5.8 ms every call; docs/performance.md, stop 63). Only a caller on the default
policy is switched, for the call alone; where the platform has no SCHED_BATCH or refuses it, the
call runs as before.

Deployment code: numpy and iree.runtime (passed in as ``rt``)."""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

_BATCH: int | None = getattr(os, "SCHED_BATCH", None)     # Linux only
WORKER_DRIVER = "local-task"      # the CPU driver whose dispatches run on IREE's worker threads


class HostCall:
    """One region's function on a CPU device (local-task, local-sync). Called with numpy arrays
    (copied into device buffers) or buffer views this device returned (passed on as they are);
    returns one ``HalBufferView`` per result."""

    __slots__ = ("_rt", "context", "device", "function", "_results", "_element_types", "wait")

    def __init__(self, rt: Any, context: Any, device: Any, function: Any, results: int, workers: bool) -> None:
        """``workers``: the device runs dispatches on worker threads (local-task), so the call
        waits for them as SCHED_BATCH (above)."""
        self._rt = rt
        self.context, self.device, self.function = context, device, function
        self._results = results
        self._element_types: dict[np.dtype, Any] = {}
        # How a call waits; public, so that a bare call of the same module timed against this one
        # waits the same way (tools/bench.py).
        self.wait = BatchWhileWaiting() if workers else _plain

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        rt = self._rt
        packed = rt.VmVariantList(len(args))
        for arg in args:
            if isinstance(arg, np.ndarray):
                arg = self.device.allocator.allocate_buffer_copy(
                    memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
                    device=self.device, buffer=arg, element_type=self._element_type(arg.dtype))
            packed.push_ref(arg)
        returned = rt.VmVariantList(self._results)
        self.wait(self.context.invoke, self.function, packed, returned)
        return tuple(returned.get_as_object(i, rt.HalBufferView) for i in range(self._results))

    def _element_type(self, dtype: np.dtype) -> Any:
        """IREE's element type for numpy's ``dtype``, as FunctionInvoker maps it (bool to i8 etc.)."""
        found = self._element_types.get(dtype)
        if found is None:
            from iree.runtime.dtypes import map_dtype_to_hal_element_type

            found = self._element_types[dtype] = map_dtype_to_hal_element_type(dtype)
        return found


def _plain(call: Callable[..., Any], *args: Any) -> Any:
    return call(*args)


def waiting(driver: str) -> Callable[..., Any]:
    """How a call on ``driver`` is made: as SCHED_BATCH where workers signal it (above), else plain.
    Every timed CPU call goes through it: the session's and the tuner's probes alike."""
    return BatchWhileWaiting() if driver == WORKER_DRIVER else _plain


class BatchWhileWaiting:
    """Calls ``call(*args)`` with the calling thread as SCHED_BATCH, where it was on the default
    policy (SCHED_OTHER), and puts the policy back after; a thread on any other policy (real-time,
    idle, batch already) is left as it is. Once the platform refuses the switch, calls run plain."""

    __slots__ = ("enabled",)

    def __init__(self) -> None:
        self.enabled = _BATCH is not None

    def __call__(self, call: Callable[..., Any], *args: Any) -> Any:
        if not self.enabled or _BATCH is None:
            return call(*args)
        try:
            switch = os.sched_getscheduler(0) == os.SCHED_OTHER
            if switch:
                os.sched_setscheduler(0, _BATCH, os.sched_param(0))
        except OSError:            # a sandbox without the syscall, or one that refuses it
            self.enabled = False
            return call(*args)
        try:
            return call(*args)
        finally:
            if switch:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def batch_from_here() -> None:
    """This process as SCHED_BATCH from now on, where it is on the default policy: for a child
    about to run an IREE tool whose caller waits for its workers as a session's does (the tool
    cannot switch around its waits, so it runs so throughout). Where refused, as it was."""
    try:
        if _BATCH is not None and os.sched_getscheduler(0) == os.SCHED_OTHER:
            os.sched_setscheduler(0, _BATCH, os.sched_param(0))
    except OSError:
        pass


def is_host_view(rt: Any, value: Any) -> bool:
    """``value`` is a result ``HostCall`` returned (a buffer view in host memory)."""
    return isinstance(value, rt.HalBufferView)


def to_numpy(rt: Any, view: Any) -> np.ndarray:
    """A fresh numpy array with the contents of a CPU device's buffer view (IREE's i1 comes back
    as the int8 it is stored in; the session casts to the manifest's dtype)."""
    mapped = view.map()
    return np.array(mapped.asarray(tuple(view.shape), rt.HalElementType.map_to_dtype(view.element_type)), copy=True)
