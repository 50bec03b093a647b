"""What the command line's values must be, checked before a command starts its work: whole
numbers and tolerances, input files that are one plain .npy array of the bundle's dtype, and
output places that can be written. Each refusal is a typed error naming the flag or the file
(`aot.cli` prints it as ``ERROR: ...`` with its hint and exits 1)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from aot.errors import RuntimeInputError, UsageError

if TYPE_CHECKING:
    from aot.options import BuildOptions
    from aot.runtime.manifest import Manifest


class Parser(argparse.ArgumentParser):
    """argparse's own errors (a missing argument, an unknown flag, a value its type refuses) as a
    UsageError, so they read like every other error: ``ERROR: ...`` and exit code 1."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", hint=f"see `{self.prog} --help`")


def count(text: str, least: int = 1) -> int:
    """An argparse type: a whole number of at least 1 (turns, requests, workers, ...)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least {least}")
    return value


def seed(text: str) -> int:
    """An argparse type: a random seed, a whole number >= 0 (numpy refuses negative ones)."""
    return count(text, 0)


def graph_counts(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated whole numbers of at least 1 (``5,11,17``), sorted, repeats dropped."""
    counts = sorted({count(part.strip()) for part in text.split(",") if part.strip()})
    if not counts:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more counts, comma-separated (e.g. 5,11,17)")
    return tuple(counts)


def finite_non_negative(text: str) -> float:
    """An argparse type: a finite number >= 0 (a tolerance, a weight)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < float("inf"):   # also refuses NaN, which no difference exceeds
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number >= 0")
    return value


def pattern(flag: str, text: str | None) -> str | None:
    """A regular expression given as ``flag``, compiled once to refuse a malformed one now."""
    if text is not None:
        try:
            re.compile(text)
        except re.error as e:
            raise UsageError(f"bad {flag} {text!r}: {e}", hint="a Python regular expression, e.g. 'conv|gemm'") from None
    return text


def output_file(flag: str, path: str | Path) -> Path:
    """``path`` as a file to write: not a folder, its folder created now, so that a bad place
    fails before the work that would fill it."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{flag} {str(p)!r} is a folder; it must name a file to write", hint="give a file name")
    output_folder(flag, p.parent)
    return p


def output_folder(flag: str, path: str | Path) -> Path:
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{flag}: cannot create the folder {str(p)!r}: {e.strerror or e}",
                         hint="choose a place you can write to (a path whose parts are folders)") from None
    return p


def read_inputs(items: list[str]) -> dict[str, object]:
    """``--input NAME=@FILE.npy`` each as its array: a file numpy cannot read as one plain array
    (empty, truncated, pickled objects, text, an .npz archive, a folder) is an error naming it."""
    import numpy as np

    inputs: dict[str, object] = {}
    for item in items:
        name, sep, ref = item.partition("=")
        if not name or not sep or not ref.startswith("@") or len(ref) < 2:
            raise UsageError(f"bad --input {item!r}", hint="write it as NAME=@file.npy")
        if name in inputs:
            raise UsageError(f"--input {name!r} given twice", hint="give each input once")
        path = ref[1:]
        hint = f"write it with numpy.save({path!r}, array): one array of numbers, no Python objects"
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:   # EOFError: an empty file
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise RuntimeInputError(f"--input {name!r}: cannot read {path!r} as a .npy array: {why}",
                                    hint=hint) from None
        if not isinstance(arr, np.ndarray):   # an .npz archive: several arrays
            arr.close()
            raise RuntimeInputError(f"--input {name!r}: {path!r} is an .npz archive, not one array", hint=hint)
        inputs[name] = arr
    return inputs


def check_input_dtypes(manifest: Manifest, items: list[str], inputs: dict[str, object]) -> None:
    """Each input file's array has the dtype the bundle takes, named with its file, before any
    device opens (the session checks shapes, which a bucketed bundle lets vary)."""
    import numpy as np

    from aot.runtime.dtypes import numpy_dtype

    files = {i.partition("=")[0]: i.partition("=")[2][1:] for i in items}
    wanted = {s.name: numpy_dtype(s.dtype) for s in manifest.inputs}
    for name, arr in inputs.items():
        if name not in wanted:
            raise RuntimeInputError(f"--input {name!r}: the bundle has no input {name!r}",
                                    hint=f"its inputs are {sorted(wanted)}")
        got = np.asarray(arr).dtype
        if got.newbyteorder("=") != wanted[name]:
            raise RuntimeInputError(f"--input {name!r}: {files[name]!r} holds {got.name}, the bundle takes "
                                    f"{wanted[name].name}", hint=f"save it with .astype(np.{wanted[name].name})")


def add_options(p: argparse.ArgumentParser, command: str = "build") -> None:
    """The flags of every BuildOptions field ``command`` takes (generated: options.py owns them)."""
    from aot.option_flags import add_arguments
    from aot.options import BuildOptions

    add_arguments(p, BuildOptions, command)


def build_options(args: argparse.Namespace, command: str = "build") -> "BuildOptions":
    """BuildOptions from the command line: what was given, parsed once; the rest its defaults."""
    from aot.option_flags import from_arguments
    from aot.options import BuildOptions

    return from_arguments(BuildOptions, args, command)
