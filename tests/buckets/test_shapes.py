"""The runtime's bucket arithmetic: which bucket serves a call, padding, cropping, chunks, and the
manifest record's round trip and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from aot.errors import RuntimeInputError
from aot.runtime import codec
from aot.runtime import shapes as sh
from aot.runtime.shapes import Axis, Bucket, Dim, PaddingCheck, Shapes

BATCH = Dim("N", (Axis("x", 0), Axis("mask", 0)), (Axis("y", 0),), (1, 2, 4), True)
SEQ = Dim("S", (Axis("x", 1), Axis("mask", 1)), (Axis("y", 1),), (8, 16), False)
BUCKETS = tuple(Bucket(sizes, "manifest.json" if i == 0 else f"buckets/b{i}.json", None if i == 0 else "0" * 64)
                for i, sizes in enumerate(sh.all_sizes((BATCH, SEQ))))
SHAPES = Shapes((BATCH, SEQ), BUCKETS, (("mask", -1.0),))


def test_every_combination_is_a_bucket_smallest_first():
    assert [dict(b.sizes) for b in BUCKETS][:3] == [{"N": 1, "S": 8}, {"N": 1, "S": 16}, {"N": 2, "S": 8}]
    assert len(BUCKETS) == 6


@pytest.mark.parametrize("sizes, chosen", [({"N": 1, "S": 3}, {"N": 1, "S": 8}), ({"N": 3, "S": 8}, {"N": 4, "S": 8}),
                                           ({"N": 2, "S": 9}, {"N": 2, "S": 16}), ({"N": 4, "S": 16}, {"N": 4, "S": 16})])
def test_the_smallest_bucket_holding_the_call_is_chosen(sizes, chosen):
    assert dict(sh.fitting(SHAPES, sizes).sizes) == chosen


def test_no_bucket_holds_a_call_past_the_ladder():
    assert sh.fitting(SHAPES, {"N": 5, "S": 8}) is None


def test_padding_fills_the_declared_value_at_the_end_and_cropping_undoes_it():
    x = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3)
    mask = np.ones((2, 5), np.int64)
    padded = sh.pad(SHAPES, {"x": x, "mask": mask}, {"N": 4, "S": 8})
    assert padded["x"].shape == (4, 8, 3) and padded["mask"].shape == (4, 8)
    assert np.array_equal(padded["x"][:2, :5], x) and not padded["x"][2:].any() and not padded["x"][:, 5:].any()
    assert (padded["mask"][:, 5:] == -1).all() and (padded["mask"][2:] == -1).all()
    (y,) = sh.crop(SHAPES, ("y",), (padded["x"],), {"N": 2, "S": 5})
    assert np.array_equal(y, x)


def test_inputs_sharing_a_dimension_must_agree():
    with pytest.raises(RuntimeInputError, match="'mask' axis 1 is 6 but input 'x' axis 1 is 5"):
        sh.sizes_of(SHAPES, {"x": np.zeros((1, 5, 3)), "mask": np.zeros((1, 6))})
    with pytest.raises(RuntimeInputError, match="empty"):
        sh.sizes_of(SHAPES, {"x": np.zeros((0, 5, 3)), "mask": np.zeros((0, 5))})


def test_chunks_take_and_join_cover_the_batch_once():
    assert sh.chunks(11, 4) == [slice(0, 4), slice(4, 8), slice(8, 11)]
    x = np.arange(11 * 2).reshape(11, 2)
    parts = [(sh.take((Axis("x", 0),), {"x": x}, part)["x"],) for part in sh.chunks(11, 4)]
    (joined,) = sh.join((Axis("x", 0),), ("x",), parts)
    assert np.array_equal(joined, x)


def test_the_record_round_trips_and_refuses_what_the_runtime_cannot_serve():
    with_check = Shapes(SHAPES.dims, (BUCKETS[0], Bucket(BUCKETS[1].sizes, "buckets/b1.json", "1" * 64,
                                                          (PaddingCheck("S", 9, 16, 0.5, 1.0),))), SHAPES.pad_values)
    assert codec.decode(Shapes, codec.encode(with_check)) == with_check
    bad = codec.encode(with_check)
    bad["dims"][0]["sizes"] = [4, 2]
    with pytest.raises(ValueError, match="ascending"):
        codec.decode(Shapes, bad)
    bad = codec.encode(with_check)
    bad["buckets"][1]["sizes"] = {"N": 2}
    with pytest.raises(ValueError, match="does not size every dimension"):
        codec.decode(Shapes, bad)
    bad = codec.encode(with_check)
    bad["buckets"].reverse()
    with pytest.raises(ValueError, match="first bucket"):
        codec.decode(Shapes, bad)
