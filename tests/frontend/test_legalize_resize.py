"""Resize legalization (aot/frontend/legalize/resize.py): the variants IREE 3.13 cannot lower or
computes wrongly become Gathers, gathered taps or MatMuls that compute what onnx's reference
computes; the variants IREE lowers right are left to it."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aot.checks.compare import compare
from aot.frontend.legalize import legalize


def _model(shape, dtype=np.float32, scales=None, sizes=None, roi=None, opset=19, runtime=(), **attributes):
    """One Resize with its roi / scales / sizes as initializers (as folding leaves them) or, those named
    in `runtime`, graph inputs; shapes inferred."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inputs, inits = [helper.make_tensor_value_info("x", elem, shape)], []
    names = ["x", "", "", ""]
    for slot, name, value, vtype in ((1, "roi", roi, np.float32), (2, "scales", scales, np.float32),
                                     (3, "sizes", sizes, np.int64)):
        if value is None:
            continue
        names[slot] = name
        if name in runtime:
            inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(vtype)),
                                                        [len(value)]))
        else:
            inits.append(numpy_helper.from_array(np.array(value, vtype), name))
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Resize", names, ["y"], name="resize", **attributes)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", elem, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)
    return (3 * rng.standard_normal(shape)).astype(dtype)


_TOL = {np.dtype(np.float16): (2e-3, 1e-3), np.dtype(ml_dtypes.bfloat16): (1.6e-2, 1e-2)}


def _rewritten_computes_the_same(model, seed=0, **inputs):
    """Legalize `model`; check the rewrite replaced the Resize and matches the reference; return
    (the rewritten model's op types, the tally)."""
    x = model.graph.input[0]
    dtype = helper.tensor_dtype_to_np_dtype(x.type.tensor_type.elem_type)
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    result, tally = legalize(model)
    ops = [n.op_type for n in result.model.graph.node]
    assert "Resize" not in ops and result.modified
    assert [(t.op_type, t.count) for t in tally] == [("Resize", 1)]
    feeds = {"x": _data(shape, dtype, seed), **{k: np.array(v, np.float32) for k, v in inputs.items()}}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = ReferenceEvaluator(result.model).run(None, feeds)[0]
    assert got.dtype == want.dtype
    # Integers: linear/cubic round the float32 result half to even, as the reference does its float64
    # one, so a value one side of a tie in one and on it in the other lands one step apart.
    exact = (0.0, 0.0) if "Round" not in ops else (0.0, 1.0)
    rtol, atol = _TOL.get(np.dtype(dtype), (1e-5, 1e-5) if np.dtype(dtype).kind == "f" else exact)
    c = compare(got, want, rtol=rtol, atol=atol)   # also fails on a NaN or an infinity the reference lacks
    assert c.ok, c.describe()
    return ops, tally[0].reason


FAILS_TO_COMPILE = {   # name: (model arguments, ops the rewrite must use)
    "nearest_axes_3_2": (dict(shape=[1, 1, 2, 2], sizes=[8, 7], axes=[3, 2], mode="nearest"), {"Gather"}),
    "nearest_scales_axes_2_3": (dict(shape=[1, 1, 2, 2], scales=[2.0, 3.0], axes=[2, 3], mode="nearest"), {"Gather"}),
    "nearest_not_larger": (dict(shape=[1, 1, 2, 4], sizes=[1, 3], axes=[2, 3], mode="nearest",
                                keep_aspect_ratio_policy="not_larger"), {"Gather"}),
    "nearest_not_smaller": (dict(shape=[1, 1, 2, 2], sizes=[7, 8], axes=[2, 3], mode="nearest",
                                 keep_aspect_ratio_policy="not_smaller"), {"Gather"}),
    "nearest_align_corners_floor": (dict(shape=[1, 1, 4, 4], sizes=[1, 1, 8, 8], mode="nearest", nearest_mode="floor",
                                         coordinate_transformation_mode="align_corners"), {"Gather"}),
    "nearest_pytorch_half_pixel_down": (dict(shape=[1, 2, 8, 8], scales=[1, 1, 0.3, 0.3], mode="nearest",
                                             coordinate_transformation_mode="pytorch_half_pixel"), {"Gather"}),
    "nearest_int64_half_pixel_symmetric": (dict(shape=[1, 2, 5, 5], dtype=np.int64, scales=[1, 1, 1.7, 1.7],
                                                mode="nearest", coordinate_transformation_mode="half_pixel_symmetric"),
                                           {"Gather"}),
    "nearest_channel_axis": (dict(shape=[1, 2, 3, 3], scales=[1, 2, 1, 1], mode="nearest"), {"Gather"}),
    "nearest_tf_crop_uint8_extrapolated": (dict(shape=[1, 1, 6, 6], dtype=np.uint8, sizes=[1, 1, 5, 5],
                                                roi=[0, 0, -0.2, 0.1, 1, 1, 1.3, 0.9], mode="nearest",
                                                coordinate_transformation_mode="tf_crop_and_resize",
                                                extrapolation_value=7.0), {"Gather", "Where"}),
    "linear_tf_crop_extrapolated": (dict(shape=[1, 1, 4, 4], sizes=[1, 1, 3, 3],
                                         roi=[0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7], mode="linear",
                                         coordinate_transformation_mode="tf_crop_and_resize",
                                         extrapolation_value=10.0), {"MatMul", "Where"}),
    "linear_tf_crop_axes_3_2": (dict(shape=[1, 1, 4, 4], sizes=[3, 3], roi=[0.6, 0.4, 0.8, 0.6], axes=[3, 2],
                                     mode="linear", coordinate_transformation_mode="tf_crop_and_resize"), {"MatMul"}),
    "cubic_tf_crop_taps": (dict(shape=[1, 2, 24, 24], sizes=[1, 2, 30, 20], roi=[0, 0, -0.2, 0.1, 1, 1, 1.3, 0.9],
                                mode="cubic", coordinate_transformation_mode="tf_crop_and_resize",
                                extrapolation_value=-3.0), {"Gather", "Sum", "Where"}),
    "cubic_exclude_outside": (dict(shape=[1, 1, 4, 4], scales=[1, 1, 0.8, 0.8], mode="cubic", exclude_outside=1,
                                   cubic_coeff_a=-0.5), {"MatMul"}),
    "cubic_exclude_outside_taps": (dict(shape=[1, 2, 32, 32], scales=[1, 1, 2, 2], mode="cubic", exclude_outside=1,
                                        cubic_coeff_a=-0.5), {"Gather", "Mul", "Sum"}),
    "cubic_coeff_a": (dict(shape=[1, 1, 4, 4], scales=[1, 1, 2, 2], mode="cubic", cubic_coeff_a=-0.5), {"MatMul"}),
    "linear_antialias_taps": (dict(shape=[1, 2, 64, 64], scales=[1, 1, 0.25, 0.25], mode="linear", antialias=1),
                              {"Gather", "Sum"}),
    "linear_antialias_wide": (dict(shape=[1, 2, 64, 64], sizes=[1, 2, 7, 7], mode="linear", antialias=1), {"MatMul"}),
    "cubic_antialias": (dict(shape=[1, 1, 4, 4], sizes=[1, 1, 3, 3], mode="cubic", antialias=1), {"MatMul"}),
    "linear_float16_taps": (dict(shape=[1, 3, 40, 40], dtype=np.float16, scales=[1, 1, 2, 2], mode="linear"),
                            {"Cast", "Gather", "Sum"}),
    "linear_bfloat16": (dict(shape=[1, 1, 4, 4], dtype=ml_dtypes.bfloat16, scales=[1, 1, 2, 2], mode="linear"),
                        {"Cast", "MatMul"}),
    "cubic_float64": (dict(shape=[1, 1, 4, 4], dtype=np.float64, scales=[1, 1, 2, 2], mode="cubic"), {"MatMul"}),
    "linear_int8": (dict(shape=[1, 1, 4, 4], dtype=np.int8, scales=[1, 1, 2, 2], mode="linear"),
                    {"Cast", "Round", "Clip"}),
    "linear_uint8_taps": (dict(shape=[1, 3, 20, 20], dtype=np.uint8, scales=[1, 1, 1.5, 1.5], mode="linear"),
                          {"Cast", "Round", "Clip", "Sum"}),
    "linear_rank5": (dict(shape=[1, 2, 3, 3, 3], scales=[1, 1, 2, 2, 2], mode="linear"), {"Reshape", "MatMul"}),
    "linear_rank3": (dict(shape=[1, 2, 4], scales=[1, 1, 2], mode="linear"), {"MatMul"}),
    "linear_rank2": (dict(shape=[4, 4], scales=[2, 2], mode="linear"), {"MatMul"}),
    "linear_channel_axis": (dict(shape=[1, 2, 3, 3], scales=[1, 2, 1, 1], mode="linear"), {"Reshape", "MatMul"}),
}


@pytest.mark.parametrize("name", FAILS_TO_COMPILE)
def test_variants_iree_cannot_lower_are_rewritten_and_compute_the_same(name):
    arguments, uses = FAILS_TO_COMPILE[name]
    ops, reason = _rewritten_computes_the_same(_model(**arguments))
    assert uses <= set(ops), ops
    assert "cannot lower" in reason


@pytest.mark.parametrize("arguments", [
    dict(shape=[1, 1, 2, 4], scales=[1, 1, 0.6, 0.6], mode="linear"),                 # node test: max abs diff 0.86
    dict(shape=[1, 1, 4, 4], scales=[1, 1, 0.8, 0.8], mode="cubic"),                  # node test: 1.05
    dict(shape=[1, 3, 41, 41], scales=[1, 1, 1.7, 1.7], mode="linear"),               # upsampling too; taps
], ids=["linear_down", "cubic_down", "linear_up_taps"])
def test_align_corners_where_size_times_scale_is_not_whole_is_rewritten(arguments):
    model = _model(coordinate_transformation_mode="align_corners", **arguments)
    ops, reason = _rewritten_computes_the_same(model)
    assert "wrongly" in reason and "align_corners" in reason


def test_a_runtime_roi_matters_only_to_tf_crop_and_resize():
    _rewritten_computes_the_same(_model([1, 1, 2, 2], scales=[2.0, 3.0], roi=[0, 0, 1, 1], axes=[2, 3], mode="nearest",
                                        runtime=("roi",)), roi=[0, 0, 1, 1])
    crop = _model([1, 1, 4, 4], sizes=[3, 3], roi=[0.4, 0.6, 0.6, 0.8], axes=[2, 3], mode="linear",
                  coordinate_transformation_mode="tf_crop_and_resize", runtime=("roi",))
    assert not legalize(crop)[0].modified


def test_nearest_is_gathers_only_and_shrinking_axes_go_first():
    ops, _ = _rewritten_computes_the_same(_model([1, 64, 80, 80], scales=[1, 1, 2, 0.5], mode="nearest",
                                                 coordinate_transformation_mode="pytorch_half_pixel"))
    assert ops == ["Gather", "Gather", "Identity"]
    model = _model([1, 64, 80, 80], scales=[1, 1, 2, 0.5], mode="nearest", coordinate_transformation_mode="align_corners")
    gathers = [n for n in legalize(model)[0].model.graph.node if n.op_type == "Gather"]
    assert [helper.get_attribute_value(n.attribute[0]) for n in gathers] == [3, 2]


def test_bilinear_2x_on_a_feature_map_is_a_few_large_ops():
    """Two taps per axis, each a Gather and a Mul, summed: O(1) work per output, not a dense
    80 x 160 product per axis."""
    ops, _ = _rewritten_computes_the_same(_model([1, 64, 80, 80], scales=[2, 2], axes=[2, 3], mode="linear"))
    assert "MatMul" not in ops and ops.count("Gather") == 4 and ops.count("Sum") == 2 and len(ops) <= 11
    ops, _ = _rewritten_computes_the_same(_model([1, 64, 80, 80], dtype=np.float16, scales=[1, 1, 2, 2], mode="linear"))
    assert "MatMul" not in ops and ops.count("Gather") == 4 and ops.count("Cast") == 2


@pytest.mark.parametrize("arguments", [
    dict(shape=[1, 1, 2, 2], scales=[1, 1, 2, 3], mode="nearest"),
    dict(shape=[1, 1, 2, 4], scales=[1, 1, 0.6, 0.6], mode="nearest"),
    dict(shape=[1, 1, 4, 4], sizes=[1, 1, 8, 8], mode="nearest", nearest_mode="ceil"),
    dict(shape=[1, 1, 4, 4], sizes=[1, 1, 8, 8], mode="nearest", nearest_mode="round_prefer_ceil",
         coordinate_transformation_mode="asymmetric"),
    dict(shape=[1, 1, 2, 2], dtype=np.int32, scales=[1, 1, 2, 2], mode="nearest"),
    dict(shape=[1, 1, 2, 2, 2], scales=[1, 1, 2, 2, 2], mode="nearest"),
    dict(shape=[1, 64, 80, 80], scales=[1, 1, 2, 2], mode="linear"),
    dict(shape=[1, 1, 4, 4], sizes=[1, 1, 3, 1], mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    dict(shape=[1, 1, 2, 2], scales=[1, 1, 2.3, 2.94], mode="linear", coordinate_transformation_mode="half_pixel_symmetric"),
    dict(shape=[1, 1, 4, 4], scales=[1, 1, 2, 2], mode="cubic", coordinate_transformation_mode="asymmetric"),
    dict(shape=[1, 1, 4, 4], scales=[1, 1, 2, 2], mode="cubic", coordinate_transformation_mode="align_corners"),
    dict(shape=[1, 1, 4, 4], sizes=[1, 1, 3, 3], mode="linear", coordinate_transformation_mode="align_corners"),
])
def test_variants_iree_lowers_right_are_left_to_it(arguments):
    result, tally = legalize(_model(**arguments))
    assert not result.modified and not tally


@pytest.mark.parametrize("arguments", [
    dict(shape=[1, 1, 2, 2], scales=[2.0, 3.0], axes=[2, 3], mode="nearest", runtime=("scales",)),
    dict(shape=[1, 1, 4, 4], dtype=np.int32, scales=[1, 1, 2, 2], mode="linear"),   # float32 cannot hold int32
    dict(shape=[1, 1, 2, 2], scales=[1, 1, 2, 2], mode="nearest", opset=10),         # Resize-10: (x, scales)
], ids=["runtime_scales", "linear_int32", "resize_10"])
def test_what_cannot_be_computed_at_build_time_is_left_alone(arguments):
    result, tally = legalize(_model(**arguments))
    assert not result.modified and not tally


_SWEEP = [(mode, transform, nearest, exclude, antialias, n, scale)
          for mode, nearest, antialias in (("nearest", "round_prefer_floor", 0), ("nearest", "round_prefer_ceil", 0),
                                           ("nearest", "floor", 0), ("nearest", "ceil", 0), ("linear", None, 0),
                                           ("linear", None, 1), ("cubic", None, 0), ("cubic", None, 1))
          for transform in ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                            "tf_crop_and_resize")
          for exclude, (n, scale) in itertools.product((0, 1), ((1, 3.0), (5, 0.3), (5, 1.7), (12, 0.7), (7, 2.0)))]


def test_every_mode_transform_and_option_matches_the_reference():
    """A sweep over 1-D resizes of a rank-2 tensor (which IREE never lowers): the copied neighbour
    choice, exclude_outside and the extrapolation agree with onnx's reference in every combination."""
    for mode, transform, nearest, exclude, antialias, n, scale in _SWEEP:
        attributes = dict(mode=mode, coordinate_transformation_mode=transform, exclude_outside=exclude,
                          antialias=antialias, **({"nearest_mode": nearest} if nearest else {}))
        roi = [0, -0.3, 1, 1.2] if transform == "tf_crop_and_resize" else None
        model = _model([3, n], scales=[1, scale], roi=roi, **attributes)
        try:
            _rewritten_computes_the_same(model, seed=n)
        except AssertionError as e:
            raise AssertionError(f"{attributes}, n={n}, scale={scale}: {e}") from e
