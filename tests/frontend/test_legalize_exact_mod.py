"""Mod as an exact float64 long division (frontend/legalize/exact_mod.py), compared bit for bit with
numpy's fmod (fmod=1) and mod (fmod=0), which onnx's reference computes: doubles drawn from every
exponent, quotients up to 2**2098, subnormals, DBL_MAX, signed zeros, infinities and NaN."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto as T
from onnx import helper
from onnx.reference import ReferenceEvaluator

from aot.frontend.legalize import legalize
from aot.frontend.legalize.unlowerable import unlowerable_nodes

_MAX = np.finfo(np.float64).max
_SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 5e-324, -5e-324, _MAX, -_MAX, 2.0 ** -1022,
                     2.0 ** 1023, 0.1, -0.1, 3.0, 1e17 + 3, 2.0 ** 53 + 1, 1e300, 1e-300, 7.0, -7.5])


def _mod(fmod: int, x_shape=("n",), y_shape=("n",), dtype=T.DOUBLE) -> onnx.ModelProto:
    node = helper.make_node("Mod", ["x", "y"], ["z"], name="remainder", fmod=fmod)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, x_shape),
                                            helper.make_tensor_value_info("y", dtype, y_shape)],
                              [helper.make_tensor_value_info("z", dtype, None)])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]))


@functools.lru_cache(maxsize=None)
def _evaluators(fmod: int) -> tuple[ReferenceEvaluator, ReferenceEvaluator]:
    model = _mod(fmod)
    result, tally = legalize(model)
    assert [t.op_type for t in tally] == ["Mod"] and "Mod" not in {n.op_type for n in result.model.graph.node}
    return ReferenceEvaluator(model), ReferenceEvaluator(result.model)


def assert_same_bits(got: np.ndarray, want: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    """Equal bit for bit (the sign of a zero included); NaN exactly where the reference has NaN."""
    x, y = np.broadcast_arrays(x, y)
    assert got.dtype == want.dtype == np.float64 and got.shape == want.shape
    nan = np.isnan(got) != np.isnan(want)
    bad = np.flatnonzero(nan | (~np.isnan(want) & (got.view(np.uint64) != want.view(np.uint64))))
    examples = [f"{x.flat[i]!r} mod {y.flat[i]!r}: {got.flat[i]!r}, reference {want.flat[i]!r}" for i in bad[:5]]
    assert not bad.size, f"{bad.size} differ: " + "; ".join(examples)


def _check(fmod: int, x: np.ndarray, y: np.ndarray) -> None:
    original, rewritten = _evaluators(fmod)
    with np.errstate(all="ignore"):
        want = original.run(None, {"x": x, "y": y})[0]
        got = rewritten.run(None, {"x": x, "y": y})[0]
    assert_same_bits(got, want, x, y)


def every_exponent(n: int, seed: int) -> np.ndarray:
    """Finite doubles with uniformly random bit patterns: every exponent equally likely."""
    bits = np.random.default_rng(seed).integers(0, 0x7FF0_0000_0000_0000, n, dtype=np.uint64)
    signs = np.random.default_rng(seed + 1).integers(0, 2, n, dtype=np.uint64) << np.uint64(63)
    return (bits | signs).view(np.float64)


def hard_pairs() -> tuple[np.ndarray, np.ndarray]:
    """Pairs where an inexact step would show: exact multiples and their neighbours, quotients
    just below and above powers of two and of the 25-bit digit, dividends in the top binade."""
    rng = np.random.default_rng(7)
    y = every_exponent(3000, 3)
    y = y[np.abs(y) < 2.0 ** 1000]
    k = np.ldexp(1.0, rng.integers(0, 1000, y.size)) * rng.integers(1, 1 << 20, y.size)
    with np.errstate(over="ignore"):   # a multiple beyond DBL_MAX is inf: a special value, also checked
        multiple = np.abs(y) * k
    xs = [multiple, np.nextafter(multiple, np.inf), np.nextafter(multiple, 0), -multiple,
          np.abs(y) * (2.0 ** 25 - 0.5), np.abs(y) * 2.0 ** 25, np.full(y.size, _MAX), -np.full(y.size, _MAX) / 1.5]
    x = np.concatenate(xs)
    return x, np.tile(y, len(xs))


@pytest.mark.parametrize("fmod", [1, 0])
def test_random_doubles_of_every_magnitude_match_numpy_bit_for_bit(fmod):
    x, y = every_exponent(20000, 1), every_exponent(20000, 2)
    _check(fmod, x, y)
    rng = np.random.default_rng(5)
    moderate = rng.standard_normal((2, 20000)) * np.exp2(rng.integers(-60, 60, (2, 20000)))
    _check(fmod, moderate[0], moderate[1])


@pytest.mark.parametrize("fmod", [1, 0])
def test_hard_pairs_and_special_values_match_numpy_bit_for_bit(fmod):
    _check(fmod, *hard_pairs())
    x, y = np.meshgrid(_SPECIAL, _SPECIAL)
    _check(fmod, x.ravel(), y.ravel())


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float64, st.integers(1, 32), elements=st.floats(width=64)),
       hnp.arrays(np.float64, 1, elements=st.floats(width=64)), st.sampled_from([0, 1]))
def test_any_doubles_match_numpy(x, y, fmod):
    _check(fmod, x, np.broadcast_to(y, x.shape).copy())


def test_broadcasting_keeps_the_shape():
    model = _mod(0, (3, 4), (4,))
    result, _ = legalize(model)
    x, y = every_exponent(12, 9).reshape(3, 4), np.array([3.0, -0.5, 1e-300, -1e300])
    with np.errstate(all="ignore"):
        got = ReferenceEvaluator(result.model).run(None, {"x": x, "y": y})[0]
    assert_same_bits(got, np.mod(x, y), x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_narrow_truncated_remainder_is_the_float64_one(dtype):
    """IREE's float32 fmod=1 is x - y * trunc(x / y) in float32; through float64 it is exact."""
    elem = {np.float32: T.FLOAT, np.float16: T.FLOAT16}[dtype]
    bits = np.uint32 if dtype == np.float32 else np.uint16
    rng = np.random.default_rng(11)
    x, y = (rng.integers(0, np.iinfo(bits).max, 20000, dtype=bits, endpoint=True).view(dtype) for _ in range(2))
    model = _mod(1, ("n",), ("n",), elem)
    result, tally = legalize(model)
    assert [t.op_type for t in tally] == ["Mod"] and result.model.graph.node[-1].op_type == "Cast"
    with np.errstate(all="ignore"):
        got = ReferenceEvaluator(result.model).run(None, {"x": x, "y": y})[0]
        want = np.fmod(x, y)
    assert got.dtype == want.dtype
    wide = {np.float32: np.uint32, np.float16: np.uint16}[dtype]
    bad = np.flatnonzero((np.isnan(got) != np.isnan(want)) | (~np.isnan(want) & (got.view(wide) != want.view(wide))))
    assert not bad.size, [(x[i], y[i], got[i], want[i]) for i in bad[:5]]


@pytest.mark.parametrize("dtype", [T.FLOAT, T.FLOAT16, T.INT64])
def test_other_types_are_left_to_iree(dtype):
    """float32 and float16 fmod=0 link fmodf, which is exact; integers are IREE's."""
    result, tally = legalize(_mod(0, (6,), (6,), dtype))
    assert not result.modified and tally == ()


@pytest.mark.parametrize("fmod", [0, 1])
def test_a_exact_mod_is_no_longer_refused(fmod):
    assert unlowerable_nodes(_mod(fmod, (6,), (6,))) == []


@pytest.mark.device   # compiles with IREE (llvm-cpu): its float64 arithmetic must keep every step exact
def test_iree_computes_the_exact_remainder(tmp_path):
    """Fused into one dispatch, the splitting and the exact subtractions must survive IREE's and
    LLVM's optimisations (no reassociation, no contraction that changes a result), and no step may
    pass through a subnormal, which IREE flushes to zero."""
    import aot
    from aot import runtime
    from aot.options import BuildOptions

    hx, hy = hard_pairs()
    sx, sy = (v.ravel() for v in np.meshgrid(_SPECIAL, _SPECIAL))
    x = np.concatenate([every_exponent(20000, 1), hx, sx])
    y = np.concatenate([every_exponent(20000, 2), hy, sy])
    nodes = [helper.make_node("Mod", ["x", "y"], ["floored"], fmod=0),
             helper.make_node("Mod", ["x", "y"], ["truncated"], fmod=1)]
    graph = helper.make_graph(nodes, "mods", [helper.make_tensor_value_info(n, T.DOUBLE, x.shape) for n in "xy"],
                              [helper.make_tensor_value_info(n, T.DOUBLE, x.shape) for n in ("floored", "truncated")])
    path = tmp_path / "mod.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]), str(path))
    result = aot.build(path, tmp_path / "out", BuildOptions(accel=None))
    with runtime.load(result.bundle.path) as session:
        floored, truncated = session.run({"x": x, "y": y})
    # IREE's float64 arithmetic flushes subnormals to zero (a plain Mul does too), so pairs with a
    # subnormal operand or result are left out; every other one must be exact
    def normal(v: np.ndarray) -> np.ndarray:
        return ~((v != 0) & (np.abs(v) < np.finfo(np.float64).tiny))

    for got, reference in ((truncated, np.fmod), (floored, np.mod)):
        with np.errstate(all="ignore"):
            want = reference(x, y)
        keep = normal(x) & normal(y) & normal(want)
        assert keep.sum() > 0.95 * x.size
        assert_same_bits(np.asarray(got)[keep], want[keep], x[keep], y[keep])


@pytest.mark.device   # compiles with IREE (llvm-cpu)
def test_iree_computes_the_exact_float32_truncated_remainder(tmp_path):
    """Measured before the rewrite: 3,543 of these 20,000 pairs came out wrong."""
    import aot
    from aot import runtime
    from aot.options import BuildOptions

    rng = np.random.default_rng(0)
    x, y = ((rng.standard_normal(20000) * np.exp2(rng.integers(-30, 30, 20000))).astype(np.float32) for _ in range(2))
    bits = np.random.default_rng(1).integers(0, 0xFFFFFFFF, (2, 20000), dtype=np.uint32, endpoint=True).view(np.float32)
    x, y = np.concatenate([x, bits[0]]), np.concatenate([y, bits[1]])
    graph = helper.make_graph([helper.make_node("Mod", ["x", "y"], ["z"], fmod=1)], "mod",
                              [helper.make_tensor_value_info(n, T.FLOAT, x.shape) for n in "xy"],
                              [helper.make_tensor_value_info("z", T.FLOAT, x.shape)])
    path = tmp_path / "mod.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]), str(path))
    result = aot.build(path, tmp_path / "out", BuildOptions(accel=None))
    with runtime.load(result.bundle.path) as session:
        (got,) = session.run({"x": x, "y": y})
    with np.errstate(all="ignore"):
        want = np.fmod(x, y)
    tiny = np.finfo(np.float32).tiny   # IREE flushes float32 subnormals too
    keep = ~(((x != 0) & (np.abs(x) < tiny)) | ((y != 0) & (np.abs(y) < tiny)) | ((want != 0) & (np.abs(want) < tiny)))
    got, want = np.asarray(got)[keep], want[keep]
    differ = ~np.isnan(want) & (got.view(np.uint32) != want.view(np.uint32))
    bad = np.flatnonzero((np.isnan(got) != np.isnan(want)) | differ)
    assert not bad.size, [(x[keep][i], y[keep][i], got[i], want[i]) for i in bad[:5]]
