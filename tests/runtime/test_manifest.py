"""The typed manifest: JSON round trip, validation, schema refusal, bundle-or-build directory."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from aot.errors import BundleError
from aot.runtime import manifest as mf
from aot.runtime.manifest import GateRecord, Manifest
from aot.runtime.target import Target
from conftest import small_manifest


def test_json_round_trip_is_exact():
    m = small_manifest()
    data = json.loads(json.dumps(m.to_json()))
    assert Manifest.from_json(data) == m
    assert data["regions"][0]["driver"] == "vulkan" and data["constant_inputs"][1]["value"] == [0, 1]
    assert data["partition"]["gate"]["measured"] is True and data["schema_version"] == mf.SCHEMA_VERSION


def test_a_region_whose_driver_contradicts_its_target_is_malformed():
    data = small_manifest().to_json()
    data["regions"][0]["driver"] = "cuda"
    with pytest.raises(ValueError, match="driver 'cuda'"):
        Manifest.from_json(data)


def write_bundle(path, manifest: Manifest) -> None:
    (path / "modules").mkdir(parents=True)
    (path / "modules" / "r0.vmfb").write_bytes(b"module")
    (path / "weights.irpa").write_bytes(b"weights")
    manifest.write(path)


def test_read_checks_files_and_takes_the_build_directory(tmp_path):
    good = small_manifest(hashlib.sha256(b"module").hexdigest())
    write_bundle(tmp_path / "out" / "bundle", good)
    assert mf.read(tmp_path / "out") == good == mf.read(tmp_path / "out" / "bundle")
    (tmp_path / "out" / "bundle" / "modules" / "r0.vmfb").write_bytes(b"other")
    with pytest.raises(BundleError, match="does not match its sha256"):
        mf.read(tmp_path / "out")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(schema_version=2), "schema_version 2; this aot reads 1"),
    (lambda d: d.pop("regions"), "malformed: KeyError"),
    (lambda d: d["regions"][0].update(nodes="n0"), "malformed: TypeError"),
    (lambda d: d.update(schedule=["r0", "r0"]), "schedule does not list every region once"),
])
def test_a_bad_manifest_is_a_bundle_error_naming_the_file(tmp_path, edit, message):
    write_bundle(tmp_path, small_manifest(hashlib.sha256(b"module").hexdigest()))
    data = json.loads((tmp_path / "manifest.json").read_text())
    edit(data)
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match=message) as info:
        mf.read(tmp_path)
    assert "manifest.json" in info.value.message and info.value.hint


def test_measurements_replace_estimates_without_touching_the_rest():
    m = small_manifest()
    gate = GateRecord(False, 3.0, 2.0, None, "slower", measured=True)
    measured = m.with_measurements({"r0": 7.12345}, gate)
    assert measured.regions[0].measured_us == 7.123 and measured.partition.gate == gate
    assert dataclasses.replace(measured, regions=m.regions, partition=m.partition) == m


def test_a_manifest_written_before_the_typed_manifest_reads_and_round_trips_exactly():
    """tests/runtime/golden/: the example's manifest.json as aot wrote it at 567cc05 (dict-based,
    schema 1, verified on lavapipe). Bundles built then keep loading, and nothing is lost."""
    data = json.loads((Path(__file__).with_name("golden") / "tiny_cnn-schema1-567cc05.manifest.json").read_text())
    m = Manifest.from_json(data)
    assert m.to_json() == data
    assert [(r.name, str(r.target), r.target.driver) for r in m.regions] == [
        ("r0", "vulkan-spirv:llvmpipe", "vulkan"), ("r1", "llvm-cpu:host", "local-task")]
    assert m.verification.checked[0].ok and m.partition.gate.accepted and m.partition.coverage.supported == 14


def test_tuning_and_host_runtime_round_trip_and_pick_the_driver():
    tuning = mf.Tuning("O2", 80.0, 100.0, "cpu x2", (
        mf.TuneCandidate("default", ("--a",), 100.0, 1e-6, None),
        mf.TuneCandidate("O2", ("--iree-opt-level=O2",), 80.0, 2e-6, None),
        mf.TuneCandidate("bad", ("--b",), None, None, "compile failed (exit 1): error: no")))
    host = dataclasses.replace(small_manifest().regions[0], target=Target.host(), flags=("--iree-opt-level=O2",),
                               tuning=tuning)
    m = dataclasses.replace(small_manifest(), regions=(host,),
                            host_runtime=mf.HostRuntime("local-sync", (), (("local-task", 120.0), ("local-sync", 90.0))))
    assert Manifest.from_json(json.loads(json.dumps(m.to_json()))) == m
    assert tuning.speedup == pytest.approx(1.25)
    assert m.driver(host) == "local-sync" and m.drivers == ("local-sync",)
    data = m.to_json()
    data["host_runtime"]["driver"] = "vulkan"  # only CPU drivers can run llvm-cpu code
    with pytest.raises(ValueError, match="host_runtime driver 'vulkan'"):
        Manifest.from_json(data)


def test_the_front_end_round_trips_and_an_onnx_manifest_reads_as_before():
    onnx_json = small_manifest().to_json()
    assert "frontend" not in onnx_json["model"]   # unchanged bytes for every ONNX bundle
    torch_model = dataclasses.replace(small_manifest().model, frontend="torch", opset=0)
    data = dataclasses.replace(small_manifest(), model=torch_model).to_json()
    again = Manifest.from_json(json.loads(json.dumps(data)))
    assert again.model.frontend == "torch" and again.model.reference == "PyTorch eager"
    assert Manifest.from_json(onnx_json).model.reference == "onnxruntime"
    data["model"]["frontend"] = "tensorflow"
    with pytest.raises(BundleError, match="unknown front end 'tensorflow'"):
        Manifest.from_json(data)
