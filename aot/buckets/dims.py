"""Which sizes each symbolic dimension is compiled at, and which output axes follow it.

A batch-like dimension gets ``--batch-buckets``; any other needs ``--dim SYMBOL=LADDER`` (all the
missing ones are named in one error). An output axis follows a dimension when the model, pinned at
two sizes of it, gives that axis exactly those sizes; an axis that stays put does not follow it;
one that changes some other way (a strided convolution's output) cannot be cropped, so the ladder
is refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from aot.buckets import ladder
from aot.errors import ModelError
from aot.frontend.load import load
from aot.frontend.symbols import Symbol, SymbolicInputs, symbolic_inputs
from aot.options import BuildOptions
from aot.runtime.shapes import Axis, Dim


def plan_dims(model: Path, inputs: SymbolicInputs, options: BuildOptions) -> tuple[Dim, ...]:
    symbols = inputs.symbols
    ladders = _ladders(symbols, options)
    smallest = {s.name: ladders[s.name][0] for s in symbols}
    dims = []
    for s in symbols:
        follows, outputs = _output_axes(model, inputs, s, smallest, ladders[s.name], options)
        # Chunks of a call join along every output's axis: a batch some output does not follow
        # (a sum over it, say) cannot be chunked, so a call past its ladder is refused instead.
        chunkable = s.batch and {a.tensor for a in follows} == outputs
        dims.append(Dim(s.name, s.inputs, follows, ladders[s.name], chunkable))
    return tuple(dims)


def _ladders(symbols: tuple[Symbol, ...], options: BuildOptions) -> dict[str, tuple[int, ...]]:
    given = dict(options.dim_ladders)
    known = {s.name for s in symbols}
    unknown = sorted(given.keys() - known)
    if unknown:
        raise ModelError(f"--dim names {', '.join(map(repr, unknown))}, which the model's inputs do not have",
                         hint=f"symbolic dimensions: {', '.join(map(repr, sorted(known))) or 'none'}")
    missing = [s for s in symbols if s.name not in given and not s.batch]
    if missing:
        listed = "; ".join(f"{s.name!r} ({s.where})" for s in missing)
        raise ModelError(f"the model has symbolic dimensions without a size: {listed}",
                         hint="give each a size or a ladder: " + " ".join(f"--dim {s.name}=SIZE" for s in missing)
                              + f" (ladders: {ladder.FORMS}), or pin the inputs with --input-shape")
    return {s.name: ladder.parse(given[s.name], f"--dim {s.name}") if s.name in given
            else ladder.parse(options.batch_buckets, "--batch-buckets") for s in symbols}


def _output_axes(model: Path, inputs: SymbolicInputs, symbol: Symbol, smallest: dict[str, int],
                 sizes: tuple[int, ...], options: BuildOptions) -> tuple[tuple[Axis, ...], set[str]]:
    """The output axes that follow ``symbol``, and the names of every output."""
    a = sizes[0]
    b = sizes[1] if len(sizes) > 1 else a + 1
    low, high = (_output_shapes(model, inputs, {**smallest, symbol.name: n}, options) for n in (a, b))
    follows = []
    for name, shape in low.items():
        for axis, (x, y) in enumerate(zip(shape, high[name])):
            if (x, y) == (a, b):
                follows.append(Axis(name, axis))
            elif x != y:
                raise ModelError(
                    f"output {name!r} axis {axis} is {x} when {symbol.name!r} is {a} and {y} when it is {b}: "
                    f"it does not follow {symbol.name!r} one to one, so padding along it cannot be cropped",
                    hint=f"compile the sizes you need exactly with --input-shape (or --dim {symbol.name}=SIZE "
                         "for inputs of exactly that size)")
    return tuple(follows), set(low)


def _output_shapes(model: Path, inputs: SymbolicInputs, sizes: dict[str, int],
                   options: BuildOptions) -> dict[str, tuple[int, ...]]:
    """The output shapes the front end infers with the inputs pinned at ``sizes``."""
    source = load(model, {**dict(options.input_shapes), **dict(inputs.at(sizes))}, dict(options.constant_inputs),
                  options.index_guards)
    return {o.name: o.shape for o in source.outputs}


def smallest_bucket(model: Path, options: BuildOptions) -> BuildOptions:
    """``options`` with every symbolic input pinned at its ladder's smallest size (what `aot plan`
    partitions: every bucket's plan is made the same way)."""
    inputs = symbolic_inputs(model, set(dict(options.input_shapes)), set(dict(options.constant_inputs)))
    ladders = _ladders(inputs.symbols, options)
    return with_sizes(options, inputs, {s: sizes[0] for s, sizes in ladders.items()})


def with_sizes(options: BuildOptions, inputs: SymbolicInputs, sizes: dict[str, int]) -> BuildOptions:
    """``options`` with every symbolic input pinned at ``sizes``: one bucket's static build."""
    return dataclasses.replace(options, input_shapes=(*options.input_shapes, *inputs.at(sizes)))
