"""A model input's or output's signature: a leaf record that the manifest and the shape
arithmetic (runtime/shapes.py) both use, so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TensorSig:
    """A model input or output: what the stub takes or returns."""

    name: str
    dtype: str                # numpy dtype name
    shape: tuple[int, ...]
