"""The CLI is generated from BuildOptions: its defaults, every flag spelling, the accelerator target
parsed once, usage errors that name the flag."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import aot
from aot import cli, cli_args, option_flags
from aot.option_flags import UsageError
from aot.options import FallbackMode
from aot.partition.cost import DEFAULT_PARAMS
from aot.partition.partitioner import PartitionOptions
from aot.partition.order import OrderMode
from aot.partition.plan import GateMode
from aot.partition.support import Overrides
from aot.runtime import codec
from aot.tune.search import TuneSettings
from aot.errors import AotError
from aot.options import BuildOptions
from aot.runtime.target import Target


def options(*argv: str) -> BuildOptions:
    return cli_args.build_options(cli._parser().parse_args(["build", "m.onnx", "-o", "out", *argv]))


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
    assert (o.host, o.policy, o.select, o.min_compute, o.gate) == (
        Target.host("x86-64-v3"), "depth", "cost", 5, GateMode.OFF)


# Every flag spelling `aot build` accepted before the CLI was generated from BuildOptions, with
# the field it sets and the value it must set.
SPELLINGS = [
    (("--name", "m"), "name", "m"),
    (("--input-shape", "x=1x3x8x8", "--input-shape", "y=2"), "input_shapes", (("x", (1, 3, 8, 8)), ("y", (2,)))),
    (("--example-input", "t=1x16:int64"), "example_inputs", (("t", (1, 16), "int64"),)),
    (("--const-input", "sr=16000", "--const-input", "ax=0,2"), "constant_inputs", (("sr", 16000), ("ax", [0, 2]))),
    (("--no-index-guards",), "index_guards", False),
    (("--batch-buckets", "1,2,4"), "batch_buckets", "1,2,4"),
    (("--dim", "seq=8,16"), "dim_ladders", (("seq", "8,16"),)),
    (("--pad-value", "x=-1"), "pad_values", (("x", -1.0),)),
    (("--accept-padding", "seq=0.01"), "padding_tolerances", (("seq", 0.01),)),
    (("--fallback", "dynamic"), "fallback", FallbackMode.DYNAMIC),
    (("--threshold", "7"), "threshold", 7),
    (("--gate", "measured"), "gate", GateMode.MEASURED),
    (("--measure",), "gate", GateMode.MEASURED),
    (("--no-gate",), "gate", GateMode.OFF),
    (("--cost-params", "d.json"), "cost_params", Path("d.json")),
    (("--cost-params", "shipped"), "cost_params", DEFAULT_PARAMS),
    (("--min-segment-nodes", "3"), "min_segment_nodes", 3),
    (("--order", "search"), "order", OrderMode.SEARCH),
    (("--order-budget", "16"), "order_budget", 16),
    (("--measure-plans", "2"), "measure_plans", 2),
    (("--memory-limit", "vulkan=64MiB,local-task=1.5GiB"), "memory_limits", (("vulkan", 64 << 20),
                                                                            ("local-task", 3 << 29))),
    (("--host-ops", "Softmax, Relu", "--accel-nodes", "conv*"), "overrides",
     Overrides(host_ops=frozenset({"Softmax", "Relu"}), accel_nodes=("conv*",))),
    (("--accel-ops", "Conv", "--host-nodes", "a,b"), "overrides",
     Overrides(accel_ops=frozenset({"Conv"}), host_nodes=("a", "b"))),
    (("--plan", "p.json"), "plan_file", Path("p.json")),
    (("--accel-compile-timeout", "2.5"), "accel_compile_timeout", 2.5),
    (("--verify",), "verify", True),
    (("--no-verify",), "verify", False),
    (("--tune",), "tune", True),
    (("--tune-repeats", "3"), "tune_repeats", 3),
    (("--tune-segments", "6"), "tune_segments", 6),
    (("--cluster", "tcp://h:8786"), "cluster", "tcp://h:8786"),
    (("--dump-after", "plan", "--dump-after", "import"), "dump_after", frozenset({"plan", "import"})),
]


@pytest.mark.parametrize("argv, field, value", SPELLINGS, ids=[" ".join(a) for a, _, _ in SPELLINGS])
def test_every_flag_spelling_still_sets_its_option_and_nothing_else(argv, field, value):
    assert options(*argv) == dataclasses.replace(BuildOptions(), **{field: value})


@pytest.mark.parametrize("argv", [("--order-budget", "0"), ("--min-segment-nodes", "-1"), ("--order-budget", "x"),
                                  ("--measure-plans", "0"),
                                  ("--tune-segments", "3"), ("--tune-segments", "9"), ("--tune-segments", "x")])
def test_order_and_segment_settings_out_of_range_are_usage_errors(argv):
    with pytest.raises(AotError, match=argv[0]):
        options(*argv)


def test_every_option_has_exactly_one_flag_and_no_spelling_is_taken_twice():
    spellings = []
    for f in dataclasses.fields(BuildOptions):
        flag = f.metadata[option_flags.FLAG]          # a KeyError names a setting the CLI cannot reach
        spellings += [s for s in [flag.spelling] if s]
        spellings += [s.spelling for s in flag.switches] + [c.spelling for c in flag.companions]
    assert len(spellings) == len(set(spellings))


def test_the_partitioner_and_tuner_settings_are_views_without_defaults_of_their_own():
    for view in (PartitionOptions, TuneSettings):
        assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(view)), view
    o = BuildOptions(min_compute=4, gate=GateMode.OFF, tune_repeats=9)
    assert (o.partition_options().min_compute, o.partition_options().gate) == (4, GateMode.OFF)
    assert o.tune_settings().repeats == 9
    assert BuildOptions(tune_segments=4).tune_settings().segments == 4 and BuildOptions().tune_segments == 0


def test_the_api_keeps_its_former_spellings_of_the_gate():
    assert BuildOptions(gate=False).gate is GateMode.OFF and BuildOptions(gate=True).gate is GateMode.ROOFLINE
    assert BuildOptions(measure=True).gate is GateMode.MEASURED
    assert dataclasses.replace(BuildOptions(measure=True), tune=True).gate is GateMode.MEASURED


@pytest.mark.parametrize("gate, measure, mode", [(True, False, GateMode.ROOFLINE), (False, False, GateMode.OFF),
                                                 (True, True, GateMode.MEASURED)])
def test_options_stored_before_the_gate_was_one_setting_still_read(gate, measure, mode):
    stored = codec.encode(BuildOptions(min_compute=3))
    stored.update(gate=gate, measure=measure)
    assert BuildOptions.from_record(stored) == BuildOptions(min_compute=3, gate=mode)


def test_the_api_functions_keep_their_signatures():
    import inspect

    from aot import api

    assert list(inspect.signature(api.build).parameters) == ["model", "out_dir", "options", "progress"]
    assert list(inspect.signature(api.plan).parameters) == ["model", "options", "suggest"]
    assert list(inspect.signature(api.tune).parameters) == ["build_dir", "repeats", "cluster", "progress"]
    assert (aot.build, aot.plan, aot.GateMode) == (api.build, api.plan, GateMode)


@pytest.mark.parametrize("argv, message", [
    (("--input-shape", "x=1xabc"), "bad --input-shape 'x=1xabc'"),
    (("--min-compute", "two"), "bad --min-compute 'two': not an integer"),
    (("--accel-compile-timeout", "soon"), "bad --accel-compile-timeout 'soon': not a number"),
    (("--pad-value", "x"), "bad --pad-value 'x'"),
    (("--const-input", "sr=sixteen"), "bad --const-input 'sr=sixteen'"),
])
def test_a_malformed_flag_value_is_a_usage_error_that_names_the_flag(argv, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        options(*argv)


def test_the_cli_prints_a_usage_error_without_a_traceback(tmp_path):
    from conftest import run_aot

    proc = run_aot("plan", str(tmp_path / "m.onnx"), "--min-compute", "two", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("ERROR: bad --min-compute 'two'")


def test_an_output_folder_under_a_file_is_an_error_not_a_traceback(example_model, tmp_path):
    from conftest import run_aot

    (tmp_path / "file").write_text("not a folder")
    proc = run_aot("build", str(example_model), "-o", str(tmp_path / "file" / "out"), "--accel", "none", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "ERROR: cannot create the build folder" in proc.stderr and "Not a directory" in proc.stderr
