"""Several bundles in one registry: the same answers as separate sessions, each device opened
once, clear errors for unknown and duplicate model ids."""

from __future__ import annotations

import numpy as np
import pytest

from aot import runtime
from aot.checks import reference
from aot.errors import BundleError
from aot.runtime import devices as devices_module

pytestmark = pytest.mark.device  # runs on lavapipe and the CPU


def test_two_bundles_share_devices_and_answer_as_separate_sessions(vulkan_bundle, host_bundle, monkeypatch):
    inputs = reference.random_inputs(host_bundle.bundle.manifest.inputs, seed=7)
    expected = {}
    for name, bundle in (("vk", vulkan_bundle), ("cpu", host_bundle)):
        with runtime.load(bundle.bundle.path) as alone:
            expected[name] = alone.run(inputs)
    opened: list[str] = []
    real_open = devices_module.open_device
    monkeypatch.setattr(devices_module, "open_device",
                        lambda rt, driver, *a, **k: (opened.append(driver), real_open(rt, driver, *a, **k))[1])
    with runtime.Registry() as registry:
        registry.load("vk", vulkan_bundle.bundle.path)
        registry.load("cpu", host_bundle.bundle.path)
        assert registry.ids == ("vk", "cpu")
        for _ in range(2):                                      # and again: nothing is reopened
            for name in ("vk", "cpu"):
                for got, want in zip(registry.run(name, inputs), expected[name]):
                    np.testing.assert_array_equal(got, want)
        # Both bundles run CPU regions on local-task; the Vulkan regions of one on vulkan.
        assert sorted(opened) == sorted(set(opened)) == ["local-task", "vulkan"]
        assert registry.devices.opened == opened
        assert registry["cpu"](*[inputs[s.name] for s in host_bundle.bundle.manifest.inputs])[0].shape == (1, 10)


def test_unknown_and_duplicate_ids_are_refused_by_name(host_bundle):
    with runtime.Registry() as registry:
        registry.load("m", host_bundle.bundle.path)
        with pytest.raises(BundleError, match="'m' is already loaded"):
            registry.load("m", host_bundle.bundle.path)
        with pytest.raises(BundleError, match="(?s)no model 'other'.*loaded: \\['m'\\]"):
            registry.run("other", {})
        registry.unload("m")
        assert "m" not in registry and registry.ids == ()
