"""The decisions that matter on the CPU host, as candidate plans for ``aot learn collect``.

A host-only build still decides three things: where the host code is cut into regions (one
IREE module per region: a cut costs a call and lets each side get other flags), which
optimisation flags each region is compiled with, and how the runtime drives the CPU (IREE's
local-task worker pool or local-sync on the caller's thread). Each combination is a plan
(``Plan.regions[*].flags``, ``Plan.host_runtime``), built and timed like any other. Measuring
them is cheap next to an accelerator plan on lavapipe (a run costs milliseconds, not seconds),
so they are where most of the database's rows come from.

Cuts are the per-segment tuner's (``tune/segments.split``: runs of whole key-node segments
grouped by FLOP share), so a cut plan is one a build could make. The flag sets are the tuner's
own, by name (``tune/candidates.py``), so each region gets the spelling for its content.
Uniform plans (every region the same set) come first; then seeded mixed ones. A mixed plan's
regions are each compiled for some uniform plan already (the same region, the same flags), so it
costs the compile cache nothing: ``mixed`` per cut adds real plans at the price of timing alone."""

from __future__ import annotations

import dataclasses
import random
from typing import TYPE_CHECKING, Iterator

from aot.frontend.source import region_families
from aot.lower.flags import LEGACY_HOST_DEFAULT, UNLEARNED_DECISIONS
from aot.partition.partitioner import single_region_plan
from aot.partition.plan import Plan
from aot.partition.segments import segments
from aot.partition.support import HOST
from aot.runtime.manifest import HostRuntime
from aot.runtime.target import Target
from aot.tune.candidates import FlagSet, candidates
from aot.tune.segments import split

if TYPE_CHECKING:
    from aot.pipeline import Planned

# Host regions per plan: the whole model, and cut into this many groups where it has the segments.
CUTS = (1, 2, 4)
# The tuner's sets every llvm-cpu region is offered, whatever its content, for the cut plans: the
# decisions with the largest measured spread on the corpus (docs/performance.md).
FLAG_SETS = ("default", "O2", "data-tiling", "data-tiling+ukernels", "O3+data-tiling+ukernels")
RUNTIMES: tuple[HostRuntime | None, ...] = (None, HostRuntime("local-sync", ()))   # None: local-task
MIXED_PER_CUT = 3      # seeded mixed-flag plans per cut unless the collection asks for more


@dataclasses.dataclass(frozen=True, slots=True)
class HostPlan:
    origin: str     # "regions=2 flags=data-tiling runtime=local-sync", "regions=4 mixed 1 runtime=local-task"
    plan: Plan


def host_plans(planned: "Planned", target: Target, seed: int, mixed: int = MIXED_PER_CUT) -> Iterator[HostPlan]:
    """Every host decision candidate of a model for the host ``target``, in a fixed (seeded) order;
    ``mixed`` seeded mixed-flag plans per cut. The first ``MIXED_PER_CUT`` of them are the same for
    any larger ``mixed`` (the extra ones are drawn after), so a database collected with fewer
    keeps its rows."""
    view = planned.view
    whole = single_region_plan(view, HOST)
    segs = segments(view)
    cuts: dict[int, Plan] = {1: whole}
    for count in CUTS[1:]:
        cut, groups = split(whole, view, segs, count, lambda name: True)
        if groups and len(cut.regions) not in {len(p.regions) for p in cuts.values()}:
            cuts[count] = cut
    # Every set is offered against the databases' reference (im2col alone, the "default" set of
    # every row collected so far), not today's defaults: those are offered under their own names.
    reference = LEGACY_HOST_DEFAULT if target.backend == "llvm-cpu" else None
    offered = {count: {r.name: _by_name(candidates(target, region_families(planned.source, view, r.nodes),
                                                   default=reference))
                       for r in plan.regions} for count, plan in cuts.items()}
    rng = random.Random(seed)
    for count, plan in cuts.items():
        # The whole model gets every set the tuner offers it; a cut one the common sets (each
        # cut compiles every set once per region).
        names = FLAG_SETS if count > 1 else tuple(offered[1][whole.regions[0].name])
        for name in names:
            sets = {r: by_name[name] for r, by_name in offered[count].items() if name in by_name}
            for runtime in RUNTIMES:   # innermost: a bounded collection still sees both
                if len(sets) == len(plan.regions):
                    yield HostPlan(f"regions={len(plan.regions)} flags={name} runtime={_driver(runtime)}",
                                   _pinned(plan, sets, runtime))
    for draws in (range(min(mixed, MIXED_PER_CUT)), range(MIXED_PER_CUT, mixed)):
        for count, plan in cuts.items():
            if len(plan.regions) < 2:
                continue
            for i in draws:
                sets = {r: by_name[rng.choice([n for n in FLAG_SETS if n in by_name])]
                        for r, by_name in offered[count].items()}
                runtime = rng.choice(RUNTIMES)
                yield HostPlan(f"regions={len(plan.regions)} mixed {i} runtime={_driver(runtime)}",
                               _pinned(plan, sets, runtime))


def _driver(runtime: HostRuntime | None) -> str:
    return runtime.driver if runtime else "local-task"


def _by_name(sets: tuple[FlagSet, ...]) -> dict[str, FlagSet]:
    """The sets the features can describe, by name (lower/flags.py: UNLEARNED_DECISIONS)."""
    return {s.name: s for s in sets if not any(f.startswith(p) for f in s.flags for _, p in UNLEARNED_DECISIONS)}


def _pinned(plan: Plan, sets: dict[str, FlagSet], runtime: HostRuntime | None) -> Plan:
    return dataclasses.replace(plan, host_runtime=runtime, regions=tuple(
        dataclasses.replace(r, flags=sets[r.name].flags) for r in plan.regions))
