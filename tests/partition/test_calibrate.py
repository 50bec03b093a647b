"""`aot calibrate`: what it counts, how it fits, and a real run on the host and lavapipe."""

from __future__ import annotations

import ctypes.util
import json
import math

import pytest

from aot.cli import main
from aot.options import BuildOptions
from aot.partition import calibrate as cal
from aot.partition import calibrations
from aot.runtime import fingerprint
from aot.partition.cost import DEFAULT_PARAMS, CostModel, CostParamsError, DeviceModel

TRUE = DeviceModel(gflops=120.0, gbps=15.0, call_overhead_us=20.0, dispatch_us=6.0)


def _sample(w: cal.Workload, device: DeviceModel = TRUE, hop_us: float = 50.0, link_gbps: float = 4.0) -> cal.Sample:
    """What ``device`` would measure: its roofline, and transfers over the link."""
    work = cal.counted(w)
    region = device.time_us(work.flops, work.nbytes, work.dispatches)
    moved = 4 * (sum(math.prod(i) for i in w.inputs) + math.prod(w.output))
    return cal.Sample(w, work, region, region + hop_us * w.transfers + moved / (link_gbps * 1e3))


def test_workloads_are_counted_as_the_cost_model_counts():
    by_name = {w.name: cal.counted(w) for w in cal.workloads(cal.Suite.FULL)}
    assert by_name["matmul-512"].flops == 2 * 512 ** 3
    assert by_name["conv3x3-64x56"].flops == 2 * 64 * 56 * 56 * 64 * 9
    # Every node of the fused chain counts its own operands: Add and Mul 3 x 4 MB, Relu 2 x 4 MB.
    assert by_name["eltwise-1048576"].nbytes == 8 * 4 * (1 << 20)
    assert by_name["chain-8x64"].dispatches == 8 and by_name["chain-1x64"].dispatches == 1
    assert by_name["eltwise-1048576"].dispatches == 1     # elementwise nodes fuse: no dispatch of their own


def test_fit_recovers_a_known_device():
    samples = [_sample(w) for w in cal.workloads(cal.Suite.FULL)]
    fitted, unresolved = cal.fit_device(samples, "test", DeviceModel(1.0, 1.0, 1.0))
    assert unresolved == ()
    # The call cost is the fastest call (here the tiny model's, a little over TRUE's fixed cost).
    assert fitted.call_overhead_us == pytest.approx(TRUE.call_overhead_us, rel=0.01)
    assert fitted.gflops == pytest.approx(TRUE.gflops, rel=0.02)
    assert fitted.gbps == pytest.approx(TRUE.gbps, rel=0.02)
    assert fitted.dispatch_us == pytest.approx(TRUE.dispatch_us, rel=0.02)
    link, hop = cal.fit_link(samples)
    assert hop == pytest.approx(50.0, rel=0.01)
    assert link == pytest.approx(4.0, rel=0.05)


def test_what_the_timing_cannot_resolve_keeps_the_default():
    fallback = DeviceModel(7.0, 8.0, 9.0, 1.5)
    samples = [_sample(w) for w in cal.workloads(cal.Suite.FULL)]
    # The elementwise chain as fast as the fastest call: no bandwidth can be read from it.
    samples = [s if s.workload.role is not cal.Role.MEMORY
               else cal.Sample(s.workload, s.work, min(x.region_us for x in samples), s.whole_us) for s in samples]
    fitted, unresolved = cal.fit_device(samples, "test", fallback)
    assert unresolved == ("gbps",)
    assert fitted.gbps == fallback.gbps and fitted.gflops == pytest.approx(TRUE.gflops, rel=0.02)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0])
def test_a_broken_measurement_is_refused(bad):
    samples = [_sample(w) for w in cal.workloads(cal.Suite.QUICK)]
    samples[1] = cal.Sample(samples[1].workload, samples[1].work, bad, samples[1].whole_us)
    with pytest.raises(cal.CalibrationError, match="matmul-128"):
        cal.fit_device(samples, "test", TRUE)


def test_further_dispatches_cost_only_where_measured():
    hand_set = DeviceModel(100.0, 10.0, 15.0)     # devices.json's entries carry no dispatch cost
    assert hand_set.time_us(10 ** 6, 100, 40) == hand_set.time_us(10 ** 6, 100, 1)
    assert TRUE.time_us(10 ** 6, 100, 5) == pytest.approx(TRUE.time_us(10 ** 6, 100, 1) + 4 * TRUE.dispatch_us)


@pytest.mark.device
def test_calibrate_host_and_lavapipe(tmp_path, capsys, monkeypatch):
    # Without -o the calibration goes to this machine's store, where builds for lavapipe find it.
    monkeypatch.setenv(calibrations.STORE_ENV, str(tmp_path / "store"))
    assert calibrations.for_build(BuildOptions()) is None
    assert main(["calibrate", "--accel", "vulkan", "--suite", "quick", "--repeats", "5"]) == 0
    out = calibrations.for_build(BuildOptions())
    assert out is not None and out.parent == tmp_path / "store"
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(out)
    data = json.loads(out.read_text())
    samples = data["_calibration"]["samples"]
    assert {s["device"] for s in samples} == {"host", "vulkan-spirv"}
    assert len(samples) == 2 * len(cal.workloads(cal.Suite.QUICK))
    model = CostModel.load("vulkan-spirv", out)
    for device in (model.host, model.accel):
        for value in (device.gflops, device.gbps, device.call_overhead_us, device.dispatch_us):
            assert math.isfinite(value) and value >= 0
        assert device.gflops > 0 and device.call_overhead_us > 0
    # The measured entry replaced the hand-set "GPU" class (2,000 GFLOP/s) for lavapipe, and the
    # host entry is this machine's; the other targets keep the defaults.
    assert model.accel.gflops < 200 and model.source.startswith(f"{out} (sha256 ")
    assert CostModel.load("cuda", out).accel == CostModel.load("cuda").accel

    # Timing bundles that are not there: a clear error, and the good file survives.
    before = out.read_bytes()
    capsys.readouterr()
    assert main(["calibrate", "--accel", "vulkan", "--no-build", "--work", str(tmp_path / "none"),
                 "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no calibration bundle" in err and "--build-only" in err and "Traceback" not in err
    assert out.read_bytes() == before


@pytest.mark.parametrize("text, what", [
    ("not json", "JSONDecodeError"),
    ('{"host": {"gflops": 1, "gbps": 1, "call_overhead_us": 1}}', "accelerators"),
    (json.dumps({**json.loads(DEFAULT_PARAMS.read_text()), "host": {"gflops": float("nan"), "gbps": 1,
                                                                     "call_overhead_us": 1}}), "nan"),
    (json.dumps({**json.loads(DEFAULT_PARAMS.read_text()), "host": {"gflops": 0, "gbps": 1,
                                                                     "call_overhead_us": 1}}), "> 0"),
    (json.dumps({**json.loads(DEFAULT_PARAMS.read_text()), "host": {"gflops": 1, "gbps": 1, "call_overhead_us": 1,
                                                                     "speed": 3}}), "speed"),
])
def test_a_bad_cost_params_file_is_a_typed_error_that_names_it(text, what, tmp_path, example_model, capsys):
    bad = tmp_path / "params.json"
    bad.write_text(text)
    with pytest.raises(CostParamsError, match=what) as e:
        CostModel.load("vulkan-spirv", bad)
    assert str(bad) in str(e.value) and "aot calibrate" in e.value.hint
    assert main(["plan", str(example_model), "--cost-params", str(bad), "-o", str(tmp_path / "plan.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: the cost parameters {str(bad)!r}") and "Traceback" not in err
    assert not (tmp_path / "plan.json").exists()
    with pytest.raises(CostParamsError, match="cannot read"):
        CostModel.load(None, tmp_path / "missing.json")


def test_a_record_names_the_very_parameters_file(tmp_path):
    params = tmp_path / "params.json"
    params.write_text(DEFAULT_PARAMS.read_text())
    first = CostModel.load("cuda", params).source
    params.write_text(DEFAULT_PARAMS.read_text().replace('"gflops": 60.0', '"gflops": 61.0'))
    assert first.startswith(str(params)) and CostModel.load("cuda", params).source != first
    assert CostModel.load("cuda").source == "defaults (aot/partition/devices.json)"


@pytest.mark.device
def test_a_cross_build_builds_here_and_times_there(tmp_path, capsys):
    """--build-only writes the workload bundles and no parameters; --no-build times those bundles
    without building (what the device's machine, which may lack the compiler, runs)."""
    work, out = tmp_path / "work", tmp_path / "host.json"
    assert main(["calibrate", "--accel", "none", "--suite", "quick", "--build-only", "--work", str(work),
                 "-o", str(out)]) == 0
    assert not out.exists() and capsys.readouterr().out.strip() == str(work)
    built = sorted(p.name for p in work.iterdir() if p.is_dir())
    assert built == sorted(f"host-{w.name}" for w in cal.workloads(cal.Suite.QUICK))   # the host only: --accel none
    assert main(["calibrate", "--accel", "none", "--suite", "quick", "--no-build", "--repeats", "3",
                 "--work", str(work), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {s["device"] for s in data["_calibration"]["samples"]} == {"host"}
    assert data["accelerators"] == json.loads(DEFAULT_PARAMS.read_text())["accelerators"]
    assert CostModel.load(None, out).host.gflops == data["host"]["gflops"] > 0


@pytest.mark.device
@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None,
                    reason="a CUDA driver is on this machine: the case needs one without")
def test_timing_where_the_device_is_not_says_where_to_run_it(tmp_path, capsys):
    """This machine has no CUDA: the cross build works, timing it here is a typed error that says
    how to calibrate a device elsewhere, before the host is timed."""
    work, out = tmp_path / "work", tmp_path / "cuda.json"
    assert main(["calibrate", "--accel", "cuda", "--suite", "quick", "--build-only", "--work", str(work),
                 "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["calibrate", "--accel", "cuda", "--suite", "quick", "--no-build", "--work", str(work),
                 "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ERROR: cannot open cuda") and "--no-build" in err and "Traceback" not in err
    assert " on host:" not in err and not out.exists()


def _plan_gate(model, out, *flags: str) -> dict:
    assert main(["plan", str(model), "--accel", "vulkan", "--gate", "roofline", *flags, "-o", str(out)]) == 0
    return json.loads(out.read_text())["gate"]


def test_a_build_decides_from_this_machines_stored_calibration(tmp_path, example_model, monkeypatch, capsys):
    """A calibration in the store is what a build for the same devices decides from, and the plan
    names it; --cost-params shipped, a cross build, or another arch keep the hand-set entries."""
    monkeypatch.setenv(calibrations.STORE_ENV, str(tmp_path / "store"))
    shipped = _plan_gate(example_model, tmp_path / "shipped.json")
    assert shipped["accepted"] and "cost model: defaults" in shipped["detail"]

    # This machine's "GPU" measured at lavapipe's speed: the roofline keeps the model on the host.
    slow = json.loads(DEFAULT_PARAMS.read_text())
    slow["accelerators"]["vulkan-spirv"]["device"]["gflops"] = 1.0
    stored = calibrations.path_for(BuildOptions())
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps(slow))
    calibrated = _plan_gate(example_model, tmp_path / "calibrated.json")
    assert not calibrated["accepted"] and f"cost model: {stored} (sha256 " in calibrated["detail"]

    for flags in (("--cost-params", "shipped"), ("--host-cpu", "x86-64-v3"), ("--vulkan-target", "ampere")):
        gate = _plan_gate(example_model, tmp_path / "other.json", *flags)
        assert gate["accepted"] and "cost model: defaults" in gate["detail"], flags

    # A damaged store file is a typed error that says how to recover, and nothing is written.
    stored.write_text("{ truncated")
    capsys.readouterr()
    assert main(["plan", str(example_model), "--accel", "vulkan", "-o", str(tmp_path / "bad.json")]) == 1
    err = capsys.readouterr().err
    assert str(stored) in err and "--cost-params shipped" in err and "Traceback" not in err
    assert not (tmp_path / "bad.json").exists()


def test_calibrate_where_names_the_devices_and_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(calibrations.STORE_ENV, str(tmp_path))
    assert main(["calibrate", "--accel", "none", "--where"]) == 0
    out = capsys.readouterr().out
    assert f"devices: none host=" in out and f"cpu={fingerprint.cpu_model()}" in out and "none yet" in out
    assert str(tmp_path) in out and not any(tmp_path.iterdir())
