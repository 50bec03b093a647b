"""onnx.backend.test drives aot as a backend (a few node tests; the full suite is `make conformance`)."""

from __future__ import annotations

import onnx.backend.test

from aot.onnx_backend import AotBackend

backend_test = onnx.backend.test.BackendTest(AotBackend, __name__)
for name in ("test_relu", "test_add_bcast", "test_softmax_axis_1", "test_conv_with_strides_padding",
             "test_topk", "test_matmul_2d"):
    backend_test.include(rf"^{name}_cpu$")
globals().update(backend_test.test_cases)
