"""Inputs staged onto an accelerator (runtime/upload.py), on the real Vulkan device (lavapipe):
the same answers as iree.runtime's own upload, one staging buffer per input shape reused call
after call, and no stale values when the input changes."""

from __future__ import annotations

import numpy as np
import pytest

from aot import runtime
from aot.checks.compare import assert_close
from aot.runtime import devices, upload

pytestmark = pytest.mark.device  # runs on the Vulkan device


def _inputs(session, scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {i.name: (rng.standard_normal(i.shape) * scale).astype(np.float32) for i in session.manifest.inputs}


def test_staged_inputs_give_the_answers_of_the_implicit_upload_and_reuse_one_buffer(vulkan_bundle):
    with runtime.load(vulkan_bundle.bundle.path) as session:
        (uploader,) = session._uploaders.values()   # the Vulkan device's; the CPU takes numpy as it is
        first, second = _inputs(session, 1.0), _inputs(session, 3.0)
        uploader.min_bytes = 10**12                   # iree.runtime's own upload, for the reference
        expected = [session.run(first), session.run(second)]
        assert not uploader._staging
        uploader.min_bytes = 0
        for _ in range(2):
            for inputs, want in zip((first, second), expected):
                for got, exp in zip(session.run(inputs), want):
                    assert_close(got, exp, atol=1e-6, what="staged vs implicit upload")
        assert len(uploader._staging) == 1             # one shape: one buffer, reused four times
        assert not np.allclose(expected[0][0], expected[1][0])   # the inputs really differ


def test_small_arrays_and_host_drivers_take_the_implicit_way(vulkan_bundle, host_bundle):
    with runtime.load(host_bundle.bundle.path) as session:
        assert not session._uploaders
    with runtime.load(vulkan_bundle.bundle.path) as session:
        (uploader,) = session._uploaders.values()
        small = np.zeros(4, np.float32)
        assert uploader.min_bytes == upload.MIN_STAGED_BYTES and uploader.upload(small) is small
        uploader.min_bytes = 0
        staged = uploader.upload(np.arange(6, dtype=np.float32).reshape(2, 3))
        values = devices.to_host(staged).tolist()
        del staged   # a device buffer must not outlive its device (the session's close drops it)
    assert values == [[0, 1, 2], [3, 4, 5]]
