"""What users hand a bundle at its boundary: arrays in any memory layout are taken as their
values, anything else is refused with RuntimeInputError; nothing crashes the process."""

from __future__ import annotations

import numpy as np
import pytest

from aot import runtime
from aot.checks import reference
from aot.errors import RuntimeInputError

pytestmark = pytest.mark.device  # runs the example bundle on the host device


@pytest.fixture(scope="module")
def session(host_bundle):
    with runtime.load(host_bundle.bundle.path) as s:
        yield s


@pytest.fixture(scope="module")
def image(host_bundle):
    return reference.random_inputs(host_bundle.bundle.manifest.inputs, seed=3)["image"]


def _misaligned(a: np.ndarray) -> np.ndarray:
    raw = np.zeros(a.nbytes + 1, np.uint8)
    view = np.frombuffer(raw.data, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    view[...] = a
    assert not view.flags.aligned
    return view


def _read_only(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b.flags.writeable = False
    return b


@pytest.mark.parametrize("layout", [
    lambda a: a.astype(a.dtype.newbyteorder(">")),                  # big-endian
    _misaligned,
    _read_only,
    lambda a: np.ascontiguousarray(a.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2),   # Fortran-like strides
    lambda a: np.repeat(a, 2, axis=3)[..., ::2],                     # a strided view
])
def test_any_memory_layout_gives_the_same_answer(session, image, layout):
    want = session.run({"image": image})
    arr = layout(image)
    assert np.array_equal(arr, image)
    for got, expected in zip(session.run({"image": arr}), want):
        assert got.tobytes() == expected.tobytes()


def test_nan_and_inf_pass_through_without_a_crash(session, image):
    bad = image.copy()
    bad[0, 0, :4, :4] = np.nan
    bad[0, 1, :4, :4] = np.inf
    outputs = session.run({"image": bad})
    assert [o.shape for o in outputs] == [o.shape for o in session.run({"image": image})]


@pytest.mark.parametrize("value, message", [
    (np.zeros((0, 3, 64, 64), np.float32), r"expected shape \[1, 3, 64, 64\], got \[0, 3, 64, 64\]"),
    (np.array([[1.0, 2.0], [3.0]], dtype=object), "expected dtype float32, got object"),
    (np.full((1, 3, 64, 64), "x"), "expected dtype float32, got str"),
    (np.zeros((1, 3, 64, 64), np.float64), "expected dtype float32, got float64"),
    (np.zeros((1, 3, 64, 64), np.float32).astype(">f8"), "expected dtype float32, got float64"),
])
def test_wrong_values_are_refused_by_name(session, value, message):
    with pytest.raises(RuntimeInputError, match=message):
        session.run({"image": value})
