"""GridSample legalization (aot/frontend/legalize/grid_sample.py): the variants IREE 3.13 cannot
lower or lowers wrongly (bicubic, border/reflection padding, 5-D, nearest) are rewritten into
coordinate arithmetic and one GatherElements, and compute what onnxruntime computes for the op;
bilinear with zeros padding on 4-D inputs, which IREE lowers, is left alone."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, shape_inference

from aot.checks.compare import assert_close
from aot.frontend.legalize import grid_sample, legalize
from aot.frontend.load import load
from aot.runtime.manifest import IndexStatus


def _model(x_shape, grid_shape, opset=22, dtype=T.FLOAT, **attributes) -> onnx.ModelProto:
    node = helper.make_node("GridSample", ["X", "grid"], ["Y"], name="gs", **attributes)
    y_shape = [x_shape[0], x_shape[1], *grid_shape[1:-1]]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", dtype, x_shape),
                                        helper.make_tensor_value_info("grid", dtype, grid_shape)],
                          [helper.make_tensor_value_info("Y", dtype, y_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return shape_inference.infer_shapes(m)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _feeds(x_shape, grid_shape, dtype=np.float32, seed=0) -> dict[str, np.ndarray]:
    """Random pixels; grid points inside, near and far outside [-1, 1], a few exactly on pixel
    centres and halfway between them (where nearest's rounding shows)."""
    rng = np.random.default_rng(seed)
    grid = rng.uniform(-2.5, 2.5, grid_shape)
    flat = grid.reshape(-1)
    flat[:10] = [-1, 1, 0, 0.5, -0.5, 0.25, -0.75, 1e6, -1e6, 3.0][:flat.size]
    return {"X": rng.standard_normal(x_shape).astype(dtype), "grid": grid.astype(dtype)}


def _rewritten(model: onnx.ModelProto) -> onnx.ModelProto:
    result, tally = legalize(model)
    assert "GridSample" not in {n.op_type for n in result.model.graph.node}
    assert [(t.op_type, t.count, t.reason) for t in tally] == [("GridSample", 1, grid_sample.LEGALIZATIONS[0].reason)]
    onnx.checker.check_model(result.model, full_check=True)
    return result.model


def _same_as_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-5) -> None:
    want, got = _run(model, feeds), _run(_rewritten(model), feeds)
    assert np.isfinite(got).all() and np.isfinite(want).all()
    assert got.dtype == want.dtype and got.shape == want.shape
    assert_close(got, want, rtol=rtol, atol=rtol, what="rewritten GridSample")


VARIANTS = [  # (mode, padding, x shape, grid shape): every failing family of the node tests, and more
    ("cubic", "zeros", (2, 3, 4, 5), (2, 3, 6, 2)),
    ("cubic", "border", (2, 3, 4, 5), (2, 3, 6, 2)),
    ("cubic", "reflection", (1, 2, 3, 2), (1, 4, 5, 2)),
    ("linear", "border", (2, 3, 4, 5), (2, 3, 6, 2)),
    ("linear", "reflection", (2, 3, 4, 5), (2, 3, 6, 2)),
    ("nearest", "zeros", (2, 3, 4, 5), (2, 3, 6, 2)),
    ("nearest", "border", (1, 2, 3, 2), (1, 4, 5, 2)),
    ("nearest", "reflection", (1, 2, 3, 2), (1, 4, 5, 2)),
    ("linear", "zeros", (2, 2, 3, 4, 2), (2, 2, 3, 4, 3)),
    ("linear", "reflection", (1, 2, 3, 2, 4), (1, 3, 2, 2, 3)),
    ("nearest", "zeros", (2, 2, 3, 4, 2), (2, 2, 3, 4, 3)),
    ("nearest", "border", (1, 2, 3, 2, 4), (1, 3, 2, 2, 3)),
]


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("mode, padding, x_shape, grid_shape", VARIANTS)
def test_rewrite_computes_what_onnxruntime_computes(mode, padding, x_shape, grid_shape, align):
    model = _model(x_shape, grid_shape, mode=mode, padding_mode=padding, align_corners=align)
    _same_as_onnxruntime(model, _feeds(x_shape, grid_shape))


def test_nearest_rounds_halves_to_even():
    """What IREE 3.13 gets wrong: x = 0.5, 1.5, 2.5 pick pixels 0, 2, 2 (not 1, 2, 3)."""
    model = _model((1, 1, 1, 4), (1, 1, 3, 2), mode="nearest", align_corners=0)
    x = np.array([10, 20, 30, 40], np.float32).reshape(1, 1, 1, 4)
    grid = np.array([[-0.5, 0], [0, 0], [0.5, 0]], np.float32).reshape(1, 1, 3, 2)   # x = ((g+1) 4 - 1) / 2
    got = _run(_rewritten(model), {"X": x, "grid": grid})
    assert_close(got.reshape(-1), np.array([10, 30, 30], np.float32), what="nearest at halves")
    assert_close(got, _run(model, {"X": x, "grid": grid}), what="onnxruntime")


def test_opset16_names():
    model = _model((1, 2, 3, 4), (1, 2, 5, 2), opset=16, mode="bicubic", padding_mode="border")
    _same_as_onnxruntime(model, _feeds((1, 2, 3, 4), (1, 2, 5, 2)))


def test_float64_is_computed_in_float64():
    model = _model((1, 2, 3, 4), (1, 2, 5, 2), dtype=T.DOUBLE, mode="cubic", padding_mode="reflection")
    _same_as_onnxruntime(model, _feeds((1, 2, 3, 4), (1, 2, 5, 2), np.float64), rtol=1e-12)


def test_a_length_one_axis_reflects_onto_its_only_pixel():
    """align_corners and reflection on a length-1 axis: the reflection's span is 0 (the reference
    divides by it); every point reads that axis' only pixel, as onnxruntime does."""
    for mode in ("linear", "nearest"):
        model = _model((1, 2, 1, 3), (1, 2, 4, 2), mode=mode, padding_mode="reflection", align_corners=1)
        _same_as_onnxruntime(model, _feeds((1, 2, 1, 3), (1, 2, 4, 2)))


@pytest.mark.parametrize("opset, mode", [(16, "bilinear"), (22, "linear")])
def test_bilinear_zeros_4d_is_left_to_iree(opset, mode):
    model = _model((1, 1, 3, 4), (1, 2, 2, 2), opset=opset, mode=mode, padding_mode="zeros", align_corners=1)
    result, tally = legalize(model)
    assert not result.modified and tally == ()
    assert [n.op_type for n in result.model.graph.node] == ["GridSample"]


def test_the_gather_is_proved_in_range(tmp_path):
    """Every tap index is clamped before the gather, so no index guard (and no flag output) is added."""
    path = tmp_path / "gs.onnx"
    onnx.save(_model((1, 2, 3, 4), (1, 2, 5, 2), mode="cubic", padding_mode="zeros"), str(path))
    source = load(path)
    assert [n.op_type for n in source.model.graph.node].count("GatherElements") == 1
    assert [op.status for op in source.index_ops] == [IndexStatus.PROVED]
    assert [e.op_type for e in source.expanded] == ["GridSample"]


@pytest.mark.device   # compiles with IREE
def test_failing_node_tests_pass_on_llvm_cpu():
    """One of each family that failed before: bicubic and 5-D failed to compile, nearest was wrong."""
    import onnx.backend.test.case.node as node_tests
    import onnx.backend.test.case.node.gridsample  # noqa: F401 - importing it registers its cases

    from aot.tools import conformance

    # Only GridSample's cases: conformance.collect() generates all 1,884 (~15 s on a busy machine).
    cases = {c.name: c for c in node_tests._NodeTestCases}
    names = ("test_gridsample_bicubic", "test_gridsample_nearest",
             "test_gridsample_volumetric_bilinear_align_corners_0")
    results = [conformance.run_case(cases[n], "none") for n in names]   # "none": all on the host, llvm-cpu
    assert [(r.name, r.status, r.detail) for r in results] == [(n, "pass", "") for n in names]
