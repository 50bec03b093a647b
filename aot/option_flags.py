"""Command-line flags generated from the fields of an options dataclass.

A setting is written once: its ``BuildOptions`` field carries its default, its flag spellings,
its help text and the parser of its text (``option(...)``). The CLI adds the flags with
``add_arguments`` and turns what was given back into the dataclass with ``from_arguments``;
what was not given keeps the dataclass's default, so the CLI has no defaults of its own.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from aot.errors import UsageError

__all__ = ["Companion", "Flag", "Switch", "UsageError", "add_arguments", "from_arguments", "option"]

FLAG = "flag"   # the metadata key of a field's Flag


@dataclass(frozen=True, slots=True)
class Switch:
    """A flag that takes no value and sets the option to ``value`` (``--no-gate``, ``--tune``)."""

    spelling: str
    value: Any
    help: str


@dataclass(frozen=True, slots=True)
class Companion:
    """A second flag whose text the option's ``compose`` reads by ``keyword`` (``--vulkan-target``)."""

    spelling: str
    keyword: str
    help: str
    metavar: str | None = None


@dataclass(frozen=True, slots=True)
class Flag:
    """How the command line sets one option."""

    spelling: str | None                    # "--min-compute"; None: only switches/companions set it
    help: str = ""
    metavar: str | None = None
    parse: Callable[[str], Any] = str        # one occurrence's text -> value
    repeated: bool = False                   # may be given many times; the option holds them all
    collect: Callable[[Iterable[Any]], Any] = tuple   # how repeated values are held
    choices: Callable[[], Sequence[str]] | None = None  # read when the parser is made (registries)
    switches: tuple[Switch, ...] = ()
    companions: tuple[Companion, ...] = ()
    # compose(main text or default_text, **companion texts) -> value, for options several flags set
    compose: Callable[..., Any] | None = None
    default_text: str | None = None          # the default as the user would write it (help, compose)
    commands: frozenset[str] = frozenset({"build"})   # the commands that take it besides build/plan/bench


def option(default: Any, flag: Flag) -> Any:
    """A dataclass field with its default and its flag."""
    return dataclasses.field(default=default, metadata={FLAG: flag})


class _Given:
    """A switch's value as argparse stores it: already parsed, unlike a flag's text."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _flags(cls: type, command: str) -> Iterable[tuple[dataclasses.Field, Flag]]:
    for f in dataclasses.fields(cls):
        flag = f.metadata.get(FLAG)
        if flag is not None and command in flag.commands:
            yield f, flag


def add_arguments(parser: argparse.ArgumentParser, cls: type, command: str = "build") -> None:
    """Add the flags of every field of ``cls`` that ``command`` takes."""
    defaults = cls()
    for f, flag in _flags(cls, command):
        shown = flag.default_text if flag.default_text is not None else _text(getattr(defaults, f.name))
        if flag.spelling:
            parser.add_argument(flag.spelling, dest=f.name, default=argparse.SUPPRESS,
                                metavar=None if flag.choices else flag.metavar or _metavar(flag.spelling),
                                action="append" if flag.repeated else "store",
                                choices=flag.choices() if flag.choices else None,
                                help=flag.help + (f" (default: {shown})" if shown and not flag.repeated else ""))
        for s in flag.switches:
            parser.add_argument(s.spelling, dest=f.name, action="store_const", const=_Given(s.value),
                                default=argparse.SUPPRESS, help=s.help)
        for c in flag.companions:
            parser.add_argument(c.spelling, dest=f"{f.name}:{c.keyword}", default=argparse.SUPPRESS,
                                metavar=c.metavar or _metavar(c.spelling), help=c.help)


def from_arguments(cls: type, args: argparse.Namespace, command: str = "build") -> Any:
    """``cls`` from what the command line gave; every other field keeps its default."""
    given = vars(args)
    values: dict[str, Any] = {}
    for f, flag in _flags(cls, command):
        companions = {c.keyword: given[f"{f.name}:{c.keyword}"] for c in flag.companions
                      if f"{f.name}:{c.keyword}" in given}
        if f.name not in given and not companions:
            continue
        raw: Any = given.get(f.name)      # argparse holds text, lists of text or None
        if isinstance(raw, _Given):
            values[f.name] = raw.value
        elif flag.compose is not None:
            values[f.name] = flag.compose(raw if raw is not None else flag.default_text, **companions)
        elif flag.repeated:
            values[f.name] = flag.collect(flag.parse(text) for text in raw)
        else:
            values[f.name] = flag.parse(raw)
    return cls(**values)


def _metavar(spelling: str) -> str:
    return spelling.lstrip("-").upper().replace("-", "_")


def _text(value: Any) -> str:
    """A default as the help prints it."""
    if value is None or value == () or value == frozenset():
        return ""
    return str(getattr(value, "value", value))
