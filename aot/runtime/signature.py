"""A model input's or output's signature: a leaf record that the manifest and the shape
arithmetic (runtime/shapes.py) both use, so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TensorSig:
    """A model input or output: what the stub takes or returns."""

    name: str
    dtype: str                # numpy dtype name
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TensorSig":
        return cls(str(d["name"]), str(d["dtype"]), tuple(int(x) for x in d["shape"]))
