"""`aot bench-replay`: the bundle's accelerator regions replay a command buffer recorded at load;
the variants it compares really record on every call (or use the BDA ABI) and compute the same."""

from __future__ import annotations

import re

import pytest

from conftest import run_aot

from aot.errors import AotError
from aot.tools import replay


@pytest.mark.device  # compiles with IREE and runs on lavapipe
def test_built_regions_replay_and_the_variants_record_or_use_bda(vulkan_bundle):
    out = vulkan_bundle.bundle.path.parent
    result = replay.bench(out, trials=1, calls=2)
    (region,) = result.regions
    assert [name for name, _ in region.modes] == ["replay", "record", "bda"]
    built, record, bda = (t for _, t in region.modes)
    # As built: no dispatch recorded per call, one submission of the command buffer made at load.
    assert built.per_call["command_buffer.dispatch"] == 0
    assert built.per_call["device.queue.execute.indirect"] == 1
    # The example CNN's Vulkan region has several dispatches; recording each call re-records them all.
    assert record.per_call["command_buffer.dispatch"] >= 5 and record.per_call["device.queue.execute.indirect"] == 0
    assert bda.per_call["command_buffer.dispatch"] == 0
    for t in (built, record, bda):
        assert t.max_abs_diff <= 1e-5 and t.first_us > 0 and t.steady_us > 0 and t.load_ms > 0
    text = result.text()
    assert re.search(r"record/replay: first call \d+\.\d+, steady \d+\.\d+", text)
    assert "bda/replay" in text and "dispatches recorded per call" in text


@pytest.mark.device  # builds with IREE
def test_a_host_only_bundle_is_refused_with_a_hint(host_bundle):
    with pytest.raises(AotError, match="no accelerator region") as e:
        replay.bench(host_bundle.bundle.path.parent)
    assert "--accel vulkan" in e.value.hint


@pytest.mark.device
def test_a_copied_bundle_without_its_build_directory_is_refused(vulkan_bundle, tmp_path):
    import shutil

    shutil.copytree(vulkan_bundle.bundle.path, tmp_path / "copy" / "bundle")
    proc = run_aot("bench-replay", str(tmp_path / "copy"), check=False)
    assert proc.returncode != 0 and "region MLIR" in proc.stderr and "aot build -o" in proc.stderr
