"""``--measure`` compares bundles side by side: whole runs interleaved turn by turn, every
contender on the same inputs, regions timed alone. A fake session records what ran when."""

from pathlib import Path

import numpy as np

from aot.checks import measure
from tests.conftest import small_manifest


class _FakeSession:
    ran: list[tuple[str, float]] = []

    def __init__(self, bundle: Path, manifest) -> None:
        self.name = bundle.name

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def region_times(self, inputs, repeats):
        return {"r0": 5.0 if self.name == "a" else 7.0}

    def run(self, inputs):
        _FakeSession.ran.append((self.name, float(np.sum([np.sum(v) for v in inputs.values()]))))


def test_whole_runs_alternate_and_share_inputs(monkeypatch):
    monkeypatch.setattr(measure, "CheckSession", _FakeSession)
    _FakeSession.ran = []
    m = small_manifest()
    got = measure.side_by_side([measure.Contender("a", Path("a"), m), measure.Contender("b", Path("b"), m)],
                               repeats=4, warmup=1)
    names = [n for n, _ in _FakeSession.ran]
    assert len(names) == 2 * (4 + 1)
    # each turn runs both contenders, one after the other
    assert all(names[i] != names[i + 1] for i in range(0, len(names), 2))
    assert names.count("a") == names.count("b")
    assert len({total for _, total in _FakeSession.ran}) == 1       # the same seeded inputs for both
    assert got["a"].regions == {"r0": 5.0} and got["b"].regions == {"r0": 7.0}
    assert got["a"].whole_us > 0 and np.isfinite(got["a"].whole_us)
