"""Casts to and from float8 through float32 (frontend/legalize/narrow_cast.py), compared bit for bit
with onnx's reference implementation (the one the node tests' expected outputs come from): every
float16 and float8 value, float32 values around each type's largest finite value and its rounding
midpoints, infinities, NaN and signed zeros."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aot.frontend.legalize import legalize
from aot.frontend.legalize.narrow_cast import FLOAT8_MAX

_FLOAT8 = sorted(FLOAT8_MAX)
_NP = {T.FLOAT: np.dtype(np.float32), T.FLOAT16: np.dtype(np.float16), T.DOUBLE: np.dtype(np.float64),
       T.BFLOAT16: np.dtype(ml_dtypes.bfloat16), **{t: np.dtype(helper.tensor_dtype_to_np_dtype(t)) for t in _FLOAT8}}


def _cast_model(op: str, src: int, dst: int, n: int, **attributes) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", src, (n,))]
    inits = []
    if op == "CastLike":
        inits.append(numpy_helper.from_array(np.zeros((0,), _NP[dst]), "like"))
        node = helper.make_node("CastLike", ["x", "like"], ["y"], name="cast", **attributes)
    else:
        node = helper.make_node("Cast", ["x"], ["y"], name="cast", to=dst, **attributes)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", dst, (n,))], inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)]),
                                             strict_mode=True)


def every_value(dtype: np.dtype) -> np.ndarray:
    """Every bit pattern of a 8- or 16-bit float type."""
    return np.arange(1 << (8 * dtype.itemsize), dtype=np.uint16 if dtype.itemsize == 2 else np.uint8).view(dtype)


def float32_probes(float8: int) -> np.ndarray:
    """Random float32 values plus every float8 value, the midpoints between neighbours (the ties
    that round to even), their float32 neighbours, and values around the largest finite one."""
    grid = np.unique(every_value(_NP[float8]).astype(np.float32))
    grid = grid[np.isfinite(grid)]
    mid = (grid[:-1] + grid[1:]) / 2   # exact in float32: float8 has far fewer bits
    near = np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))])
    top = np.float32(FLOAT8_MAX[float8])
    edge = np.array([top, top * 1.01, top * 1.1, top * 2, 1e6, 3e38, np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-7, -1e-7,
                     1e-30, -1e-30], np.float32)
    rng = np.random.default_rng(float8)
    noise = (rng.standard_normal(2000) * np.exp2(rng.integers(-20, 20, 2000))).astype(np.float32)
    values = np.concatenate([grid, near, edge, -edge, noise])
    return values.astype(np.float32)


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    """Equal bit for bit, except that any NaN matches any NaN (both sides must be NaN there)."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    g, w = got.astype(np.float32), want.astype(np.float32)
    nan = np.flatnonzero(np.isnan(g) != np.isnan(w))
    assert not nan.size, f"{what}: NaN differs at {nan[:5]}: {g[nan[:5]]} where the reference has {w[nan[:5]]}"
    keep = ~np.isnan(w)
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    bad = np.flatnonzero(got[keep].view(bits) != want[keep].view(bits))
    assert not bad.size, (f"{what}: {bad.size} differ, e.g. {g[keep][bad[:5]]} where the reference has "
                          f"{w[keep][bad[:5]]}")


def _legalized_matches(model: onnx.ModelProto, x: np.ndarray) -> onnx.ModelProto:
    result, tally = legalize(model)
    assert result.changed == 1 and [t.op_type for t in tally] == [model.graph.node[0].op_type]
    onnx.checker.check_model(result.model, full_check=True)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = ReferenceEvaluator(result.model).run(None, {"x": x})[0]
    assert_same_bits(got, want)
    return result.model


@pytest.mark.parametrize("float8", _FLOAT8)
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("op", ["Cast", "CastLike"])
@pytest.mark.parametrize("src", [T.FLOAT16, T.BFLOAT16, T.FLOAT])
def test_a_cast_to_float8_narrows_from_float32_and_saturates_with_a_clip(float8, saturate, op, src):
    x = every_value(_NP[src]) if src != T.FLOAT else float32_probes(float8)
    rewritten = _legalized_matches(_cast_model(op, src, float8, x.size, saturate=saturate), x)
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops[-1] == "CastLike" and ("Clip" in ops) == bool(saturate) and "Cast" not in ops[1:]
    assert helper.get_attribute_value(rewritten.graph.node[-1].attribute[0]) == 0   # saturate=0: what IREE does


@pytest.mark.parametrize("float8", _FLOAT8)
@pytest.mark.parametrize("dst", [T.FLOAT16, T.BFLOAT16, T.DOUBLE])
@pytest.mark.parametrize("op", ["Cast", "CastLike"])
def test_a_cast_from_float8_widens_through_float32(float8, dst, op):
    x = every_value(_NP[float8])
    rewritten = _legalized_matches(_cast_model(op, float8, dst, x.size), x)
    assert [n.op_type for n in rewritten.graph.node if n.op_type == "Cast"] == ["Cast", "Cast"]


def test_e4m3fn_to_float32_gets_its_negative_nan_back():
    x = every_value(_NP[T.FLOAT8E4M3FN])
    rewritten = _legalized_matches(_cast_model("Cast", T.FLOAT8E4M3FN, T.FLOAT, x.size), x)
    assert rewritten.graph.node[-1].op_type == "Where" and rewritten.graph.node[-1].output[0] == "y"


def test_float8_between_float8_types_goes_through_float32():
    x = every_value(_NP[T.FLOAT8E5M2])
    _legalized_matches(_cast_model("Cast", T.FLOAT8E5M2, T.FLOAT8E4M3FN, x.size), x)


@pytest.mark.parametrize("src,dst", [(T.DOUBLE, T.FLOAT8E4M3FN), (T.INT32, T.FLOAT8E5M2), (T.FLOAT8E5M2, T.FLOAT),
                                     (T.FLOAT, T.FLOAT16), (T.FLOAT8E5M2, T.INT32)])
def test_casts_iree_handles_or_that_would_round_twice_are_left_alone(src, dst):
    result, tally = legalize(_cast_model("Cast", src, dst, 4))
    assert not result.modified and tally == ()


def test_rewriting_twice_changes_no_value():
    x = every_value(_NP[T.FLOAT16])
    once, _ = legalize(_cast_model("Cast", T.FLOAT16, T.FLOAT8E4M3FNUZ, x.size))
    twice, tally = legalize(onnx.shape_inference.infer_shapes(once.model))
    assert [t.op_type for t in tally] == ["CastLike"]   # the emitted narrowing, fixed again
    assert_same_bits(ReferenceEvaluator(twice.model).run(None, {"x": x})[0],
                     ReferenceEvaluator(once.model).run(None, {"x": x})[0])


@pytest.mark.device   # compiles with IREE: its own conversions, not the reference's, are what run
@pytest.mark.parametrize("accel", ["none", "vulkan"])   # llvm-cpu; lavapipe runs float8 casts on the device
def test_iree_computes_every_float8_cast_bit_for_bit(tmp_path, accel):
    """The node tests hold 15 values each; this holds every float16 value (to each float8 type,
    saturating or not), float32 values around every rounding midpoint (CastLike, saturating or
    not) and every float8 value (back to float16 and float32)."""
    import aot
    from aot import runtime
    from aot.options import BuildOptions
    from aot.partition.plan import GateMode
    from aot.runtime.target import Target

    x16 = every_value(np.dtype(np.float16))
    nodes, outputs, likes, feeds = [], [], [], {"x16": x16}
    inputs = [helper.make_tensor_value_info("x16", T.FLOAT16, x16.shape)]
    for t in _FLOAT8:
        name = T.DataType.Name(t)
        for saturate in (1, 0):
            nodes.append(helper.make_node("Cast", ["x16"], [f"{name}_{saturate}"], to=t, saturate=saturate))
            outputs.append(helper.make_tensor_value_info(f"{name}_{saturate}", t, x16.shape))
        x32 = float32_probes(t)
        feeds[f"x32_{name}"] = x32
        inputs.append(helper.make_tensor_value_info(f"x32_{name}", T.FLOAT, x32.shape))
        like = numpy_helper.from_array(np.zeros((0,), _NP[t]), f"like_{name}")
        likes.append(like)
        for saturate in (1, 0):
            nodes.append(helper.make_node("CastLike", [f"x32_{name}", like.name], [f"{name}_f32_{saturate}"],
                                          saturate=saturate))
            outputs.append(helper.make_tensor_value_info(f"{name}_f32_{saturate}", t, x32.shape))
        feeds[f"in_{name}"] = every_value(_NP[t])
        inputs.append(helper.make_tensor_value_info(f"in_{name}", t, (256,)))
        for wide in (T.FLOAT16, T.FLOAT):
            nodes.append(helper.make_node("Cast", [f"in_{name}"], [f"back_{name}_{wide}"], to=wide))
            outputs.append(helper.make_tensor_value_info(f"back_{name}_{wide}", wide, (256,)))
    model = helper.make_model(helper.make_graph(nodes, "casts", inputs, outputs, likes),
                              opset_imports=[helper.make_opsetid("", 24)])
    path = tmp_path / "casts.onnx"
    onnx.save(model, str(path))
    want = ReferenceEvaluator(model).run(None, feeds)
    target = None if accel == "none" else Target.parse(accel)
    # verify=False: the build's check feeds float8 region inputs to onnxruntime, which takes no
    # ml_dtypes array ("Numpy_type 260 can't be converted"); this test is the check
    options = BuildOptions(accel=target, min_compute=1, gate=GateMode.OFF, verify=False)
    result = aot.build(path, tmp_path / "out", options)
    if target is not None:   # the casts ran on the device, not on the host
        assert {r.target.backend for r in result.bundle.manifest.regions} == {"vulkan-spirv"}
    with runtime.load(result.bundle.path) as session:
        got = session.run(feeds)
    for g, w, out in zip(got, want, outputs):
        assert_same_bits(np.asarray(g), w, out.name)
