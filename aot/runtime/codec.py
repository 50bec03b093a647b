"""One JSON codec for every record: a dataclass's fields and their type hints say how a value is
written and read, so no record carries a hand-written ``to_json``/``from_json`` pair.

The rules, in the order ``decode`` applies them:
- a class with its own ``to_json``/``from_json`` keeps them (records owned by other modules);
- a dataclass is a JSON object of its fields, written in field order; a field whose metadata
  says ``key`` uses that JSON name, ``as_map`` writes ``tuple[tuple[str, X], ...]`` as an object,
  ``omit_default`` leaves a field out while it holds its default (older readers never saw it);
- a field with a default may be missing on read (bundles written before it existed);
- a dataclass marked ``codec_positional`` is a JSON list of its field values (an axis: [tensor, 1]);
- ``X | None`` reads None, ``tuple[X, ...]`` a list, ``tuple[A, B]`` a pair, an ``Enum`` its value,
  ``Any`` any JSON value (lists frozen to tuples, so records stay hashable);
- a record with a ``codec_validate`` method has it called once read;
- unknown keys are ignored: a newer writer may add fields an older reader does not need.

Pure (json types, dataclasses, typing): the runtime ships it.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import pathlib
import types
import typing
from functools import lru_cache
from typing import Any, Callable, TypeVar

T = TypeVar("T")
_MISSING = dataclasses.MISSING


@dataclasses.dataclass(frozen=True, slots=True)
class Inline:
    """A field written as keys of its parent object rather than under its own key (a region's
    target is ``"target"``, ``"arch"`` and ``"driver"`` beside its other keys, as schema 1 wrote it)."""

    write: Callable[[Any], dict[str, Any]]
    read: Callable[[dict[str, Any]], Any]


class TextEnum(str, enum.Enum):
    """An enum whose members are their JSON strings: each compares, hashes, formats and encodes as
    its value (``Device.HOST == "host"``, ``f"{Device.HOST}"`` is ``host``), so code and files
    that held the bare strings keep working. ``enum.StrEnum`` does the same from Python 3.11."""

    def __str__(self) -> str:
        return str.__str__(self)


def field(*, default: Any = _MISSING, key: str | None = None, as_map: bool = False,
          omit_default: bool = False, inline: Inline | None = None) -> Any:
    """A dataclass field with codec metadata (see the module docstring)."""
    meta = {"codec_key": key, "codec_map": as_map, "codec_omit": omit_default, "codec_inline": inline}
    if default is _MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def encode(value: Any) -> Any:
    """``value`` as JSON-ready data (dicts, lists, strings, numbers, bools, None)."""
    if isinstance(value, enum.Enum):      # first: a TextEnum is also a str
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if _own_codec(type(value)):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode_fields(value)
    if isinstance(value, (tuple, list, frozenset)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if callable(getattr(value, "tolist", None)):   # a numpy array or scalar (a baked --const-input)
        return encode(value.tolist())
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def encode_fields(value: Any) -> Any:
    """A dataclass as a JSON object of its fields (also for a record whose own ``to_json`` adds
    an envelope around them). A class marked ``codec_positional`` is a list of its field values."""
    if getattr(value, "codec_positional", False):
        return [encode(getattr(value, f.name)) for f in dataclasses.fields(value)]
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        if f.metadata.get("codec_omit") and item == _default_of(f):
            continue
        if f.metadata.get("codec_inline"):
            out.update(f.metadata["codec_inline"].write(item))
        elif f.metadata.get("codec_map"):
            out[_key(f)] = {str(k): encode(v) for k, v in item}
        else:
            out[_key(f)] = encode(item)
    return out


def decode(cls: type[T], data: Any) -> T:
    """Read ``data`` as a ``cls``; raises TypeError/ValueError/KeyError on a malformed value
    (callers turn those into an error naming the file)."""
    return typing.cast(T, _decode(cls, data, cls.__name__))


def _decode(tp: Any, data: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return freeze(data)
    if origin in (typing.Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"{where}: cannot decode a union of {rest}")
        return _decode(rest[0], data, where)
    if origin is tuple:
        if isinstance(data, (str, bytes, dict)) or not isinstance(data, (list, tuple)):
            raise TypeError(f"{where}: expected a list, got {type(data).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(data))
        if len(args) != len(data):
            raise ValueError(f"{where}: expected {len(args)} items, got {len(data)}")
        return tuple(_decode(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, data)))
    if origin is frozenset:
        return frozenset(_decode(args[0], v, where) for v in data)
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return tp(data)
        if _own_codec(tp):
            return tp.from_json(data)  # type: ignore[attr-defined]  # _own_codec(tp): it has one
        if dataclasses.is_dataclass(tp):
            return _decode_record(tp, data, where)
        if tp is bool:
            if not isinstance(data, bool):
                raise TypeError(f"{where}: expected true/false, got {data!r}")
            return data
        if tp is float:
            if isinstance(data, bool) or not isinstance(data, (int, float)):
                raise TypeError(f"{where}: expected a number, got {data!r}")
            return float(data)
        if tp is int:
            if isinstance(data, bool) or not isinstance(data, int):
                raise TypeError(f"{where}: expected an integer, got {data!r}")
            return data
        if tp is str:
            if not isinstance(data, str):
                raise TypeError(f"{where}: expected a string, got {type(data).__name__}")
            return data
        if issubclass(tp, pathlib.PurePath):
            return tp(str(data))
    raise TypeError(f"{where}: cannot decode type {tp!r}")


def decode_fields(cls: type[T], data: Any) -> T:
    """Read a dataclass from its fields (``encode_fields``' inverse)."""
    return typing.cast(T, _decode_record(cls, data, cls.__name__))


def _decode_record(cls: type, data: Any, where: str) -> Any:
    hints = _hints(cls)
    if getattr(cls, "codec_positional", False):
        fields = dataclasses.fields(cls)
        if not isinstance(data, list) or len(data) != len(fields):
            raise TypeError(f"{where}: expected a list of {len(fields)} values")
        return cls(*(_decode(hints[f.name], v, f"{where}[{i}]") for i, (f, v) in enumerate(zip(fields, data))))
    if not isinstance(data, dict):
        raise TypeError(f"{where}: expected an object, got {type(data).__name__}")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = _key(f)
        if f.metadata.get("codec_inline"):
            values[f.name] = f.metadata["codec_inline"].read(data)
            continue
        if key not in data:
            if f.default is _MISSING and f.default_factory is _MISSING:
                raise KeyError(f"{where} lacks {key!r}")
            continue
        item = data[key]
        if f.metadata.get("codec_map"):
            if not isinstance(item, dict):
                raise TypeError(f"{where}.{key}: expected an object")
            item = [[k, v] for k, v in item.items()]
        values[f.name] = _decode(hints[f.name], item, f"{where}.{key}")
    record = cls(**values)
    if callable(getattr(record, "codec_validate", None)):   # invariants a reader checks (raises ValueError)
        record.codec_validate()
    return record


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _own_codec(cls: type) -> bool:
    """A class that writes itself (a dataclass defining to_json, or any class with from_json)."""
    return callable(getattr(cls, "from_json", None)) and callable(getattr(cls, "to_json", None))


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get("codec_key") or f.name


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not _MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not _MISSING else _MISSING


def freeze(value: Any) -> Any:
    """JSON lists as tuples, at every depth (frozen records stay hashable)."""
    return tuple(freeze(v) for v in value) if isinstance(value, list) else value
