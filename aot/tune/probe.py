"""The tuner's measuring process: ``python -m aot.tune.probe`` reads one JSON request on stdin
and writes one JSON event per line on stdout.

It runs apart from the build because a candidate module can crash the process that runs it (a
miscompiled dispatch, a stack overflow): the parent sees which candidate had started and had
not finished, rejects it, and asks again without it. Inside the probe, candidates are timed
side by side in one process, interleaved, so the machine's noise hits all of them alike.

Candidates are timed as a deployed session runs them: with a call's large intermediates kept in
the heap (``runtime/heap.py``, event ``heap`` first). Without it a candidate whose transients pass
glibc's mmap threshold faulted them in every call here and nowhere else: CREPE's tuning timed
its data-tiled default at 91.7 ms and chose IREE's defaults at 80.1, which ran 77.7 ms against
the default's 64.7 in the shipped bundle (docs/performance.md, stop 70).

Requests:
- ``{"kind": "region", ...}``: check each candidate module of one region against onnxruntime's
  outputs, then time the correct ones (events ``start``, ``checked``, ``timed``).
- ``{"kind": "bundle", ...}``: time whole runs of a bundle under one host runtime configuration
  (runtime flags are process-wide and read when the device opens: one configuration per process).
- ``{"kind": "bundles", ...}``: time whole runs of several bundles of one model under one host
  runtime configuration, interleaved (per-segment tuning: one flag set vs a mixed-flag plan).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from aot.checks import timing
from aot.checks.compare import within
from aot.runtime import heap
from aot.runtime.invoke import waiting


def main() -> int:
    _emit(event="heap", kept=heap.keep_intermediates())
    request = json.loads(sys.stdin.read())
    if request["kind"] == "region":
        _region(request)
    elif request["kind"] == "bundles":
        _bundles(request)
    else:
        _bundle(request)
    return 0


def _emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def _region(req: dict[str, Any]) -> None:
    import iree.runtime as rt

    data = np.load(req["data"])
    args = [data[f"in{i}"] for i in range(req["inputs"])]
    expected = [data[f"out{i}"] for i in range(req["outputs"])]
    instance = rt.VmInstance()
    device = rt.get_driver(req["driver"]).create_default_device()
    base = [rt.create_hal_module(instance, device)]
    if req["weights"]:
        params = rt.ParameterIndex()
        params.load(req["weights"])
        base.append(rt.create_io_parameters_module(instance, params.create_provider(scope=req["scope"])))
    device_args = [rt.asdevicearray(device, a) for a in args]
    wait = waiting(req["driver"])
    calls: dict[str, Callable[[], Any]] = {}
    keep: list[Any] = []
    for cand in req["candidates"]:
        _emit(event="start", name=cand["name"])
        try:
            module = rt.VmModule.mmap(instance, cand["vmfb"])
            context = rt.VmContext(instance, modules=[*base, module])
            invoker = rt.FunctionInvoker(context, device, module.lookup_function(req["function"]))
            outs = invoker(*device_args)
        except Exception as e:  # a module that cannot load or run is a rejected candidate
            _emit(event="checked", name=cand["name"], ok=False, max_abs_diff=None,
                  error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
            continue
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        results = [within(np.asarray(o.to_host()), e, req["rtol"]) for o, e in zip(outs, expected)]
        worst = max((d for _, d in results), default=0.0)
        ok = len(outs) == len(expected) and all(good for good, _ in results)
        _emit(event="checked", name=cand["name"], ok=ok, max_abs_diff=worst if np.isfinite(worst) else None,
              error=None if ok else f"outputs differ from onnxruntime by up to {worst:.3g}")
        if ok:
            keep.append((module, context, invoker))
            # timed as the runtime calls it: on local-task, waiting as SCHED_BATCH (runtime/invoke.py)
            calls[cand["name"]] = functools.partial(wait, invoker, *device_args)
    medians, counts = _interleaved(calls, req["warmup"], req["repeats"], prune=True)
    _emit(event="timed", medians_us=medians, calls=counts)


# A candidate whose median after PRUNE_AFTER turns is over PRUNE_RATIO times the best one's cannot
# win (a winner must beat the default by 3%) and is timed no more: on a big model each of its
# calls costs what a good candidate's does, twice over. Its median so far is what the record keeps.
PRUNE_AFTER = 5
PRUNE_RATIO = 1.5


def _interleaved(calls: dict[str, Callable[[], Any]], warmup: int, repeats: int,
                 prune: bool = False) -> tuple[dict[str, float], dict[str, int]]:
    """Median microseconds per call, and the calls timed; each round starts at the next
    candidate, so none always follows the same one. IREE modules only here: nothing spins between
    calls, so no idle gap. ``prune``: candidates far behind the best after a few turns stop being
    timed (fewer calls)."""
    pruning = prune and repeats > PRUNE_AFTER
    schedule = timing.Schedule(warmup, repeats, prune_after=PRUNE_AFTER if pruning else 0, prune_ratio=PRUNE_RATIO)
    times = timing.interleaved(calls, schedule)
    return {n: timing.median_us(s) for n, s in times.items() if s}, {n: len(s) for n, s in times.items() if s}


def _bundle(req: dict[str, Any]) -> None:
    import dataclasses

    from aot import runtime
    from aot.runtime import manifest as mf

    bundle = Path(req["bundle"])
    manifest = dataclasses.replace(mf.Manifest.from_json(json.loads(Path(req["manifest"]).read_text())),
                                   host_runtime=mf.HostRuntime(req["driver"], tuple(req["flags"])))
    data = np.load(req["data"])
    inputs = {s.name: data[s.name] for s in manifest.inputs}
    with runtime.Session(bundle, manifest) as session:
        medians, _ = _interleaved({"run": lambda: session.run(inputs)}, req["warmup"], req["repeats"])
    _emit(event="timed", medians_us=medians)


def _bundles(req: dict[str, Any]) -> None:
    import contextlib
    import dataclasses

    from aot import runtime
    from aot.runtime import manifest as mf

    data = np.load(req["data"])
    host = mf.HostRuntime(req["driver"], tuple(req["flags"]))
    calls: dict[str, Callable[[], Any]] = {}
    with contextlib.ExitStack() as stack:
        for b in req["bundles"]:
            manifest = dataclasses.replace(mf.Manifest.from_json(json.loads(Path(b["manifest"]).read_text())),
                                           host_runtime=host)
            session = stack.enter_context(runtime.Session(Path(b["bundle"]), manifest))
            inputs = {s.name: data[s.name] for s in manifest.inputs}
            calls[b["name"]] = functools.partial(session.run, inputs)
        medians, _ = _interleaved(calls, req["warmup"], req["repeats"])
    _emit(event="timed", medians_us=medians)


if __name__ == "__main__":
    sys.exit(main())
