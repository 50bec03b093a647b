"""A lavapipe device lost mid-run is opened again and the call runs once more; any other loss,
and a second one, reach the caller as DeviceLostError (the run stays a typed error)."""

from __future__ import annotations

import numpy as np
import pytest

from aot import runtime
from aot.checks import reference
from aot.errors import DeviceError, DeviceLostError

pytestmark = pytest.mark.device
LOST = ("c/runtime/src/iree/hal/drivers/vulkan/queue.c:2867: DATA_LOSS; [vkSignalSemaphore] "
        "VK_ERROR_DEVICE_LOST; while invoking native function hal.fence.await")


class _LosesDevice:
    """An invoker that fails ``times`` times as a lost device does, then calls the real one.
    Each failure is a new exception: one shared instance would keep every traceback it was raised
    through, and with them the replaced device, alive for the rest of the test process (an
    orphaned lavapipe device kept alive that way spun both cores: later tests ran 5x slower)."""

    def __init__(self, real, times: int) -> None:
        self.real, self.left = real, times

    def __call__(self, *args):
        if self.left:
            self.left -= 1
            raise RuntimeError(LOST)
        return self.real(*args)


def _accel_region(session) -> str:
    return next(r.name for r in session.manifest.regions if not r.target.is_host)


def test_a_lost_lavapipe_device_is_opened_again_and_the_call_answers(vulkan_bundle):
    with runtime.load(vulkan_bundle.bundle.path) as session:
        inputs = reference.random_inputs(session.manifest.inputs, seed=4)
        expected = session.run(inputs)
        region = _accel_region(session)
        session._invokers[region] = _LosesDevice(session._invokers[region], 1)
        got = session.run(inputs)
        assert session.reopened == 1 and not isinstance(session._invokers[region], _LosesDevice)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected))
        assert all(np.array_equal(a, b) for a, b in zip(session.run(inputs), expected))


def test_a_second_loss_in_one_call_is_raised(vulkan_bundle):
    with runtime.load(vulkan_bundle.bundle.path) as session:
        inputs = reference.random_inputs(session.manifest.inputs, seed=4)
        region = _accel_region(session)
        real_open = session._open

        def open_and_lose_again(rt, driver, check):
            real_open(rt, driver, check)
            session._invokers[region] = _LosesDevice(session._invokers[region], 1)

        session._open = open_and_lose_again
        session._invokers[region] = _LosesDevice(session._invokers[region], 1)
        with pytest.raises(DeviceLostError, match="VK_ERROR_DEVICE_LOST") as e:
            session.run(inputs)
        assert e.value.driver == "vulkan" and session.reopened == 1


def test_a_loss_on_another_device_is_not_retried(host_bundle):
    with runtime.load(host_bundle.bundle.path) as session:
        inputs = reference.random_inputs(session.manifest.inputs, seed=4)
        region = session.manifest.regions[0].name
        session._invokers[region] = _LosesDevice(session._invokers[region], 1)
        with pytest.raises(DeviceError, match="DATA_LOSS"):
            session.run(inputs)
        assert session.reopened == 0
        assert len(session.run(inputs)) == len(session.manifest.outputs)   # the session still serves
