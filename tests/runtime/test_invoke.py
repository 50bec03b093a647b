"""A CPU region is called through the lean path (runtime/invoke.py): the same answers as
iree.runtime's FunctionInvoker, bools and intermediates included, in memory the caller owns; a
local-task call waits with its thread as SCHED_BATCH and puts the thread's policy back, a
local-sync call and a thread on another policy are left alone, a platform that refuses the switch
runs the call plain."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import onnx_model


def _two_host_regions(tmp_path):
    """y = (x * 2 > 1) and b, z = relu(x * 2) - 1, built as two host regions: the product is an
    intermediate that passes from one region's call to the next."""
    from aot import api
    from aot.options import BuildOptions
    from aot.partition.plan import Plan, Region

    nodes = [helper.make_node("Mul", ["x", "two"], ["m"], name="mul"),
             helper.make_node("Greater", ["m", "one"], ["g"], name="greater"),
             helper.make_node("And", ["g", "b"], ["y"], name="and"),
             helper.make_node("Relu", ["m"], ["r"], name="relu"),
             helper.make_node("Sub", ["r", "one"], ["z"], name="sub")]
    inits = [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]), helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5]),
                               helper.make_tensor_value_info("b", TensorProto.BOOL, [3, 5])],
                       [helper.make_tensor_value_info("y", TensorProto.BOOL, [3, 5]),
                        helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 5])], inits)
    path = tmp_path / "two.onnx"
    path.write_bytes(model.SerializeToString())
    options = BuildOptions(accel=None)
    plan = api.plan(path, options).plan
    (whole,) = plan.regions
    first = tuple(n for n in whole.nodes if n == "mul")
    split = Plan((Region("r0", whole.device, first), Region("r1", whole.device, tuple(n for n in whole.nodes if n not in first))),
                 ("r0", "r1"))
    (tmp_path / "plan.json").write_text(json.dumps(split.to_json()))
    return api.build(path, tmp_path / "out", dataclasses.replace(options, plan_file=tmp_path / "plan.json")).bundle.path


@pytest.mark.device    # compiles with IREE
def test_cpu_regions_answer_as_function_invoker_does_in_arrays_of_their_own(tmp_path):
    import iree.runtime as rt

    from aot import runtime
    from aot.runtime.invoke import HostCall, to_numpy

    bundle = _two_host_regions(tmp_path)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.random((3, 5)) > 0.3
    with runtime.load(bundle) as session:
        assert [r.name for r in session.manifest.regions] == ["r0", "r1"]
        assert all(isinstance(session._invokers[r], HostCall) for r in ("r0", "r1"))
        y, z = session.run({"x": x, "b": b})
        assert y.dtype == np.bool_ and z.dtype == np.float32
        assert np.isfinite(z).all()     # array_equal would take NaN for NaN
        np.testing.assert_array_equal(y, (x * 2 > 1) & b)
        np.testing.assert_array_equal(z, np.maximum(x * 2, 0) - 1)

        # Region by region, against FunctionInvoker on the same functions.
        calls = {r: session._invokers[r] for r in ("r0", "r1")}
        bare = {r: rt.FunctionInvoker(c.context, c.device, c.function) for r, c in calls.items()}
        (m,) = calls["r0"](x)
        r1_inputs = session.manifest.regions[1].inputs
        args = {"m": m, "b": b}
        lean = calls["r1"](*[args[v] for v in r1_inputs])
        plain = bare["r1"](*[bare["r0"](x) if v == "m" else b for v in r1_inputs])
        for got, want in zip(lean, plain if isinstance(plain, tuple) else (plain,)):
            assert np.isfinite(to_numpy(rt, got).astype(np.float32)).all()
            np.testing.assert_array_equal(to_numpy(rt, got), want.to_host())

        # The caller owns what it got: writing into it changes nothing the next call returns.
        y[...], z[...] = False, np.nan
        y2, z2 = session.run({"x": x, "b": b})
        np.testing.assert_array_equal(z2, np.maximum(x * 2, 0) - 1)
        np.testing.assert_array_equal(y2, (x * 2 > 1) & b)


class _Recording:
    """A context whose invoke records the calling thread's scheduling policy, or raises. It holds
    a VM instance as a real context does: iree.runtime 3.13 crashes freeing a variant list (the
    call's arguments) while no instance is alive, as in a run of these tests alone."""

    def __init__(self, fail: bool = False) -> None:
        import iree.runtime as rt

        self.instance = rt.VmInstance()
        self.policies: list[int] = []
        self.fail = fail

    def invoke(self, function, packed, returned) -> None:
        self.policies.append(os.sched_getscheduler(0))
        if self.fail:
            raise RuntimeError("the module failed")


def _host_call(context, workers: bool):
    import iree.runtime as rt

    from aot.runtime.invoke import HostCall

    return HostCall(rt, context, device=None, function=None, results=0, workers=workers)


linux_policies = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")


@linux_policies
def test_a_local_task_call_waits_as_sched_batch_and_puts_the_policy_back():
    context = _Recording()
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
    assert _host_call(context, workers=True)() == ()
    _host_call(context, workers=False)()          # local-sync: the caller runs the dispatches itself
    assert context.policies == [os.SCHED_BATCH, os.SCHED_OTHER]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


@linux_policies
def test_a_failed_call_still_puts_the_policy_back():
    with pytest.raises(RuntimeError, match="the module failed"):
        _host_call(_Recording(fail=True), workers=True)()
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


@linux_policies
def test_a_thread_on_another_policy_is_left_on_it():
    context = _Recording()
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    try:
        _host_call(context, workers=True)()
        assert context.policies == [os.SCHED_IDLE] and os.sched_getscheduler(0) == os.SCHED_IDLE
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def test_a_platform_that_refuses_the_switch_runs_the_call_plain(monkeypatch):
    from aot.runtime import invoke

    def refuse(*args):
        raise PermissionError("sched_setscheduler: operation not permitted")

    monkeypatch.setattr(invoke, "_BATCH", 3)
    monkeypatch.setattr(os, "sched_getscheduler", lambda pid: 0, raising=False)
    monkeypatch.setattr(os, "SCHED_OTHER", 0, raising=False)
    monkeypatch.setattr(os, "sched_setscheduler", refuse, raising=False)
    context = _Recording()
    host = _host_call(context, workers=True)
    host()
    host()
    assert len(context.policies) == 2 and host.wait.enabled is False


@linux_policies
def test_the_tuners_probes_wait_the_way_the_session_calls():
    from aot.runtime import invoke

    assert isinstance(invoke.waiting(invoke.WORKER_DRIVER), invoke.BatchWhileWaiting)
    assert invoke.waiting("local-sync") is invoke._plain and invoke.waiting("vulkan") is invoke._plain
    context = _Recording()
    invoke.waiting(invoke.WORKER_DRIVER)(context.invoke, None, None, None)
    assert context.policies == [os.SCHED_BATCH] and os.sched_getscheduler(0) == os.SCHED_OTHER


@pytest.mark.device    # the host bundle compiles with IREE
def test_the_benchmarks_bare_call_waits_as_the_sessions_call_does(host_bundle):
    """``aot bench`` times a bare iree.runtime call against the session to find the session's
    overhead: the bare call must wait for IREE's workers the same way (runtime/invoke.py), or a
    stall of the wait is counted against it."""
    import iree.runtime as rt

    from aot import runtime
    from aot.checks import reference
    from aot.checks.compare import compare
    from aot.tools import bench

    with runtime.load(host_bundle.bundle.path) as session:
        (region,) = session.manifest.regions
        lean = session._invokers[region.name]
        waited = []

        def recording(call, *args):
            waited.append(call)
            return call(*args)

        lean.wait = recording
        inputs = reference.random_inputs(session.manifest.inputs, seed=0)
        bare = bench._bare_call(session, inputs)()
        assert len(waited) == 1 and isinstance(waited[0], rt.FunctionInvoker)
        ran = session.run(inputs)
        assert len(waited) == 2 and len(bare) == len(ran) > 0
        for got, want in zip(bare, ran):
            assert compare(got, want, rtol=0, atol=0).ok      # fails on NaN and Inf that differ
            assert np.isfinite(got).all()
