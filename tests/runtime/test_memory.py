"""Device memory: the build records what one run holds per device; loading refuses a bundle that
needs more than a device offers, before any device opens."""

from __future__ import annotations

import os

import pytest

from conftest import run_aot

from aot import runtime
from aot.runtime import devices as devices_module, memory
from aot.runtime.errors import DeviceError
from aot.runtime.memory import DeviceMemory, DeviceMemoryError


def test_sizes_and_limits_parse_and_bad_ones_are_errors():
    assert memory.parse_size("64MiB") == 64 << 20 and memory.parse_size("1.5GiB") == 3 << 29
    assert memory.parse_size("2gb") == 2_000_000_000 and memory.parse_size("4096") == 4096
    assert memory.configured_limits("vulkan=2GiB, local-task=512M") == {"vulkan": 2 << 30, "local-task": 512 << 20}
    assert memory.configured_limits("") == {}
    for bad in ("vulkan", "vulkan=lots", "vulkan=2XB"):
        with pytest.raises(DeviceError):
            memory.configured_limits(bad)


def test_buckets_loaded_together_add_up():
    small, large = DeviceMemory("vulkan", 100, 10, 50), DeviceMemory("vulkan", 100, 40, 200)
    needs = memory.needs([(small, DeviceMemory("local-task", 0, 8, 8)), (large,)])
    assert needs["vulkan"][0] == 160 + 340 and needs["local-task"][0] == 16
    assert "2 shape buckets loaded together" in needs["vulkan"][1] and "340 B" in needs["vulkan"][1]


def test_preflight_names_the_device_the_need_and_the_offer():
    need = memory.needs([(DeviceMemory("vulkan", 48 << 20, 1 << 20, 30 << 20),)])
    with pytest.raises(DeviceMemoryError, match=r"needs 79\.0 MiB .*'vulkan'.*offers 64\.0 MiB") as e:
        memory.preflight(need, {"vulkan": 64 << 20})
    assert "parameters 48.0 MiB" in str(e.value) and "AOT_DEVICE_MEMORY=vulkan=SIZE" in e.value.hint
    memory.preflight(need, {"vulkan": 80 << 20})          # enough: no error
    memory.preflight(need, {"cuda": 1})                   # a limit for another device does not apply


@pytest.mark.device  # lavapipe reports its heaps like any Vulkan device
def test_the_vulkan_and_cpu_queries_report_real_sizes():
    vulkan, source = memory.offered("vulkan", {})
    assert vulkan is not None and vulkan >= 64 << 20 and "vkGetPhysicalDeviceMemoryProperties" in source
    cpu, source = memory.offered("local-task", {})
    assert cpu is not None and cpu > 64 << 20 and "MemAvailable" in source


@pytest.mark.device
def test_the_build_records_each_device_from_its_regions(vulkan_bundle):
    m = vulkan_bundle.bundle.manifest
    record = {d.driver: d for d in m.memory}
    assert set(record) == set(m.drivers)
    for driver, d in record.items():
        regions = [r for r in m.regions if m.driver(r) == driver]
        assert d.outputs == sum(m.boundary(v).bytes for r in regions for v in r.outputs)
        assert d.transients > 0
    # The convolutions' weights are on the Vulkan side; the softmax region reads none.
    weights = (vulkan_bundle.bundle.path / m.weights.path).stat().st_size
    assert 0 < record["vulkan"].parameters <= weights and record["local-task"].parameters == 0
    assert "device memory one run holds" in run_aot("report", str(vulkan_bundle.bundle.path)).stdout


@pytest.mark.device
def test_a_device_configured_too_small_refuses_the_bundle_before_opening_anything(vulkan_bundle, monkeypatch):
    need = {d.driver: d.total for d in vulkan_bundle.bundle.manifest.memory}["vulkan"]
    opened = []
    monkeypatch.setattr(devices_module, "open_device", lambda *a, **k: opened.append(a) or pytest.fail("opened"))
    with pytest.raises(DeviceMemoryError, match="'vulkan' device"):
        runtime.load(vulkan_bundle.bundle.path, device_memory={"vulkan": need - 1})
    assert opened == []
    monkeypatch.undo()
    with runtime.load(vulkan_bundle.bundle.path, device_memory=f"vulkan={need}") as s:
        assert s.manifest.memory
    # The environment variable, through `aot run`: a clear error and exit status, no traceback.
    env_before = os.environ.get(memory.LIMIT_ENV)
    os.environ[memory.LIMIT_ENV] = "vulkan=1KiB"
    try:
        proc = run_aot("run", str(vulkan_bundle.bundle.path), check=False)
    finally:
        os.environ.pop(memory.LIMIT_ENV) if env_before is None else os.environ.__setitem__(memory.LIMIT_ENV, env_before)
    assert proc.returncode != 0 and "offers 1.0 KiB" in proc.stderr and "Traceback" not in proc.stderr
