"""A model with a float8 input builds with verification and passes `aot check`: onnxruntime's numpy
API cannot take float8 arrays ("Numpy_type 260 can't be converted to MLDataType", an internal
error before), so such a model's reference comes from onnx's reference evaluator."""

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from aot.checks import reference
from conftest import run_aot


def _model(dtype: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Cast", ["x"], ["d"], to=T.FLOAT), helper.make_node("Mul", ["d", "d"], ["e"]),
             helper.make_node("Relu", ["e"], ["y"])]
    g = helper.make_graph(nodes, "narrow_in", [helper.make_tensor_value_info("x", dtype, [4, 64])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [4, 64])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def test_only_narrow_types_leave_onnxruntime():
    assert reference.onnxruntime_cannot_feed(_model(T.FLOAT8E4M3FN))
    assert reference.onnxruntime_cannot_feed(_model(T.INT4))
    assert not reference.onnxruntime_cannot_feed(_model(T.FLOAT16))


@pytest.mark.device   # compiles for Vulkan and verifies on lavapipe
def test_a_float8_input_model_builds_verified_and_checks(tmp_path):
    onnx.save(_model(T.FLOAT8E4M3FN), tmp_path / "f8.onnx")
    built = run_aot("build", str(tmp_path / "f8.onnx"), "--accel", "vulkan", "--min-compute", "1", "--no-gate",
                    "-o", str(tmp_path / "out"))
    assert "verify   r0: ok" in built.stderr
    checked = run_aot("check", str(tmp_path / "out"))
    assert "max abs error" in checked.stdout + checked.stderr and "internal error" not in checked.stderr
