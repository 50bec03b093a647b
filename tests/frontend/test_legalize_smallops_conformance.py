"""One or two ONNX node tests per small legalized family (frontend/legalize/: DFT, LpPool,
MaxPool/AveragePool edges, QLinearMatMul 3-D, Col2Im, RNN/GRU/LSTM directions, ScatterElements
max/min), built and run on llvm-cpu through the conformance harness: each failed to compile, or
computed wrongly, before its rewrite; Mod fmod=0 on float64 is refused with a clear error."""

from __future__ import annotations

import functools

import pytest

from aot.tools import conformance

pytestmark = pytest.mark.device  # compiles with IREE and runs on the CPU

CASES = (
    "test_dft_irfft",            # opset 20, axis as an input, inverse + onesided
    "test_dft_axis_opset19",     # opset 19, axis as an attribute
    "test_lppool_2d_dilations",
    "test_lppool_2d_same_lower",
    "test_maxpool_2d_same_upper",
    "test_averagepool_2d_ceil_last_window_starts_on_pad",
    "test_qlinearmatmul_3D_uint8_float16",
    "test_col2im_5d",
    "test_gru_bidirectional",
    "test_lstm_reverse",
    "test_scatter_elements_with_reduction_max",
)


# Refused at load with a ModelError naming the node, where IREE failed to link (unlowerable.py).
REFUSED = "test_mod_float64_mixed_sign_fmod_0"


@functools.lru_cache(maxsize=1)
def _cases() -> dict:
    return {c.name: c for c in conformance.collect("^(" + "|".join((*CASES, REFUSED)) + ")$")}


@pytest.mark.parametrize("name", CASES)
def test_node_case_passes(name):
    result = conformance.run_case(_cases()[name], "none")
    assert result.status == "pass", f"{name}: {result.status} {result.detail}"


def test_float64_floored_mod_is_refused_clearly():
    result = conformance.run_case(_cases()[REFUSED], "none")
    assert result.status == "unsupported" and "no target can compile it" in result.detail, result
