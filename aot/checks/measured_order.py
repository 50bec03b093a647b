"""``--order search --measure``: the order search scored again with region times measured on the
devices.

The search ranks plans by the roofline (``partition/cost.py``), which can be far from a real device
(lavapipe runs a convolution many times slower than its parameters say). So, before verification,
the build compiles a few candidate plans through the normal stages (``search.candidate_plans``:
greedy's, then per segment the next best by estimate; ``--measure-plans`` bounds them, and the
content-hash compile cache compiles a region met again for free), times each distinct region
(device + node set) once, alone on its device, on the real intermediates of one run
(``CheckSession.region_times``, through the one timing harness), and partitions again with those
durations: the same seeded candidates, scored with a measurement where one exists. The plan it
chooses is staged; the end-to-end comparison against greedy (``against_greedy``) still decides
what ships. A plan file replays the result: a replayed build never reaches this stage.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable

from aot.bundle.write import Staged
from aot.checks import measure
from aot.checks.reference import random_inputs
from aot.checks.session import CheckSession
from aot.errors import AotError
from aot.frontend.graph import GraphView
from aot.partition.order import OrderMode
from aot.partition.partitioner import PartitionOptions, partition
from aot.partition.plan import Plan
from aot.partition.cost import CostModel
from aot.partition.search import RegionKey, MeasuredRegion, fit_hop_us
from aot.partition.support import ACCEL, HOST, Device
from aot.runtime.manifest import RegionEntry

REPEATS = 20    # timed calls per region: the measured gate's count (checks/measure.py)
# Rounds of "time what the scoring chose, score again": each adds the chosen plan's untimed
# regions, so it settles fast; the bound keeps a plan that keeps changing from compiling forever.
ROUNDS = 3

Compile = Callable[[Plan, str], Staged]   # the pipeline's outline -> compile -> stage for one plan
Done = Callable[[str, str], None]         # the pipeline's clock: a stage's name and its line


@dataclass(frozen=True, slots=True)
class Rescored:
    """What the measured scoring chose: its staged bundle (record updated), and greedy's plan when
    the chosen one replaced it (for the end-to-end comparison)."""

    staged: Staged
    greedy: Plan | None
    times: tuple[MeasuredRegion, ...]   # every region timed, in the order they were


def device_of(region: RegionEntry) -> Device:
    """Where a region really ran: a region whose accelerator compile fell back ran on the host,
    so its time belongs to the host's plan, not to the accelerator's."""
    return HOST if region.target.is_host else ACCEL


def time_regions(bundles: tuple[Staged, ...], done: Done, known: tuple[MeasuredRegion, ...] = (),
                 repeats: int | None = None) -> tuple[MeasuredRegion, ...]:
    """Each distinct region (device + node set) of ``bundles`` not in ``known`` timed once, in the
    first bundle that has it. A bundle that fails to run is skipped (its regions keep their
    estimates)."""
    times: dict[RegionKey, MeasuredRegion] = {t.key: t for t in known}
    inputs = random_inputs(bundles[0].manifest.inputs, seed=0)
    for b in bundles:
        keys = {r.name: (device_of(b.manifest.region(r.name)), r.nodes) for r in b.plan.regions}
        todo = {name for name, (dev, nodes) in keys.items() if (dev, frozenset(nodes)) not in times}
        if not todo:
            continue
        try:
            with CheckSession(b.path, b.manifest) as session:
                got = session.region_times(inputs, repeats or REPEATS, only=todo)
        except (AotError, RuntimeError) as e:   # iree.runtime raises RuntimeError
            done("order", f"candidate {b.path.name} did not run ({e}); its regions keep their estimates")
            continue
        for name, us in got.items():
            dev, nodes = keys[name]
            times[(dev, frozenset(nodes))] = MeasuredRegion(dev, nodes, round(us, 3))
    done("order", f"timed {len(times) - len(known)} new region(s) of {len(bundles)} plan(s) on their devices")
    return tuple(times.values())


def _fitted_hop_us(view: GraphView, options: PartitionOptions, bundles: tuple[Staged, ...],
                   times: tuple[MeasuredRegion, ...], one_lane: bool, done: Done) -> float | None:
    """The candidates' whole runs timed side by side, and one cross-device transfer's cost fitted
    to what they hold beyond their regions (``search.fit_hop_us``); None when no two plans ran."""
    try:
        runs = measure.side_by_side([measure.Contender(b.plan.digest(), b.path, b.manifest) for b in bundles],
                                    repeats=REPEATS, regions_too=False)
    except (AotError, RuntimeError) as e:   # iree.runtime raises RuntimeError
        done("order", f"the candidates' whole runs did not run ({e}): transfers keep the cost model's price")
        return None
    cost = CostModel.load(options.accel_target, options.cost_params)
    hop_us = fit_hop_us(view, cost, times, one_lane, [(b.plan, runs[b.plan.digest()].whole_us) for b in bundles])
    done("order", f"timed {len(bundles)} candidate plan(s) whole: one transfer "
                  + (f"costs {hop_us:.1f} us measured (the cost model says {cost.hop_us:.1f})" if hop_us is not None
                     else "was never made (no plan crosses devices)"))
    return hop_us


def rescore(view: GraphView, options: PartitionOptions, candidates: tuple[Plan, ...], staged: Staged,
            compile_: Compile, done: Done) -> Rescored:
    """Time ``candidates`` (and ``staged``, the estimates' choice) region by region, partition
    again scoring with the measured times, and stage the plan that wins. Where the winner holds a
    region nobody timed (a grouping no candidate had, scored by a scaled estimate), time it and
    score again, up to ``ROUNDS`` times: what ships is chosen by its own measured regions.
    Deterministic given the times."""
    start = time.perf_counter()
    estimated = staged.record.partition.order_search
    assert estimated is not None, "the measured scoring follows an order search"
    others = tuple(compile_(p, f"order-{i}") for i, p in enumerate(candidates) if p.digest() != staged.plan.digest())
    bundles: dict[str, Staged] = {b.plan.digest(): b for b in (staged, *others)}
    times = time_regions(tuple(bundles.values()), done)
    # An accelerator that computes on the host's cores (lavapipe) runs nothing beside the host: its
    # measured times add up, where the lane simulation would overlap them (measured on a two-branch
    # model at 32x32: the search's overlapped plan predicted 10% faster, timed 6% slower).
    one_lane = all(r.target.on_host_cores for r in staged.manifest.regions)
    hop_us = _fitted_hop_us(view, options, tuple(bundles.values()), times, one_lane, done)
    for round_ in range(1, ROUNDS + 1):
        again = partition(view, dataclasses.replace(options, measured=times, measured_one_lane=one_lane,
                                                    measured_hop_us=hop_us))
        # The partitioner's plans carry no memory splits: the pipeline pins them on every plan it builds.
        plan = dataclasses.replace(again.plan, splits=staged.plan.splits)
        if plan.digest() not in bundles:   # a grouping no candidate had: its regions mostly compiled already
            bundles[plan.digest()] = compile_(plan, f"measured-order-{round_}")
        chosen = bundles[plan.digest()]
        if round_ == ROUNDS or not (more := time_regions((chosen,), done, times)[len(times):]):
            break
        times = (*times, *more)
    measured = again.order_search
    assert measured is not None and measured.measured_scoring is not None
    scoring = dataclasses.replace(measured.measured_scoring, plans_timed=len(bundles), rounds=round_,
                                  changed=plan.digest() != staged.plan.digest(),
                                  seconds=round(time.perf_counter() - start, 3))
    done("order", f"scored {scoring.scored_measured} region(s) by measurement, {scoring.scored_estimated} by "
                  f"estimate ({len(times)} timed, {len(bundles)} plan(s), {round_} round(s)): {scoring.verdict()}, "
                  f"{'not ' if scoring.changed else ''}the one the estimates chose")
    part = dataclasses.replace(chosen.record.partition, order_search=dataclasses.replace(
        estimated, kept=measured.kept, measured_scoring=scoring))
    greedy = again.greedy and dataclasses.replace(again.greedy, splits=staged.plan.splits)
    return Rescored(dataclasses.replace(chosen, record=dataclasses.replace(chosen.record, partition=part)),
                    greedy, times)


def against_greedy(staged: Staged, greedy: Plan, compile_: Compile, progress: Callable[[str], None]) -> Staged:
    """Time the searched plan against the greedy one it replaced, whole runs side by side
    (``measure.side_by_side``); keep the faster. The scoring chose the searched plan from its
    regions' times; this is the same choice on whole runs, transfers and lane overlap included."""
    searched = staged.record.partition.order_search
    assert searched is not None
    other = compile_(greedy, "greedy-order")
    got = measure.side_by_side([measure.Contender("searched", staged.path, staged.manifest),
                                measure.Contender("greedy", other.path, other.manifest)])
    searched_us, greedy_us = got["searched"].whole_us, got["greedy"].whole_us
    outcome = searched.measured(greedy_us, searched_us)
    progress(f"measure  searched order {searched_us:.1f} us vs greedy {greedy_us:.1f} us (medians): "
             f"kept the {outcome.kept.value} plan")
    chosen = staged if outcome.kept is OrderMode.SEARCH else other
    part = dataclasses.replace(chosen.record.partition, order_search=outcome)
    return dataclasses.replace(chosen, record=dataclasses.replace(chosen.record, partition=part))
