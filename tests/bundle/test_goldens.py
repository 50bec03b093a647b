"""Exact goldens for what aot owns: the example model's manifest (the deploy contract) and build
record (volatile fields masked) and its generated Python stub. A change to either is a change to the contract with deployed code: review
the diff, then regenerate with `AOT_UPDATE_GOLDENS=1 pytest tests/bundle/test_goldens.py`."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.device  # built and verified on lavapipe

GOLDEN = Path(__file__).with_name("golden")
MASK = "<volatile>"


def masked(manifest: dict) -> dict:
    """The manifest without what differs between machines and runs: paths, module and weight
    hashes (compiler output), toolchain versions, CPU flags, measured differences."""
    m = json.loads(json.dumps(manifest))
    m["model"]["source"] = MASK
    m["weights"]["sha256"] = MASK
    m["build_machine"]["cpu_flags"] = MASK
    m["toolchain"] = {k: MASK for k in m["toolchain"]}
    for r in m["regions"]:
        r["sha256"] = MASK
    return m


def masked_record(record: dict) -> dict:
    """The build record without the machine and the measured differences."""
    r = json.loads(json.dumps(record))
    r["machine"] = MASK
    for c in r.get("verification", {}).get("checked", []):
        c["max_abs_diff"] = MASK
    return r


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if os.environ.get("AOT_UPDATE_GOLDENS"):
        path.write_text(actual)
    assert path.is_file(), f"no golden {path}; create it with AOT_UPDATE_GOLDENS=1"
    assert actual == path.read_text(), f"{name} differs from its golden; review, then AOT_UPDATE_GOLDENS=1"


def test_example_manifest_matches_its_golden(vulkan_bundle):
    data = json.loads((vulkan_bundle.bundle.path / "manifest.json").read_text())
    # Key order as written: a reader in another language sees the file, not a dict.
    check_golden("tiny_cnn.manifest.json", json.dumps(masked(data), indent=2) + "\n")


def test_example_record_matches_its_golden(vulkan_bundle):
    data = json.loads((vulkan_bundle.bundle.path / "record.json").read_text())
    check_golden("tiny_cnn.record.json", json.dumps(masked_record(data), indent=2) + "\n")


def test_example_stub_matches_its_golden(vulkan_bundle):
    # The hash of the shipped runtime changes with every runtime edit; the footprint tests check it.
    stub = re.sub(r"^RUNTIME_SHA256 = '[0-9a-f]{64}'$", f"RUNTIME_SHA256 = {MASK}", vulkan_bundle.bundle.stub.read_text(),
                  flags=re.M)
    assert MASK in stub
    check_golden("tiny_cnn.py", stub)


def test_masking_keeps_everything_else(vulkan_bundle):
    """The mask must not hide the contract: regions, schedule, signature and reasons stay exact."""
    m = masked(vulkan_bundle.bundle.manifest.to_json())
    assert m["schedule"] == ["r0", "r1"] and m["inputs"][0]["shape"] == [1, 3, 64, 64]
    assert [r["target"] for r in m["regions"]] == ["vulkan-spirv", "llvm-cpu"]
    assert MASK not in json.dumps({k: m[k] for k in ("inputs", "outputs", "regions", "schedule")}
                                  ).replace(f'"sha256": "{MASK}"', "")
    r = masked_record(vulkan_bundle.bundle.record.to_json())
    assert MASK not in json.dumps({k: r[k] for k in ("host_reasons", "regions", "graph", "partition", "options")})
