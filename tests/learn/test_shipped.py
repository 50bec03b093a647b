"""The trained defaults that ship in the package: one per device fingerprint, each loadable, named
for the devices it was trained on, small, and carrying its training set's digest."""

from __future__ import annotations

import pytest

from aot.learn.model import SHIPPED, LearnedModel, shipped_model, shipped_path


def _shipped() -> list:
    return sorted(SHIPPED.glob("*.json"))


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: p.stem)
def test_a_shipped_model_is_named_for_its_devices_small_and_has_its_training_digest(path):
    model = LearnedModel.load(path)
    assert shipped_path(model.fingerprint) == path and shipped_model(model.fingerprint) == path
    assert path.stat().st_size < 1 << 20
    assert len(model.training_set) >= 16 and dict(model.versions).get("aot")


def test_the_cpu_and_the_lavapipe_defaults_ship_and_other_devices_find_none():
    fingerprints = {LearnedModel.load(p).fingerprint for p in _shipped()}
    assert any(f.startswith("none host=") for f in fingerprints)
    assert any(f.startswith("vulkan-spirv:llvmpipe host=") for f in fingerprints)
    assert shipped_model("cuda:sm_80 host=x86-64-v4 cores=64") is None
