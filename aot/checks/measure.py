"""``--measure``: replace cost estimates with times measured on the real devices, so the gate (and
the order search) decide on them.

Two bundles compared are timed side by side in one process, interleaved turn by turn through the
one harness (``checks/timing.py``), and compared by medians: timed one after the other, a burst of
noise on this shared machine lands on one contender only and decides the comparison."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from aot.checks import timing
from aot.checks.reference import random_inputs
from aot.checks.session import CheckSession
from aot.runtime.manifest import Manifest

REPEATS, WARMUP = 20, 3


@dataclass(frozen=True, slots=True)
class Contender:
    name: str
    bundle: Path
    manifest: Manifest


@dataclass(frozen=True, slots=True)
class Measured:
    whole_us: float                        # median of the whole run, interleaved with the others
    region_us: tuple[tuple[str, float], ...]   # each region alone on its device

    @property
    def regions(self) -> dict[str, float]:
        return dict(self.region_us)


def side_by_side(contenders: Sequence[Contender], repeats: int = REPEATS,
                 warmup: int = WARMUP) -> dict[str, Measured]:
    """Each contender's whole-run median (interleaved with the others: ``timing.interleaved``,
    rotating start, no idle gap as no spinning runtime shares the process) and its regions' medians
    (each region alone, on the real intermediates of one run). Every contender takes the same
    seeded random inputs."""
    inputs = random_inputs(contenders[0].manifest.inputs, seed=0)
    with contextlib.ExitStack() as stack:
        sessions = {c.name: stack.enter_context(CheckSession(c.bundle, c.manifest)) for c in contenders}
        regions = {name: s.region_times(inputs, repeats) for name, s in sessions.items()}
        calls = {name: (lambda s=s: s.run(inputs)) for name, s in sessions.items()}
        whole = timing.interleaved(calls, timing.Schedule(warmup, repeats))
    return {name: Measured(timing.median_us(whole[name]), tuple(regions[name].items())) for name in sessions}

