"""PyTorch modules built end to end: the torch-path bundle against eager PyTorch on the CPU and on
lavapipe, against the same module's ONNX export built through the ONNX path, and through the CLI."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import aot
import aot.record
import torch_models as tm
from aot import runtime
from aot.checks.compare import compare
from aot.partition.plan import GateMode
from conftest import ROOT

pytestmark = pytest.mark.device
ATOL = 1e-4
# The devices each model's regions run on in a Vulkan build: the selection ops go to the host.
# The gate is off: the small encoder costs less on the host than a call to a GPU (the roofline
# gate would build it all-host, test_torch_partition.py), and here the accelerator path is tested.
VULKAN_TARGETS = {"resnet_like": ["vulkan-spirv", "llvm-cpu"], "encoder": ["vulkan-spirv"],
                  "topk_pool": ["vulkan-spirv", "llvm-cpu", "vulkan-spirv"]}


def _run(bundle, inputs: dict[str, torch.Tensor]) -> list[np.ndarray]:
    with runtime.load(bundle) as session:
        return session.run({k: v.numpy() for k, v in inputs.items()})


def _eager(name: str, inputs: dict[str, torch.Tensor]) -> list[np.ndarray]:
    with torch.no_grad():
        out = getattr(tm, name)()(*inputs.values())
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def _max_abs(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert [x.shape for x in a] == [y.shape for y in b] and [x.dtype for x in a] == [y.dtype for y in b]
    return max(compare(x, y).max_abs_diff for x, y in zip(a, b))   # inf where NaN/Inf differ


@pytest.fixture(scope="session")
def torch_bundles(tmp_path_factory):
    """Each model built for Vulkan and for the host only: {(name, accel): bundle path}."""
    out = {}
    for name in tm.EXAMPLES:
        for accel in ("vulkan", "none"):
            result = aot.build_torch(getattr(tm, name)(), tm.example_inputs(name),
                                     tmp_path_factory.mktemp(f"{name}-{accel}"), accel=accel, gate=GateMode.OFF)
            out[name, accel] = result.bundle.path
    return out


@pytest.mark.parametrize("accel", ["vulkan", "none"])
@pytest.mark.parametrize("name", list(tm.EXAMPLES))
def test_the_bundle_matches_eager_pytorch(name, accel, torch_bundles):
    bundle = torch_bundles[name, accel]
    manifest = runtime.manifest.read(bundle)
    targets = [r.target.backend for r in manifest.regions]
    assert targets == (VULKAN_TARGETS[name] if accel == "vulkan" else ["llvm-cpu"])
    for seed in (1, 2):
        x = tm.example_inputs(name, seed)
        err = _max_abs(_run(bundle, x), _eager(name, x))
        print(f"{name} {accel}: max abs error vs eager {err:.3g}")
        assert err <= ATOL
    assert manifest.model.frontend == "torch" and manifest.model.reference == "PyTorch eager"
    assert {"torch", "iree-turbine"} <= dict(manifest.toolchain).keys()
    if accel == "vulkan":
        verification = aot.record.read(bundle).verification
        assert verification.checked and all(c.ok for c in verification.checked) and not verification.moved_to_host


@pytest.mark.parametrize("name", list(tm.EXAMPLES))
def test_the_onnx_path_agrees_with_the_torch_path(name, torch_bundles, tmp_path):
    x = tm.example_inputs(name, 3)
    path = tmp_path / f"{name}.onnx"
    tm.export_onnx(name, path, x)
    onnx_bundle = aot.build(path, tmp_path / "onnx", aot.BuildOptions(gate=GateMode.OFF)).bundle.path
    onnx_targets = [r.target.backend for r in runtime.manifest.read(onnx_bundle).regions]
    assert onnx_targets == VULKAN_TARGETS[name]
    err = _max_abs(_run(onnx_bundle, x), _run(torch_bundles[name, "vulkan"], x))
    print(f"{name}: ONNX-path vs torch-path bundle max abs difference {err:.3g}")
    assert err <= ATOL


def _aot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aot.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def test_the_cli_builds_a_factory_and_reports_torch_ops_per_region(tmp_path):
    out = tmp_path / "resnet"
    build = _aot("build", "tests.torch_models:resnet_like", "--example-input", "x=1x3x64x64", "--accel", "vulkan",
                 "-o", str(out))
    assert build.returncode == 0, build.stderr[-3000:]
    assert "export   ResNetLike:" in build.stderr
    report = _aot("report", str(out))
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    host = next(i for i, line in enumerate(lines) if line.startswith("r1       llvm-cpu"))
    assert lines[host + 1].split() == ["ops:", "aten.topk", "x1"]
    assert any("aten.conv2d x9" in line for line in lines[:host])
    assert "1 x vulkan-spirv.aten.topk: selection/sort op" in report.stdout
    assert "PyTorch tests.torch_models:resnet_like (torch 2.13.0" in report.stdout
    check = _aot("check", str(out))
    assert check.returncode == 0 and "vs PyTorch eager" in check.stdout, check.stdout + check.stderr


def test_a_factory_without_example_inputs_is_a_clear_error(tmp_path):
    build = _aot("build", "tests.torch_models:encoder", "-o", str(tmp_path / "x"))
    assert build.returncode == 1
    assert "its input shapes are needed" in build.stderr and "--example-input" in build.stderr
    assert not (tmp_path / "x" / "bundle").exists()


def test_cuda_builds_keep_fused_attention_and_compile_without_a_gpu(tmp_path):
    """No GPU here: the CUDA modules compile (nothing falls back) and are checked on a GPU machine."""
    result = aot.build_torch(tm.encoder(), tm.example_inputs("encoder"), tmp_path, accel="cuda",
                             host=aot.Target.host("x86-64-v3"), gate=GateMode.OFF)
    regions = result.bundle.manifest.regions
    assert [(r.target.backend, result.bundle.record.region(r.name).fallback) for r in regions] == [("cuda", None)]
    ops = {g.op for g in result.bundle.record.graph}
    assert "aten.scaled_dot_product_attention" in ops and "aten.matmul" not in ops


def test_bench_and_profile_say_they_need_an_onnx_model(torch_bundles):
    from aot.errors import AotError
    from aot.tools import profile

    with pytest.raises(AotError, match="built from PyTorch and has no ONNX model") as e:
        profile.profile_bundle(torch_bundles["encoder", "none"])
    assert "torch.onnx.export" in e.value.hint
    bench = _aot("bench", "tests.torch_models:encoder")
    assert bench.returncode == 1 and "is a PyTorch factory" in bench.stderr


def test_literals_are_copied_into_every_region_that_reads_them(tmp_path):
    x = {"x": torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))}
    # Gate off and one compute node per region: the partition is forced, so the literal crosses.
    result = aot.build_torch(tm.literals(), x, tmp_path, accel="vulkan", gate=GateMode.OFF, min_compute=1)
    regions = result.bundle.manifest.regions
    assert [r.target.backend for r in regions] == ["vulkan-spirv", "llvm-cpu", "vulkan-spirv"]
    sources = {r.name: (tmp_path / "build" / "regions" / "built" / f"{r.name}.mlir").read_text() for r in regions}
    assert [s.count("torch.vtensor.literal") > 0 for s in sources.values()] == [True, False, True]
    with torch.no_grad():
        want = tm.literals()(*x.values()).numpy()
    assert _max_abs(_run(result.bundle.path, x), [want]) <= ATOL


def test_the_parts_of_a_chunked_tensor_cross_regions_as_tensors(tmp_path):
    """aten.split (``chunk``) returns a tensor list: the view gives the op one output per part, the
    outliner passes each part across a region boundary. Before, any chunk failed to build ('prim.
    ListUnpack ... is no ATen op'), so did a Llama-style layer (its rotary halves, its gated MLP)."""
    x = {"x": torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(0))}
    result = aot.build_torch(tm.chunked(), x, tmp_path, accel="vulkan", gate=GateMode.OFF, min_compute=1)
    regions = result.bundle.manifest.regions
    assert [r.target.backend for r in regions] == ["vulkan-spirv", "llvm-cpu", "vulkan-spirv"]
    assert len(regions[0].outputs) == 3   # a, for the host's topk, and b and c, for the last region
    with torch.no_grad():
        want = tm.chunked()(*x.values()).numpy()
    assert _max_abs(_run(result.bundle.path, x), [want]) <= ATOL


def test_a_llama_style_decoder_builds_for_the_host_and_matches_eager_pytorch(tmp_path):
    """RMSNorm, rotary halves (chunk), fused causal attention, a SiLU-gated MLP (chunk): the layer
    of current decoder models, which did not build through the torch path before chunks did."""
    x = {"x": torch.randn(1, 32, 384, generator=torch.Generator().manual_seed(0))}
    result = aot.build_torch(tm.decoder(), x, tmp_path, accel="none")
    with torch.no_grad():
        want = tm.decoder()(*x.values()).numpy()
    assert _max_abs(_run(result.bundle.path, x), [want]) <= ATOL


@pytest.mark.parametrize("accel", ["none", "vulkan"])
def test_recurrent_layers_build_and_match_eager_pytorch(accel, tmp_path):
    """nn.LSTM, nn.GRU and nn.RNN are decomposed into their steps before import (iree-turbine
    writes aten.lstm/aten.gru as opaque ops, and the build stopped at 'the exported program has 5
    ATen calls but the MLIR 4 ops')."""
    x = {"x": torch.randn(2, 10, 16, generator=torch.Generator().manual_seed(0))}
    result = aot.build_torch(tm.recurrent(), x, tmp_path, accel=accel, gate=GateMode.OFF)
    assert not {"aten.lstm", "aten.gru", "aten.rnn_tanh"} & {g.op for g in result.bundle.record.graph}
    with torch.no_grad():
        want = tm.recurrent()(*x.values()).numpy()
    assert _max_abs(_run(result.bundle.path, x), [want]) <= ATOL


@pytest.mark.parametrize("accel, width", [("none", 12), ("vulkan", 12), ("none", 8)])
def test_instance_norm_with_and_without_affine_parameters_matches_eager_pytorch(accel, width, tmp_path):
    """InstanceNorm2d's default (no weight, no bias) failed to compile: torch-mlir's lowering
    unsqueezes the absent weight. The per-channel PReLU between failed to compile where the last
    dimension differs from the 8 channels (width 12), and gave wrong numbers where it equals them
    (width 8). Both are written out before import (frontend/torch/decompose.py)."""
    x = {"x": torch.randn(2, 3, width, width, generator=torch.Generator().manual_seed(0))}
    result = aot.build_torch(tm.instance_normed(), x, tmp_path, accel=accel, gate=GateMode.OFF)
    with torch.no_grad():
        want = tm.instance_normed()(*x.values()).numpy()
    assert _max_abs(_run(result.bundle.path, x), [want]) <= ATOL
