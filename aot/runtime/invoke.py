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

Deployment code: numpy and iree.runtime (passed in as ``rt``)."""

from __future__ import annotations

from typing import Any

import numpy as np


class HostCall:
    """One region's function on a CPU device (local-task, local-sync). Called with numpy arrays
    (copied into device buffers) or buffer views this device returned (passed on as they are);
    returns one ``HalBufferView`` per result."""

    __slots__ = ("_rt", "context", "device", "function", "_results", "_element_types")

    def __init__(self, rt: Any, context: Any, device: Any, function: Any, results: int) -> None:
        self._rt = rt
        self.context, self.device, self.function = context, device, function
        self._results = results
        self._element_types: dict[np.dtype, Any] = {}

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
        self.context.invoke(self.function, packed, returned)
        return tuple(returned.get_as_object(i, rt.HalBufferView) for i in range(self._results))

    def _element_type(self, dtype: np.dtype) -> Any:
        """IREE's element type for numpy's ``dtype``, as FunctionInvoker maps it (bool to i8 etc.)."""
        found = self._element_types.get(dtype)
        if found is None:
            from iree.runtime.dtypes import map_dtype_to_hal_element_type

            found = self._element_types[dtype] = map_dtype_to_hal_element_type(dtype)
        return found


def is_host_view(rt: Any, value: Any) -> bool:
    """``value`` is a result ``HostCall`` returned (a buffer view in host memory)."""
    return isinstance(value, rt.HalBufferView)


def to_numpy(rt: Any, view: Any) -> np.ndarray:
    """A fresh numpy array with the contents of a CPU device's buffer view (IREE's i1 comes back
    as the int8 it is stored in; the session casts to the manifest's dtype)."""
    mapped = view.map()
    return np.array(mapped.asarray(tuple(view.shape), rt.HalElementType.map_to_dtype(view.element_type)), copy=True)
