"""Targets are parsed once; lower/flags.py gives each its iree-compile flags; compile_argv is pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from aot.errors import AotError
from aot.lower.compile import compile_argv
from aot.options import BuildOptions
from aot.lower.flags import (DATA_TILED_CONV, DATA_TILING, HOIST_LIMIT, IM2COL, PACKING_PAYS_FROM_FLOPS, REPLAY_FLAGS,
                             FINER_SPLITS, Holds, compile_flags, default_opt_flags, holds, region_defaults,
                             region_fallbacks, threads)
from aot.runtime.target import Target


@pytest.mark.parametrize("text, backend, arch, driver", [
    ("vulkan", "vulkan-spirv", "llvmpipe", "vulkan"),
    ("vulkan-spirv:ampere", "vulkan-spirv", "ampere", "vulkan"),
    ("cuda", "cuda", "sm_80", "cuda"),
    ("cpu", "llvm-cpu", "host", "local-task"),
    ("llvm-cpu:x86-64-v3", "llvm-cpu", "x86-64-v3", "local-task"),
])
def test_parse_owns_backend_arch_and_driver(text, backend, arch, driver):
    t = Target.parse(text)
    assert (t.backend, t.arch, t.driver) == (backend, arch, driver)
    assert Target.parse(str(t)) == t


def test_accelerator_parsing():
    assert Target.accelerator("none") is None
    assert Target.accelerator("vulkan") == Target("vulkan-spirv", "llvmpipe")
    assert Target.accelerator("vulkan", "ampere") == Target("vulkan-spirv", "ampere")   # --vulkan-target
    assert Target.accelerator("cuda:sm_86", "sm_80") == Target("cuda", "sm_86")        # the explicit arch wins
    with pytest.raises(AotError, match="unknown target 'tpu'"):
        Target.accelerator("tpu")
    with pytest.raises(AotError, match="is the host, not an accelerator"):
        Target.accelerator("cpu")


def test_default_options_hold_parsed_targets():
    assert BuildOptions().accel == Target.parse("vulkan") and BuildOptions().host == Target.host()
    assert BuildOptions().partition_options().accel_target == "vulkan-spirv"
    assert BuildOptions(accel=None).partition_options().accel_target is None


def test_llvm_cpu_flags():
    flags = compile_flags(Target.host("x86-64-v3"))
    assert flags == ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                     "--iree-llvmcpu-target-cpu=x86-64-v3",
                     f"--iree-opt-const-expr-max-size-increase-threshold={HOIST_LIMIT}",
                     "--iree-global-opt-use-im2col-for-convs=true")
    assert "--iree-input-demote-f64-to-f32=false" in compile_flags(Target.host(), keep_f64=True)


def _product(op: str, a: str, b: str, out: str, attrs: str = "") -> str:
    t = "!torch.vtensor<[{}],f32>".format
    if op.startswith("onnx."):
        return f'%0 = torch.operator "{op}"(%a, %b) {attrs}: ({t(a)}, {t(b)}) -> {t(out)}\n'
    return f"%0 = torch.{op} %a, %b : {t(a)}, {t(b)} -> {t(out)}\n"


def test_a_conv_free_host_region_gets_data_tiling_where_its_products_pay_for_the_packing():
    host = Target.host()
    big = _product("onnx.MatMul", "1,128,384", "384,384", "1,128,384")        # 37.7 MFLOP
    step = _product("aten.linear", "1,2,32", "128,32", "1,2,128")              # 16 kFLOP: a recurrent step
    gemm_t = _product("onnx.Gemm", "512,1", "512,256", "1,256", "{torch.onnx.transA = 1 : si64} ")
    assert holds(big.encode()) == Holds(False, 1, 2 * 128 * 384 * 384)
    assert holds(step.encode()) == Holds(False, 1, 2 * 2 * 128 * 32)
    assert holds(gemm_t.encode()).product_flops == 2 * 256 * 512      # K is A's first dim under transA
    assert region_defaults(host, big.encode()) == (DATA_TILING,)
    assert region_defaults(host, step.encode()) == (IM2COL,)            # its dispatches would cost more
    # The mean decides: one large product pays for a few small ones, not for many.
    assert region_defaults(host, (big + step * 3).encode()) == (DATA_TILING,)
    assert region_defaults(host, (big + step * 1000).encode()) == (IM2COL,)
    assert PACKING_PAYS_FROM_FLOPS * 1001 > 2 * 128 * 384 * 384 + 1000 * 16384
    # A convolution gets IREE's data-tiled convolutions, whatever its products; where IREE refuses
    # them, the same split finer, then im2col, then no flags. Other backends ignore products.
    for conv in (b'%1 = torch.operator "onnx.Conv"(%a, %w) : (...)\n', b'%1 = torch.operator "onnx.QLinearConv"(%a)\n',
                 b"%1 = torch.aten.convolution %a, %w\n"):
        assert region_defaults(host, conv + big.encode()) == DATA_TILED_CONV
        assert region_fallbacks(host, conv + big.encode()) == (
            DATA_TILED_CONV, *((*DATA_TILED_CONV, threads(split)) for split in FINER_SPLITS), (IM2COL,), ())
    assert region_fallbacks(host, big.encode()) == ((DATA_TILING,), ())
    assert region_fallbacks(host, step.encode()) == ((IM2COL,), ())
    assert region_defaults(Target.parse("vulkan"), big.encode()) == ()
    assert region_fallbacks(Target.parse("vulkan"), big.encode()) == ((),)
    assert region_defaults(Target.parse("cuda"), big.encode()) == ()


def test_only_a_refusal_at_the_split_is_worth_a_finer_split():
    """The chain's finer splits of its first set wait for IREE's words for a refusal at the split;
    other steps, and the first set itself, are no finer split of it."""
    from aot.lower.flags import REFUSED_AT_THIS_SPLIT, at_a_finer_split_of, at_split, refused_at_this_split
    for words in REFUSED_AT_THIS_SPLIT:
        assert refused_at_this_split(f"r0.mlir:3:7: error: 'vector.transfer_read' op {words}\n")
    assert not refused_at_this_split("error: failed to legalize operation 'torch.operator'")
    assert all(at_a_finer_split_of(at_split(DATA_TILED_CONV, split), DATA_TILED_CONV) for split in FINER_SPLITS)
    assert not at_a_finer_split_of(DATA_TILED_CONV, DATA_TILED_CONV)
    assert not at_a_finer_split_of((IM2COL,), DATA_TILED_CONV) and not at_a_finer_split_of((), DATA_TILED_CONV)
    assert not at_a_finer_split_of(at_split(DATA_TILED_CONV, 16), DATA_TILED_CONV)   # not one the chain offers


def test_vulkan_flags_map_results_and_hoist_dequantized_weights():
    flags = compile_flags(Target.parse("vulkan:ampere"))
    assert "--iree-vulkan-target=ampere" in flags and "--iree-hal-external-resources-mappable" in flags
    assert f"--iree-opt-const-expr-max-size-increase-threshold={HOIST_LIMIT}" in flags
    # Vulkan has no f64 to keep: the flag would only break the SPIR-V lowering.
    assert "--iree-input-demote-f64-to-f32=false" not in compile_flags(Target.parse("vulkan"), keep_f64=True)


def test_cuda_flags():
    assert compile_flags(Target.parse("cuda:sm_80")) == ("--iree-hal-target-device=cuda",
                                                         "--iree-cuda-target=sm_80", *REPLAY_FLAGS)


def test_optimisation_flags_replace_the_defaults_and_keep_the_device_flags():
    host = Target.host()
    assert compile_flags(host, opt=("--iree-opt-level=O2",))[-1] == "--iree-opt-level=O2"
    assert default_opt_flags(host)[0] not in compile_flags(host, opt=())
    assert compile_flags(host, opt=())[:3] == compile_flags(host)[:3]
    assert compile_flags(Target.parse("cuda"), opt=("--iree-opt-level=O3",))[-1] == "--iree-opt-level=O3"


def test_compile_argv_is_the_tool_the_input_the_flags_and_the_output():
    target = Target.parse("vulkan")
    argv = compile_argv("iree-compile", Path("r0.mlir"), Path("out/r0.vmfb"), target)
    assert argv == ["iree-compile", "r0.mlir", *compile_flags(target), "-o", "out/r0.vmfb"]
    assert compile_argv("t", Path("a"), Path("b"), Target.host(), keep_f64=True)[2:-2] == list(
        compile_flags(Target.host(), keep_f64=True))


@pytest.mark.parametrize("recorded", [(), ("--iree-opt-level=O2",)])
def test_the_dispatch_and_memory_statistics_compile_a_region_as_the_manifest_says_it_was(recorded, tmp_path,
                                                                                          monkeypatch):
    """A region whose default flags failed to compile was built with none (lower/compile.py), and
    its manifest says ``()``: its dispatch sizes and transient bytes come from that module, not
    from a compile with the defaults (which fails again, or measures another module)."""
    import subprocess

    from aot.lower import dispatches, footprint
    from aot.runtime.manifest import RegionEntry

    region = RegionEntry("r0", Target.host(), "modules/r0.vmfb", "main", ("x",), ("y",), "0" * 64, flags=recorded)
    text = b'%0 = torch.operator "onnx.Conv"(%arg0, %w) : (...)'
    seen = []

    def compiled(argv, **kw):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, b"Transient Size\n0\n", b"")

    monkeypatch.setattr(subprocess, "run", compiled)
    for module in (dispatches, footprint):    # nothing is compiled: the commands are only looked at
        monkeypatch.setattr(module, "iree_compile_path", lambda: "iree-compile")
    dispatches.region_dispatches(region, text, tmp_path)
    footprint._transient_bytes(region, text, tmp_path)
    assert len(seen) == 2
    expected = list(compile_flags(Target.host(), opt=recorded))
    for argv in seen:
        assert argv[2:2 + len(expected)] == expected
        assert default_opt_flags(Target.host(), Holds(convolution=True))[0] not in argv


def test_a_recurrence_is_a_product_per_step_and_direction():
    from aot.lower.flags import recurrence

    one = recurrence("LSTM", (10, 2, 16), 32, bidirectional=False, batch_first=False)
    assert one == Holds(False, 10, 10 * 2 * 2 * 4 * 32 * (16 + 32))
    assert recurrence("LSTM", (10, 2, 16), 32, bidirectional=True, batch_first=False) == one + one
    assert recurrence("LSTM", (2, 10, 16), 32, bidirectional=False, batch_first=True) == one
    assert recurrence("GRU", (10, 2, 16), 32, False, False).product_flops * 4 == one.product_flops * 3
    assert not one.pays_for_packing     # 15 kFLOP a step
