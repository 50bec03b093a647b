"""``aot learn retime``: a model's measured plans timed again side by side, into another database.

``collect`` times each plan on its own, minutes or days apart from the model's other plans, and
on a shared machine the same plan then differs by 14-29% between two such measurements (Kendall
tau 0.37-0.89 per model between them, docs/learned.md): more than most of its plans differ from
each other. Ranking plans needs their differences, not their absolute times, so this rebuilds
every plan of a model that the source database holds (from the collection's compile cache, so
nothing compiles twice), loads them together and times them interleaved in one process
(``timing.interleaved``: each turn runs every plan once), and appends one row per plan to the
target database. Plans whose weights would not fit in memory together are timed in groups, each
with the same anchor plan, and each group's times are scaled by the anchor's time in the first
group: the ratios stay side by side. Rows carry the end-to-end time only (no region times), so a
model trained on them predicts plans whole (``train`` chooses its plan mode by itself).

One round is one such timing of every plan. A plan's label is the median of its rows, and on a
shared two-core host a sub-millisecond model's local-task plans slow down 1.3-2x in a round where
the other core is busy while its local-sync ones do not (docs/learned.md, stop 60): ``rounds``
times every plan again, all together each round, until the target holds that many rows of it.
Each turn also times the host-state yardstick once (``checks/host_state.TurnYardstick``), and a
round's row is the median over its uncontended turns, as the corpus benchmark's headline is,
waiting for them up to ``MAX_TURNS_FACTOR`` times the turns (every turn's median where too few
answered; the progress line says which).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from aot.checks import host_state, reference, timing
from aot.errors import AotError
from aot.learn import db as costdb
from aot.learn.collect import CACHE, measuring
from aot.learn.key import key_of, stored_plan
from aot.options import BuildOptions
from aot.partition.plan import Plan

GROUP_BYTES = 1 << 30   # bundles' files loaded at once; more is timed in groups around an anchor
# Turns timed at most per round, as a multiple of the iterations, waiting for uncontended ones:
# less than the benchmark's (``host_state.MAX_TURNS_FACTOR``), since a retime times every plan of
# twenty models three times.
MAX_TURNS_FACTOR = 1.5


@dataclass(frozen=True, slots=True)
class Retimed:
    model: str
    plans: int                          # the source's plans of this model that still fit it
    timed: int                          # rows added to the target
    skipped: int                        # already in the target
    groups: int                         # the most any round timed them in
    failed: tuple[tuple[str, str], ...]    # (key, why): plans that fit but did not build
    left_out: tuple[tuple[str, str], ...] = ()  # (key, why): stored plans that no longer fit the graph


@dataclass(frozen=True, slots=True)
class _Built:
    row: costdb.Measurement
    bundle: Path
    nbytes: int


def groups_around_anchor(sizes: Sequence[int], limit: int = GROUP_BYTES) -> list[list[int]]:
    """Indices into ``sizes`` in groups whose sizes sum to at most ``limit``, each starting with
    index 0 (the anchor), in order; one group when everything fits."""
    if not sizes:
        return []
    groups: list[list[int]] = [[0]]
    used = sizes[0]
    for i in range(1, len(sizes)):
        if len(groups[-1]) > 1 and used + sizes[i] > limit:
            groups.append([0])
            used = sizes[0]
        groups[-1].append(i)
        used += sizes[i]
    return groups


def scaled_to_anchor(medians: Sequence[dict[int, float]]) -> dict[int, float]:
    """Each group's medians (by index, the anchor 0 in every group) on the first group's scale."""
    out: dict[int, float] = {}
    for group in medians:
        scale = medians[0][0] / group[0]
        out.update({i: us * scale for i, us in group.items() if i not in out})
    return out


def retime(model: str, source: Path, target: Path, work: Path, options: BuildOptions = BuildOptions(),
           iterations: int = 100, progress: Callable[[str], None] = lambda s: None,
           group_bytes: int = GROUP_BYTES, rounds: int = 1) -> Retimed:
    from aot.pipeline import build_planned

    how = measuring(model, options)
    planned, options, fingerprint = how.planned, how.options, how.fingerprint
    with costdb.CostDatabase(source) as db:
        rows = [r for r in db.rows() if r.model == model and r.fingerprint == fingerprint]
    first: dict[str, tuple[costdb.Measurement, Plan]] = {}
    unfit: dict[str, str] = {}
    for r in rows:
        if r.key not in first:
            plan = stored_plan(r.plan, planned.view)
            if isinstance(plan, str):
                unfit.setdefault(r.key, plan)
            else:
                first[r.key] = (r, plan)
    with costdb.CostDatabase(target) as db:
        have = collections.Counter(r.key for r in db.rows()
                                   if r.model == model and not isinstance(stored_plan(r.plan, planned.view), str))
    fits: list[tuple[costdb.Measurement, Plan]] = []
    left_out = [(key, reason) for key, reason in unfit.items() if key not in first]
    for key, (row, plan) in first.items():
        # The graph part of the key: rows measured before host regions were stored pinned
        # (``as_measured``) keyed them by other flags, and the row keeps its key in the target.
        if key_of(planned.view, plan, fingerprint).graph != row.graph:
            left_out.append((key, "the stored plan labels today's graph differently"))
            continue
        fits.append((row, plan))
    for key, why in left_out:
        progress(f"retime   {model}: plan {key[:12]} left out: {why}")
    failed: list[tuple[str, str]] = []
    todo = [(row, plan) for row, plan in fits if have[row.key] < rounds]
    progress(f"retime   {model}: {len(fits)} plan(s), {len(fits) - len(todo)} already retimed "
             f"{rounds} time(s), building {len(todo)} from the compile cache")
    built: list[_Built] = []
    for i, (row, plan) in enumerate(todo):
        out = work / f"r{i}"
        try:
            result = build_planned(dataclasses.replace(planned, plan=plan), out, options, cache=work / CACHE)
        except AotError as e:
            failed.append((row.key, e.message[:200]))
            progress(f"retime   {model}: plan {row.key[:12]} failed to build: {e.message[:120]}")
            continue
        size = sum(p.stat().st_size for p in result.bundle.path.rglob("*") if p.is_file())
        built.append(_Built(row, result.bundle.path, size))
    timed = groups = 0
    # Round by round, each one every plan still short of ``rounds`` rows, written as it ends: the
    # dataset's label is the median over a key's rows, and a killed retime keeps its whole rounds.
    missing = max((rounds - have[b.row.key] for b in built), default=0)
    for turn in range(missing):
        members = [b for b in built if have[b.row.key] + turn < rounds]
        progress(f"retime   {model}: round {turn + 1} of {missing}, {len(members)} plan(s)")
        labels, used = _side_by_side(members, source, target, iterations, group_bytes,
                                     lambda s: progress(f"retime   {model}: {s}"))
        with costdb.CostDatabase(target) as db:
            for b, us in zip(members, labels):
                db.add(dataclasses.replace(b.row, total_us=us, regions=()))
        timed, groups = timed + len(members), max(groups, used)
    return Retimed(model, len(fits), timed, len(fits) - len(todo), groups, tuple(failed), tuple(left_out))


def _side_by_side(built: Sequence[_Built], source: Path, target: Path, iterations: int, group_bytes: int,
                  progress: Callable[[str], None]) -> tuple[list[float], int]:
    """Each bundle's median time (µs), all timed interleaved in one process, in groups around the
    first one where their files would not fit in memory together; and the number of groups."""
    from aot import runtime

    groups = groups_around_anchor([b.nbytes for b in built], group_bytes)
    medians: list[dict[int, float]] = []
    # The source's lock too: a collector still filling it times under that one.
    with costdb.timing_lock(source), costdb.timing_lock(target):
        for g, members in enumerate(groups):
            progress(f"group {g + 1}/{len(groups)}, {len(members)} plan(s) interleaved, {iterations} turns")
            with contextlib.ExitStack() as stack:
                sessions = {i: stack.enter_context(runtime.load(built[i].bundle)) for i in members}
                inputs = reference.random_inputs(runtime.manifest.read(built[0].bundle).inputs, seed=0)
                calls = [(str(i), (lambda s=s: s.run(inputs))) for i, s in sessions.items()]
                split = host_state.interleaved_with_turn_yardstick(
                    calls, timing.Schedule(warmup=3, iterations=iterations), int(MAX_TURNS_FACTOR * iterations))
            by_state = host_state.medians_by_state(split, iterations)
            progress(f"group {g + 1}/{len(groups)}: {host_state.state_text(by_state.state)}")
            medians.append({i: by_state.headline[str(i)] * 1e3 for i in members})
    labels = scaled_to_anchor(medians) if medians else {}
    return [labels[i] for i in range(len(built))], len(groups)
