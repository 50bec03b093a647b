"""The build's session over a staged bundle: a runtime ``Session`` plus what checks and
measurements need and a deployment never should.

- ``run_region``: one region alone, on inputs the caller chose (verification feeds it the
  reference's intermediates; ``aot bench-replay`` times it);
- ``region_times`` / ``profile``: the median time of each region on its own device, and of whole
  runs;
- ``check_device=False``: open a device that does not match what a module was compiled for
  (verification wants to see what such a module really computes there).

Here and not in aot/runtime: every bundle ships a copy of the runtime, which carries only what a
deployment runs. A subclass, because these read the session's loaded regions and invokers."""

from __future__ import annotations

import functools

from pathlib import Path
from typing import Any, Collection, Mapping

import numpy as np

from aot.checks import timing
from aot.runtime.manifest import Manifest, RegionEntry
from aot.runtime.session import Session, check_inputs, contiguous


class CheckSession(Session):
    """``Session(bundle, manifest, **options)`` with ``run_region`` and ``profile``."""

    def __init__(self, bundle: Path, manifest: Manifest, *, check_device: bool = True, **options: Any) -> None:
        # Set before Session.__init__, which opens the devices (and checks them).
        self._skip_device_check = not check_device
        super().__init__(bundle, manifest, **options)

    def _check_device(self, rt: Any, driver: str, regions: list[RegionEntry]) -> None:
        if not self._skip_device_check:
            super()._check_device(rt, driver, regions)

    def run_region(self, name: str, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
        """Run one region alone on its device."""
        values: dict[str, tuple[str | None, Any]] = {v: (None, contiguous(np.asarray(a)))
                                                     for v, a in zip(self._regions[name].inputs, args)}
        try:
            self._run_region(name, values)
            return tuple(self._to_numpy(values[v]) for v in self._regions[name].outputs)
        finally:
            values.clear()

    def region_times(self, inputs: Mapping[str, Any], repeats: int = 20,
                     only: Collection[str] | None = None) -> dict[str, float]:
        """Median wall time of each region on its own device (microseconds), each region timed on
        the real intermediates of one run. Device work is synchronous in FunctionInvoker calls, so
        wall time covers it. The regions take turns (``timing.interleaved``): timed one after the
        other, a burst of load on this shared machine would land on one region only. ``only``:
        time just these regions (the others still run once, to make their intermediates)."""
        checked = check_inputs(self._inputs, inputs)
        values: dict[str, tuple[str | None, Any]] = {k: (None, v) for k, v in checked.items()}
        calls: dict[str, timing.Call] = {}
        try:
            for name in self._schedule:
                region = self._regions[name]
                if only is None or name in only:
                    args = [self._move(values[v], self._driver_of[name]) for v in region.inputs]
                    calls[name] = functools.partial(self._invokers[name], *args)
                self._run_region(name, values)
            times = timing.interleaved(calls, timing.Schedule(warmup=1, iterations=repeats))
        finally:
            values.clear()
            calls.clear()
        return {name: timing.median_us(samples) for name, samples in times.items()}

    def profile(self, inputs: Mapping[str, Any], repeats: int = 20) -> tuple[float, dict[str, float]]:
        """(median wall time of a whole run, ``region_times``), microseconds."""
        per_region = self.region_times(inputs, repeats)
        checked = check_inputs(self._inputs, inputs)
        return timing.median_us(timing.repeat(lambda: self.run(checked), repeats)), per_region
