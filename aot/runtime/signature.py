"""A model input's or output's signature: a leaf record that the manifest and the shape
arithmetic (runtime/shapes.py) both use, so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass

from .codec import field


@dataclass(frozen=True, slots=True)
class TensorSig:
    """A model input or output: what the stub takes or returns."""

    name: str
    dtype: str                # numpy dtype name (int4, float4_e2m1fn, ...: ml_dtypes' names)
    shape: tuple[int, ...]
    # The dtype the compiled modules take or return where ``dtype`` is one IREE cannot carry
    # (sub-byte, exponent-only: frontend/narrow_types.py); the runtime converts at the boundary.
    carrier: str = field(default="", omit_default=True)
