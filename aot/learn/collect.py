"""``aot learn collect``: distinct candidate plans of each model, built through the normal stages
and timed end to end on the real devices, one row each in the cost database.

Candidates of a model: the partitioner under every policy and selection mode, minimum-compute
thresholds swept; the order planner's candidates (``--order search``: each key-node segment's
k-th best grouping and issue order by the lane model, linked); all on the host; all on the
accelerator where every node can go there; and seeded random perturbations of region
boundaries (a node moved to the other device, repaired by the cycle-free merge and checked by
``plan.validate``). They are deduplicated by their key
(``key.plan_key``), so a plan measured before is skipped, and a killed collection resumes where
it stopped. Compiles hit the content-hash cache for regions that repeat across candidates: the
collection's own (``WORK/cache``, kept between runs, so a resumed, repeated or widened
collection compiles only what it has not compiled before), or ``AOT_CACHE_DIR``'s.
Timing holds the cross-process lock: two collectors never time at once. Each row carries, beside
the end-to-end median, each region's median on its device (``CheckSession.profile``: every region
timed alone on the real intermediates of a run), under the region's digest. A host set IREE
refuses at its work split is built again split finer, as the tuner builds it, and its row keeps
the plan that ran (``built_splitting_where_refused``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from aot.checks import reference, timing
from aot.checks.session import CheckSession
from aot.errors import AotError, CompileError, PartitionError
from aot.learn import db as costdb
from aot.learn.host_plans import MIXED_PER_CUT, host_plans
from aot.learn.key import PlanKey, as_stored, device_fingerprint, key_of, region_digest, stored_plan
from aot.lower import flags
from aot.options import BuildOptions
from aot.partition import policies
from aot.partition.order import OrderMode
from aot.partition import select as selection
from aot.partition.partitioner import make_plan, partition, plan_from_groups, single_region_plan
from aot.partition.plan import GateMode, Plan, validate
from aot.partition.support import ACCEL, HOST
from aot.pipeline import BuildResult, Planned, build_planned, plan_model
from aot.runtime import manifest as mf
from aot.tune.candidates import FlagSet, finer_splits

Progress = Callable[[str], None]
MIN_COMPUTE_SWEEP = (1, 2, 4, 8)
ORDER_CANDIDATES = 6    # the order planner's plans per model (greedy's first, so 5 new at most)


@dataclass(frozen=True, slots=True)
class Candidate:
    origin: str     # how it was made: "policy=greedy select=all min_compute=2", "all-host", "perturb 3"
    plan: Plan


@dataclass(frozen=True, slots=True)
class Collected:
    model: str
    candidates: int      # distinct plans generated
    measured: int        # rows added this run
    skipped: int         # already in the database (``repeats`` times)
    failed: tuple[tuple[str, str], ...]   # (origin, why) of plans that did not build or run


def candidates(planned: Planned, options: BuildOptions, perturbations: int, seed: int,
               host_decisions: bool = False, mixed: int = MIXED_PER_CUT) -> Iterator[Candidate]:
    """Every candidate plan of a model, in a fixed order (seeded); with ``host_decisions``, the
    host's cuts x flag sets x runtimes too, ``mixed`` seeded mixed-flag plans per cut
    (``host_plans.py``)."""
    view = planned.view
    yield Candidate("all-host", single_region_plan(view, HOST))
    if host_decisions:
        for hp in host_plans(planned, options.host, seed, mixed):
            yield Candidate(hp.origin, hp.plan)
    if options.accel is None:
        return
    for policy in policies.names():
        for mode in selection.MODES:
            for min_compute in MIN_COMPUTE_SWEEP:
                popts = dataclasses.replace(planned.options, policy=policy, select=mode, min_compute=min_compute,
                                            gate=GateMode.OFF)
                try:
                    plan = make_plan(view, popts)
                except PartitionError:
                    continue
                yield Candidate(f"policy={policy} select={mode} min_compute={min_compute}", plan)
    yield from _order_candidates(planned)
    try:
        everything = single_region_plan(view, ACCEL)
        validate(everything, view)
        yield Candidate("all-accel", everything)
    except PartitionError:
        pass
    rng = random.Random(seed)
    base = {n: r.device for r in planned.plan.regions for n in r.nodes}
    merge = policies.get(planned.options.policy)
    for i in range(perturbations):
        devices = dict(base)
        for name in rng.sample(sorted(devices), k=max(1, len(devices) // 10)):
            devices[name] = HOST if devices[name] == ACCEL else ACCEL
        try:
            groups = merge(view, devices)
            plan = plan_from_groups(view, groups, {n: "perturbed" for n, d in devices.items() if d == HOST})
            validate(plan, view)
        except PartitionError:
            continue
        yield Candidate(f"perturbation {i}", plan)


def _order_candidates(planned: Planned) -> Iterator[Candidate]:
    """The plans ``--order search --measure`` would time (greedy's first): what the order planner
    considers the best alternatives, so the database learns how its lane model ranks them."""
    popts = dataclasses.replace(planned.options, order=OrderMode.SEARCH, gate=GateMode.MEASURED,
                                measure_plans=ORDER_CANDIDATES, measured=())
    try:
        found = partition(planned.view, popts).candidates
    except PartitionError:
        return
    for k, plan in enumerate(found):
        yield Candidate(f"order search {k}", plan)


CACHE = "cache"   # the compile cache under the collection's work folder


@dataclass(frozen=True, slots=True)
class Measuring:
    """How a collection plans and builds one model: its graph, the options every plan of it is
    built with (no gate, no verification: the plan is the thing measured) and the device
    fingerprint its rows carry. ``retime`` builds with the same, so its builds hit the
    collection's compile cache."""

    path: Path               # the model file (a zoo or corpus name resolved)
    planned: Planned
    options: BuildOptions
    fingerprint: str


def built_splitting_where_refused(planned: Planned, cand: Candidate, out: Path, options: BuildOptions,
                                  cache: Path) -> tuple[BuildResult, Candidate]:
    """Build ``cand``; a host region whose pinned set IREE refuses at its work split is built again
    split finer (``candidates.finer_splits``, in turn), as the tuner compiles such a set
    (``tune/search.py``), so the row holds the plan that ran, under its own key. A region still
    refused at the last split, or any other failure, raises as before."""
    plan = cand.plan
    ladders: dict[str, Iterator[FlagSet]] = {}   # region -> the finer splits it has left
    now: dict[str, FlagSet] = {}                  # region -> the split it is built at
    while True:
        try:
            result = build_planned(dataclasses.replace(planned, plan=plan), out, options, cache=cache)
            return result, Candidate(" ".join((cand.origin, *(s.name for s in now.values()))), plan)
        except CompileError as e:
            region = next((r for r in cand.plan.regions if r.name == e.region), None)
            if (region is None or region.device != HOST or region.flags is None
                    or not flags.refused_at_this_split(e.stderr_tail)):
                raise
            finer = next(ladders.setdefault(region.name, finer_splits(FlagSet(region.name, region.flags))), None)
            if finer is None:
                raise
            now[region.name] = finer
            plan = dataclasses.replace(cand.plan, regions=tuple(
                dataclasses.replace(r, flags=now[r.name].flags) if r.name in now else r for r in cand.plan.regions))


def measuring(model: str | Path, options: BuildOptions) -> Measuring:
    from aot import api

    path, options = api.resolve(model, options)
    planned = plan_model(path, dataclasses.replace(options, gate=GateMode.OFF), suggest=False)
    return Measuring(Path(path), planned, dataclasses.replace(options, gate=GateMode.OFF, verify=False),
                     device_fingerprint(options))


def collect(model: str | Path, database: Path, work: Path, options: BuildOptions = BuildOptions(),
            perturbations: int = 8, seed: int = 0, iterations: int = 20,
            progress: Progress = lambda s: None, max_plans: int | None = None,
            host_decisions: bool = False, repeats: int = 1, mixed: int = MIXED_PER_CUT) -> Collected:
    """Measure every new candidate plan of ``model`` into ``database`` (the first ``max_plans``
    new ones, in candidate order, where given: a later collection measures the rest). With
    ``repeats`` > 1, a plan measured fewer times is measured again (another row: the database's
    median over rows is the plan's time, so a timing disturbed once weighs less)."""
    from aot import runtime

    how = measuring(model, options)
    planned, options, fingerprint = how.planned, how.options, how.fingerprint
    measured = skipped = 0
    failed: list[tuple[str, str]] = []
    seen: set[str] = set()
    with costdb.CostDatabase(database) as db:
        stored: dict[str, list[costdb.Measurement]] = {}
        for row in db.rows():
            stored.setdefault(row.key, []).append(row)

        def measured_rows(key: str) -> int:
            """Rows of ``key`` whose plan fits today's graph (``stored_plan``): a renamed graph's do not."""
            return sum(not isinstance(stored_plan(r.plan, planned.view), str) for r in stored.get(key, ()))

        todo: list[tuple[Candidate, PlanKey]] = []
        for cand in candidates(planned, options, perturbations, seed, host_decisions, mixed):
            key = key_of(planned.view, cand.plan, fingerprint)
            if key.key in seen:
                continue
            seen.add(key.key)
            if measured_rows(key.key) >= repeats:
                skipped += 1
            else:
                todo.append((cand, key))
        progress(f"collect  {how.path.name}: {len(seen)} distinct plan(s), {skipped} already measured"
                 + (f", measuring {min(max_plans, len(todo))} of {len(todo)} new" if max_plans is not None else ""))
        todo = todo[:max_plans]
        for i, (cand, key) in enumerate(todo):
            out = work / f"c{i}"
            try:
                result, cand = built_splitting_where_refused(planned, cand, out, options, work / CACHE)
                if cand.plan != todo[i][0].plan:
                    key = key_of(planned.view, cand.plan, fingerprint)
                    if measured_rows(key.key) >= repeats or key.key in seen:
                        skipped += 1
                        continue
                    seen.add(key.key)
                manifest = result.bundle.manifest
                inputs = reference.random_inputs(manifest.inputs, seed=0)
                with costdb.timing_lock(database):
                    with runtime.load(result.bundle.path) as session:
                        times = timing.interleaved([("plan", lambda: session.run(inputs))],
                                                   timing.Schedule(3, iterations))
                    with CheckSession(mf.bundle_dir(result.bundle.path), manifest) as check:
                        _, per_region = check.profile(inputs, iterations)
            except AotError as e:
                failed.append((cand.origin, e.message[:200]))
                progress(f"collect  {cand.origin}: failed: {e.message[:120]}")
                continue
            finally:
                shutil.rmtree(out, ignore_errors=True)
            total = timing.median_us(times["plan"])
            compiled = {r.name: r.flags for r in manifest.regions}
            db.add(costdb.Measurement(
                key=key.key, graph=key.graph, model=str(model), plan_digest=_digest(cand.plan),
                plan=json.dumps(as_stored(cand.plan, compiled).to_json(), sort_keys=True), fingerprint=fingerprint,
                versions=json.dumps(dict(manifest.toolchain), sort_keys=True), total_us=total,
                regions=region_times(planned, result.plan, per_region, compiled)))
            measured += 1
            progress(f"collect  [{i + 1}/{len(todo)}] {cand.origin}: {len(cand.plan.regions)} region(s), "
                     f"{total:.1f} us")
    return Collected(str(model), len(seen), measured, skipped, tuple(failed))


def region_times(planned: Planned, plan: Plan, per_region: dict[str, float],
                 flags: dict[str, tuple[str, ...]]) -> tuple[costdb.RegionTime, ...]:
    """Each region's median under its digest (``key.region_digest``), in schedule order."""
    def one(name: str) -> costdb.RegionTime:
        r = plan.region(name)
        digest = region_digest(planned.view, r.nodes, r.device.value, flags.get(name, ()))
        return costdb.RegionTime(name, r.device.value, digest, per_region[name])

    return tuple(one(name) for name in plan.schedule)


def _digest(plan: Plan) -> str:
    return hashlib.sha256(json.dumps(plan.to_json(), sort_keys=True).encode()).hexdigest()

