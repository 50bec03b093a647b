"""The one JSON codec: every rule it applies, and the malformed input it refuses."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from aot.runtime import codec
from aot.runtime.codec import Inline, field


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int

    codec_positional: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    color: Color
    corners: tuple[Point, ...]
    tags: tuple[tuple[str, float], ...] = field(as_map=True)
    where: Path | None = field(key="path")
    span: tuple[int, int] = field(inline=Inline(lambda s: {"lo": s[0], "hi": s[1]}, lambda d: (d["lo"], d["hi"])))
    extra: Any = None
    note: str = field(default="", omit_default=True)

    def codec_validate(self) -> None:
        if self.span[0] > self.span[1]:
            raise ValueError("span is backwards")


SHAPE = Shape("s", Color.BLUE, (Point(1, 2), Point(3, 4)), (("a", 0.5),), Path("/tmp/x"), (1, 2), [[1, 2], 3])


def test_every_rule_round_trips():
    data = json.loads(json.dumps(codec.encode(SHAPE)))
    assert data == {"name": "s", "color": "blue", "corners": [[1, 2], [3, 4]], "tags": {"a": 0.5}, "path": "/tmp/x",
                    "lo": 1, "hi": 2, "extra": [[1, 2], 3]}          # note omitted while it is its default
    again = codec.decode(Shape, data)
    assert again.extra == ((1, 2), 3) and again.where == Path("/tmp/x")
    assert again == Shape("s", Color.BLUE, SHAPE.corners, SHAPE.tags, SHAPE.where, (1, 2), ((1, 2), 3))
    assert codec.decode(Shape, {**data, "unknown": 1, "note": "n"}).note == "n"   # newer writers' keys ignored


@pytest.mark.parametrize("edit, error", [
    (lambda d: d.pop("name"), KeyError),
    (lambda d: d.update(name=3), TypeError),
    (lambda d: d.update(color="green"), ValueError),
    (lambda d: d.update(corners=[[1, 2, 3]]), TypeError),
    (lambda d: d.update(corners="ab"), TypeError),
    (lambda d: d.update(tags=[["a", 1]]), TypeError),
    (lambda d: d.update(tags={"a": True}), TypeError),    # a bool is not a number
    (lambda d: d.update(lo=5), ValueError),              # codec_validate
])
def test_malformed_input_is_refused(edit, error):
    data = codec.encode(SHAPE)
    edit(data)
    with pytest.raises(error):
        codec.decode(Shape, data)


def test_numpy_values_encode_as_lists():
    import numpy as np

    assert codec.encode({"v": np.arange(3), "s": np.float32(1.5)}) == {"v": [0, 1, 2], "s": 1.5}


class Side(codec.TextEnum):
    LEFT = "left"
    RIGHT = "right"


def test_a_text_enum_is_its_string_in_code_and_in_json():
    assert Side.LEFT == "left" and {Side.LEFT: 1}["left"] == 1 and f"{Side.LEFT:>6}" == "  left"
    encoded = codec.encode({"side": Side.RIGHT})
    assert encoded == {"side": "right"} and type(encoded["side"]) is str
    assert codec.decode(tuple[Side, ...], ["left", "right"]) == (Side.LEFT, Side.RIGHT)
    with pytest.raises(ValueError):
        codec.decode(tuple[Side, ...], ["up"])
