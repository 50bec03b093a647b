"""Shape buckets: a symbolic dimension compiled as a ladder of static sizes.

A bucketed bundle's manifest describes its smallest bucket exactly as a static bundle's does, and
adds ``shapes``: each symbolic dimension (where inputs carry it, where outputs carry it, its
ladder) and each bucket (its sizes and the manifest of its own region modules; every bucket reads
the one ``weights.irpa``). At run time the smallest bucket that holds the input is chosen, the
inputs are padded up to it and every output is cropped back (``route``, ``pad``, ``crop``).

Pure data and numpy: part of the runtime a bundle ships.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import ClassVar, Mapping

import numpy as np

from .codec import field
from .errors import RuntimeInputError
from .signature import TensorSig


@dataclass(frozen=True, slots=True)
class Axis:
    """Axis ``axis`` of the model input or output ``tensor``."""

    tensor: str
    axis: int

    codec_positional: ClassVar[bool] = True   # written as [tensor, axis]


@dataclass(frozen=True, slots=True)
class Dim:
    """A symbolic dimension and its ladder of compiled sizes (ascending)."""

    symbol: str
    inputs: tuple[Axis, ...]     # where a call's size is read, and padding goes
    outputs: tuple[Axis, ...]    # where results are cropped (and chunks joined)
    sizes: tuple[int, ...]
    batch: bool                  # a leading batch axis: a call larger than the ladder runs in chunks

    def __post_init__(self) -> None:
        sizes = self.sizes
        if not sizes or list(sizes) != sorted(set(sizes)) or sizes[0] < 1:
            raise ValueError(f"dimension {self.symbol!r}: sizes {list(sizes)} are not an ascending ladder")

    @property
    def largest(self) -> int:
        return self.sizes[-1]


@dataclass(frozen=True, slots=True)
class PaddingCheck:
    """The build ran this bucket on an input padded from ``valid`` to ``padded`` along ``symbol``
    and compared the valid part with onnxruntime on the unpadded input."""

    symbol: str
    valid: int
    padded: int
    max_abs_diff: float
    # the user accepted a difference above verification's
    accepted_tolerance: float | None = field(default=None, omit_default=True)


@dataclass(frozen=True, slots=True)
class Bucket:
    sizes: tuple[tuple[str, int], ...] = field(as_map=True)   # (symbol, size) for every dimension
    manifest: str = field()                 # its modules' manifest in the bundle ("manifest.json": the first)
    sha256: str | None = field()            # of that file; None for the bundle's own manifest
    checks: tuple[PaddingCheck, ...] = ()

    def size(self, symbol: str) -> int:
        return dict(self.sizes)[symbol]

    @property
    def label(self) -> str:
        return ", ".join(f"{s}={n}" for s, n in self.sizes)

@dataclass(frozen=True, slots=True)
class Fallback:
    """The whole model compiled for the host with its symbolic dimensions left dynamic
    (``--fallback dynamic``): it serves a call past the largest bucket along a non-batch
    dimension. The build ran it at the ``checked`` sizes against onnxruntime."""

    manifest: str                           # its manifest in the bundle
    sha256: str                             # of that file
    checked: tuple[tuple[str, int], ...] = field(as_map=True)   # (symbol, size) of the build's check
    max_abs_diff: float = field()

@dataclass(frozen=True, slots=True)
class Shapes:
    dims: tuple[Dim, ...]
    buckets: tuple[Bucket, ...]                  # buckets[0] is the one manifest.json itself describes
    pad_values: tuple[tuple[str, float], ...] = field(as_map=True)   # input -> what padding fills (default 0)
    fallback: Fallback | None = field(default=None, omit_default=True)   # the dynamic host module, if built

    def codec_validate(self) -> None:
        """What a bundle's shapes must satisfy (checked when read; a build assembles them in steps)."""
        symbols = [x.symbol for x in self.dims]
        for b in self.buckets:
            if sorted(dict(b.sizes)) != sorted(symbols):
                raise ValueError(f"bucket {b.label} does not size every dimension {symbols}")
        if not self.buckets or self.buckets[0].manifest != "manifest.json":
            raise ValueError("the first bucket must be the one manifest.json describes")

    def dim(self, symbol: str) -> Dim:
        return next(d for d in self.dims if d.symbol == symbol)

    def pad_value(self, tensor: str) -> float:
        return dict(self.pad_values).get(tensor, 0)

def sizes_of(shapes: Shapes, inputs: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Each dimension's size in this call; every input carrying it must agree."""
    sizes: dict[str, int] = {}
    for d in shapes.dims:
        for use in d.inputs:
            n = inputs[use.tensor].shape[use.axis]
            if n < 1:
                raise RuntimeInputError(f"input {use.tensor!r}: axis {use.axis} ({d.symbol!r}) is empty")
            first = sizes.setdefault(d.symbol, n)
            if n != first:
                where = next(u for u in d.inputs if inputs[u.tensor].shape[u.axis] == first)
                raise RuntimeInputError(
                    f"input {use.tensor!r} axis {use.axis} is {n} but input {where.tensor!r} axis {where.axis} is "
                    f"{first}; both are the model's dimension {d.symbol!r}", hint="give them the same size")
    return sizes


def fitting(shapes: Shapes, sizes: Mapping[str, int]) -> Bucket | None:
    """The smallest bucket (fewest elements over the dimensions) holding ``sizes``; None when none does."""
    fits = [b for b in shapes.buckets if all(b.size(s) >= n for s, n in sizes.items())]
    return min(fits, key=lambda b: (int(np.prod([n for _, n in b.sizes])), b.sizes), default=None)


def pad(shapes: Shapes, inputs: Mapping[str, np.ndarray], sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Inputs padded at the end of every symbolic axis up to ``sizes`` (a bucket's)."""
    widths: dict[str, list[tuple[int, int]]] = {k: [(0, 0)] * v.ndim for k, v in inputs.items()}
    for d in shapes.dims:
        for use in d.inputs:
            widths[use.tensor][use.axis] = (0, sizes[d.symbol] - inputs[use.tensor].shape[use.axis])
    return {k: v if not any(w for _, w in widths[k]) else
            np.pad(v, widths[k], constant_values=np.array(shapes.pad_value(k)).astype(v.dtype))
            for k, v in inputs.items()}


def crop(shapes: Shapes, output_names: tuple[str, ...], outputs: tuple[np.ndarray, ...],
         sizes: Mapping[str, int]) -> tuple[np.ndarray, ...]:
    """Every output cut back along its symbolic axes to this call's sizes."""
    cut = {name: [slice(None)] * out.ndim for name, out in zip(output_names, outputs)}
    for d in shapes.dims:
        for use in d.outputs:
            cut[use.tensor][use.axis] = slice(0, sizes[d.symbol])
    return tuple(out[tuple(cut[name])] for name, out in zip(output_names, outputs))


def chunks(total: int, size: int) -> list[slice]:
    """``[0, total)`` in consecutive slices of at most ``size``."""
    return [slice(i, min(i + size, total)) for i in range(0, total, size)]


def take(axes: tuple[Axis, ...], arrays: Mapping[str, np.ndarray], part: slice) -> dict[str, np.ndarray]:
    """``arrays`` sliced to ``part`` along each one's axis in ``axes`` (the others whole)."""
    out = dict(arrays)
    for use in axes:
        index = [slice(None)] * out[use.tensor].ndim
        index[use.axis] = part
        out[use.tensor] = arrays[use.tensor][tuple(index)]
    return out


def join(axes: tuple[Axis, ...], names: tuple[str, ...], parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """Results of consecutive chunks joined along each output's axis in ``axes``."""
    axis_of = {a.tensor: a.axis for a in axes}
    return tuple(np.concatenate([p[i] for p in parts], axis=axis_of[name]) for i, name in enumerate(names))


def resized(specs: tuple[TensorSig, ...], dims: tuple[Dim, ...], sizes: Mapping[str, int]) -> tuple[TensorSig, ...]:
    """``specs`` with every axis of a dimension named in ``sizes`` at that size (the others kept)."""
    shapes = {t.name: list(t.shape) for t in specs}
    for d in dims:
        for a in d.inputs if d.symbol in sizes else ():
            shapes[a.tensor][a.axis] = sizes[d.symbol]
    return tuple(replace(t, shape=tuple(shapes[t.name])) for t in specs)


def all_sizes(dims: tuple[Dim, ...]) -> list[tuple[tuple[str, int], ...]]:
    """Every combination of the dimensions' ladders, smallest first: the buckets a build compiles."""
    combos = itertools.product(*[d.sizes for d in dims])
    return [tuple(zip([d.symbol for d in dims], c)) for c in sorted(combos, key=lambda c: (int(np.prod(c)), c))]
