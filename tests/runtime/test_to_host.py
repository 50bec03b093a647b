"""A device-local buffer on Vulkan comes back to the host: iree.runtime 3.13's own copy imports an
unaligned numpy array as host memory, which Vulkan refuses (minImportedHostPointerAlignment 4096);
``devices.to_host`` copies through a staging buffer instead. A learned-policy collection on a
generated graph died on it (a region's output left in device-local memory)."""

import numpy as np
import pytest

from aot.runtime import devices as dv

pytestmark = pytest.mark.device   # opens lavapipe


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_a_device_local_buffer_comes_back_whole(dtype):
    import iree.runtime as rt

    rt_device = rt.get_device("vulkan")
    x = (np.arange(4099) % 251).astype(dtype).reshape(1, 4099)
    on_device = rt.asdevicearray(rt_device, x)
    got = dv.to_host(on_device)
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, x)
    assert got.flags.owndata   # the host's own memory: nothing maps a buffer the device may reuse
