"""The learned cost model: trees exported to JSON and evaluated with numpy exactly as sklearn
predicts, the model file's errors and its atomic write, the features, the metrics, training and
the leave-one-model-out evaluation on a synthetic cost database."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aot.checks.compare import assert_close
from aot.errors import AotError
from aot.learn import evaluate
from aot.learn.dataset import load_dataset
from aot.learn.features import (DISPATCH_SCALARS, GEOMETRY_SCALARS, LATE_SCALARS, PLAN_DIM, REGION_DIM, WIDTHS, encode,
                                node_features, shape_of)
from aot.learn.geometry import Geometry
from aot.lower.flags import DATA_TILING, VECTOR_256
from aot.learn.model import BEFORE_WEIGHTS, PREDICTION_ALONE, ChoiceWeights, LearnedModel, Mode
from aot.learn.neighbours import GraphEffects
from aot.learn.train import ModeChoice, fit
from aot.learn.trees import Forest, ModelFileError, from_sklearn
from aot.partition.partitioner import plan_from_groups, single_region_plan
from aot.partition.support import ACCEL, HOST, Group

sklearn = pytest.importorskip("sklearn.ensemble", reason="the [learn] extra (scikit-learn) is not installed")
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import synthetic  # noqa: E402
from synthetic import synthetic_db  # noqa: E402,F401 - a fixture


def _data(seed: int = 0, n: int = 400, width: int = 12):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, width))
    x[:, 3] = rng.integers(0, 4, size=n)          # a discrete column: values land exactly on split points
    y = 3 * x[:, 0] + np.sin(2 * x[:, 1]) + (x[:, 3] > 1) + 0.1 * rng.normal(size=n)
    return x, y


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_trees_predict_exactly_what_sklearn_predicts(seed):
    x, y = _data(seed)
    reg = sklearn.GradientBoostingRegressor(n_estimators=60, max_depth=4, subsample=0.8, random_state=seed).fit(x, y)
    clf = sklearn.GradientBoostingClassifier(n_estimators=40, max_depth=3, random_state=seed).fit(x, y > 0)
    probe = np.vstack([_data(seed + 10)[0], x[:50]])
    forest = Forest.from_json(json.loads(json.dumps(from_sklearn(reg, x).to_json())), "test")
    ours = forest.raw(probe)
    assert np.all(np.isfinite(ours))
    assert_close(ours, reg.predict(probe), atol=1e-9, what="regressor")
    cforest = Forest.from_json(json.loads(json.dumps(from_sklearn(clf, x).to_json())), "test")
    p = cforest.probability(probe)
    assert np.all(np.isfinite(p))
    assert_close(p, clf.predict_proba(probe)[:, 1], atol=1e-9, what="classifier")


def test_the_cost_model_is_the_mean_of_its_seeded_forests():
    from aot.learn import train

    x, y = _data(3)
    bagged = train._regressor(sklearn, x, y, estimators=30)
    alone = [sklearn.GradientBoostingRegressor(n_estimators=30, max_depth=3, learning_rate=0.05, subsample=0.8,
                                               random_state=train.SEED + i).fit(x, y) for i in range(train.BAG)]
    assert train.BAG > 1 and len(bagged.trees) == 30 * train.BAG
    probe = _data(13)[0]
    assert_close(bagged.raw(probe), np.mean([m.predict(probe) for m in alone], axis=0), atol=1e-9, what="bag")
    # Fewer than 20 rows: no subsampling, so one forest (every seed would fit the same one).
    assert len(train._regressor(sklearn, x[:10], y[:10], estimators=30).trees) == 30


def test_a_forest_refuses_trees_that_point_outside_themselves_or_the_wrong_width():
    x, y = _data()
    good = from_sklearn(sklearn.GradientBoostingRegressor(n_estimators=3).fit(x, y), x).to_json()
    bad = json.loads(json.dumps(good))
    bad["trees"][0]["left"][0] = 10_000
    with pytest.raises(ModelFileError, match="points outside"):
        Forest.from_json(bad, "m.json")
    bad = json.loads(json.dumps(good))
    bad["trees"][1]["value"][0] = float("nan")
    with pytest.raises(ModelFileError):
        Forest.from_json(bad, "m.json")
    with pytest.raises(ModelFileError, match="expects 12 features"):
        Forest.from_json(good, "m.json").raw(np.zeros((2, 5)))


def _tiny_model(fingerprint: str = "fp", mode: Mode = Mode.PLAN) -> LearnedModel:
    width = PLAN_DIM if mode is Mode.PLAN else REGION_DIM
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, width))
    y = np.abs(x[:, 0]) + 1
    cost = from_sklearn(sklearn.GradientBoostingRegressor(n_estimators=5).fit(x, y), x)
    return LearnedModel(mode, cost, 1.0, 0.0, None, fingerprint, "digest", (("aot", "test"),),
                        tuner_wins=((("--a", "--b"), 3), (("(no optimisation flags)",), 1)),
                        flag_risk=((("--a", "--b"), 0.5), (("--c",), 0.0)),
                        neighbours=(GraphEffects((0.5, 0.0, 0.5, 0.0, 2.0), ((("--a",), -0.7),), 0.25),
                                    GraphEffects((0.0, 0.0, 1.0, 0.0, 3.0), (), None)))


def test_model_file_round_trip_and_clear_errors(tmp_path):
    m = _tiny_model()
    path = m.save(tmp_path / "model.json")
    again = LearnedModel.load(path)
    assert again == dataclass_eq(again, m)
    assert again.tuner_wins == m.tuner_wins and again.wins(("--a", "--b")) == 3 and again.wins(("--c",)) == 0
    assert again.flag_risk == m.flag_risk and again.neighbours == m.neighbours
    with pytest.raises(ModelFileError, match=r"missing\.json.*") as e:
        LearnedModel.load(tmp_path / "missing.json")
    assert "aot learn train" in e.value.hint
    (tmp_path / "cut.json").write_text(path.read_text()[:200])
    with pytest.raises(ModelFileError, match="cut.json.*not JSON"):
        LearnedModel.load(tmp_path / "cut.json")
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(ModelFileError, match="not an aot learned model"):
        LearnedModel.load(tmp_path / "other.json")
    data = json.loads(path.read_text())
    data["feature_version"] = 999
    (tmp_path / "old.json").write_text(json.dumps(data))
    with pytest.raises(ModelFileError, match="999"):
        LearnedModel.load(tmp_path / "old.json")
    for bad in ([["--a"], -1], [["--a"], 1.5], ["--a", 1], [[3], 1], [["--a"]]):
        data = json.loads(path.read_text())
        data["tuner_wins"] = [bad]
        (tmp_path / "wins.json").write_text(json.dumps(data))
        with pytest.raises(ModelFileError, match=r"wins\.json': malformed learned model"):
            LearnedModel.load(tmp_path / "wins.json")
    for bad in ([["--a"], -0.5], [["--a"], float("nan")], [["--a"], True], [[3], 0.1], [["--a"]]):
        data = json.loads(path.read_text())
        data["flag_risk"] = [bad]
        (tmp_path / "risk.json").write_text(json.dumps(data))
        with pytest.raises(ModelFileError, match=r"risk\.json': malformed learned model"):
            LearnedModel.load(tmp_path / "risk.json")
    for bad in ({"signature": [0.5], "flags": [], "runtime": None},
                {"signature": [0.0, 0.0, 1.0, 0.0, float("nan")], "flags": [], "runtime": None},
                {"signature": [0.0, 0.0, 1.0, 0.0, 2.0], "flags": [[["--a"], "fast"]], "runtime": None},
                {"signature": [0.0, 0.0, 1.0, 0.0, 2.0], "flags": [], "runtime": float("inf")},
                {"signature": [0.0, 0.0, 1.0, 0.0, 2.0], "flags": [[["--a"], "0.5"]], "runtime": None},
                {"signature": [0.0, 0.0, True, 0.0, 2.0], "flags": [], "runtime": None},
                {"signature": [0.0, 0.0, 1.0, 0.0, 2.0], "flags": []}):
        data = json.loads(path.read_text())
        data["neighbours"] = [bad]
        (tmp_path / "near.json").write_text(json.dumps(data))
        with pytest.raises(ModelFileError, match=r"near\.json': malformed learned model"):
            LearnedModel.load(tmp_path / "near.json")
    for bad in ({"risk": -1.0, "prior": 0.0}, {"risk": float("inf"), "prior": 0.0}, {"risk": True, "prior": 0.0},
                {"risk": "1", "prior": 0.0}, {"risk": 1.0}, [1.0, 1.0]):
        data = json.loads(path.read_text())
        data["choice_weights"] = bad
        (tmp_path / "weights.json").write_text(json.dumps(data))
        with pytest.raises(ModelFileError, match=r"weights\.json': malformed learned model"):
            LearnedModel.load(tmp_path / "weights.json")
    data = json.loads(path.read_text())
    del data["flag_risk"], data["neighbours"], data["choice_weights"]   # trained before the risk and prior: none
    (tmp_path / "before.json").write_text(json.dumps(data))
    assert LearnedModel.load(tmp_path / "before.json").flag_risk == ()
    assert LearnedModel.load(tmp_path / "before.json").neighbours == ()
    # ... and one written before its file kept the choice weights was trained to be used with both at 1
    assert again.weights == PREDICTION_ALONE and LearnedModel.load(tmp_path / "before.json").weights == BEFORE_WEIGHTS
    weighed = dataclasses.replace(m, weights=ChoiceWeights(0.5, 2.0))
    assert LearnedModel.load(weighed.save(tmp_path / "weighed.json")).weights == ChoiceWeights(0.5, 2.0)
    assert m.mismatch("fp") is None and "trained on 'fp'" in m.mismatch("other devices")


def dataclass_eq(a: LearnedModel, b: LearnedModel) -> LearnedModel:
    """``b`` if ``a`` holds the same numbers (dataclass equality on numpy arrays is ambiguous)."""
    x = np.random.default_rng(1).normal(size=(20, a.cost.features))
    assert (a.mode, a.fingerprint, a.training_set, a.versions) == (b.mode, b.fingerprint, b.training_set, b.versions)
    assert np.array_equal(a.cost.raw(x), b.cost.raw(x))
    return a


_KILLED_WRITER = """
import os, pathlib, signal, sys
sys.path.insert(0, {here!r})
from aot.learn.model import LearnedModel
import json
real = pathlib.Path.write_bytes
def half_then_die(self, data):
    with open(self, "wb") as f:
        f.write(data[: len(data) // 2]); f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
pathlib.Path.write_bytes = half_then_die
model = LearnedModel.load(pathlib.Path({src!r}))
model.save(pathlib.Path({dst!r}))
"""


def test_a_trainer_killed_while_writing_leaves_the_previous_model_intact(tmp_path):
    previous = _tiny_model("previous").save(tmp_path / "model.json")
    before = previous.read_bytes()
    newer = _tiny_model("newer").save(tmp_path / "newer.json")
    code = _KILLED_WRITER.format(here=str(HERE), src=str(newer), dst=str(previous))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert previous.read_bytes() == before
    assert LearnedModel.load(previous).fingerprint == "previous"


def test_kendall_tau_is_tau_b_and_regret_counts_ties_against_the_chooser():
    stats = pytest.importorskip("scipy.stats", reason="scipy comes with the [learn] extra")
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = rng.integers(0, 5, size=15).astype(float), rng.normal(size=15)
        ours = evaluate.kendall_tau(a, b)
        assert np.isfinite(ours) and abs(ours - stats.kendalltau(a, b).statistic) < 1e-12
    assert evaluate.kendall_tau([1, 1, 1], [3, 2, 1]) == 0.0        # no ranking information, never NaN
    assert evaluate.kendall_tau([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert evaluate.top1_regret([1, 2, 3], [10, 20, 30]) == 0.0
    assert evaluate.top1_regret([3, 2, 1], [10, 20, 30]) == pytest.approx(2.0)
    assert evaluate.top1_regret([1, 1, 3], [10, 20, 5]) == pytest.approx(3.0)   # a tie: the worse counts
    assert evaluate.topk_regret([3, 2, 1], [10, 20, 30], 3) == 0.0       # the best is among the three
    assert evaluate.topk_regret([3, 2, 1, 0], [10, 20, 30, 40], 2) == pytest.approx(2.0)
    assert evaluate.topk_regret([1, 1, 1, 0], [10, 20, 30, 40], 2) == pytest.approx(2.0)   # ties: slowest first
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            evaluate.topk_regret([1, bad, 3], [10, 20, 30], 2)
        with pytest.raises(ValueError):
            evaluate.top1_regret([1, 2, 3], [10, bad, 30])
    with pytest.raises(ValueError):
        evaluate.kendall_tau([1.0, float("nan")], [1.0, 2.0])


def test_the_labels_own_noise_scores_each_round_against_the_others_median():
    from types import SimpleNamespace as Row

    assert evaluate.one_timing([Row(samples_us=(1.0,)), Row(samples_us=(2.0, 2.1))]) is None   # one round only
    steady = [Row(samples_us=(10.0, 11.0, 10.5)), Row(samples_us=(20.0, 21.0, 19.0)), Row(samples_us=(30.0, 29.0, 31.0))]
    assert evaluate.one_timing(steady) == evaluate.Score(1.0, 0.0, 0.0)
    # Round 2 saw plan 1 fastest: against the others' medians (10, 20.5) it picked 20.5 over 10;
    # rounds 1 and 3 picked plan 0, and ranked with (tau 1) and against a tie (tau 0) of the others.
    flipped = [Row(samples_us=(10.0, 25.0, 10.0)), Row(samples_us=(20.0, 15.0, 21.0))]
    got = evaluate.one_timing(flipped)
    assert got is not None and np.isfinite(got.tau) and got.regret == pytest.approx((20.5 / 10.0 - 1) / 3)
    assert got.tau == pytest.approx((1 - 1 + 0) / 3) and got.regret_top3 == 0.0
    with pytest.raises(ValueError):   # a NaN row is refused, not scored
        evaluate.one_timing([Row(samples_us=(10.0, float("nan"))), Row(samples_us=(20.0, 21.0))])


def test_features_ignore_names_and_see_devices():
    from synthetic import graph

    a = graph([("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")])
    b = graph([("p", "q"), ("p", "r"), ("q", "s"), ("r", "s")])
    ca, cb = encode(a), encode(b)
    assert np.array_equal(ca.bins, cb.bins) and np.all(np.isfinite(node_features(a, ca)))
    host = shape_of(single_region_plan(a, HOST), a, ca)
    split = shape_of(plan_from_groups(a, [Group(ACCEL, ("A", "B", "C")), Group(HOST, ("D",))]), a, ca)
    assert host.regions.shape == (1, REGION_DIM) and split.plan.shape == (PLAN_DIM,)
    assert host.hops == 0 and split.hops == 2 and split.crossing_bytes > 0   # B.out and C.out into D on the host
    assert not np.array_equal(host.plan, split.plan)
    assert all(np.all(np.isfinite(s.regions)) and np.all(np.isfinite(s.plan)) for s in (host, split))


def _geometry_graph():
    """One node of each geometry, over a 32-channel feature map (and a 3-channel stem)."""
    from aot.frontend.graph import GraphView, Node, Value

    fmap, v = (1, 32, 16, 16), {}

    def conv(name, x, w, side=16, op="Conv", **attrs):
        v[f"{name}.w"] = Value(f"{name}.w", "float32", w)
        v[f"{name}.out"] = Value(f"{name}.out", "float32", (1, w[0], side, side))
        return Node(name, op, (x,), (f"{name}.out",), tuple(attrs.items()), (f"{name}.w",))

    v["x"], v["rgb"] = Value("x", "float32", fmap), Value("rgb", "float32", (1, 3, 16, 16))
    v["row"], v["rows"] = Value("row", "float32", (1, 1, 256)), Value("rows", "float32", (1, 64, 256))
    v["w"] = Value("w", "float32", (256, 256))
    nodes = [conv("pointwise", "x", (32, 32, 1, 1)), conv("spatial", "x", (32, 32, 3, 3)),
             conv("strided", "x", (32, 32, 3, 3), 8, strides=(2, 2)), conv("stem", "rgb", (32, 3, 3, 3)),
             conv("torch_strided", "x", (32, 32, 3, 3), 8, "aten.conv2d"),   # no attributes: its shapes say so
             conv("depthwise", "x", (32, 1, 3, 3), group=32),
             Node("thin", "MatMul", ("row",), ("thin.out",), (), ("w",)),
             Node("wide", "MatMul", ("rows",), ("wide.out",), (), ("w",)),
             Node("relu", "Relu", ("x",), ("relu.out",))]
    v["thin.out"], v["wide.out"] = Value("thin.out", "float32", (1, 1, 256)), Value("wide.out", "float32", (1, 64, 256))
    v["relu.out"] = Value("relu.out", "float32", fmap)
    return GraphView.build(nodes, ["x", "rgb", "row", "rows"], [n.outputs[0] for n in nodes], v)


def test_each_geometry_is_told_apart_and_closes_the_vectors():
    view = _geometry_graph()
    codes = encode(view, None)
    assert [Geometry(g) for g in codes.geometry] == [
        Geometry.POINTWISE, Geometry.SPATIAL, Geometry.STRIDED, Geometry.NARROW, Geometry.STRIDED, Geometry.GROUPED,
        Geometry.THIN_PRODUCT, Geometry.PRODUCT, Geometry.OTHER]
    plan = single_region_plan(view, HOST)
    shape = shape_of(plan, view, codes)
    v4 = WIDTHS[4]
    block = shape.plan[v4.plan - len(GEOMETRY_SCALARS):v4.plan]
    shares = block[:len(Geometry)]
    assert np.all(np.isfinite(shape.plan))
    assert_close(np.array([shares.sum()]), np.array([1.0]), rtol=1e-12, atol=1e-12)
    assert_close(shares, np.bincount(codes.geometry, weights=codes.flops, minlength=len(Geometry)) / codes.flops.sum(),
                 rtol=1e-12, atol=1e-12)
    assert np.array_equal(shape.regions[0, v4.region - len(GEOMETRY_SCALARS):v4.region], block)
    # The convolutions' FLOP-weighted log2 input channels and output pixels: between the stem's
    # 3 channels and the feature map's 32, between 8 x 8 and 16 x 16 pixels.
    channels, pixels = block[-2:]
    assert np.log2(3) < channels < 5 and 6 < pixels < 8
    # Versions only append: version 3's vectors are version 4's without the geometry block.
    assert (WIDTHS[3].plan, WIDTHS[3].region) == (v4.plan - len(GEOMETRY_SCALARS), v4.region - len(GEOMETRY_SCALARS))
    # Version 5's columns: the 256-bit decision, off here; on, its bit and each geometry's share
    # under it (the shares above), in the region and the plan alike.
    v6 = WIDTHS[6]
    assert not shape.plan[v4.plan:v6.plan].any() and not shape.regions[0, v4.region:v6.region].any()
    wide = shape_of(dataclasses.replace(plan, regions=tuple(dataclasses.replace(r, flags=(DATA_TILING, VECTOR_256))
                                                              for r in plan.regions)), view, codes)
    assert wide.regions[0, v4.region] == 1.0 and 0.99 < wide.plan[v4.plan] <= 1.0
    v5 = WIDTHS[5]
    assert_close(wide.regions[0, v4.region + 1:v5.region], shares, rtol=1e-12, atol=1e-12)
    assert_close(wide.plan[v4.plan + 1:v5.plan], shares, rtol=1e-12, atol=1e-12)
    assert (v5.plan, v5.region) == (v4.plan + len(LATE_SCALARS), v4.region + len(LATE_SCALARS))
    # Version 6's column, local-sync against the work per node, is 0 on local-task (version 7's
    # columns after it: tests/learn/test_kernel_form.py).
    assert (v6.plan, v6.region) == (v5.plan + len(DISPATCH_SCALARS), v5.region + len(DISPATCH_SCALARS))
    assert not shape.plan[v5.plan:v6.plan].any() and not wide.regions[0, v5.region:v6.region].any()


def test_a_model_of_the_previous_feature_version_reads_the_leading_columns(tmp_path):
    old = WIDTHS[3]
    rng = np.random.default_rng(1)
    x = rng.normal(size=(60, old.plan))
    cost = from_sklearn(sklearn.GradientBoostingRegressor(n_estimators=5).fit(x, np.abs(x[:, 0]) + 1), x)
    model = LearnedModel(Mode.PLAN, cost, 0.0, 0.0, None, "fp", "digest", (), feature_version=3)
    view = _geometry_graph()
    shape = shape_of(single_region_plan(view, HOST), view, encode(view, None))
    again = LearnedModel.load(model.save(tmp_path / "v3.json"))
    assert again.feature_version == 3 and json.loads((tmp_path / "v3.json").read_text())["feature_version"] == 3
    predicted = again.plans_us([shape])
    assert np.all(np.isfinite(predicted))
    assert predicted[0] == pytest.approx(float(np.expm1(cost.raw(shape.plan[None, :old.plan]))[0]))
    # A version-3 file with today's width is damaged, not old: refused.
    data = json.loads((tmp_path / "v3.json").read_text())
    data["cost"]["features"] = PLAN_DIM
    (tmp_path / "wide.json").write_text(json.dumps(data))
    with pytest.raises(ModelFileError, match="version 3"):
        LearnedModel.load(tmp_path / "wide.json")


@pytest.mark.slow    # builds a synthetic database (partitions every candidate) and fits several forests
def test_train_fits_both_modes_and_eval_holds_out_only_real_models(synthetic_db):
    data = load_dataset(synthetic_db[0], synthetic.VULKAN)
    assert len(data.graphs) == 3 and sum(g.generated for g in data.graphs) == 1 and not data.skipped
    for choice, mode in ((ModeChoice.REGIONS, Mode.REGIONS), (ModeChoice.PLAN, Mode.PLAN)):
        model = fit(data, choice, estimators=60)
        assert model.mode is mode and model.training_set == data.digest()
        shapes = [p.shape for g in data.graphs for p in g.plans]
        measured = np.array([p.total_us for g in data.graphs for p in g.plans])
        predicted = model.plans_us(shapes)
        assert np.all(np.isfinite(predicted)) and np.all(predicted > 0)
        # Fitted on these very plans, it ranks them: a broken feature or evaluator would not.
        assert evaluate.kendall_tau(predicted, measured) > 0.6
    result = evaluate.evaluate(data, ModeChoice.REGIONS, estimators=60)
    assert {h.model for h in result.held_out} == {g.model for g in data.graphs if not g.generated}
    assert sum(n for _, n in result.best_classes) == 3 and result.plans == sum(len(g.plans) for g in data.graphs)
    for h in result.held_out:
        for p, s in h.scores:
            assert np.isfinite(s.tau) and -1 <= s.tau <= 1 and np.isfinite(s.regret) and s.regret >= 0
    assert "always all-host" in evaluate.render(result)


@pytest.mark.slow    # builds the synthetic database
def test_a_plan_measured_again_under_a_new_key_is_its_new_rows_alone(synthetic_db, tmp_path):
    """After a lowering's version in the key changes, `collect` measures the same plan again
    under its new key: the older rows timed another module and no longer count."""
    import shutil

    from aot.learn import db as costdb

    database = tmp_path / "costs.sqlite"
    shutil.copy(synthetic_db[0], database)
    before = load_dataset(database, synthetic.VULKAN)
    with costdb.CostDatabase(database) as db:
        first = db.rows()[0]
        db.add(dataclasses.replace(first, key=first.key + "-relowered", total_us=first.total_us * 7))
    after = load_dataset(database, synthetic.VULKAN)
    counts = [len(g.plans) for g in before.graphs]
    assert [len(g.plans) for g in after.graphs] == counts
    (plan,) = [p for g in after.graphs for p in g.plans if p.key == first.key + "-relowered"]
    assert plan.total_us == pytest.approx(first.total_us * 7) and np.isfinite(plan.total_us)
    assert not any(p.key == first.key for g in after.graphs for p in g.plans)
    assert after.unloadable == ()


@pytest.mark.slow    # builds the synthetic database
def test_a_measured_model_that_is_gone_is_named_apart_from_the_stale_plans(synthetic_db, tmp_path):
    import shutil

    from aot.learn import db as costdb

    database = tmp_path / "costs.sqlite"
    shutil.copy(synthetic_db[0], database)
    gone = tmp_path / "gone.onnx"
    with costdb.CostDatabase(database) as db:
        first = db.rows()[0]
        db.add(dataclasses.replace(first, key=first.key + "-gone", model=str(gone)))
    data = load_dataset(database, synthetic.VULKAN)
    assert [model for model, _ in data.unloadable] == [str(gone)]
    assert "cannot load it" in data.unloadable[0][1] and "gone.onnx" in data.unloadable[0][1]
    assert len(data.graphs) == 3 and not data.skipped      # the others still load, whole


def test_training_data_errors_name_the_file(tmp_path):
    with pytest.raises(AotError, match=r"no cost database at .*nothing\.sqlite") as e:
        load_dataset(tmp_path / "nothing.sqlite", synthetic.VULKAN)
    assert "aot learn collect" in e.value.hint
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(AotError, match="junk.sqlite"):
        load_dataset(tmp_path / "junk.sqlite", synthetic.VULKAN)


@pytest.mark.slow    # three `aot` processes, each loading the synthetic database's models
def test_the_train_and_eval_commands(synthetic_db, tmp_path):
    from conftest import run_aot

    database = str(synthetic_db[0])
    out = tmp_path / "model.json"
    train = run_aot("learn", "train", "--db", database, "--accel", "vulkan", "-o", str(out), "--mode", "regions")
    assert train.stdout.strip() == str(out) and "mode regions" in train.stderr
    model = LearnedModel.load(out)
    # The generated graph trains only when asked.
    assert model.mode is Mode.REGIONS and model.policy is not None
    assert (dict(model.summary)["graphs"], dict(model.summary)["generated"]) == ("2", "0")
    assert model.weights == PREDICTION_ALONE
    run_aot("learn", "train", "--db", database, "--accel", "vulkan", "-o", str(out), "--with-generated",
            "--risk-weight", "0.5", "--prior-weight", "2")
    summary = dict(LearnedModel.load(out).summary)
    assert (summary["graphs"], summary["generated"]) == ("3", "1")
    assert LearnedModel.load(out).weights == ChoiceWeights(0.5, 2.0)      # kept in the file it wrote
    negative = run_aot("learn", "train", "--db", database, "-o", str(tmp_path / "no.json"), "--risk-weight", "-1",
                       check=False)
    assert negative.returncode == 1 and "argument --risk-weight: '-1': must be a finite number >= 0" in negative.stderr
    assert not (tmp_path / "no.json").exists()
    figures = tmp_path / "eval.json"
    ev = run_aot("learn", "eval", "--db", database, "--accel", "vulkan", "--json", str(figures))
    assert "always all-host" in ev.stdout and "fitted roofline" in ev.stdout
    data = json.loads(figures.read_text())
    assert len(data["held_out"]) == 2 and sum(data["best_classes"].values()) == 2
    assert all(np.isfinite(h[p]["tau"]) for h in data["held_out"] for p in ("learned", "fitted roofline"))
    run_aot("learn", "eval", "--db", database, "--accel", "vulkan", "--learning-curve", "1,5", "--json", str(figures))
    (point,) = json.loads(figures.read_text())["learning_curve"]    # two real models: one other to train on
    assert (point["graphs"], point["fits"]) == (1, 2) and np.isfinite(point["tau"]) and np.isfinite(point["regret"])
    both = run_aot("learn", "eval", "--db", database, "--end-to-end", "--learning-curve", "2", check=False)
    assert both.returncode == 1 and "--end-to-end and --learning-curve" in both.stderr and "Traceback" not in both.stderr
    missing = run_aot("learn", "train", "--db", str(tmp_path / "none.sqlite"), check=False)
    assert missing.returncode == 1 and "ERROR: no cost database" in missing.stderr and "none.sqlite" in missing.stderr


@pytest.mark.parametrize("command", ["train", "eval"])
def test_train_and_eval_name_every_model_they_left_out(command, monkeypatch):
    """A model whose stored plans no longer fit it (its front end changed) is said, not dropped."""
    from aot import cli_tools
    from aot.cli import _parser
    from aot.learn import dataset

    why = "a stored plan no longer fits the model: 316 node(s) are in no region"
    skipped = (("corpus:basic-pitch", why), ("corpus:basic-pitch", "another"))
    unloadable = (("zoo:minilm", "cannot load it"),)
    monkeypatch.setattr(dataset, "load_dataset", lambda *a, **k: dataset.Dataset((), "fp", skipped, unloadable))
    argv = ["learn", command, "--db", "x.sqlite", "--accel", "none"]
    said: list[str] = []
    # A model that cannot be loaded takes a whole graph out of the training set and the means: it
    # stops the command, named, until the user says to go on without it.
    with pytest.raises(AotError, match=r"1 model\(s\) measured in 'x.sqlite' cannot be loaded: zoo:minilm") as e:
        cli_tools._training_data(_parser().parse_args(argv), said.append)
    assert "--leave-out-missing" in e.value.hint and said == []
    cli_tools._training_data(_parser().parse_args(argv + ["--leave-out-missing"]), said.append)
    assert said == [f"learn  skipped corpus:basic-pitch (2 stored plan(s) or the model): {why}",
                    "learn  skipped zoo:minilm (1 stored plan(s) or the model): cannot load it"]
