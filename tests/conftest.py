"""Shared fixtures: the example model, bundles built once per session, graph builders."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from aot.models import examples
from aot.frontend.graph import GraphView, Node, Value
from aot.options import BuildOptions
from aot.pipeline import build
from aot.runtime import manifest as mf
from aot.partition import calibrations
from aot.partition.plan import Gate
from aot.record import (BuildRecord, GraphNode, Machine, PartitionRecord, RegionCheck, RegionRecord,
                        Verification)
from aot.runtime.manifest import ConstantInput, Manifest, ModelInfo, RegionEntry, TensorSig, Weights
from aot.runtime.target import Target
from aot.workspace import SHARED_CACHE_ENV

ROOT = Path(__file__).resolve().parents[1]

# Model-supplied names that generated code must survive (quotes, comment ends, trigraphs, NUL, ...).
HOSTILE = [
    "x", "'", '"', '"""', "'''", "a\nb", "a\r\nb", "*/", "/*", "??=", "\\", "\\x00", "\0", "a\0b",
    "import os; os.system('echo pwned')", "__import__('os')", "class", "def", "None", "self", "np",
    "1abc", "", " ", "é", "名前", "\u202e", "\ud800", "x" * 5000, "{{ raw }}", "{% if %}", "#",
    "a.b:c/d", "-", "...", "__init__", "print(1)#",
]


def hostile_manifest(name: str) -> Manifest:
    """A one-region manifest whose model, tensor and node names are ``name``."""
    region = RegionEntry(name="r0", target=Target.host(), module="modules/r0.vmfb", function="main", inputs=(name,),
                         outputs=(name + "'out",), sha256="0" * 64)
    return Manifest(
        model=ModelInfo(name=name, sha256="0" * 64, source=name),
        inputs=(TensorSig(name, "float32", (1, 3)), TensorSig(name + "2", "int64", (2,)), TensorSig("x", "float32", ())),
        outputs=(TensorSig(name + "'out", "float32", (1,)),),
        weights=None, regions=(region,), schedule=("r0",), boundary_tensors=(), toolchain=(("aot", name),))


def graph(edges: list[tuple[str, str]], order: list[str] | None = None, op_types: dict[str, str] | None = None,
          shape: tuple[int, ...] = (1, 8)) -> GraphView:
    """A GraphView from edges ("A", "B"); every node has one output ``<name>.out``."""
    names = order or list(dict.fromkeys([n for e in edges for n in e]))
    nodes = [Node(n, (op_types or {}).get(n, "Conv"), tuple(f"{a}.out" for a, b in edges if b == n), (f"{n}.out",))
             for n in names]
    sinks = [f"{n}.out" for n in names if not any(a == n for a, _ in edges)]
    values = {f"{n}.out": Value(f"{n}.out", "float32", shape) for n in names}
    return GraphView.build(nodes, [], sinks, values)


def load_script(name: str):
    """scripts/NAME.py as a module (the scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def small_manifest(module_sha: str = "0" * 64) -> Manifest:
    region = RegionEntry(name="r0", target=Target.parse("vulkan"), module="modules/r0.vmfb", function="main",
                         inputs=("x",), outputs=("y",), sha256=module_sha)
    return Manifest(
        model=ModelInfo(name="m", sha256="a" * 64, source="/tmp/m.onnx"),
        inputs=(TensorSig("x", "float32", (1, 2)),), outputs=(TensorSig("y", "float32", (1, 2)),),
        constant_inputs=(ConstantInput("sr", "int64", (), 16000), ConstantInput("axes", "int64", (2,), (0, 1))),
        weights=Weights("weights.irpa", "model", "b" * 64, 1024), regions=(region,), schedule=("r0",),
        boundary_tensors=(("x", mf.BoundaryTensor("float32", (1, 2), 8)),), cpu_flags=("avx2",),
        toolchain=(("aot", "0.1.0"),))


def small_record() -> BuildRecord:
    """The build record of ``small_manifest``: every kind of decision filled in."""
    return BuildRecord(
        opset=17, folded_nodes=3, options={"tune": False},
        partition=PartitionRecord("greedy", "all", 2, Gate(True, 1.0, 2.0, None, "d", measured=True), None,
                                  ("tip",), "defaults"),
        host_reasons=(("n1", "why"),), graph=(GraphNode("n0", "Relu", ("x",), ("y",)),),
        regions=(RegionRecord(name="r0", planned_device="accel", nodes=("n0",), compute_nodes=1, flops=8,
                              estimated_us=1.5, fallback=None, measured_us=2.25),),
        machine=Machine("Linux", "cpu", 2), verification=Verification((RegionCheck("r0", True, 1e-6, None),), ()))


# What the marks promise (pyproject's markers): `make test-fast` deselects device, network and
# slow tests, so a test that needs one of them and is not marked would make the fast suite slow or
# need the package index. The guards below make the marks honest instead of a convention.
SLOW_S = 20.0   # a test not marked slow (or device) that takes longer fails and says so


# One compile cache for the whole session (AOT_CACHE_DIR, as a CI machine would share it between
# builds): most tests build the example CNN or a zoo model with options that leave the compiled
# modules unchanged, and the cache is keyed by module text, target, flags and compiler version.
# A test that needs a compile to happen asks for `private_compile_cache`. Under pytest-xdist the
# controller makes it before the workers start (they inherit the variable) and removes it after.
# The same for the calibration store (partition/calibrations.py): an `aot calibrate` run on this
# machine must not change what the tests' builds decide, so they see an empty store of their own.
def pytest_configure(config):
    if not hasattr(config, "workerinput"):   # a fresh one, whatever the caller's environment says
        config._aot_shared_cache = Path(tempfile.mkdtemp(prefix="aot-test-cache-"))
        os.environ[SHARED_CACHE_ENV] = str(config._aot_shared_cache)
        os.environ[calibrations.STORE_ENV] = str(config._aot_shared_cache / "calibrations")


# The modules whose module-scoped fixtures build for a minute or more (a tuned build; torch bundles
# for lavapipe) run first. pytest-xdist hands each worker a first batch of consecutive tests, so
# all of such a module's tests then land on one worker and its fixtures are built once; tests
# handed out later go one by one, and a module split over both workers built its fixture twice
# (the tuned build: 100 s, twice). The order is the same on every worker, as xdist requires.
# (`--dist loadgroup` would say this with marks, but does not group under pytest 9.2:
# pytest-xdist issue 1386.)
FIRST = ("tests/tune/test_tune_build.py::", "tests/test_torch_e2e.py::")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not item.nodeid.startswith(FIRST))   # stable: the rest keep their order


def pytest_unconfigure(config):
    made = getattr(config, "_aot_shared_cache", None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def malloc_untuned(monkeypatch):
    """No malloc setting of this machine's environment, nor aot's opt-out (runtime/heap.py)."""
    from aot.runtime import heap

    for name in heap.SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def private_compile_cache(monkeypatch):
    """Builds in this test (and the processes it starts) keep their cache in their build folder:
    they compile rather than reuse what other tests compiled."""
    monkeypatch.delenv(SHARED_CACHE_ENV, raising=False)


def _refuse(what: str, mark: str):
    def refuse(*args, **kwargs):
        raise AssertionError(f"this test {what} but is not marked `{mark}`: add @pytest.mark.{mark}")
    return refuse


@pytest.fixture(autouse=True)
def _marks_say_what_a_test_needs(request, monkeypatch):
    from aot.lower import compile as compile_, executor, footprint
    from aot.tools import replay
    from aot.models import zoo

    marks = {m.name for m in request.node.iter_markers()}
    if "network" not in marks:   # a cached model counts too: a fresh machine downloads it
        monkeypatch.setattr(zoo, "fetch", _refuse("fetches a zoo model from the package index", "network"))
    if "device" not in marks:
        # A build that found every module in the session's shared cache would never ask for the
        # compiler: an unmarked test builds with its own (empty) cache, so it is refused every time.
        monkeypatch.delenv(SHARED_CACHE_ENV, raising=False)
        for module in (executor, compile_, footprint, replay):
            monkeypatch.setattr(module, "iree_compile_path", _refuse("compiles with IREE", "device"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    marks = {m.name for m in item.iter_markers()}
    # Enforced where it matters, in a run that deselects slow tests (`make test-fast`): a full run
    # (CI) on a loaded machine must not fail for a duration; its --durations list shows them.
    fast_run = "not slow" in (item.config.getoption("markexpr") or "")
    if (fast_run and call.when == "call" and report.passed and call.duration > SLOW_S
            and not marks & {"slow", "device"}):
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {call.duration:.0f}s (over {SLOW_S:.0f}s) and is not marked "
                           "slow: `make test-fast` would wait for it; add @pytest.mark.slow")


@pytest.fixture(scope="session")
def example_model(tmp_path_factory) -> Path:
    return examples.write(tmp_path_factory.mktemp("example") / "tiny_cnn.onnx")


@pytest.fixture(scope="session")
def vulkan_bundle(example_model, tmp_path_factory):
    """The example CNN built for Vulkan (lavapipe) + CPU."""
    _require_vulkan()
    return build(example_model, tmp_path_factory.mktemp("vk") / "tiny_cnn", BuildOptions(accel=Target.parse("vulkan")))


@pytest.fixture(scope="session")
def host_bundle(example_model, tmp_path_factory):
    return build(example_model, tmp_path_factory.mktemp("host") / "tiny_cnn", BuildOptions(accel=None))


def _require_vulkan() -> None:
    """Device tests run on a real Vulkan device (lavapipe in CI); a missing driver is a failure,
    not a skip, because `make test` installs it."""
    import iree.runtime as rt

    try:
        devices = rt.get_driver("vulkan").query_available_devices()
    except Exception as e:  # noqa: BLE001 - report whatever the driver says
        pytest.fail(f"no Vulkan driver ({e}); `make test` installs mesa-vulkan-drivers libvulkan1")
    assert devices, "Vulkan driver has no device; install mesa-vulkan-drivers"


def run_aot(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "aot.cli", *args], capture_output=True, text=True, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"aot {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


RTOL, ATOL = 1e-4, 1e-5


def golden(bundle_path: Path, model_path: Path, seed: int = 0, inputs=None, rtol: float = RTOL, atol: float = ATOL,
           finite: bool = False):
    """Run the bundle through its generated stub and compare every output with onnxruntime;
    return each output's max abs difference, by name. ``finite``: every output, the bundle's and
    onnxruntime's, must be finite too (``assert_close`` lets NaN match NaN)."""
    import numpy as np

    from aot.checks import golden as check, reference
    from aot.runtime import manifest as mf

    data = mf.read(bundle_path)
    inputs = inputs if inputs is not None else reference.random_inputs(data.inputs, seed)
    stub = check.load_stub_class(bundle_path)()   # the generated stub, with its default bundle dir
    try:
        actual = stub(*[inputs[s.name] for s in data.inputs])
    finally:
        stub.close()
    expected = reference.outputs(model_path, inputs, [o.name for o in data.outputs], data)
    diffs = {}
    for a, e, o in zip(actual, expected, data.outputs):
        assert a.dtype == e.dtype and a.shape == e.shape, o.name
        assert not finite or (np.all(np.isfinite(a)) and np.all(np.isfinite(e))), f"{o.name}: NaN or infinite"
        diffs[o.name] = assert_close(a, e, rtol=rtol, atol=atol, what=o.name).max_abs_diff
    return diffs


def on_host(tmp_path: Path, model: onnx.ModelProto, name: str = "model") -> tuple[Path, onnx.ModelProto, Path]:
    """``model`` saved as NAME.onnx, loaded as a host build loads it and built for the host (IREE
    compiles): its path, the loaded ONNX model (what the front-end rewrites made of it), and the
    bundle's path, for ``golden``."""
    from aot import api
    from aot.frontend.load import load
    from aot.options import BuildOptions

    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    loaded = load(path, cpu_conv_rewrites=True).model
    return path, loaded, api.build(path, tmp_path / name, BuildOptions(accel=None)).bundle.path


def rewrite_outputs(model: onnx.ModelProto, rewritten: onnx.ModelProto, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """onnxruntime's output of ``rewritten`` (unoptimised, so that its own rewrites do not hide
    ours) and of ``model``, on one seeded random input ``x``; both asserted finite."""
    from aot.checks import reference

    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    want = reference.session(model.SerializeToString()).run(None, {"x": x})[0]
    got = reference.session(rewritten.SerializeToString(), optimize=False).run(None, {"x": x})[0]
    # assert_close lets NaN match NaN: a comparison of two broken outputs must still fail.
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(want)), "an output is NaN or infinite"
    return got, want


def onnx_model(nodes, inputs, outputs, inits=(), opset=17):
    """A one-graph ONNX model from helper-made nodes and value infos."""
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def indexing_model() -> onnx.ModelProto:
    """Four Gathers from one table of 10 rows: ids straight from an input (reshaped), ids + 3
    computed in the graph, ids clipped into [0, 9], and constant ids; plus a GatherND whose index
    pairs are an input."""
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    three = numpy_helper.from_array(np.array(3, np.int64), "three")
    lo, hi = numpy_helper.from_array(np.array(0, np.int64), "lo"), numpy_helper.from_array(np.array(9, np.int64), "hi")
    const_ids = numpy_helper.from_array(np.array([0, 9, -10], np.int64), "const_ids")
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    nodes = [
        helper.make_node("Reshape", ["ids", "shape"], ["ids2d"], name="reshape"),
        helper.make_node("Gather", ["table", "ids2d"], ["direct"], name="g_direct"),
        helper.make_node("Add", ["ids", "three"], ["shifted"], name="add"),
        helper.make_node("Gather", ["table", "shifted"], ["computed"], name="g_computed"),
        helper.make_node("Clip", ["shifted", "lo", "hi"], ["clipped"], name="clip"),
        helper.make_node("Gather", ["table", "clipped"], ["bounded"], name="g_clipped"),
        helper.make_node("Gather", ["table", "const_ids"], ["fixed"], name="g_const"),
        helper.make_node("GatherND", ["grid", "pairs"], ["picked"], name="g_nd"),
    ]
    return onnx_model(nodes,
                  [helper.make_tensor_value_info("ids", TensorProto.INT64, [6]),
                   helper.make_tensor_value_info("grid", TensorProto.FLOAT, [3, 5]),
                   helper.make_tensor_value_info("pairs", TensorProto.INT64, [4, 2])],
                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in
                   (("direct", [2, 3, 4]), ("computed", [6, 4]), ("bounded", [6, 4]), ("fixed", [3, 4]),
                    ("picked", [4]))],
                  [table, three, lo, hi, const_ids, shape])


def legalized_once(model, op_type: str, *, replaced: bool = True):
    """``model`` through the legalization pass: exactly one ``op_type`` node rewritten and tallied,
    (``replaced``: no ``op_type`` node left), and a model the full ONNX checker accepts."""
    import onnx

    from aot.frontend.legalize import legalize

    result, tally = legalize(model)
    assert result.modified and [(t.op_type, t.count) for t in tally] == [(op_type, 1)]
    if replaced:
        assert op_type not in {n.op_type for n in result.model.graph.node}
    onnx.checker.check_model(result.model, full_check=True)
    return result.model
