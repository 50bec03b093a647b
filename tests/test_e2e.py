"""Build -> bundle -> generated stub, on the real Vulkan device (lavapipe) and the CPU, against
onnxruntime. Plus the CLI contract, input validation, device checks and compile fallback."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from aot import runtime
from aot.checks import reference
from aot.errors import BundleError, CompileError, DeviceError, RuntimeInputError, UsageError
from aot.lower import flags
from aot.options import BuildOptions
from aot.pipeline import build, plan_model
from aot.record import BuildRecord
from aot.runtime import manifest as mf
from aot.runtime.target import Target
from aot.partition.plan import GateMode
from conftest import RTOL, ATOL, golden, run_aot

pytestmark = pytest.mark.device  # compiles with IREE and runs on a real device

VULKAN, CUDA = Target.parse("vulkan"), Target.parse("cuda")


def test_default_model_on_vulkan_and_cpu_matches_onnxruntime(vulkan_bundle, example_model):
    m = vulkan_bundle.bundle.manifest
    targets = [r.target.backend for r in m.regions]
    assert "vulkan-spirv" in targets and "llvm-cpu" in targets
    assert all(r.fallback is None for r in vulkan_bundle.bundle.record.regions)
    vk = next(r for r in m.regions if r.target.backend == "vulkan-spirv")
    assert vk.target.arch == "llvmpipe" and vk.target.driver == "vulkan"
    for seed in range(3):
        golden(vulkan_bundle.bundle.path, example_model, seed)


def test_host_only_bundle_matches_onnxruntime(host_bundle, example_model):
    assert {r.target.backend for r in host_bundle.bundle.manifest.regions} == {"llvm-cpu"}
    golden(host_bundle.bundle.path, example_model)


def test_manifest_contract(vulkan_bundle, example_model):
    """The JSON a bundle ships (what a C stub or another tool reads) and its typed round trip;
    the build record beside it, and the plan it replays."""
    typed = vulkan_bundle.bundle.manifest
    m = json.loads((vulkan_bundle.bundle.path / "manifest.json").read_text())
    rec = json.loads((vulkan_bundle.bundle.path / "record.json").read_text())
    assert m == typed.to_json() and mf.Manifest.from_json(m) == typed
    assert rec == vulkan_bundle.bundle.record.to_json() and BuildRecord.from_json(rec) == vulkan_bundle.bundle.record
    assert m["schema_version"] == 2 and rec["record_schema"] == 1
    assert m["weights"]["size"] == (vulkan_bundle.bundle.path / "weights.irpa").stat().st_size
    assert m["model"]["name"] == "tiny_cnn"
    import hashlib
    assert m["model"]["sha256"] == hashlib.sha256(example_model.read_bytes()).hexdigest()
    assert m["inputs"] == [{"name": "image", "dtype": "float32", "shape": [1, 3, 64, 64]}]
    assert [o["name"] for o in m["outputs"]] == ["logits", "top_probs", "top_classes"]
    assert set(m["toolchain"]) >= {"aot", "iree-base-compiler", "onnx"}
    nodes = [n for r in rec["regions"] for n in r["nodes"]]
    assert sorted(nodes) == sorted(n.name for n in onnx.load(str(example_model)).graph.node)
    for r in m["regions"]:
        assert (vulkan_bundle.bundle.path / r["module"]).is_file()
        assert mf.file_sha256(vulkan_bundle.bundle.path / r["module"]) == r["sha256"]
    topk = next(r["name"] for r in rec["regions"] if "top5" in r["nodes"])
    assert typed.region(topk).target.backend == "llvm-cpu" and "TopK" in rec["host_reasons"]["top5"]
    assert rec["options"]["accel"] == {"backend": "vulkan-spirv", "arch": "llvmpipe"}
    assert json.loads((vulkan_bundle.bundle.path / "plan.json").read_text())["schedule"] == m["schedule"]
    assert m["schedule"] == [r["name"] for r in m["regions"]]


def test_intermediates_stay_on_device_within_a_region_chain(vulkan_bundle):
    """Only the boundary tensor crosses devices: 'probs' from Vulkan to the CPU."""
    m = vulkan_bundle.bundle.manifest
    crossing = [v for r in m.regions for v in r.inputs if v not in {"image"}]
    assert crossing == ["probs"]


def test_aot_run_reproduces_onnxruntime(vulkan_bundle, example_model, tmp_path):
    x = np.random.default_rng(7).standard_normal((1, 3, 64, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    proc = run_aot("run", str(vulkan_bundle.bundle.path), "--input", f"image=@{tmp_path / 'x.npy'}",
                   "--output-dir", str(out))
    files = proc.stdout.split()
    assert len(files) == 3
    expected = reference.outputs(example_model, {"image": x}, ["logits", "top_probs", "top_classes"])
    for f, e in zip(files, expected):
        assert_close(np.load(f), e, rtol=RTOL, atol=ATOL)


def test_aot_report_names_devices_reasons_and_bytes(vulkan_bundle):
    text = run_aot("report", str(vulkan_bundle.bundle.path)).stdout
    assert "vulkan-spirv:llvmpipe" in text and "llvm-cpu:host" in text
    assert "TopK" in text and "'probs'" in text and "40 B" in text


@pytest.mark.parametrize("inputs, message", [
    ({"image": np.zeros((1, 3, 64, 64), np.float64)}, "expected dtype float32, got float64"),
    ({"image": np.zeros((1, 3, 16, 16), np.float32)}, r"expected shape \[1, 3, 64, 64\], got \[1, 3, 16, 16\]"),
    ({}, "missing input 'image'"),
    ({"image": np.zeros((1, 3, 64, 64), np.float32), "extra": np.zeros(1)}, "unknown input 'extra'"),
])
def test_wrong_inputs_get_a_typed_error(vulkan_bundle, inputs, message):
    with runtime.load(vulkan_bundle.bundle.path) as session:
        with pytest.raises(RuntimeInputError, match=message):
            session.run(inputs)


def test_runtime_refuses_a_bundle_compiled_for_another_vulkan_device(vulkan_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(vulkan_bundle.bundle.path, copy)
    data = json.loads((copy / "manifest.json").read_text())
    next(r for r in data["regions"] if r["driver"] == "vulkan")["arch"] = "ampere"
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(DeviceError, match="compiled for Vulkan target 'ampere'"):
        runtime.load(copy)


def test_corrupt_bundle_is_refused(vulkan_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(vulkan_bundle.bundle.path, copy)
    module = copy / vulkan_bundle.bundle.manifest.regions[0].module
    module.write_bytes(module.read_bytes()[:100])
    with pytest.raises(BundleError, match="does not match its sha256"):
        runtime.load(copy)
    (copy / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="corrupt"):
        runtime.load(copy)
    proc = run_aot("run", str(copy), check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("ERROR: ")


def test_accelerator_compile_failure_falls_back_to_host_and_is_recorded(example_model, tmp_path, monkeypatch):
    # A Vulkan compile that fails (an option iree-compile refuses): the build survives, the region moves.
    real = flags.compile_flags
    monkeypatch.setattr(flags, "compile_flags", lambda target, keep_f64=False, opt=None: (
        *real(target, keep_f64, opt), *(() if target.is_host else ("--iree-no-such-option",))))
    result = build(example_model, tmp_path / "fb", BuildOptions(accel=VULKAN))
    how = next(r for r in result.bundle.record.regions if r.planned_device == "accel")
    region = result.bundle.manifest.region(how.name)
    assert region.target.backend == "llvm-cpu"
    assert "iree-no-such-option" in how.fallback
    golden(result.bundle.path, example_model)


@pytest.mark.parametrize("accel, words", [("vulkan:no_such_gpu", "has no vulkan-spirv target 'no_such_gpu'"),
                                          ("cuda:sm_90", "has no cuda target 'sm_90'")])
def test_an_accelerator_arch_iree_does_not_know_stops_the_build(example_model, tmp_path, accel, words):
    # Falling back region by region would put the whole model on the host without a word.
    out = tmp_path / "keep"
    build(example_model, out, BuildOptions(accel=None))
    before = (out / "bundle" / "manifest.json").read_bytes()
    with pytest.raises(UsageError, match=words) as info:
        build(example_model, out, BuildOptions(accel=Target.parse(accel), gate=GateMode.OFF))
    assert "pick" in info.value.hint
    assert (out / "bundle" / "manifest.json").read_bytes() == before


def test_host_compile_failure_is_a_compile_error_and_keeps_the_old_bundle(example_model, tmp_path, monkeypatch):
    out = tmp_path / "keep"
    build(example_model, out, BuildOptions(accel=None))
    before = (out / "bundle" / "manifest.json").read_bytes()
    # Other flags are another cache key, so the bad flags really reach iree-compile.
    monkeypatch.setattr(flags, "compile_flags",
                        lambda target, keep_f64=False, opt=None: ("--iree-hal-target-device=no-such-device",))
    with pytest.raises(CompileError) as info:
        build(example_model, out, BuildOptions(accel=None))
    assert "iree-compile" in info.value.hint and "no-such-device" in " ".join(info.value.argv)
    assert (out / "bundle" / "manifest.json").read_bytes() == before


def test_cuda_build_compiles_without_a_gpu(example_model, tmp_path):
    # The gate off: left on, it keeps this small CNN on the host (the next test).
    result = build(example_model, tmp_path / "cuda", BuildOptions(accel=CUDA, gate=GateMode.OFF))
    targets = {(r.target.backend, r.target.arch, r.target.driver) for r in result.bundle.manifest.regions}
    assert ("cuda", "sm_80", "cuda") in targets and ("llvm-cpu", "host", "local-task") in targets


def test_the_measured_cuda_costs_keep_a_small_cnn_on_the_host(example_model):
    # 34 MFLOP: at the 0.5 ms a CUDA region call cost on an H100 (devices.json, docs/cuda.md)
    # the host's 60 GFLOP/s finishes first; the hand-set 20 us per call said otherwise.
    plan = plan_model(example_model, BuildOptions(accel=CUDA)).plan
    assert plan.gate is not None and not plan.gate.accepted
    assert all(r.device == "host" for r in plan.regions)


def test_plan_then_build_exactly_that_plan(example_model, tmp_path):
    plan = tmp_path / "plan.json"
    run_aot("plan", str(example_model), "-o", str(plan))
    data = json.loads(plan.read_text())
    # Hand edit: move the classifier head (fc, softmax) to the host as its own region.
    first = data["regions"][0]
    moved = [n for n in first["nodes"] if n in ("fc", "softmax")]
    first["nodes"] = [n for n in first["nodes"] if n not in moved]
    data["regions"][1]["nodes"] = moved + data["regions"][1]["nodes"]
    plan.write_text(json.dumps(data))
    result = build(example_model, tmp_path / "edited", BuildOptions(accel=VULKAN, plan_file=plan))
    host = next(r for r in result.bundle.manifest.regions if r.target.backend == "llvm-cpu")
    assert result.bundle.record.region(host.name).nodes == ("fc", "softmax", "top5")
    golden(result.bundle.path, example_model)


def hostile_model(path, name: str):
    """The example's shape with every graph, node and tensor name replaced by hostile ones."""
    w = numpy_helper.from_array(np.full((4, 4), 0.5, np.float32), name + "w")
    nodes = [helper.make_node("MatMul", [name, name + "w"], [name + "h"], name=name + "node1"),
             helper.make_node("Relu", [name + "h"], [name + "r"], name=name),
             helper.make_node("TopK", [name + "r", "k"], [name + "v", name + "i"], name=name + "*/topk")]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(name + "v", TensorProto.FLOAT, [1, 2]),
         helper.make_tensor_value_info(name + "i", TensorProto.INT64, [1, 2])],
        [w, numpy_helper.from_array(np.array([2], np.int64), "k")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("name", ['q"uote\'s\nnew*/line', "x" * 5000, "class", "%0 = @bad\\"])
def test_hostile_names_survive_a_real_build(tmp_path, name):
    model = hostile_model(tmp_path / "hostile.onnx", name)
    result = build(model, tmp_path / "out", BuildOptions(accel=VULKAN, min_compute=1, gate=GateMode.OFF))
    assert len(result.bundle.manifest.regions) == 2
    assert result.bundle.manifest.model.name == name
    golden(result.bundle.path, model)


def test_accelerator_compile_that_runs_too_long_falls_back(example_model, tmp_path, private_compile_cache):
    result = build(example_model, tmp_path / "slow", BuildOptions(accel=VULKAN, accel_compile_timeout=0.01))
    how = next(r for r in result.bundle.record.regions if r.planned_device == "accel")
    region = result.bundle.manifest.region(how.name)
    assert region.target.backend == "llvm-cpu" and "timed out after" in how.fallback
    golden(result.bundle.path, example_model)


def test_measured_gate_keeps_the_faster_bundle(example_model, tmp_path):
    """--measure times the partition on the real devices against the whole model on the host.
    On lavapipe (a CPU pretending to be a GPU) the partition loses, and the gate says so."""
    import iree.runtime as rt

    result = build(example_model, tmp_path / "m", BuildOptions(accel=VULKAN, measure=True))
    m, rec = result.bundle.manifest, result.bundle.record
    gate = rec.partition.gate
    assert gate.measured and gate.partitioned_us > 0 and gate.all_host_us > 0
    assert gate.accepted == (gate.partitioned_us < gate.all_host_us)
    if gate.accepted:
        assert len(m.regions) == 2 and all(r.measured_us is not None for r in rec.regions)
    else:
        assert [r.target.backend for r in m.regions] == ["llvm-cpu"] and rec.regions[0].measured_us is not None
    if "llvmpipe" in rt.get_driver("vulkan").query_available_devices()[0]["name"]:
        assert not gate.accepted, "lavapipe beat the host CPU: the measurement is suspect"
    golden(result.bundle.path, example_model)


def test_report_html_draws_every_node_and_region(vulkan_bundle):
    import xml.etree.ElementTree as ET

    from aot import report

    m, rec = vulkan_bundle.bundle.manifest, vulkan_bundle.bundle.record
    page = report.html_page(m, rec)
    assert "14/15 nodes supported on vulkan-spirv, 93.3%" in page and "partition accepted" in page
    svg_text = page[page.index("<svg"):page.index("</svg>") + 6]
    root = ET.fromstring(svg_text)  # well-formed XML
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert sorted(t.split(" (")[0] for t in titles) == sorted(n for r in rec.regions for n in r.nodes)
    red = [l for l in root.iter("{http://www.w3.org/2000/svg}line") if l.get("stroke") == "#c0392b"]
    assert len(red) == 1  # probs: the one tensor passed between regions
    proc = run_aot("report", str(vulkan_bundle.bundle.path))
    assert proc.stdout.strip().endswith("report.html")


def test_report_escapes_hostile_names(vulkan_bundle):
    import xml.etree.ElementTree as ET

    from aot import report

    rec = vulkan_bundle.bundle.record.to_json()
    rec["graph"][0]["name"] = '<script>alert(1)</script>&"'
    rec["regions"][0]["nodes"][0] = rec["graph"][0]["name"]
    page = report.html_page(vulkan_bundle.bundle.manifest, BuildRecord.from_json(rec))
    assert "<script>" not in page
    ET.fromstring(page[page.index("<svg"):page.index("</svg>") + 6])


def test_verification_moves_a_silently_wrong_region_to_the_host(example_model, tmp_path):
    """A region compiled for a real GPU (ampere, subgroup 32) runs on lavapipe and returns wrong
    numbers without any error: a stand-in for a miscompiled region. Verification insisted on
    (--verify) catches it, moves it to the host, and the rebuilt bundle matches onnxruntime."""
    result = build(example_model, tmp_path / "amp", BuildOptions(accel=Target.parse("vulkan:ampere"), verify=True))
    m, rec = result.bundle.manifest, result.bundle.record
    moved = rec.verification.moved_to_host
    assert [c.region for c in moved] == ["r0"] and "differ from onnxruntime" in moved[0].error
    assert moved[0].max_abs_diff > 1e-2
    assert {r.target.backend for r in m.regions} == {"llvm-cpu"}
    assert "verification moved region r0" in dict(rec.host_reasons)["conv1"]
    golden(result.bundle.path, example_model)
    assert "moved to the host" in run_aot("report", str(result.bundle.path)).stdout


def test_a_bundle_for_a_gpu_not_on_the_build_machine_is_not_verified_here_but_says_so(example_model, tmp_path):
    """Built on CI (lavapipe) for a deployment GPU: checking the ampere module here would call a
    good region wrong and ship the model all-host. The build keeps the plan and records why it did
    not check; `aot check` on the target machine does."""
    result = build(example_model, tmp_path / "amp", BuildOptions(accel=Target.parse("vulkan:ampere")))
    regions = {r.name: r.target for r in result.bundle.manifest.regions}
    assert Target.parse("vulkan:ampere") in regions.values()
    skipped = result.bundle.record.verification.skipped
    assert "built for Vulkan target 'ampere'" in skipped and "llvmpipe" in skipped
    assert "verification skipped" in run_aot("report", str(result.bundle.path)).stdout


def test_without_verification_the_runtime_refuses_the_mismatched_module(example_model, tmp_path):
    result = build(example_model, tmp_path / "amp", BuildOptions(accel=Target.parse("vulkan:ampere"), verify=False))
    assert result.bundle.record.verification is None
    assert "verification" not in json.loads((result.bundle.path / "record.json").read_text())
    with pytest.raises(DeviceError, match="compiled for Vulkan target 'ampere'"):
        runtime.load(result.bundle.path)


def _failing_contexts(monkeypatch, failures: int) -> list[int]:
    """Make the first ``failures`` VM contexts fail the way lavapipe's initializers sometimes do."""
    import iree.runtime as rt

    real, calls = rt.VmContext, []

    def context(*args, **kwargs):
        calls.append(1)
        if len(calls) <= failures:
            raise RuntimeError("Error creating vm context with modules: DATA_LOSS; "
                               "while invoking native function hal.fence.await")
        return real(*args, **kwargs)

    monkeypatch.setattr(rt, "VmContext", context)
    return calls


def test_a_context_whose_initializers_fail_once_is_retried_on_a_fresh_device(host_bundle, example_model, monkeypatch):
    calls = _failing_contexts(monkeypatch, failures=1)
    data = host_bundle.bundle.manifest
    inputs = reference.random_inputs(data.inputs, 0)
    with runtime.load(host_bundle.bundle.path) as session:
        actual = session.run(inputs)
    assert session.load_retries == 1 and len(calls) == 2
    expected = reference.outputs(example_model, inputs, [o.name for o in data.outputs], data)
    for a, e in zip(actual, expected):
        assert_close(a, e, rtol=RTOL, atol=ATOL)


def test_a_context_that_keeps_failing_is_a_device_error_naming_the_regions(host_bundle, monkeypatch):
    calls = _failing_contexts(monkeypatch, failures=runtime.LOAD_ATTEMPTS)
    with pytest.raises(DeviceError, match=r"region\(s\) r0 on 'local-task' failed 3 times .*DATA_LOSS"):
        runtime.load(host_bundle.bundle.path)
    assert len(calls) == runtime.LOAD_ATTEMPTS


def test_verification_moves_regions_whose_device_load_fails_to_the_host(example_model, tmp_path, monkeypatch):
    """A bundle whose accelerator context cannot be created is not shipped: its regions move to the
    host like regions that run wrong, and the record says why."""
    from aot.checks import verify

    real_session, loads = verify.CheckSession, []

    def session_failing_first(bundle, manifest, **kwargs):
        loads.append(bundle)
        if len(loads) == 1:
            raise DeviceError("loading region(s) r0 on 'vulkan' failed 3 times while running their initializers: "
                              "DATA_LOSS")
        return real_session(bundle, manifest, **kwargs)

    monkeypatch.setattr(verify, "CheckSession", session_failing_first)
    result = build(example_model, tmp_path / "lost", BuildOptions(accel=VULKAN))
    moved = result.bundle.record.verification.moved_to_host
    assert [(c.region, c.max_abs_diff) for c in moved] == [("r0", None)]
    assert "initializers" in moved[0].error
    assert {r.target.backend for r in result.bundle.manifest.regions} == {"llvm-cpu"}
    golden(result.bundle.path, example_model)


def test_a_good_build_records_its_verification(vulkan_bundle):
    checked = vulkan_bundle.bundle.record.verification.checked
    assert [(c.region, c.ok) for c in checked] == [("r0", True)]
    assert checked[0].max_abs_diff < 1e-4


def test_runtime_refuses_host_code_built_for_a_cpu_with_more_features(host_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(host_bundle.bundle.path, copy)
    data = json.loads((copy / "manifest.json").read_text())
    assert data["regions"][0]["arch"] == "host"
    data["build_machine"]["cpu_flags"] = data["build_machine"]["cpu_flags"] + ["amx_tile_from_the_future"]
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(DeviceError, match=r"(?s)amx_tile_from_the_future.*--host-cpu"):
        runtime.load(copy)


def test_report_run_and_check_take_the_build_directory_too(vulkan_bundle, tmp_path):
    """`aot build -o artifacts/NAME` writes artifacts/NAME/bundle; every command that reads a bundle
    takes either directory."""
    build_dir = vulkan_bundle.bundle.path.parent
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 64, 64), np.float32))
    assert "vulkan-spirv:llvmpipe" in run_aot("report", str(build_dir)).stdout
    assert "max abs error vs onnxruntime" in run_aot("check", str(build_dir)).stdout
    assert "'top_classes': int64[1, 5]" in run_aot("run", str(build_dir), "--input", f"image=@{tmp_path / 'x.npy'}").stdout
    proc = run_aot("report", str(tmp_path), check=False)
    assert proc.returncode == 1 and "is not a bundle" in proc.stderr and "aot build -o" in proc.stderr


def _as_schema_1(manifest: dict, record: dict) -> dict:
    """The manifest.json aot wrote before the build record moved out (schema 1): the record's
    fields inline, per region and at the top."""
    old = {**manifest, "schema_version": 1,
           "model": {**manifest["model"], "opset": record["opset"], "folded_nodes": record["folded_nodes"]},
           "host_reasons": record["host_reasons"], "partition": record["partition"], "graph": record["graph"]}
    how = {r["name"]: r for r in record["regions"]}
    old["regions"] = [{**r, **{k: v for k, v in how[r["name"]].items() if k != "name"}} for r in manifest["regions"]]
    old["weights"] = {k: v for k, v in manifest["weights"].items() if k != "size"}
    return old


def test_a_bundle_built_before_the_build_record_loads_runs_and_reports(host_bundle, example_model, tmp_path):
    old = tmp_path / "oldbuild" / "bundle"
    shutil.copytree(host_bundle.bundle.path, old)
    m = json.loads((old / "manifest.json").read_text())
    (old / "manifest.json").write_text(json.dumps(_as_schema_1(m, json.loads((old / "record.json").read_text()))))
    (old / "record.json").unlink()
    # Every field of the contract reads as before; only the weights' size is new.
    assert dataclasses.replace(mf.read(old), weights=host_bundle.bundle.manifest.weights) == host_bundle.bundle.manifest
    golden(old, example_model)                     # loads and runs through its stub
    text = run_aot("report", str(old)).stdout
    assert "no build record" in text and "r0" in text
    proc = run_aot("tune", str(tmp_path / "oldbuild"), check=False)   # its options are unknown: refused
    assert proc.returncode == 1 and proc.stderr.startswith("ERROR: ") and "no build record" in proc.stderr
