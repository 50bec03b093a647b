"""Serving under load (aot/tools/soak.py): 16 client threads through one Batcher over a bucketed
bundle, a tenth of the requests malformed; every caller gets its own answer or its own error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aot import api
from aot.options import BuildOptions
from aot.tools import soak

sys.path.insert(0, str(Path(__file__).parents[1] / "buckets"))
import bucket_models  # noqa: E402

pytestmark = pytest.mark.device   # builds with IREE and runs the bundle


@pytest.fixture(scope="module")
def buckets(tmp_path_factory):
    cnn = bucket_models.batch_cnn(tmp_path_factory.mktemp("soak") / "cnn.onnx")
    return api.build(cnn, tmp_path_factory.mktemp("soak-out") / "out",
                     BuildOptions(accel=None, batch_buckets="1,2,4")).bundle.path


def test_a_thousand_requests_from_sixteen_threads_nothing_wrong_nothing_lost(buckets):
    result = soak.soak(buckets, requests=1000, clients=16, seed=3, watchdog_s=120)
    print(result.text())
    assert result.lost == 0 and result.wrong == 0 and not result.other_errors, result.text()
    assert result.malformed > 50 and result.refused == result.malformed
    assert result.ok and result.p99_ms >= result.p50_ms > 0


def test_the_soak_check_catches_a_wrong_answer(buckets, monkeypatch):
    """The comparison can fail: a batcher that swaps two answers is caught."""
    from aot.runtime import batching

    def swapped(self, batch):   # answers go to the wrong callers whenever a batch holds two or more
        results = self.session.run_batch([inputs for inputs, _ in batch])
        for (_, future), result in zip(batch, results[::-1]):
            future.set_result(result)

    monkeypatch.setattr(batching.Batcher, "_run", swapped)
    result = soak.soak(buckets, requests=200, clients=16, seed=4, watchdog_s=120)
    assert result.wrong > 0 and not result.ok


def test_closing_with_requests_in_flight_answers_every_one(buckets):
    answered, errors, seconds = soak.close_in_flight(buckets, requests=64)
    assert answered + errors == 64 and errors == 0 and seconds < 5
