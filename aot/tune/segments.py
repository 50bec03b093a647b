"""Per-segment flag choice (``--tune-segments N``): one flag set per region leaves speed on the table
when one part of a model wants im2col and another data tiling, or when the best set fails to compile
one op. So each large host region of the tuned (single-flag) plan is cut at key-node segments into
groups by FLOP share (``partition/flop_groups.py``), each group's flags are searched like a region's
(the same candidates, checked against the reference, a bounded number per group), and the mixed plan
(each group its own winner, groups as separate host regions) is timed as a whole run against the
single-flag plan. It is kept only when it wins by the tuner's margin: a group boundary costs a call,
and that cost is in what is timed.

The pipeline hands in how to compile a plan and how to run the flag search; this module decides
the cuts, the candidates, the measurement and the choice. The chosen plan pins its cuts and every
region's flags, so ``--plan`` replays it without searching or timing."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from aot.bundle.write import Staged
from aot.checks.reference import random_inputs
from aot.errors import AotError
from aot.frontend.graph import GraphView
from aot.partition.flop_groups import MIN_REGION_NODES, Group, region_groups
from aot.partition.plan import Plan, Region, validate
from aot.partition.segments import Segment
from aot.record import FlagPlan, SegmentGroup, SegmentTuning, Tuning
from aot.runtime.atomic import write_json
from aot.runtime.manifest import HostRuntime
from aot.tune.candidates import FlagSet, offered_as
from aot.tune.search import MIN_GAIN, TuneSettings, device_identity, run_probe

# Candidates compiled and timed per group, the baseline (the source region's winner) included.
# A bound, not a time limit, so the same model always tries the same sets: the whole-region search
# already ranked them, and a full search per group (11 sets on a CNN) times 4-8 groups made tuning
# a large detector take minutes per region.
GROUP_CANDIDATES = 5
ROUNDS = 3     # probe processes per comparison; each interleaves both plans (tune/runtime.py does the same)

Choose = Callable[[str, tuple[FlagSet, ...]], "tuple[FlagSet, ...] | None"]
Search = Callable[[Staged, Choose], dict[str, Tuning]]
Compile = Callable[[Plan, str], Staged]


@dataclasses.dataclass(frozen=True, slots=True)
class _Cut:
    """A region of the single-flag plan and the groups it is cut into."""

    region: Region
    groups: tuple[Group, ...]
    names: tuple[str, ...]       # the groups' region names in the mixed plan


def split(plan: Plan, view: GraphView, segs: tuple[Segment, ...], count: int,
          is_host: Callable[[str], bool]) -> tuple[Plan, tuple[_Cut, ...]]:
    """``plan`` with each host region of at least MIN_REGION_NODES nodes that cuts into two or more
    groups replaced by its groups, in order, with the region's flags (unpinned: the search decides)."""
    taken = {r.name for r in plan.regions}
    cuts: list[_Cut] = []
    for r in plan.regions:
        if not is_host(r.name) or len(r.nodes) < MIN_REGION_NODES:
            continue
        groups = region_groups(r.nodes, segs, view, count)
        if len(groups) < 2:
            continue
        names = tuple(_fresh(f"{r.name}s{g.index}", taken) for g in groups)
        taken.update(names)
        cuts.append(_Cut(r, groups, names))
    by_region = {c.region.name: c for c in cuts}
    regions: list[Region] = []
    for r in plan.regions:
        cut = by_region.get(r.name)
        regions += [r] if cut is None else [Region(n, r.device, g.nodes) for n, g in zip(cut.names, cut.groups)]
    schedule = tuple(n for s in plan.schedule for n in (by_region[s].names if s in by_region else (s,)))
    mixed = dataclasses.replace(plan, regions=tuple(regions), schedule=schedule)
    validate(mixed, view)   # groups are runs of whole segments: acyclic, in order; checked anyway
    return mixed, tuple(cuts)


def _fresh(name: str, taken: set[str]) -> str:
    out, k = name, 0
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    return out


def narrowed(baseline: str, ranked: tuple[str, ...], offered: tuple[FlagSet, ...], bound: int) -> tuple[FlagSet, ...]:
    """The sets a group tries: the source region's winner first (by name: a group without
    convolutions gets that set's spelling for its content), then the others in the order the whole
    region's search ranked them (sets it never saw last, in their own order), ``bound`` in all.
    A set the region's search compiled split finer is offered as itself: the group's search
    splits it again if IREE refuses the group at its own split."""
    first = next((s for s in offered if s.name == offered_as(baseline)), offered[0])
    rank: dict[str, int] = {}
    for i, name in enumerate(ranked):
        rank.setdefault(offered_as(name), i)
    rest = sorted((s for s in offered if s is not first), key=lambda s: rank.get(s.name, len(rank)))
    return (first, *rest)[:max(bound, 1)]


def ranking(tuning: Tuning | None) -> tuple[str, ...]:
    """A region's candidates, fastest correct first, then the rejected ones in the order tried
    (a set that failed on the whole region may work on a group without the op that broke it)."""
    if tuning is None:
        return ()
    timed = sorted((c for c in tuning.candidates if c.rejected is None and c.median_us is not None),
                   key=lambda c: c.median_us or 0.0)
    return (*(c.name for c in timed), *(c.name for c in tuning.candidates if c not in timed))


def tune_segments(single: Staged, view: GraphView, segs: tuple[Segment, ...], tunings: dict[str, Tuning],
                  compile_: Compile, search: Search, settings: TuneSettings, cache: Path,
                  progress: Callable[[str], None] = lambda s: None) -> tuple[Staged, SegmentTuning]:
    """The faster of ``single`` (the tuned single-flag candidate, its host runtime chosen) and the
    mixed plan; which one, each group's search and both times in the returned record. ``cache``:
    the build's cache folder (the comparison is kept by the modules compared, like the search's)."""
    runtime = single.manifest.host_runtime
    mixed_plan, cuts = split(single.plan, view, segs, settings.segments,
                             lambda r: single.manifest.region(r).target.is_host)

    def nothing(why: str, groups: tuple[SegmentGroup, ...] = (), times: tuple[float | None, float | None] = (None, None)
                ) -> tuple[Staged, SegmentTuning]:
        progress(f"segments {why}: kept the single-flag plan")
        return _with(single, SegmentTuning(groups, *times, FlagPlan.SINGLE, MIN_GAIN, GROUP_CANDIDATES, why))

    if not cuts:
        return nothing(f"no host region of {MIN_REGION_NODES}+ nodes cuts into 2+ groups by FLOP share")
    source = {n: c for c in cuts for n in c.names}
    progress(f"segments cut {', '.join(f'{c.region.name} into {len(c.names)}' for c in cuts)} group(s); "
             f"up to {GROUP_CANDIDATES} candidate(s) each")

    def choose(name: str, offered: tuple[FlagSet, ...]) -> tuple[FlagSet, ...] | None:
        cut = source.get(name)
        if cut is None:
            return None      # not a group: its region's search is already done
        t = tunings.get(cut.region.name)
        return narrowed(t.winner if t else offered[0].name, ranking(t), offered, GROUP_CANDIDATES)

    try:
        # With the chosen host runtime: each group's candidates are timed on the driver that ships.
        grouped = compile_(mixed_plan, "segments")
        found = search(grouped, choose)
    except AotError as e:   # a group that does not build leaves the single plan as it was
        return nothing(f"the groups did not build: {e.message[:300]}")
    groups = tuple(SegmentGroup(n, c.region.name, g.segments, len(g.nodes), g.flops, found[n])
                   for c in cuts for n, g in zip(c.names, c.groups))
    if any(g.tuning.best_us is None for g in groups):
        return nothing("a group had no correct candidate", groups)
    winners = {g.region: next(c.flags for c in g.tuning.candidates if c.name == g.tuning.winner) for g in groups}
    pinned = dataclasses.replace(mixed_plan, host_runtime=runtime, regions=tuple(
        dataclasses.replace(r, flags=winners.get(r.name, r.flags)) for r in mixed_plan.regions))
    try:
        mixed = compile_(pinned, "mixed")   # every module is in the compile cache from the search
    except AotError as e:
        return nothing(f"the mixed plan did not build: {e.message[:300]}", groups)
    single_us, mixed_us = _compared(single, mixed, runtime, settings, cache)
    if single_us is None or mixed_us is None:
        return nothing("the whole runs could not be timed", groups, (single_us, mixed_us))
    keep = mixed_us < single_us * (1 - MIN_GAIN)
    kept = FlagPlan.MIXED if keep else FlagPlan.SINGLE
    outcome = SegmentTuning(groups, round(single_us, 1), round(mixed_us, 1), kept, MIN_GAIN, GROUP_CANDIDATES)
    progress(f"segments single {single_us:.1f} us vs mixed {mixed_us:.1f} us (medians): kept the {kept.value} plan")
    if not keep:
        return _with(single, outcome)
    manifest = dataclasses.replace(mixed.manifest, host_runtime=runtime)
    region_tunings = {**tunings, **{g.region: g.tuning for g in groups}}
    record = dataclasses.replace(mixed.record.with_tuning(region_tunings), verification=single.record.verification,
                                 host_runtime_measured=single.record.host_runtime_measured)
    return _with(dataclasses.replace(mixed, manifest=manifest, record=record, plan=pinned), outcome)


def _with(staged: Staged, outcome: SegmentTuning) -> tuple[Staged, SegmentTuning]:
    """``staged`` with ``outcome`` in its build record (the report's section), and ``outcome``."""
    return dataclasses.replace(staged, record=dataclasses.replace(staged.record, segment_tuning=outcome)), outcome


def _compared(single: Staged, mixed: Staged, runtime: HostRuntime | None, settings: TuneSettings,
              cache: Path) -> tuple[float | None, float | None]:
    """``compare``, kept under ``cache/segments`` by both bundles' modules and weights, the host
    runtime, the machine and the schedule: a second build of an unchanged model times nothing."""
    parts = [*(f"{m.weights.sha256 if m.weights else ''}|" + ",".join(f"{r.name}:{r.sha256}" for r in m.regions)
               for m in (single.manifest, mixed.manifest)),
             runtime.label if runtime else "-", device_identity("local-task"),
             f"{settings.repeats}/{settings.warmup}/{ROUNDS}", "compare-v1"]
    record = cache / "segments" / f"{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:32]}.json"
    if record.exists():
        known = json.loads(record.read_text())
        return known["single_us"], known["mixed_us"]
    single_us, mixed_us = compare(single, mixed, runtime, settings)
    if single_us is not None and mixed_us is not None:
        record.parent.mkdir(parents=True, exist_ok=True)
        write_json(record, {"single_us": single_us, "mixed_us": mixed_us})
    return single_us, mixed_us


def compare(single: Staged, mixed: Staged, runtime: HostRuntime | None,
            settings: TuneSettings) -> tuple[float | None, float | None]:
    """Median whole-run microseconds of both staged bundles under ``runtime`` (IREE's default host
    driver when None), interleaved in one probe process per round, rounds in alternating order;
    the median over rounds (a round that failed counts for neither)."""
    driver, flags = (runtime.driver, runtime.flags) if runtime else ("local-task", ())
    samples: dict[str, list[float]] = {"single": [], "mixed": []}
    with tempfile.TemporaryDirectory(prefix="aot-segments-") as tmp:
        data = Path(tmp, "inputs.npz")
        arrays: dict[str, Any] = random_inputs(single.manifest.inputs, seed=0)   # Any: see tune/search.py
        np.savez(data, **arrays)
        bundles = []
        for name, staged in (("single", single), ("mixed", mixed)):
            spec = Path(tmp, f"{name}.json")
            spec.write_text(json.dumps(staged.manifest.to_json()))
            bundles.append({"name": name, "bundle": str(staged.path), "manifest": str(spec)})
        for round_ in range(ROUNDS):
            events, error = run_probe({"kind": "bundles", "bundles": bundles[round_ % 2:] + bundles[:round_ % 2],
                                       "driver": driver, "flags": list(flags), "data": str(data),
                                       "warmup": settings.warmup, "repeats": settings.repeats})
            if error is None:
                medians = next(e for e in events if e["event"] == "timed")["medians_us"]
                for name in samples:
                    samples[name].append(medians[name])
    got = {name: statistics.median(s) if s else None for name, s in samples.items()}
    return got["single"], got["mixed"]
