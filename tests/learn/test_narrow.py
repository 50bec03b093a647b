"""``--tune-top K``: the learned model chooses which flag sets the tuner compiles and times."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aot import api
from aot.errors import AotError
from aot.learn import narrow_eval
from aot.learn.dataset import GraphData, MeasuredPlan
from aot.learn.features import PLAN_DIM, PLAN_SCALARS, encode, node_features, shape_of
from aot.learn.host_plans import host_plans
from aot.learn.key import device_fingerprint
from aot.learn.model import PREDICTION_ALONE, ChoiceWeights, LearnedModel, Mode
from aot.learn.neighbours import GraphEffects, prior, signature
from aot.learn.narrow import flag_key, learned_chooser
from aot.lower.flags import IM2COL
from aot.runtime.manifest import HostRuntime
from aot.learn.trees import Forest, Tree
from aot.frontend.source import region_families
from aot.options import BuildOptions
from aot.partition.partitioner import single_region_plan
from aot.partition.plan import GateMode
from aot.partition.support import HOST
from aot import record
from aot.pipeline import build, plan_model
from aot.report import tuning_text
from aot.tune.candidates import candidates
from test_host_plans import _conv_chain

HOST_ONLY = BuildOptions(accel=None)


def _stump(feature: str, faster_by: float) -> Tree:
    """One split on a plan scalar: plans that hold it predicted ``faster_by`` lower (log us)."""
    return Tree(feature=np.array([PLAN_SCALARS.index(feature), -2, -2]), threshold=np.array([0.5, -2.0, -2.0]),
                left=np.array([1, -1, -1]), right=np.array([2, -1, -1]), value=np.array([0.0, 0.0, -faster_by]))


def _model(path, fingerprint: str, wins: tuple = ()) -> LearnedModel:
    """O2 predicted much faster, data tiling a little: the ranking is known in advance."""
    cost = Forest(7.0, 1.0, PLAN_DIM, (_stump("host_share_O2", 3.0), _stump("host_share_data_tiling", 1.0)))
    model = LearnedModel(Mode.PLAN, cost, 0.0, 0.0, None, fingerprint, "test-model", (), tuner_wins=wins)
    model.save(path)
    return model


def test_the_default_and_the_predicted_fastest_are_kept(tmp_path):
    path, options = api.resolve(_conv_chain(tmp_path / "chain.onnx"), HOST_ONLY)
    planned = plan_model(path, dataclasses.replace(options, gate=GateMode.OFF), suggest=False)
    _model(tmp_path / "model.json", device_fingerprint(options))
    options = dataclasses.replace(options, cost_model=tmp_path / "model.json")
    plan = single_region_plan(planned.view, HOST)
    made: dict = {}
    choose, why = learned_chooser(plan, planned.view, options, 3, made)
    assert choose is not None and why == ""
    offered = candidates(options.host, region_families(planned.source, planned.view, plan.regions[0].nodes))
    kept = choose(plan.regions[0].name, offered)
    # O2 and data tiling together come first (one set holds both), then O2 alone, the first offered.
    assert [s.name for s in kept] == ["default", "channels-last+data-tiling", "O2"]
    narrowing = made[plan.regions[0].name]
    assert narrowing.kept == tuple(s.name for s in kept) and narrowing.model == "test-model"
    assert [n for n, _ in narrowing.predicted] == [s.name for s in offered]
    assert all(np.isfinite(us) and us > 0 for _, us in narrowing.predicted)
    assert all(n == 0 for _, n in narrowing.wins)          # this model counted no wins
    # Fewer candidates than K: nothing to narrow.
    assert choose(plan.regions[0].name, offered[:2]) == offered[:2]


def test_the_sets_that_won_most_in_training_come_before_the_prediction(tmp_path):
    """``O3`` won on two training graphs: it is timed though predicted slow; the prediction fills
    the rest (``channels-last+data-tiling``: O2 and data tiling, predicted fastest)."""
    path, options = api.resolve(_conv_chain(tmp_path / "chain.onnx"), HOST_ONLY)
    planned = plan_model(path, dataclasses.replace(options, gate=GateMode.OFF), suggest=False)
    plan = single_region_plan(planned.view, HOST)
    offered = candidates(options.host, region_families(planned.source, planned.view, plan.regions[0].nodes))
    o3 = next(s for s in offered if s.name == "O3")
    _model(tmp_path / "model.json", device_fingerprint(options), wins=((flag_key(o3.flags), 2),))
    made: dict = {}
    choose, _ = learned_chooser(plan, planned.view, dataclasses.replace(options, cost_model=tmp_path / "model.json"),
                                3, made)
    assert choose is not None
    assert [s.name for s in choose(plan.regions[0].name, offered)] == ["default", "O3", "channels-last+data-tiling"]
    assert dict(made[plan.regions[0].name].wins)["O3"] == 2
    # The key forgets the convolution base and the order: one set has one key on any model.
    assert flag_key(o3.flags) == flag_key(tuple(reversed([f for f in o3.flags if f != IM2COL])))


def test_a_model_that_predicts_nan_is_refused_by_name(tmp_path, monkeypatch):
    """A model file with a NaN is refused when it loads; one that predicts NaN anyway (built in
    memory here) is refused before a choice is made on it."""
    path, options = api.resolve(_conv_chain(tmp_path / "chain.onnx"), HOST_ONLY)
    planned = plan_model(path, dataclasses.replace(options, gate=GateMode.OFF), suggest=False)
    broken = LearnedModel(Mode.PLAN, Forest(float("nan"), 1.0, PLAN_DIM, ()), 0.0, 0.0, None,
                          device_fingerprint(options), "nan", ())
    (tmp_path / "nan.json").write_text("{}")
    monkeypatch.setattr(LearnedModel, "load", classmethod(lambda cls, p: broken))
    plan = single_region_plan(planned.view, HOST)
    choose, _ = learned_chooser(plan, planned.view, dataclasses.replace(options, cost_model=tmp_path / "nan.json"),
                                3, {})
    assert choose is not None
    offered = candidates(options.host, region_families(planned.source, planned.view, plan.regions[0].nodes))
    with pytest.raises(AotError, match=r"nan\.json.*non-finite time for region 'r0'") as e:
        choose(plan.regions[0].name, offered)
    assert "--tune-top" in e.value.hint


def test_a_model_of_other_devices_or_none_narrows_nothing(tmp_path):
    path, options = api.resolve(_conv_chain(tmp_path / "chain.onnx"), HOST_ONLY)
    planned = plan_model(path, dataclasses.replace(options, gate=GateMode.OFF), suggest=False)
    plan = single_region_plan(planned.view, HOST)
    _model(tmp_path / "other.json", "vulkan-spirv:llvmpipe host=x86-64-v3 cores=64")
    choose, why = learned_chooser(plan, planned.view, dataclasses.replace(options, cost_model=tmp_path / "other.json"),
                                  3, {})
    assert choose is None and "trained on 'vulkan-spirv:llvmpipe" in why and "every candidate is timed" in why


@pytest.mark.device    # compiles the kept candidates with IREE and times them
def test_a_narrowed_tuning_times_only_the_kept_sets_and_records_the_rest(tmp_path):
    model_path = _conv_chain(tmp_path / "chain.onnx")
    path, options = api.resolve(model_path, HOST_ONLY)
    _model(tmp_path / "model.json", device_fingerprint(options))
    options = BuildOptions(accel=None, tune=True, tune_repeats=3, tune_top=2, cost_model=tmp_path / "model.json")
    result = build(model_path, tmp_path / "out", options)
    tuning = result.bundle.record.regions[0].tuning
    assert tuning is not None and tuning.narrowed is not None
    assert [c.name for c in tuning.candidates] == ["default", "channels-last+data-tiling"]
    assert tuning.narrowed.kept == ("default", "channels-last+data-tiling") and len(tuning.narrowed.predicted) > 2
    assert record.read(result.bundle.path) == result.bundle.record        # and so the file says
    assert "--tune-top: timed 2 of" in tuning_text(result.bundle.manifest, result.bundle.record)


def _graph(tmp_path, name: str, times: dict[str, float], sync_slower: float | None = None):
    """The conv chain's whole-model flag-set plans with made-up times (others 200 us), on
    local-task; with ``sync_slower``, on local-sync too, each that many times slower."""
    path, options = api.resolve(_conv_chain(tmp_path / f"{name}.onnx"), HOST_ONLY)
    planned = plan_model(path, dataclasses.replace(options, gate=GateMode.OFF), suggest=False)
    codes = encode(planned.view, None)
    plans = []
    for hp in host_plans(planned, options.host, seed=0):
        flavour = hp.origin.split(" ")
        factor = 1.0 if flavour[2] == "runtime=local-task" else sync_slower
        if flavour[0] != "regions=1" or factor is None:
            continue
        us = factor * times.get(flavour[1].removeprefix("flags="), 200.0)
        plans.append(MeasuredPlan(hp.origin, hp.plan, shape_of(hp.plan, planned.view, codes), us, None, (us,)))
    return GraphData(name, False, planned.view, codes, node_features(planned.view, codes), tuple(plans))


def test_narrowing_regret_against_the_untuned_build_and_the_prediction_alone(tmp_path):
    held = _graph(tmp_path, "held", {"default": 100.0, "data-tiling": 50.0, "channels-last+data-tiling": 60.0})
    train = (_graph(tmp_path, "train", {"data-tiling": 10.0}), _graph(tmp_path, "train2", {"O3": 10.0}),
             _graph(tmp_path, "train3", {"data-tiling": 20.0}))
    wins = narrow_eval.tuner_wins(train)
    assert [n for _, n in wins] == [2, 1]                      # data tiling won twice, O3 once
    # predicts the sets with O2 and data tiling fastest; counted the training graphs' wins
    model = _model(tmp_path / "model.json", "fp", wins)
    score = narrow_eval.narrowing(held, model, top=3)
    assert score is not None and score.candidates == len(held.plans) > 3
    assert score.untuned == pytest.approx(1.0)                 # the default's 100 us against the best, 50
    assert score.predicted == pytest.approx(0.2)               # it timed channels-last+data-tiling: 60 us
    assert score.tune_top == pytest.approx(0.0)                # data tiling won most in training: it is timed
    assert score.in_turn == pytest.approx(0.0)                 # the predicted best, then data tiling
    assert narrow_eval.narrowing(held, model, top=len(held.plans)) is None   # nothing to narrow
    both = narrow_eval.mean([score, score])
    assert both.candidates == 2 * score.candidates and both.predicted == pytest.approx(0.2)


def test_without_a_cost_model_the_one_shipped_for_these_devices_narrows(tmp_path, monkeypatch):
    from aot.learn import model as learned_model, narrow

    path, options = api.resolve(_conv_chain(tmp_path / "chain.onnx"), HOST_ONLY)
    planned = plan_model(path, dataclasses.replace(options, gate=GateMode.OFF), suggest=False)
    plan = single_region_plan(planned.view, HOST)
    here = device_fingerprint(options)
    monkeypatch.setattr(learned_model, "SHIPPED", tmp_path / "shipped")
    monkeypatch.setattr(narrow, "shipped_model", learned_model.shipped_model)
    choose, why = learned_chooser(plan, planned.view, options, 3, {})
    assert choose is None and f"none shipped for {here!r}" in why          # nothing ships for them yet
    (tmp_path / "shipped").mkdir()
    _model(learned_model.shipped_path(here), here)
    made: dict = {}
    choose, why = learned_chooser(plan, planned.view, options, 3, made)
    assert choose is not None and why == ""
    offered = candidates(options.host, region_families(planned.source, planned.view, plan.regions[0].nodes))
    assert len(choose(plan.regions[0].name, offered)) == 3 and made[plan.regions[0].name].model == "test-model"


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_the_fastest_predictions_refuse_a_non_finite_one(bad):
    from aot.learn.narrow import fastest

    assert fastest([3.0, 1.0, 2.0, 1.0], 3) == [1, 3, 2]     # lowest first, a tie in offered order
    with pytest.raises(ValueError, match="not finite"):
        fastest([3.0, bad, 2.0], 2)


def test_in_turn_takes_the_predicted_best_then_the_most_won_then_the_next_predicted():
    from aot.learn.narrow import in_turn

    predicted, wins = [1.0, 5.0, 2.0, 4.0, 3.0], [0, 3, 0, 0, 1]
    assert in_turn(predicted, 2, wins) == [0, 1]           # predicted best, then the most wins
    assert in_turn(predicted, 4, wins) == [0, 1, 2, 4]     # second predicted, then second most won
    assert in_turn([1.0, 2.0, 3.0], 2, [5, 0, 0]) == [0, 1]   # one set first in both: taken once
    assert in_turn(predicted, 9, wins) == [0, 1, 2, 4, 3]  # never more than offered, none twice
    with pytest.raises(ValueError, match="not finite"):
        in_turn([1.0, float("nan")], 1, [0, 0])


def test_a_set_that_lost_badly_in_training_carries_its_risk_into_the_choice(tmp_path):
    """data tiling won once and ran 8x slower than the default once; O3 only ever won. Held out,
    the cost model predicts data tiling 10% ahead of O3: the raw prediction picks data tiling,
    the model's choice (the prediction weighed by the risk) picks O3."""
    train = (_graph(tmp_path, "won", {"default": 100.0, "data-tiling": 50.0, "O3": 90.0}),
             _graph(tmp_path, "lost", {"default": 100.0, "data-tiling": 800.0, "O3": 95.0}))
    risk = dict(narrow_eval.flag_risk(train))
    by_name = {p.key.split(" ")[1].removeprefix("flags="): p for p in train[0].plans}
    data_tiling, o3 = (flag_key(by_name[n].plan.regions[0].flags) for n in ("data-tiling", "O3"))
    assert risk[data_tiling] == pytest.approx(np.sqrt(np.log(8.0) ** 2 / 2))
    assert risk[o3] == 0.0 and risk[flag_key(by_name["default"].plan.regions[0].flags)] == 0.0
    model = dataclasses.replace(_model(tmp_path / "model.json", "fp"), flag_risk=tuple(risk.items()),
                                weights=ChoiceWeights(1.0, 0.0))
    plans = [by_name["data-tiling"].plan, by_name["O3"].plan]
    predicted = np.array([90.0, 100.0])
    assert int(np.argmin(predicted)) == 0
    ranked = model.ranking_us(plans, predicted)
    assert np.all(np.isfinite(ranked)) and int(np.argmin(ranked)) == 1
    # A model trained with the default weights chooses by the prediction alone (docs/learned.md).
    alone = dataclasses.replace(model, weights=PREDICTION_ALONE)
    assert np.array_equal(alone.ranking_us(plans, predicted), predicted)
    # A plan that pins no flags (the accelerator's regions, an unpinned host region) has no risk.
    unpinned = dataclasses.replace(plans[0], regions=tuple(dataclasses.replace(r, flags=None) for r in plans[0].regions))
    assert model.risk(unpinned) == 0.0 and model.ranking_us([unpinned], [90.0])[0] == 90.0


def test_what_similar_graphs_measured_steers_the_choice_and_dissimilar_ones_barely_count(tmp_path):
    """Each training graph keeps its measured effects: every whole-model flag set against the
    default, local-sync against local-task. A held-out graph weighs them by how alike the graphs
    are: the cost model predicts O3 10% ahead of data tiling, but a graph like this one measured
    data tiling at half the default's time, so the model's choice is data tiling."""
    lookalike = _graph(tmp_path, "lookalike", {"default": 100.0, "data-tiling": 50.0, "O3": 100.0},
                       sync_slower=4.0)
    (effects,) = narrow_eval.graph_effects([lookalike, dataclasses.replace(lookalike, generated=True)])
    by_name = {p.key.split(" ")[1].removeprefix("flags="): p for p in lookalike.plans if "local-task" in p.key}
    data_tiling, o3, default = (flag_key(by_name[n].plan.regions[0].flags) for n in ("data-tiling", "O3", "default"))
    flags = dict(effects.flags)
    assert flags[data_tiling] == pytest.approx(np.log(0.5), abs=1e-6) and flags[default] == 0.0
    assert flags[o3] == 0.0 and effects.runtime == pytest.approx(np.log(4.0), abs=1e-6)
    assert effects.signature == pytest.approx(tuple(signature(lookalike.codes)), abs=1e-6)
    # A graph of another kind (all its FLOPs in matmuls, 1000x the size) measured the opposite.
    unlike = GraphEffects((0.0, 0.0, 1.0, 0.0, effects.signature[-1] + 1.0), ((data_tiling, float(np.log(8.0))),), None)
    near = prior((effects, unlike), lookalike.codes)
    sig = signature(lookalike.codes)
    assert sig[0] > 0.95                                      # its FLOPs are nearly all convolution
    w = np.exp(-np.sum((sig - np.array(unlike.signature)) ** 2))     # about exp(-3) at width 1
    assert near.flag_effect[data_tiling] == pytest.approx((np.log(0.5) + w * np.log(8.0)) / (1 + w), abs=1e-5)
    assert prior((unlike,), lookalike.codes).flag_effect[data_tiling] == pytest.approx(np.log(8.0))  # all there is
    model = dataclasses.replace(_model(tmp_path / "model.json", "fp"), neighbours=(effects, unlike),
                                weights=ChoiceWeights(0.0, 1.0))
    plans = [by_name["data-tiling"].plan, by_name["O3"].plan]
    predicted = np.array([110.0, 100.0])
    unweighed, weighed = model.ranking_us(plans, predicted), model.ranking_us(plans, predicted, lookalike.codes)
    assert np.all(np.isfinite(unweighed)) and np.all(np.isfinite(weighed))    # argmin would pick a NaN
    assert int(np.argmin(unweighed)) == 1                                      # without the graph: as predicted
    assert int(np.argmin(weighed)) == 0
    alone = dataclasses.replace(model, weights=PREDICTION_ALONE)            # the prior weighed 0: as predicted
    as_predicted = alone.ranking_us(plans, predicted, lookalike.codes)
    assert np.all(np.isfinite(as_predicted)) and int(np.argmin(as_predicted)) == 1
    synced = dataclasses.replace(by_name["default"].plan, host_runtime=HostRuntime("local-sync", ()))
    assert near.of(synced) == pytest.approx(np.log(4.0), abs=1e-5)           # the runtime's effect alone


def test_a_set_the_tuner_no_longer_offers_wins_nothing(tmp_path):
    """A database keeps plans measured with a retired set (the data-tiled-conv set at O2): where
    one is the fastest, the win goes to the fastest set still offered, so that ``--tune-top`` does
    not spend a slot on a set it can no longer time; no search is scored on it either."""
    from aot.lower.flags import flag_key
    from aot.tune.candidates import DATA_TILED_CONV, RETIRED_HOST_SETS

    g = _graph(tmp_path, "g", {"data-tiled-conv": 30.0, "data-tiling": 40.0})
    base = next(p for p in g.plans if p.key.split(" ")[1] == "flags=data-tiled-conv")   # _graph keys by origin
    region = dataclasses.replace(base.plan.regions[0], flags=RETIRED_HOST_SETS[0].flags)
    retired = dataclasses.replace(base, key="retired", plan=dataclasses.replace(base.plan, regions=(region,)),
                                  total_us=10.0)
    with_retired = dataclasses.replace(g, plans=(*g.plans, retired))
    assert with_retired.best() is retired                                   # the fastest plan measured
    assert not narrow_eval.offered(retired) and all(narrow_eval.offered(p) for p in g.plans)
    assert flag_key(RETIRED_HOST_SETS[0].flags) not in narrow_eval.tuner_plans(with_retired)
    assert set(narrow_eval.tuner_plans(with_retired)) == set(narrow_eval.tuner_plans(g))
    assert narrow_eval.tuner_wins([with_retired]) == ((flag_key(DATA_TILED_CONV.flags), 1),)
    model = _model(tmp_path / "model.json", "fp")
    assert narrow_eval.narrowing(with_retired, model) == narrow_eval.narrowing(g, model) is not None   # its 10 us is no one's best
