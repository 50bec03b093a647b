"""`aot build --tune --tune-segments 4` for real on the CPU (MTCNN's ONet, host only): the record
holds each group's own flag search and both measured whole-run times, the plan kept follows the 3%
rule and is pinned in plan.json, the bundle matches onnxruntime, and a build of that plan file
tunes, times and compares nothing."""

from __future__ import annotations

import dataclasses
import math

import pytest

from aot import api, pipeline, report
from aot.checks import measure
from aot.models import zoo
from aot.options import BuildOptions
from aot.partition.plan import Plan
from aot.record import FlagPlan
from aot.tune import runtime as host_runtime, search, segments as tseg
from aot.tune.search import MIN_GAIN
from conftest import golden

# full: 105 s here at load average 7 (others' conformance runs beside it): over the 60 s a `make test` test
# gets; the whole-region search, the host runtime choice, each group's search and the comparison.
pytestmark = [pytest.mark.device, pytest.mark.network, pytest.mark.slow, pytest.mark.full]


def test_per_segment_tuning_records_each_groups_winner_and_both_times_and_replays_untimed(tmp_path, monkeypatch):
    # Fewer candidates and host runtimes than a real build tries (tests/tune/test_tune_build.py covers
    # those): what is tested here is the cut, the group searches, the comparison and the replay.
    offered = search.candidates
    monkeypatch.setattr(search, "candidates", lambda *a, **k: offered(*a, **k)[:4])
    monkeypatch.setattr(host_runtime, "configurations", lambda cores: (("local-task", ()), ("local-sync", ())))
    model = zoo.fetch(zoo.by_name("mtcnn-onet"))
    options = BuildOptions(accel=None, tune=True, tune_repeats=5, tune_segments=4)
    lines: list[str] = []
    result = api.build("zoo:mtcnn-onet", tmp_path / "tuned", options, progress=lines.append)
    bundle, rec = result.bundle.path, result.bundle.record
    outcome = rec.segment_tuning
    assert outcome is not None and len(outcome.groups) >= 2, lines
    assert outcome.single_us is not None and outcome.mixed_us is not None
    assert math.isfinite(outcome.single_us) and math.isfinite(outcome.mixed_us) and min(outcome.single_us,
                                                                                        outcome.mixed_us) > 0
    mixed_won = outcome.mixed_us < outcome.single_us * (1 - MIN_GAIN)
    assert outcome.kept is (FlagPlan.MIXED if mixed_won else FlagPlan.SINGLE) and outcome.margin == MIN_GAIN
    (source,) = {g.source for g in outcome.groups}
    whole_winner = None
    for g in outcome.groups:
        t = g.tuning
        correct = [c for c in t.candidates if c.rejected is None]
        assert 2 <= len(t.candidates) <= min(4, tseg.GROUP_CANDIDATES) and t.winner in {c.name for c in correct}
        assert all(c.max_abs_diff is not None and c.max_abs_diff < 1e-2 for c in correct)
        whole_winner = whole_winner or t.candidates[0].name
        assert t.candidates[0].name == whole_winner          # every group starts from the region's winner
    # The plan kept is pinned: its cuts and every region's flags, and the host runtime.
    plan = Plan.load(bundle / "plan.json")
    assert plan.host_runtime is not None and all(r.flags is not None for r in plan.regions)
    if outcome.kept is FlagPlan.MIXED:
        assert plan.schedule == tuple(g.region for g in outcome.groups)
        for g in outcome.groups:
            assert plan.region(g.region).flags == next(c.flags for c in g.tuning.candidates if c.name == g.tuning.winner)
    else:
        assert plan.schedule == (source,)
    assert [r.flags for r in result.bundle.manifest.regions] == [plan.region(n).flags for n in plan.schedule]
    golden(bundle, model)
    text = report.text(result.bundle.manifest, rec)
    assert f"kept the {outcome.kept.value}-flag plan" in text
    assert all(f"{g.region} (from {source}" in text and g.tuning.winner in text for g in outcome.groups)

    def forbidden(*args, **kwargs):
        raise AssertionError("a replayed plan must not tune, time or compare anything")

    for module, name in ((pipeline, "tune_regions"), (pipeline, "choose_host_runtime"), (pipeline, "tune_segments"),
                         (tseg, "compare"), (measure, "side_by_side")):
        monkeypatch.setattr(module, name, forbidden)
    replay = api.build("zoo:mtcnn-onet", tmp_path / "replay",
                       dataclasses.replace(options, tune=False, plan_file=bundle / "plan.json"))
    assert Plan.load(replay.bundle.path / "plan.json").digest() == plan.digest()
    assert replay.bundle.manifest.regions == result.bundle.manifest.regions
    assert replay.bundle.record.segment_tuning is None
    golden(replay.bundle.path, model)
