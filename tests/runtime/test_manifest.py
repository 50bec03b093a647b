"""The deploy contract: JSON round trip, validation, schema refusal, bundle-or-build directory,
schema-1 bundles (which held the build record inline) still read."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from aot import record
from aot.errors import BundleError
from aot.runtime import manifest as mf
from aot.partition.plan import Gate
from aot.record import BuildRecord, TuneCandidate, Tuning
from aot.runtime.manifest import Manifest
from aot.runtime.target import Target
from conftest import small_manifest, small_record


def test_json_round_trip_is_exact():
    m = small_manifest()
    data = json.loads(json.dumps(m.to_json()))
    assert Manifest.from_json(data) == m
    assert data["regions"][0]["driver"] == "vulkan" and data["constant_inputs"][1]["value"] == [0, 1]
    assert data["schema_version"] == mf.SCHEMA_VERSION == 2 and data["weights"]["size"] == 1024
    # The contract holds nothing of the build's decisions: those are the record's.
    assert not {"partition", "graph", "host_reasons", "verification"} & set(data)
    assert not {"nodes", "estimated_us", "measured_us", "tuning", "planned_device", "fallback"} & set(data["regions"][0])


def test_a_region_whose_driver_contradicts_its_target_is_malformed():
    data = small_manifest().to_json()
    data["regions"][0]["driver"] = "cuda"
    with pytest.raises(ValueError, match="driver 'cuda'"):
        Manifest.from_json(data)


def write_bundle(path, manifest: Manifest) -> Manifest:
    """The files ``manifest`` names, its weights' digest and size made to match; the manifest written."""
    (path / "modules").mkdir(parents=True)
    (path / "modules" / "r0.vmfb").write_bytes(b"module")
    (path / "weights.irpa").write_bytes(b"weights")
    manifest = dataclasses.replace(manifest, weights=mf.Weights("weights.irpa", "model",
                                                                hashlib.sha256(b"weights").hexdigest(), 7))
    manifest.write(path)
    return manifest


def test_read_checks_files_and_takes_the_build_directory(tmp_path):
    good = write_bundle(tmp_path / "out" / "bundle", small_manifest(hashlib.sha256(b"module").hexdigest()))
    assert mf.read(tmp_path / "out") == good == mf.read(tmp_path / "out" / "bundle")
    (tmp_path / "out" / "bundle" / "modules" / "r0.vmfb").write_bytes(b"other")
    with pytest.raises(BundleError, match="does not match its sha256"):
        mf.read(tmp_path / "out")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(schema_version=3), r"schema_version 3; this aot reads \(1, 2\)"),
    (lambda d: d.pop("regions"), "malformed: KeyError"),
    (lambda d: d["regions"][0].update(inputs="x"), "malformed: TypeError"),
    (lambda d: d["regions"][0].update(sha256=7), "malformed: TypeError"),
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
    rec = small_record()
    gate = Gate(False, 3.0, 2.0, None, "slower", measured=True)
    measured = rec.with_measurements({"r0": 7.12345}, gate)
    assert measured.regions[0].measured_us == 7.123 and measured.partition.gate == gate
    assert dataclasses.replace(measured, regions=rec.regions, partition=rec.partition) == rec


def test_a_schema_1_manifest_still_reads_as_a_contract():
    """tests/runtime/golden/: the example's manifest.json as aot wrote it at 567cc05 (schema 1,
    verified on lavapipe, the build record inline). It keeps loading as a deploy contract: every
    field a deployment reads is there; the build's decisions it held are not the contract's."""
    data = json.loads((Path(__file__).with_name("golden") / "tiny_cnn-schema1-567cc05.manifest.json").read_text())
    m = Manifest.from_json(data)
    assert [(r.name, str(r.target), r.target.driver, r.module) for r in m.regions] == [
        ("r0", "vulkan-spirv:llvmpipe", "vulkan", "modules/r0.vmfb"), ("r1", "llvm-cpu:host", "local-task", "modules/r1.vmfb")]
    assert m.schedule == ("r0", "r1") and m.weights.sha256 == data["weights"]["sha256"] and m.weights.size is None
    assert [t.name for t in m.outputs] == [t["name"] for t in data["outputs"]]
    assert m.cpu_flags == tuple(data["build_machine"]["cpu_flags"])
    again = m.to_json()
    assert again["schema_version"] == 2 and Manifest.from_json(again) == m
    assert {k: v for k, v in data.items() if k in again and k != "schema_version"} == \
        {k: v for k, v in again.items() if k != "schema_version"} | {"model": data["model"], "regions": data["regions"]}


def test_the_build_record_round_trips_and_refuses_another_schema(tmp_path):
    rec = small_record()
    tuning = Tuning("O2", 80.0, 100.0, "cpu x2", (
        TuneCandidate("default", ("--a",), 100.0, 1e-6, None),
        TuneCandidate("O2", ("--iree-opt-level=O2",), 80.0, 2e-6, None),
        TuneCandidate("bad", ("--b",), None, None, "compile failed (exit 1): error: no")))
    rec = dataclasses.replace(rec.with_tuning({"r0": tuning}), host_runtime_measured=(("local-task", 120.0),))
    rec.write(tmp_path)
    assert record.read(tmp_path) == rec and tuning.speedup == pytest.approx(1.25)
    data = json.loads((tmp_path / record.RECORD).read_text())
    assert data["regions"][0]["tuning"]["winner"] == "O2" and data["host_runtime_measured"] == {"local-task": 120.0}
    data["record_schema"] = 9
    (tmp_path / record.RECORD).write_text(json.dumps(data))
    with pytest.raises(BundleError, match="record_schema 9"):
        record.read(tmp_path)
    (tmp_path / record.RECORD).write_text("{")
    with pytest.raises(BundleError, match="malformed"):
        record.read(tmp_path)
    (tmp_path / record.RECORD).unlink()
    assert record.read(tmp_path) is None     # a bundle from before build records


def test_host_runtime_round_trips_and_picks_the_driver():
    host = dataclasses.replace(small_manifest().regions[0], target=Target.host(), flags=("--iree-opt-level=O2",))
    m = dataclasses.replace(small_manifest(), regions=(host,), host_runtime=mf.HostRuntime("local-sync", ()))
    assert Manifest.from_json(json.loads(json.dumps(m.to_json()))) == m
    assert m.driver(host) == "local-sync" and m.drivers == ("local-sync",)
    data = m.to_json()
    data["host_runtime"]["driver"] = "vulkan"  # only CPU drivers can run llvm-cpu code
    with pytest.raises(ValueError, match="host_runtime driver 'vulkan'"):
        Manifest.from_json(data)


def test_the_front_end_round_trips_and_an_onnx_manifest_reads_as_before():
    onnx_json = small_manifest().to_json()
    assert "frontend" not in onnx_json["model"]   # unchanged bytes for every ONNX bundle
    torch_model = dataclasses.replace(small_manifest().model, frontend="torch")
    data = dataclasses.replace(small_manifest(), model=torch_model).to_json()
    again = Manifest.from_json(json.loads(json.dumps(data)))
    assert again.model.frontend == "torch" and again.model.reference == "PyTorch eager"
    assert Manifest.from_json(onnx_json).model.reference == "onnxruntime"
    data["model"]["frontend"] = "tensorflow"
    with pytest.raises(BundleError, match="unknown front end 'tensorflow'"):
        Manifest.from_json(data)
