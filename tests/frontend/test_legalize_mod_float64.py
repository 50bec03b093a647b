"""Mod fmod=0 on float64 is refused with a ModelError naming the node (frontend/legalize/
mod_float64.py): IREE 3.13 cannot link it and no exact rewrite exists; the variants that build
(float32 fmod=0, float64 fmod=1, integers) are left alone."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from aot.errors import ModelError
from aot.frontend.legalize import legalize


def _model(dtype, fmod):
    node = helper.make_node("Mod", ["x", "y"], ["z"], name="remainder", fmod=fmod)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, dtype, (6,)) for n in "xy"],
                              [helper.make_tensor_value_info("z", dtype, (6,))])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]))


def test_float64_floored_remainder_is_a_clear_error():
    with pytest.raises(ModelError, match="'remainder': Mod with fmod=0 on float64") as e:
        legalize(_model(TensorProto.DOUBLE, 0))
    assert "float32" in e.value.hint


@pytest.mark.parametrize("dtype,fmod", [(TensorProto.FLOAT, 0), (TensorProto.FLOAT, 1), (TensorProto.DOUBLE, 1),
                                        (TensorProto.INT64, 0), (TensorProto.FLOAT16, 0)])
def test_the_variants_that_build_are_left_alone(dtype, fmod):
    result, tally = legalize(_model(dtype, fmod))
    assert not result.modified and tally == ()
