"""GridSample legalization (aot/frontend/legalize/grid_sample.py): the variants IREE 3.13 cannot
lower (bicubic, border/reflection padding, 5-D) or lowers wrongly (nearest; bilinear with zeros
padding reads outside the image) are rewritten into coordinate arithmetic and one GatherElements,
and compute what onnxruntime computes for the op. Also its companion AffineGrid (affine_grid.py):
with a constant size, a constant base grid and one MatMul."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, shape_inference

from aot.checks.compare import assert_close
from aot.frontend import expand
from aot.frontend.legalize import affine_grid, grid_sample, legalize
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


VARIANTS = [  # (mode, padding, x shape, grid shape): every family of the node tests, and more
    ("linear", "zeros", (2, 3, 4, 5), (2, 3, 6, 2)),
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


def test_bilinear_zeros_far_outside_the_image_reads_zeros():
    """IREE's own lowering reads outside the image there (garbage, NaN, SIGSEGV at 1e6)."""
    model = _model((1, 2, 3, 4), (1, 2, 2, 2), opset=16, mode="bilinear", padding_mode="zeros")
    grid = np.array([1e6, 1e6, -1e3, 0.5, 1.04, -1.3, 0, 0], np.float32).reshape(1, 2, 2, 2)
    feeds = {"X": np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4) + 1, "grid": grid}
    got = _run(_rewritten(model), feeds)
    assert_close(got[..., 0, :], np.zeros((1, 2, 2), np.float32), what="points outside the image")
    _same_as_onnxruntime(model, feeds)


def test_a_node_without_static_shapes_is_left_alone():
    model = _model((1, 1, 3, 4), ("n", 2, 2, 2), mode="cubic")
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


# AffineGrid ---------------------------------------------------------------------------------------

def _affine_model(size, align, size_input=False) -> onnx.ModelProto:
    r = len(size) - 2
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="ag", align_corners=align)
    inputs = [helper.make_tensor_value_info("theta", T.FLOAT, [size[0], r, r + 1])]
    inits = []
    if size_input:
        inputs.append(helper.make_tensor_value_info("size", T.INT64, [len(size)]))
    else:
        inits.append(helper.make_tensor("size", T.INT64, [len(size)], size))
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("grid", T.FLOAT, [size[0], *size[2:], r])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    return shape_inference.infer_shapes(m)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 5, 6], [2, 1, 4, 5, 6], [1, 1, 2, 1, 3]])
def test_affine_grid_is_a_constant_grid_times_theta(size, align):
    model = _affine_model(size, align)
    result, tally = legalize(model)
    assert [n.op_type for n in result.model.graph.node] == ["Transpose", "MatMul", "Reshape"]
    assert [(t.op_type, t.count) for t in tally] == [("AffineGrid", 1)]
    theta = np.random.default_rng(1).standard_normal([size[0], len(size) - 2, len(size) - 1]).astype(np.float32)
    got, want = _run(result.model, {"theta": theta}), _run(model, {"theta": theta})
    assert np.isfinite(got).all()
    if align and 1 in size[2:]:   # onnxruntime puts a length-1 axis at +1; the standard's reference at -1
        from onnx.reference import ReferenceEvaluator
        with np.errstate(divide="ignore"):   # its step 2 / (L - 1), unused for L = 1
            want = ReferenceEvaluator(model).run(None, {"theta": theta})[0]
    assert_close(got, want, rtol=1e-5, atol=1e-6, what="legalized AffineGrid")


def test_affine_grid_is_legalized_not_expanded_when_size_is_constant(tmp_path):
    path = tmp_path / "ag.onnx"
    onnx.save(_affine_model([2, 3, 5, 6], 1), str(path))
    source = load(path)
    assert [n.op_type for n in source.model.graph.node] == ["Transpose", "MatMul", "Reshape"]
    assert [e.reason for e in source.expanded] == [affine_grid.LEGALIZATIONS[0].reason]


def test_affine_grid_with_a_runtime_size_is_still_expanded():
    model = _affine_model([2, 3, 5, 6], 0, size_input=True)
    assert [e.op_type for e in expand.expanded_ops(model)] == ["AffineGrid"]
    assert expand.expand_functions(model).changed == 1
