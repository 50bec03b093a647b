"""ScatterElements reduction max/min as a masked reduction and an elementwise Max/Min
(frontend/legalize/scatter_minmax.py), against onnxruntime and onnx's reference; the reductions
IREE 3.13 lowers (none, add, mul) are not rewritten."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from aot.checks.compare import assert_close
from aot.frontend.legalize import legalize
from conftest import legalized_once

_T = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.int32: TensorProto.INT32,
      np.int64: TensorProto.INT64}


def _case(data_shape, idx_shape, axis, reduction, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {"data": (rng.standard_normal(data_shape) * 10).astype(dtype),
             "indices": rng.integers(-data_shape[axis], data_shape[axis], idx_shape).astype(np.int64),
             "updates": (rng.standard_normal(idx_shape) * 10).astype(dtype)}
    node = helper.make_node("ScatterElements", ["data", "indices", "updates"], ["y"], name="scatter", axis=axis,
                            reduction=reduction)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, _T[v.dtype.type], v.shape)
                                            for n, v in feeds.items()],
                              [helper.make_tensor_value_info("y", _T[np.dtype(dtype).type], data_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), feeds




@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("data_shape,idx_shape,axis", [
    ((1, 5), (1, 2), 1), ((4, 6), (3, 5), 0), ((4, 6), (2, 9), 1), ((3, 4, 5), (2, 4, 3), -1), ((3, 4, 5), (3, 2, 5), 1),
])
def test_matches_onnxruntime_exactly(reduction, data_shape, idx_shape, axis):
    model, feeds = _case(data_shape, idx_shape, axis, reduction)
    session = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])  # noqa: E731
    got = session(legalized_once(model, "ScatterElements")).run(None, feeds)[0]
    assert_close(got, session(model).run(None, feeds)[0])
    assert_close(got, ReferenceEvaluator(model).run(None, feeds)[0])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_other_types(dtype):
    model, feeds = _case((5, 4), (6, 4), 0, "max", dtype)
    assert_close(ReferenceEvaluator(legalized_once(model, "ScatterElements")).run(None, feeds)[0], ReferenceEvaluator(model).run(None, feeds)[0])


@pytest.mark.parametrize("reduction", ["none", "add", "mul"])
def test_the_reductions_iree_lowers_are_left_alone(reduction):
    model, _ = _case((5, 4), (6, 4), 0, reduction)
    result, tally = legalize(model)
    assert not result.modified and tally == ()
