"""onnx.backend.test drives aot as a backend (a few node tests; the full suite is `make conformance`)."""

from __future__ import annotations

import pytest

import re

import onnx.backend.test

from aot.tools.onnx_backend import AotBackend

pytestmark = pytest.mark.device  # compiles with IREE and runs on a real device

SELECTED = ("test_relu", "test_add_bcast", "test_softmax_axis_1", "test_conv_with_strides_padding",
            "test_top_k", "test_matmul_2d")
PATTERN = re.compile("^(" + "|".join(SELECTED) + ")_cpu$")

backend_test = onnx.backend.test.BackendTest(AotBackend, __name__)
backend_test.include(PATTERN.pattern)
# BackendTest generates a method for each of its ~4,000 cases and skips the unselected ones at run
# time; drop those here so the report shows only what ran.
CASES = backend_test.test_cases  # a property that builds new classes on every access: read it once
for case in CASES.values():
    for attr in [a for a in vars(case) if a.startswith("test_") and not PATTERN.match(a)]:
        delattr(case, attr)
globals().update({k: v for k, v in CASES.items() if any(a.startswith("test_") for a in vars(v))})
