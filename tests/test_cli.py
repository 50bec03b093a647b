"""The CLI reads its defaults from BuildOptions and parses the accelerator target once."""

from __future__ import annotations

import pytest

from aot import cli
from aot.errors import AotError
from aot.options import BuildOptions
from aot.runtime.target import Target


def options(*argv: str) -> BuildOptions:
    return cli._build_options(cli._parser().parse_args(["build", "m.onnx", "-o", "out", *argv]))


def test_no_flags_give_exactly_the_default_options():
    assert options() == BuildOptions()


@pytest.mark.parametrize("argv, accel", [
    (("--accel", "none"), None),
    (("--accel", "cuda"), Target("cuda", "sm_80")),
    (("--accel", "cuda", "--cuda-target", "sm_86"), Target("cuda", "sm_86")),
    (("--accel", "vulkan", "--vulkan-target", "ampere"), Target("vulkan-spirv", "ampere")),
    (("--accel", "vulkan:ampere"), Target("vulkan-spirv", "ampere")),
    (("--accel", "cuda", "--vulkan-target", "ampere"), Target("cuda", "sm_80")),  # another device's arch
])
def test_the_accelerator_is_one_parsed_target(argv, accel):
    assert options(*argv).accel == accel


def test_two_archs_for_one_device_are_refused():
    with pytest.raises(AotError, match="name two archs"):
        options("--accel", "vulkan:ampere", "--vulkan-target", "llvmpipe")


def test_host_cpu_and_partition_settings_reach_the_options():
    o = options("--host-cpu", "x86-64-v3", "--policy", "depth", "--select", "cost", "--min-compute", "5", "--no-gate")
    assert (o.host, o.policy, o.select, o.min_compute, o.gate) == (Target.host("x86-64-v3"), "depth", "cost", 5, False)


def test_an_output_folder_under_a_file_is_an_error_not_a_traceback(example_model, tmp_path):
    from conftest import run_aot

    (tmp_path / "file").write_text("not a folder")
    proc = run_aot("build", str(example_model), "-o", str(tmp_path / "file" / "out"), "--accel", "none", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "ERROR: cannot create the build folder" in proc.stderr and "Not a directory" in proc.stderr
