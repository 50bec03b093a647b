"""``--measure``: replace cost estimates with times measured on the real devices, so the gate (and
the order search) decide on them; ``gate`` and ``prediction`` are the build's measuring stages.

Two bundles compared are timed side by side in one process, interleaved turn by turn through the
one harness (``checks/timing.py``), and compared by medians: timed one after the other, a burst of
noise on this shared machine lands on one contender only and decides the comparison."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from aot.checks import timing
from aot.checks.reference import random_inputs
from aot.checks.session import CheckSession
from aot.partition.plan import Gate
from aot.runtime.manifest import Manifest

if TYPE_CHECKING:
    from aot.bundle.write import Staged

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
                 warmup: int = WARMUP, regions_too: bool = True) -> dict[str, Measured]:
    """Each contender's whole-run median (interleaved with the others: ``timing.interleaved``,
    rotating start, no idle gap as no spinning runtime shares the process) and, with
    ``regions_too``, its regions' medians (each region alone, on the real intermediates of one
    run). Every contender takes the same seeded random inputs."""
    inputs = random_inputs(contenders[0].manifest.inputs, seed=0)
    with contextlib.ExitStack() as stack:
        sessions = {c.name: stack.enter_context(CheckSession(c.bundle, c.manifest)) for c in contenders}
        regions = {name: s.region_times(inputs, repeats) if regions_too else {} for name, s in sessions.items()}
        calls = {name: (lambda s=s: s.run(inputs)) for name, s in sessions.items()}
        whole = timing.interleaved(calls, timing.Schedule(warmup, repeats))
    return {name: Measured(timing.median_us(whole[name]), tuple(regions[name].items())) for name in sessions}



def gate(staged: "Staged", whole: "Staged", progress: Callable[[str], None]) -> "Staged":
    """--measure: the partitioned bundle and the whole model on the host, side by side; the faster
    ships, with its measured times and the gate's verdict in its record."""
    got = side_by_side([Contender("partitioned", staged.path, staged.manifest),
                        Contender("whole", whole.path, whole.manifest)])
    part_us, host_us = got["partitioned"].whole_us, got["whole"].whole_us
    accepted = part_us < host_us
    detail = f"measured partitioned {part_us:.1f} us vs whole model on the host {host_us:.1f} us (medians)"
    verdict = Gate(accepted, part_us, host_us, None, detail, measured=True)
    progress(f"measure  {detail}: partition {'kept' if accepted else 'rejected'}")
    chosen, times = (staged, got["partitioned"].regions) if accepted else (whole, got["whole"].regions)
    # The record keeps what the order search measured, whichever bundle the gate keeps.
    part = dataclasses.replace(chosen.record.partition, order_search=staged.record.partition.order_search)
    return dataclasses.replace(chosen, record=dataclasses.replace(chosen.record, partition=part)
                               .with_measurements(times, verdict))


def prediction(staged: "Staged", progress: Callable[[str], None]) -> "Staged":
    """--measure-prediction: time the bundle the learned gate chose and keep the time beside the
    prediction (the report shows both; the plan file keeps them too, so a replay shows what was seen)."""
    learned = staged.plan.gate
    assert learned is not None
    got = side_by_side([Contender("shipped", staged.path, staged.manifest)])["shipped"]
    learned = dataclasses.replace(learned, measured_us=got.whole_us)
    progress(f"measure  shipped plan {got.whole_us:.1f} us; predicted {learned.predicted_us():.1f} us "
             f"({learned.source.value if learned.source else 'roofline'})")
    return dataclasses.replace(staged, plan=dataclasses.replace(staged.plan, gate=learned),
                               record=staged.record.with_measurements(got.regions, learned))
