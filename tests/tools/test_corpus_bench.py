"""`make bench`'s model list and bookkeeping (no IREE): the zoo, the corpus's development models
and its held-out validation models; validation ratios never enter the tuned-on geometric mean;
a second run resumes from the rows the first kept."""

from __future__ import annotations

import dataclasses
import json

import pytest

from aot import api
from aot.checks import host_state
from aot.errors import AotError
from aot.models import corpus, zoo
from aot.tools import corpus_bench
from aot.tools.corpus_bench import CONTENDERS, DEFAULT, ORT, TUNED, Suite


def test_every_zoo_and_corpus_model_is_benched_in_its_suite():
    models = corpus_bench.bench_models()
    suites = {m.entry.name: m.suite for m in models}
    assert {n for n, s in suites.items() if s is Suite.ZOO} == {m.name for m in zoo.MODELS}
    assert {n for n, s in suites.items() if s is Suite.VALIDATION} == set(corpus.VALIDATION)
    assert len(models) == len(zoo.MODELS) + len(corpus.CORPUS)
    assert {m.source.split(":")[0] for m in models if m.suite is not Suite.ZOO} == {"corpus"}


def test_an_unknown_name_is_refused_before_anything_is_built():
    with pytest.raises(AotError, match="no-such-model"):
        corpus_bench.bench_models(("mtcnn-onet", "no-such-model"))


def _row(name, suite, ratio):
    return {"model": name, "suite": suite, "medians_ms": dict.fromkeys(CONTENDERS, 1.0), "ratios": {f"{DEFAULT} / {ORT}": ratio,
                                                                         f"{TUNED} / {ORT}": ratio}}


def test_a_second_run_resumes_and_keeps_validation_apart(tmp_path, monkeypatch):
    picks = ("mtcnn-onet", corpus.development()[0].name, corpus.VALIDATION[0])
    for name, suite, ratio in zip(picks, ("zoo", "development", "validation"), (1.0, 4.0, 100.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "row.json").write_text(json.dumps(_row(name, suite, ratio)))

    def no_build(*args, **kwargs):
        raise AssertionError("a kept row must not be built again")

    monkeypatch.setattr(api, "build", no_build)
    result = corpus_bench.run(tmp_path, picks, progress=lambda s: None)
    assert [r["model"] for r in result["models"]] == list(picks)
    assert result["geomean"][f"{TUNED} / {ORT}"] == pytest.approx(2.0)          # 1 and 4: the held-out 100 left out
    assert result["geomean_validation"][f"{TUNED} / {ORT}"] == pytest.approx(100.0)
    assert "held-out validation models" in corpus_bench.text(result) and result["wall_s"] >= 0


def test_a_run_of_validation_models_alone_writes_its_table_and_chart(tmp_path, monkeypatch):
    name = corpus.VALIDATION[0]
    (tmp_path / name).mkdir()
    (tmp_path / name / "row.json").write_text(json.dumps(_row(name, "validation", 1.25)))
    monkeypatch.setattr(api, "build", lambda *a, **k: pytest.fail("a kept row must not be built again"))
    result = corpus_bench.run(tmp_path, (name,), progress=lambda s: None)
    assert result["geomean"] == {}
    assert "development models: none in this run" in corpus_bench.text(result)
    data, chart = corpus_bench.write(result, tmp_path / "docs")
    assert json.loads(data.read_text())["geomean_validation"][f"{TUNED} / {ORT}"] == pytest.approx(1.25)
    assert f">{name}<" in chart.read_text() and ">geomean<" not in chart.read_text()


def _medians(ort, tuned):
    return {ORT: ort, corpus_bench.ORT1: ort, DEFAULT: tuned, TUNED: tuned}


def _timed(medians, checks_us=1.0, contended=None):
    return corpus_bench.Timed(host_state.Medians(medians, {}, contended), checks_us)


def test_a_sub_millisecond_model_is_timed_three_times_and_reported_by_its_median_run():
    runs = iter([_timed(_medians(0.1, 0.15), 1.0), _timed(_medians(0.1, 0.30), 2.0), _timed(_medians(0.1, 0.12), 3.0)])
    timed = corpus_bench._timed_runs(lambda: next(runs))
    assert len(timed) == corpus_bench.SUB_MS_RUNS == 3
    assert [t.medians.headline[TUNED] for t in timed] == [0.12, 0.15, 0.30]   # sorted by tuned / ort: the middle is the median
    slow = iter([_timed(_medians(2.0, 3.0)), _timed(_medians(2.0, 9.0))])
    assert [t.medians.headline[TUNED] for t in corpus_bench._timed_runs(lambda: next(slow))] == [3.0]   # 1 ms or more: one run
    row = {**_row("mtcnn-rnet", "zoo", 1.5), "runs": [corpus_bench._ratios(t.medians.headline) for t in timed]}
    text = corpus_bench.text({"machine": {"cpu": "cpu", "cores": 2}, "iterations": 30, "models": [row],
                              "geomean": {}})
    assert "tuned/ort over 3 runs: 1.20-3.00" in text


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0])
def test_a_median_that_is_not_a_time_fails_the_row(bad):
    with pytest.raises(AotError, match="not a positive finite time"):
        corpus_bench._timed_runs(lambda: _timed(_medians(2.0, bad)))
    with pytest.raises(AotError, match="not a positive finite time"):     # a contended median too
        corpus_bench._timed_runs(lambda: _timed(_medians(2.0, 3.0), contended=_medians(2.0, bad)))


def _split(uncontended_turns, contended_turns):
    """Turns where the tuned bundle took 1 ms when the second core answered and 3 ms when not."""
    return host_state.ByState({c: [1e-3] * uncontended_turns for c in CONTENDERS}, {c: [3e-3] * contended_turns for c in CONTENDERS},
                   (1.6,) * uncontended_turns + (1.1,) * contended_turns)


def test_a_row_is_the_uncontended_turns_with_the_contended_beside():
    medians, state, contended = dataclasses.astuple(host_state.medians_by_state(_split(20, 10), iterations=30))
    assert medians[TUNED] == pytest.approx(1.0) and contended[TUNED] == pytest.approx(3.0)
    assert state["timed_in"] == "uncontended" and (state["turns_uncontended"], state["turns_contended"]) == (20, 10)
    row = {**_row("mtcnn-rnet", "zoo", 1.0), "host_state": state, "ratios_contended": corpus_bench._ratios(contended)}
    assert "[20 of 30 turns uncontended; contended turns: tuned/ort 1.00]" in corpus_bench._state_text(row)


def test_a_mostly_contended_run_reports_every_turn_and_says_so():
    medians, state, contended = dataclasses.astuple(host_state.medians_by_state(_split(4, 86), iterations=30))
    assert medians[TUNED] == pytest.approx(3.0)                       # the median of all 90 turns
    assert state["timed_in"] != "uncontended" and contended[TUNED] == pytest.approx(3.0)
    assert "every turn counted" in corpus_bench._state_text({**_row("x", "zoo", 1.0), "host_state": state})
    few = host_state.medians_by_state(_split(28, host_state.MIN_CONTENDED_TURNS - 1), iterations=30)
    assert few.contended is None                                              # too few contended turns: none beside


def test_the_single_model_bench_says_which_turns_its_medians_are():
    from aot.tools.bench import BARE, BenchResult

    medians = host_state.medians_by_state(_split(4, 86), iterations=30)
    names = ("bundle (all regions on host)", "whole model (llvm-cpu)", "onnxruntime (cpu)", BARE)
    result = BenchResult("m", 1, 30, tuple((n, 1.0) for n in names), host_state.state_text(medians.state))
    assert "30 interleaved iterations (4 of 90 turns uncontended, every turn counted)" in result.text()
