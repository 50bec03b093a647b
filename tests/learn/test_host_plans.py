"""The host's decisions as collected plans: region cuts x flag sets x local-task/local-sync."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from aot import api
from aot.checks.compare import assert_close
from aot.learn import collect, db as costdb, evaluate
from aot.learn.key import key_of
from aot.learn.features import FLAG_BITS, PLAN_SCALARS, REGION_SCALARS, WIDTHS, encode, shape_of
from aot.learn.host_plans import CUTS, FLAG_SETS, MIXED_PER_CUT, RUNTIMES, host_plans
from aot.lower.flags import IM2COL, LEGACY_HOST_DEFAULT, VECTOR_256, Holds, default_opt_flags
from aot.options import BuildOptions
from aot.partition.partitioner import plan_from_groups, single_region_plan
from aot.partition.plan import GateMode, Plan, validate
from aot.partition.support import ACCEL, HOST, Group
from aot.pipeline import plan_model
from aot.runtime import manifest as mf
from aot.frontend.source import OpFamily, region_families
from aot.tune.candidates import candidates

HOST_ONLY = BuildOptions(accel=None)


def _conv_chain(path, blocks: int = 5):
    """Conv -> Relu, ``blocks`` times: every node a key node, so the tuner's cuts apply."""
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i in range(blocks):
        inits.append(numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3, f"w{i}"))
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", T.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info(x, T.FLOAT, [1, 4, 8, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _planned(path, options=HOST_ONLY):
    path, options = api.resolve(path, options)
    return plan_model(path, dataclasses.replace(options, gate=GateMode.OFF), suggest=False), options


def test_host_plans_cover_cuts_flag_sets_and_runtimes(tmp_path):
    planned, options = _planned(_conv_chain(tmp_path / "chain.onnx"))
    plans = list(host_plans(planned, options.host, seed=0))
    cuts = sorted({len(p.plan.regions) for p in plans})
    assert cuts[0] == 1 and len(cuts) == len(CUTS)           # the whole model, and two different cuts
    uniform = [p for p in plans if "mixed" not in p.origin]
    offered = candidates(options.host, region_families(planned.source, planned.view, [n.name for n in planned.view.nodes]))
    # the whole model gets every set the tuner offers it, the 256-bit one too on an AVX-512 host
    # (the features name it from version 5)
    whole = list(offered)
    assert len(whole) > len(FLAG_SETS)      # a convolution region is offered more: the whole model tries them all
    assert any(VECTOR_256 in (r.flags or ()) for p in plans for r in p.plan.regions) == \
        any(VECTOR_256 in s.flags for s in offered)
    assert len(uniform) == (len(whole) + (len(CUTS) - 1) * len(FLAG_SETS)) * len(RUNTIMES)
    assert len(plans) - len(uniform) == (len(CUTS) - 1) * MIXED_PER_CUT
    assert {p.plan.host_runtime.driver if p.plan.host_runtime else "local-task" for p in plans} == \
        {"local-task", "local-sync"}
    for p in plans:
        validate(p.plan, planned.view)
        assert sorted(n for r in p.plan.regions for n in r.nodes) == sorted(n.name for n in planned.view.nodes)
        for r in p.plan.regions:   # every region pinned to one of the tuner's own sets for its content
            offered = candidates(options.host, region_families(planned.source, planned.view, r.nodes),
                                 default=LEGACY_HOST_DEFAULT)   # the databases' reference set
            assert r.flags in {s.flags for s in offered if s.name in FLAG_SETS or len(p.plan.regions) == 1}
    assert all(IM2COL in r.flags for p in plans for r in p.plan.regions if len(p.plan.regions) > 1)   # the base
    assert [p.plan.to_json() for p in host_plans(planned, options.host, seed=0)] == [p.plan.to_json() for p in plans]
    other = [p.plan.to_json() for p in host_plans(planned, options.host, seed=1)]
    assert other[:len(uniform)] == [p.plan.to_json() for p in uniform] and other != [p.plan.to_json() for p in plans]


def test_more_mixed_plans_keep_the_first_ones_and_reuse_the_uniform_plans_compiles(tmp_path):
    planned, options = _planned(_conv_chain(tmp_path / "chain.onnx"))
    few = [p.plan.to_json() for p in host_plans(planned, options.host, seed=0)]
    more = list(host_plans(planned, options.host, seed=0, mixed=MIXED_PER_CUT + 5))
    assert [p.plan.to_json() for p in more[:len(few)]] == few           # a database collected with fewer keeps its rows
    extra = more[len(few):]
    assert len(extra) == (len(CUTS) - 1) * 5 and all("mixed" in p.origin for p in extra)
    # every region of an extra plan (nodes and flags) is one some uniform plan compiles already
    compiled = {(r.nodes, r.flags) for p in more if "mixed" not in p.origin for r in p.plan.regions}
    assert all((r.nodes, r.flags) in compiled for p in extra for r in p.plan.regions)
    for p in extra:
        validate(p.plan, planned.view)


def test_flags_and_runtime_change_the_key_and_the_features(tmp_path):
    planned, options = _planned(_conv_chain(tmp_path / "chain.onnx"))
    plans = {p.origin: p.plan for p in host_plans(planned, options.host, seed=0)}
    a = plans["regions=1 flags=default runtime=local-task"]
    b = plans["regions=1 flags=data-tiling runtime=local-task"]
    c = plans["regions=1 flags=data-tiling runtime=local-sync"]
    fingerprint = "none host=test cores=2"
    keys = {key_of(planned.view, p, fingerprint).key for p in (a, b, c)}
    assert len(keys) == 3 and key_of(planned.view, a, fingerprint).graph == key_of(planned.view, c, fingerprint).graph
    # No optimisation flags at all (the direct-conv set) is not the target's defaults (unpinned).
    direct = plans["regions=1 flags=direct-conv runtime=local-task"]
    assert direct.regions[0].flags == ()
    assert key_of(planned.view, direct, fingerprint) != key_of(planned.view, direct.unpinned(), fingerprint)
    codes = encode(planned.view, None)
    sa, sb, sc = (shape_of(p, planned.view, codes) for p in (a, b, c))
    tiling = REGION_SCALARS.index("flag_data_tiling")
    assert (sa.regions[0, tiling], sb.regions[0, tiling]) == (0.0, 1.0)
    assert sa.regions[0, REGION_SCALARS.index("flag_im2col")] == 1.0
    sync = REGION_SCALARS.index("local_sync")
    assert (sb.regions[0, sync], sc.regions[0, sync]) == (0.0, 1.0)
    assert sc.plan[PLAN_SCALARS.index("local_sync")] == 1.0
    assert sb.plan[PLAN_SCALARS.index("host_share_data_tiling")] == 1.0
    assert sa.plan[PLAN_SCALARS.index("host_share_data_tiling")] == 0.0
    # An unpinned host region counts as the host's defaults: a convolution's data-tiled-conv set.
    unpinned = shape_of(a.unpinned(), planned.view, codes)
    tiled_conv = plans["regions=1 flags=data-tiled-conv runtime=local-task"]
    assert np.array_equal(unpinned.regions, shape_of(tiled_conv, planned.view, codes).regions)
    assert not np.array_equal(unpinned.regions, sa.regions)
    assert len(FLAG_BITS) == sum(n.startswith("flag_") for n in REGION_SCALARS)
    # What each flag compiles: the convolutions' FLOP share, alone and under data tiling.
    conv = REGION_SCALARS.index("share_conv")
    conv_tiled, conv_plan = REGION_SCALARS.index("share_conv_data_tiling"), PLAN_SCALARS.index("share_conv_data_tiling")
    assert 0.5 < sa.regions[0, conv] < 1.0
    assert sa.regions[0, conv] + sa.regions[0, REGION_SCALARS.index("share_other")] == pytest.approx(1.0)
    assert (sa.regions[0, conv_tiled], sb.regions[0, conv_tiled]) == (0.0, sb.regions[0, conv])
    assert (sa.plan[conv_plan], sb.plan[conv_plan]) == (0.0, sb.plan[PLAN_SCALARS.index("share_conv")])
    sized = REGION_SCALARS.index("local_sync_log_flops")
    assert sb.regions[0, sized] == 0.0 and sc.regions[0, sized] > 1.0
    # Version 6's last column: local-sync against the FLOPs of an average node.
    per_node = np.log1p(codes.flops.sum() / len(codes.names))
    last = WIDTHS[6]
    assert (sb.regions[0, last.region - 1], sb.plan[last.plan - 1]) == (0.0, 0.0)
    assert_close(np.array([sc.regions[0, last.region - 1], sc.plan[last.plan - 1]]), np.array([per_node, per_node]),
                 rtol=1e-12, atol=0)


def test_op_classes_tell_grouped_convolutions_and_matmuls_apart_in_either_front_ends_words():
    from aot.frontend.graph import GraphView, Node, Value
    from aot.learn.geometry import OpClass, op_class

    def classify(op, weights=(32, 32, 3, 3), **attrs):
        node = Node("n", op, ("x",), ("y",), tuple(attrs.items()), const_inputs=("w",))
        view = GraphView.build([node], ["x"], ["y"], {"x": Value("x", shape=(1, 32, 8, 8)),
                                                      "w": Value("w", shape=weights)})
        return op_class(node, view)

    assert classify("Conv") is OpClass.CONV and classify("Conv", group=1) is OpClass.CONV
    assert classify("Conv", weights=(32, 1, 3, 3), group=32) is OpClass.GROUPED_CONV
    # torch spells the op aten.*, and its groups are not an attribute: the weights tell.
    assert classify("aten.conv2d") is OpClass.CONV
    assert classify("aten.conv2d", weights=(32, 1, 3, 3)) is OpClass.GROUPED_CONV
    # A transposed convolution's weights are [Cin, Cout/group, k...]: only its attribute counts.
    assert classify("ConvTranspose", weights=(32, 8, 2, 2)) is OpClass.CONV
    assert classify("Gemm") is OpClass.MATMUL and classify("aten.linear") is OpClass.MATMUL
    assert classify("Relu") is OpClass.OTHER and classify("aten.relu") is OpClass.OTHER


@pytest.mark.device   # compiles with IREE (llvm-cpu) and times on the host
def test_collect_builds_and_times_the_host_decisions(tmp_path):
    """Built through the normal stages and timed: each row's plan pins its flags and runtime."""
    model, database = _conv_chain(tmp_path / "small.onnx", blocks=2), tmp_path / "host.sqlite"
    done = collect.collect(model, database, tmp_path / "work", HOST_ONLY, perturbations=0, iterations=2,
                           host_decisions=True, max_plans=5)
    assert done.failed == ()
    # 4 nodes: too few to cut, so each set the tuner offers under each runtime; all-host is the
    # default set under the default runtime (the same compile: one key, key.key_of). The first
    # five: all-host, then two sets under both runtimes.
    offered = len(candidates(HOST_ONLY.host, frozenset({OpFamily.CONVOLUTION})))
    assert done.candidates == offered * len(RUNTIMES) and done.measured == 5
    with costdb.CostDatabase(database) as db:
        rows = db.rows()
    plans = [Plan.from_json(json.loads(r.plan)) for r in rows]
    assert all(r.total_us > 0 and np.isfinite(r.total_us) for r in rows)
    assert all(r.fingerprint.startswith("none host=") for r in rows)
    assert sum(p.host_runtime == mf.HostRuntime("local-sync", ()) for p in plans) == 2
    # Stored with the flags each host region compiled with (key.as_stored): all-host's are the default's.
    assert all(p.regions[0].flags is not None for p in plans)
    assert len({p.regions[0].flags for p in plans}) == 3     # the default set, and two others
    again = collect.collect(model, database, tmp_path / "work", HOST_ONLY, perturbations=0, iterations=2,
                            host_decisions=True, max_plans=2, repeats=2)
    assert (again.measured, again.failed) == (2, ())     # the first two plans, measured a second time
    with costdb.CostDatabase(database) as db:
        counts = sorted(db.key_counts().values())
    assert counts == [1, 1, 1, 2, 2]


def test_the_untuned_build_is_the_all_host_baselines_first_choice(tmp_path):
    planned, options = _planned(_conv_chain(tmp_path / "chain.onnx"))
    plans = [single_region_plan(planned.view, HOST), *(p.plan for p in host_plans(planned, options.host, seed=0))]
    ranks = [evaluate._untuned_host_rank(p, planned.view) for p in plans]
    # The same build pinned (the default set of today or of the rows' time, the default runtime:
    # one module, key.key_of) ranks with it; other flags, another runtime or a cut are tuned.
    untuned = {default_opt_flags(options.host, Holds(convolution=True)), LEGACY_HOST_DEFAULT}
    same = [len(p.regions) == 1 and p.regions[0].flags in untuned and p.host_runtime is None for p in plans[1:]]
    assert ranks[0] == 0.0 and any(same) and not all(same)
    assert ranks[1:] == [0.0 if s else 1.0 for s in same]
    split = plan_from_groups(planned.view, [Group(ACCEL, ("conv0",)), Group(HOST, tuple(
        n.name for n in planned.view.nodes[1:]))])
    assert evaluate._untuned_host_rank(split, planned.view) == 2.0
    # Measured times where the untuned build is 30% behind the best: that is its regret.
    assert evaluate.top1_regret(ranks[:3], [1.3, 1.0, 1.1]) == pytest.approx(0.3)


def test_a_set_iree_refuses_at_its_split_is_collected_split_finer_and_keyed_as_it_ran(tmp_path, monkeypatch):
    """As the tuner does (tune/search.py): a host region refused for an oversized vector is built
    again at each of FINER_SPLITS in turn, and its row holds the split that compiled; a refusal of
    any other kind is a failed plan, tried once."""
    import aot.runtime
    from types import SimpleNamespace

    from aot.errors import CompileError
    from aot.lower.flags import DATA_TILING, FINER_SPLITS, O3, flag_key, threads

    last = threads(FINER_SPLITS[-1])
    built: list[tuple[str, ...]] = []
    built_plans = []

    def build(planned, out, options, cache=None):
        (region,) = planned.plan.regions
        flags = region.flags or ()
        built.append(flags)
        built_plans.append(planned.plan)
        if DATA_TILING in flags and last not in flags:     # compiles only at the last split
            raise CompileError(region.name, ["iree-compile"], 1,
                               "error: One or more operations with large vector sizes (122880 bytes) were found")
        if O3 in flags and DATA_TILING not in flags:
            raise CompileError(region.name, ["iree-compile"], 1, "error: unknown flag")
        manifest = SimpleNamespace(inputs=(), toolchain={"iree": "test"},
                                   regions=(SimpleNamespace(name=region.name, flags=flags),))
        return SimpleNamespace(bundle=SimpleNamespace(path=out, manifest=manifest), plan=planned.plan)

    from synthetic import FakeSession

    monkeypatch.setattr(collect, "build_planned", build)
    monkeypatch.setattr(collect.reference, "random_inputs", lambda specs, seed: {})
    monkeypatch.setattr(aot.runtime, "load", lambda path: FakeSession(built_plans[-1]))
    monkeypatch.setattr(collect, "CheckSession", lambda path, manifest: FakeSession(built_plans[-1]))
    model, database = _conv_chain(tmp_path / "small.onnx", blocks=2), tmp_path / "host.sqlite"
    lines: list[str] = []
    done = collect.collect(model, database, tmp_path / "work", HOST_ONLY, perturbations=0, iterations=1,
                           host_decisions=True, progress=lines.append)
    tiled = [f for f in built if DATA_TILING in f]
    assert tiled and sum(last in f for f in tiled) * (1 + len(FINER_SPLITS)) == len(tiled)   # none, 64, 256 each
    # only the set refused for another reason failed, each of its plans tried once
    assert done.failed and all("unknown flag" in why for _, why in done.failed)
    assert sum(O3 in f and DATA_TILING not in f for f in built) == len(done.failed)
    with costdb.CostDatabase(database) as db:
        stored = [Plan.from_json(json.loads(r.plan)).regions[0].flags for r in db.rows()]
    assert stored and all(last in f for f in stored if DATA_TILING in f) and any(DATA_TILING in f for f in stored)
    assert any(f"+split={FINER_SPLITS[-1]}" in line for line in lines)
    # The set it is: a split does not change the set's identity for the learned win counts.
    split = next(f for f in stored if DATA_TILING in f)
    assert flag_key(split) == flag_key(tuple(f for f in split if f != last)) != flag_key(split + (O3,))
    again = collect.collect(model, database, tmp_path / "work", HOST_ONLY, perturbations=0, iterations=1,
                            host_decisions=True)
    assert again.measured == 0 and again.skipped == done.measured     # the split plans were found under their keys
