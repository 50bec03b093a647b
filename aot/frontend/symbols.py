"""The symbolic dimensions of an ONNX model's inputs: what shape buckets are compiled over.

A named dimension (``dim_param``) is one symbol wherever it appears, as ONNX defines; an unnamed
one (no name, ``?``, or a -1/0 placeholder) is its own symbol ``input.axis``. A symbol found only
at axis 0 is batch-like: it gets the batch ladder by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Mapping

from aot.frontend.load import read_model
from aot.frontend.static_shapes import is_fixed
from aot.runtime.shapes import Axis

_UNNAMED = ("", "?")


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    inputs: tuple[Axis, ...]

    @property
    def batch(self) -> bool:
        return all(a.axis == 0 for a in self.inputs)

    @property
    def where(self) -> str:
        return ", ".join(f"{a.tensor!r} axis {a.axis}" for a in self.inputs)


@dataclass(frozen=True, slots=True)
class SymbolicInputs:
    """Each input's declared shape, a symbol's name standing for each symbolic dimension."""

    shapes: tuple[tuple[str, tuple[int | str, ...]], ...]

    @property
    def symbols(self) -> tuple[Symbol, ...]:
        found: dict[str, list[Axis]] = {}
        for name, dims in self.shapes:
            for axis, d in enumerate(dims):
                if isinstance(d, str):
                    found.setdefault(d, []).append(Axis(name, axis))
        return tuple(Symbol(s, tuple(axes)) for s, axes in found.items())

    def at(self, sizes: Mapping[str, int]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Static input shapes with every symbol at ``sizes`` (as ``--input-shape`` pins them)."""
        return tuple((name, tuple(sizes[d] if isinstance(d, str) else d for d in dims))
                     for name, dims in self.shapes if any(isinstance(d, str) for d in dims))


def symbolic_inputs(path: Path, pinned: AbstractSet[str] = frozenset(),
                    constants: AbstractSet[str] = frozenset()) -> SymbolicInputs:
    """The inputs not pinned by ``--input-shape`` or baked in, as the model declares them."""
    model = read_model(path)
    inits = {t.name for t in model.graph.initializer}
    shapes = []
    for value in model.graph.input:
        if value.name in inits or value.name in pinned or value.name in constants:
            continue
        dims = tuple(d.dim_value if is_fixed(d) else d.dim_param if d.dim_param not in _UNNAMED
                     else f"{value.name}.{axis}" for axis, d in enumerate(value.type.tensor_type.shape.dim))
        shapes.append((value.name, dims))
    return SymbolicInputs(tuple(shapes))
