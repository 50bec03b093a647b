"""Arrays staged between the host and an accelerator (runtime/staging.py), on the real Vulkan
device (lavapipe): the same answers as iree.runtime's own transfers, one staging buffer per
shape and direction reused call after call, no stale values when the input changes, and a
download that gives the caller memory of its own."""

from __future__ import annotations

import numpy as np
import pytest

from aot import runtime
from aot.checks.compare import assert_close, compare
from aot.runtime import staging

pytestmark = pytest.mark.device  # runs on the Vulkan device


def _inputs(session, scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {i.name: (rng.standard_normal(i.shape) * scale).astype(np.float32) for i in session.manifest.inputs}


def test_staged_inputs_give_the_answers_of_the_implicit_upload_and_reuse_one_buffer(vulkan_bundle):
    with runtime.load(vulkan_bundle.bundle.path) as session:
        (buffers,) = session._staging.values()   # the Vulkan device's; the CPU takes numpy as it is
        first, second = _inputs(session, 1.0), _inputs(session, 3.0)
        buffers.min_bytes = 10**12                 # iree.runtime's own transfers, for the reference
        expected = [session.run(first), session.run(second)]
        assert not buffers._buffers
        buffers.min_bytes = 0
        for _ in range(2):
            for inputs, want in zip((first, second), expected):
                for got, exp in zip(session.run(inputs), want):
                    assert_close(got, exp, atol=1e-6, what="staged vs implicit transfers")
        # One input shape: one buffer, reused four times. The Vulkan results are mappable, so
        # they come back the usual way and no download buffer is made.
        assert [key[2] for key in buffers._buffers] == ["in"]
        assert not compare(expected[0][0], expected[1][0], atol=1e-3).ok   # the inputs really differ


def test_a_result_the_host_cannot_map_comes_back_through_a_staging_buffer(vulkan_bundle):
    with runtime.load(vulkan_bundle.bundle.path) as session:
        (buffers,) = session._staging.values()
        buffers.min_bytes = 0
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        on_device = buffers.upload(data)           # device-local: not mappable
        first = buffers.download(on_device)
        second = buffers.download(on_device)
        del on_device   # a device buffer must not outlive its device (the session's close drops it)
        assert sorted(key[2] for key in buffers._buffers) == ["in", "out"]
    assert first.tolist() == data.tolist() and second.tolist() == data.tolist()
    assert not np.shares_memory(first, second)     # each call's result is the caller's own


def test_small_arrays_and_host_drivers_take_the_implicit_way(vulkan_bundle, host_bundle):
    with runtime.load(host_bundle.bundle.path) as session:
        assert not session._staging
    with runtime.load(vulkan_bundle.bundle.path) as session:
        (buffers,) = session._staging.values()
        small = np.zeros(4, np.float32)
        assert buffers.min_bytes == staging.MIN_STAGED_BYTES and buffers.upload(small) is small
