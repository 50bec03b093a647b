"""Dtype names of the deploy contract as numpy dtypes. numpy itself knows no float8, int4, int2,
float4 or float8e8m0; ml_dtypes (onnx's dependency) registers them with numpy when imported, so it is
imported only when a bundle names one (a bundle of standard types runs without it)."""

from __future__ import annotations

import numpy as np


def numpy_dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # noqa: F401  (registers its types with numpy)

        return np.dtype(name)
