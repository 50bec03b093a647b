"""`--fallback dynamic`: a call past the largest bucket along a non-batch dimension runs in a host
module compiled with that dimension dynamic, and matches onnxruntime; the buckets still serve
every size they hold."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import run_aot

from aot.checks.compare import assert_close
from aot import api, runtime
from aot.buckets.fallback import FallbackError
from aot.checks import reference
from aot.errors import BundleError, RuntimeInputError
from aot.options import BuildOptions

import bucket_models as models

pytestmark = pytest.mark.device   # compiles with IREE
LADDER = BuildOptions(accel=None, dim_ladders=(("S", "8,16"),), fallback="dynamic")


def _x(s: int) -> np.ndarray:
    return np.random.default_rng(s).standard_normal((1, s, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    model = models.per_token(tmp_path_factory.mktemp("models") / "tokens.onnx")
    return model, api.build(model, tmp_path_factory.mktemp("fallback") / "out", LADDER)


def test_a_call_past_the_ladder_runs_in_the_dynamic_module_and_matches_onnxruntime(tokens):
    model, result = tokens
    fallback = result.bundle.manifest.shapes.fallback
    assert fallback is not None and fallback.checked == (("S", 17),) and fallback.max_abs_diff < 1e-5
    with runtime.load(result.bundle.path) as session:
        served = []
        run_checked = session.fallback.run_checked
        session.fallback.run_checked = lambda checked: served.append(checked["x"].shape[1]) or run_checked(checked)
        for s in (5, 16, 17, 40):
            (y,) = session(_x(s))
            (expected,) = reference.session(model).run(None, {"x": _x(s)})
            assert y.shape == (1, s, 16)
            assert_close(y, expected, rtol=1e-4, atol=1e-5)
    assert served == [17, 40]   # sizes the ladder holds still run padded in their bucket
    assert "the dynamic host module, checked at S=17" in run_aot("report", str(result.bundle.path)).stdout


def test_a_damaged_fallback_manifest_is_a_bundle_error(tokens, tmp_path):
    _, result = tokens
    copy = tmp_path / "bundle"
    shutil.copytree(result.bundle.path, copy)
    with (copy / "buckets" / "dynamic.json").open("a") as f:
        f.write(" ")
    with pytest.raises(BundleError, match="the manifest of the dynamic fallback"):
        runtime.load(copy)


def test_without_the_fallback_the_error_names_the_option(tmp_path):
    model = models.per_token(tmp_path / "tokens.onnx")
    result = api.build(model, tmp_path / "out", BuildOptions(accel=None, dim_ladders=(("S", "8"),)))
    assert result.bundle.manifest.shapes.fallback is None
    with runtime.load(result.bundle.path) as session, pytest.raises(RuntimeInputError, match="largest bucket") as e:
        session(_x(9))
    assert "--fallback dynamic" in e.value.hint


def test_the_fallback_refuses_constant_inputs_it_could_not_bake_in(tmp_path):
    path = tmp_path / "scaled.onnx"
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["y"])], "scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S", 16]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "S", 16])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    options = BuildOptions(accel=None, dim_ladders=(("S", "8"),), fallback="dynamic", constant_inputs=(("scale", [2.0]),))
    with pytest.raises(FallbackError, match="--const-input"):
        api.build(path, tmp_path / "out", options)
    assert not (tmp_path / "out" / "bundle").exists()   # nothing half-published


def test_the_fallback_reads_the_buckets_weights_and_keeps_only_changed_ones_apart(tokens, tmp_path):
    import iree.runtime as rt

    from aot.buckets import fallback
    from aot.runtime import manifest as mf

    _, result = tokens
    m = mf.read_fallback(result.bundle.path, result.bundle.manifest.shapes.fallback)
    assert m.weights == result.bundle.manifest.weights and m.extra_weights == ()   # w1, w2 are the same bytes

    def archive(path, entries):
        index = rt.ParameterIndex()
        for k, v in entries.items():
            index.add_buffer(k, v)
        index.create_archive_file(str(path))
        return path

    shared = archive(tmp_path / "shared.irpa", {"w": b"\1" * 8, "pos": b"\2" * 8})
    own = archive(tmp_path / "own.irpa", {"w": b"\1" * 8, "pos": b"\3" * 16})
    mlir = '%a = #stream.parameter.named<"model"::"w">\n%b = #stream.parameter.named<"model"::"pos">'
    text, moved = fallback._share_weights(mlir, own, shared)
    assert moved == {"pos": b"\3" * 16}
    assert '"model"::"w"' in text and '"dynamic"::"pos"' in text and '"model"::"pos"' not in text
