"""DFT as a MatMul with a constant cos/sin matrix (frontend/legalize/dft.py): every variant the
standard defines, compared with onnx's reference implementation (the one the node tests' expected
outputs come from; it reads inverse + onesided as numpy's irfft)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aot.checks.compare import assert_close
from aot.frontend.legalize import legalize

_F = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}


def _model(shape, opset, dtype=np.float32, axis=None, dft_length=None, **attributes):
    inputs = ["x", "n" if dft_length is not None else ""]
    inits = [numpy_helper.from_array(np.array(dft_length, np.int64), "n")] if dft_length is not None else []
    if opset >= 20 and axis is not None:
        inputs.append("axis")
        inits.append(numpy_helper.from_array(np.array(axis, np.int64), "axis"))
    elif axis is not None:
        attributes["axis"] = axis
    node = helper.make_node("DFT", inputs, ["y"], name="dft", **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", _F[dtype], shape)],
                              [helper.make_tensor_value_info("y", _F[dtype], None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _check(model, shape, dtype=np.float32, rtol=1e-5, atol=1e-4):
    result, tally = legalize(model)
    assert result.modified and [t.op_type for t in tally] == ["DFT"]
    assert "DFT" not in {n.op_type for n in result.model.graph.node}
    onnx.checker.check_model(result.model, full_check=True)
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = ReferenceEvaluator(result.model).run(None, {"x": x})[0]
    assert got.dtype == want.dtype
    assert_close(got, want, rtol=rtol, atol=atol)
    # the legalized output keeps the declared shape
    declared = [d.dim_value for d in result.model.graph.output[0].type.tensor_type.shape.dim]
    assert declared == list(want.shape)


# The (signal parts, inverse, onesided) combinations onnx's shape inference accepts: a one-sided
# forward DFT takes a real signal, an inverse one-sided (irfft) a complex one.
_VARIANTS = [(1, 0, 0), (2, 0, 0), (1, 0, 1), (1, 1, 0), (2, 1, 0), (2, 1, 1)]


@pytest.mark.parametrize("opset", [19, 20])
@pytest.mark.parametrize("parts,inverse,onesided", _VARIANTS)
def test_every_variant_matches_the_reference(opset, parts, inverse, onesided):
    shape = (2, 7, 3, parts) if not (inverse and onesided) else (2, 4, 3, parts)
    _check(_model(shape, opset, axis=1, inverse=inverse, onesided=onesided), shape)


@pytest.mark.parametrize("n", [4, 7, 12])
@pytest.mark.parametrize("parts,inverse,onesided", _VARIANTS)
def test_dft_length_pads_or_truncates(n, parts, inverse, onesided):
    shape = (3, 7, parts)
    _check(_model(shape, 20, axis=-2, dft_length=n, inverse=inverse, onesided=onesided), shape)


@pytest.mark.parametrize("axis", [0, 2, -2])
def test_any_axis_but_the_last(axis):
    shape = (5, 3, 6, 1)
    _check(_model(shape, 20, axis=axis), shape)
    _check(_model(shape, 19, axis=axis % 4), shape)


def test_default_axis_per_opset():
    shape = (2, 5, 6, 2)
    _check(_model(shape, 20), shape)     # axis -2
    _check(_model(shape, 17), shape)     # axis 1


def test_float64_and_float16():
    shape = (2, 8, 2)
    _check(_model(shape, 20, dtype=np.float64, axis=1), shape, np.float64, rtol=1e-12, atol=1e-12)
    # float16 accumulates in float32: within float16 rounding of the outputs
    _check(_model(shape, 20, dtype=np.float16, axis=1), shape, np.float16, rtol=2e-3, atol=1e-2)


def test_non_constant_dft_length_is_left_alone():
    node = helper.make_node("DFT", ["x", "n"], ["y"], name="dft")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 8, 1)),
                                            helper.make_tensor_value_info("n", TensorProto.INT64, ())],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    result, tally = legalize(onnx.shape_inference.infer_shapes(model))
    assert not result.modified and tally == ()


def test_the_matrix_is_the_textbook_kernel():
    from aot.frontend.legalize.dft import matrix
    w = matrix(4, 1, 4, inverse=False, onesided=False).reshape(4, 4, 2)
    want = np.exp(-2j * np.pi * np.outer(np.arange(4), np.arange(4)) / 4)
    assert_close(w[..., 0] + 1j * w[..., 1], want, atol=1e-15)
