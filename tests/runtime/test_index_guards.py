"""Out-of-range indices never reach a compiled dispatch: a bundle refuses them at the boundary
(indices that are inputs) or through a guard's flag (indices computed inside the model), with an
error that names what was wrong, and answers valid inputs exactly as without guards."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest

from aot.checks.compare import assert_close
from aot import api, runtime
from aot.checks import reference
from aot.errors import RuntimeInputError
from aot.options import BuildOptions
from aot.runtime.target import Target
from conftest import indexing_model

pytestmark = pytest.mark.device  # compiles with IREE and runs on the device

VALID = {"ids": np.array([0, 1, 2, 3, 4, 6], np.int64), "grid": np.arange(15, dtype=np.float32).reshape(3, 5),
         "pairs": np.array([[0, 0], [2, 4], [-3, -5], [1, 2]], np.int64)}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("indexing") / "indexing.onnx"
    onnx.save(indexing_model(), path)
    return path


@pytest.fixture(scope="module", params=["none", "vulkan"])
def bundle(request, model_path, tmp_path_factory):
    accel = Target.accelerator(request.param)
    return api.build(model_path, tmp_path_factory.mktemp(request.param) / "b", BuildOptions(accel=accel)).bundle


def test_valid_indices_give_onnxruntimes_answer_bit_for_bit_with_and_without_guards(bundle, model_path, tmp_path):
    unguarded = api.build(model_path, tmp_path / "plain", BuildOptions(accel=None, index_guards=False)).bundle
    assert {op.status for op in unguarded.manifest.index_ops} == {"proved", "checked", "unguarded"}
    want = reference.session(model_path).run(None, VALID)
    with runtime.load(bundle.path) as guarded, runtime.load(unguarded.path) as plain:
        got, plain_got = guarded.run(VALID), plain.run(VALID)
    for g, p, w in zip(got, plain_got, want):
        assert g.tobytes() == p.tobytes()
        assert_close(g, w, rtol=0, atol=0)


@pytest.fixture(scope="module")
def host_bundle_of_model(model_path, tmp_path_factory):
    return api.build(model_path, tmp_path_factory.mktemp("host") / "b", BuildOptions(accel=None)).bundle


@pytest.mark.parametrize("name, value, message", [
    ("ids", np.array([0, 1, 2, 3, 10**9, 6], np.int64),
     r"input 'ids': value 1000000000 at position \[4\] is outside \[-10, 9\], the range the Gather node 'g_direct'"),
    ("ids", np.array([0, -11, 2, 3, 4, 6], np.int64), r"value -11 at position \[1\]"),
    ("pairs", np.array([[0, 0], [2, 5], [0, 0], [0, 0]], np.int64),
     r"input 'pairs': value 5 at position \[1, 1\] is outside \[-3, 2\], \[-5, 4\], the range the GatherND"),
])
def test_out_of_range_inputs_are_refused_before_anything_runs(host_bundle_of_model, name, value, message):
    # The boundary check runs before any device does: one device shows it.
    with runtime.load(host_bundle_of_model.path) as session:
        with pytest.raises(RuntimeInputError, match=message):
            session.run({**VALID, name: value})
        assert len(session.run(VALID)) == 5     # the session still serves good inputs afterwards


def test_an_out_of_range_computed_index_is_refused_through_its_guard(bundle):
    ids = np.array([0, 1, 2, 7, 8, 6], np.int64)   # 7+3, 8+3: computed in the graph, past row 9
    with runtime.load(bundle.path) as session:
        with pytest.raises(RuntimeInputError, match=r"Gather node 'g_computed': 2 index value\(s\) computed "
                                                     r"inside the model .* outside \[-10, 9\]"):
            session.run({**VALID, "ids": ids})


def test_report_lists_every_indexing_op_with_its_status(bundle):
    from aot import report

    text = report.index_text(bundle.manifest)
    assert all(s in text.splitlines()[0] for s in ("2 proved in range", "2 checked at the boundary", "1 guarded"))
    assert "Gather g_computed: guarded, valid [-10, 9] flag aot.index_flag.g_computed" in text
    assert "GatherND g_nd: checked at the boundary, valid [-3, 2], [-5, 4] input 'pairs' checked" in text


def test_aot_run_on_a_bad_id_exits_with_an_error_not_a_signal(bundle, tmp_path):
    for name, array in {**VALID, "ids": np.array([0, 1, 2, 3, 10**9, 6], np.int64)}.items():
        np.save(tmp_path / f"{name}.npy", array)
    proc = subprocess.run([sys.executable, "-m", "aot.cli", "run", str(bundle.path),
                           *(f"--input={n}=@{tmp_path / n}.npy" for n in VALID)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "ERROR: input 'ids': value 1000000000 at position [4]" in proc.stderr


def test_one_hot_keeps_its_spec_for_out_of_range_indices(tmp_path):
    """OneHot defines out-of-range indices (an all-off row); IREE's lowering compares instead of
    reading, so the bundle answers exactly as onnxruntime and records the op as defined."""
    from onnx import TensorProto, helper, numpy_helper

    from conftest import onnx_model

    model = onnx_model([helper.make_node("OneHot", ["idx", "depth", "vals"], ["y"], name="hot", axis=-1)],
                       [helper.make_tensor_value_info("idx", TensorProto.INT64, [6])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 5])],
                       [numpy_helper.from_array(np.array(5, np.int64), "depth"),
                        numpy_helper.from_array(np.array([0, 1], np.float32), "vals")])
    onnx.save(model, tmp_path / "onehot.onnx")
    built = api.build(tmp_path / "onehot.onnx", tmp_path / "out", BuildOptions(accel=None)).bundle
    assert [(op.node, op.status, op.dims) for op in built.manifest.index_ops] == [("hot", "defined", (5,))]
    x = {"idx": np.array([0, 4, -1, -5, 5, 10**9], np.int64)}
    with runtime.load(built.path) as session:
        np.testing.assert_array_equal(session.run(x)[0], reference.session(tmp_path / "onehot.onnx").run(None, x)[0])
