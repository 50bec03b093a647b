"""``aot learn eval --end-to-end``: what ``--policy learned --gate learned`` ships, model by model.

Each real model of the database is held out in turn: the learned model is trained on the other
models' rows, and the held-out one is built the way a user would build it (``--policy learned
--gate learned --cost-model``, no database, so nothing it ships was looked up). Beside it, the
default build (greedy merging, the roofline gate). The two bundles are timed side by side in one
process (``checks/timing.FAIR``, interleaved, medians); the best plan the database measured for
that model is the third figure. Where a shipped plan was collected too, its database time is kept
beside, as a check that the two timings agree."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from aot.checks import reference, timing
from aot.learn.dataset import Dataset
from aot.learn.key import key_of
from aot.learn.evaluate import leave_one_out
from aot.learn.train import ModeChoice, fit
from aot.options import BuildOptions
from aot.partition.plan import GateMode, Plan
from aot.partition.support import ACCEL

POLICY = "learned"


@dataclass(frozen=True, slots=True)
class Shipped:
    """One build's plan and its measured time."""

    plan: str                  # "all-host", "all-accel" or "N regions, K on the accelerator"
    median_us: float           # timed now, side by side with the other build
    database_us: float | None  # the same plan's time in the database, if it was collected


@dataclass(frozen=True, slots=True)
class EndToEnd:
    model: str
    plans: int                 # distinct plans the database measured for it
    learned: Shipped           # --policy learned --gate learned, trained without this model
    default: Shipped           # greedy + roofline gate
    best_us: float             # the fastest plan the database measured
    best_plan: str
    gate: str                  # the learned gate's verdict and cost source


def describe(plan: Plan) -> str:
    on_accel = sum(r.device == ACCEL for r in plan.regions)
    if on_accel == 0:
        return "all-host"
    if on_accel == len(plan.regions):
        return "all-accel" if len(plan.regions) == 1 else f"{len(plan.regions)} regions, all on the accelerator"
    return f"{len(plan.regions)} regions, {on_accel} on the accelerator"


def run(data: Dataset, options: BuildOptions, work: Path, choice: ModeChoice = ModeChoice.AUTO,
        iterations: int = 20, only: tuple[str, ...] = (),
        progress: Callable[[str], None] = lambda s: None) -> tuple[EndToEnd, ...]:
    """Every real model of ``data`` (or those named in ``only``) held out, built both ways under
    ``work``, timed; in the database's order."""
    from aot import api, runtime

    rows = []
    for g, train in leave_one_out(data, progress, only):
        out = work / _folder(g.model)
        shutil.rmtree(out, ignore_errors=True)
        model_file = out / "model.json"
        fit(train, choice).save(model_file)
        learned = api.build(g.model, out / "learned", dataclasses.replace(
            options, policy=POLICY, gate=GateMode.LEARNED, cost_model=model_file, cost_db=None), progress)
        default = api.build(g.model, out / "default", options, progress)
        inputs = reference.random_inputs(default.bundle.manifest.inputs, seed=0)
        with runtime.load(learned.bundle.path) as a, runtime.load(default.bundle.path) as b:
            times = timing.medians_ms(timing.interleaved(
                [("learned", lambda: a.run(inputs)), ("default", lambda: b.run(inputs))],
                timing.FAIR.with_counts(3, iterations)))
        known = {p.key: p.total_us for p in g.plans}
        best = g.best()

        def shipped(plan: Plan, ms: float) -> Shipped:
            return Shipped(describe(plan), round(ms * 1e3, 1), known.get(key_of(g.view, plan, data.fingerprint).key))

        gate = learned.plan.gate
        verdict = ("no gate" if gate is None else
                   f"{'partition' if gate.accepted else 'all-host'} ({gate.source.value if gate.source else 'roofline'})")
        rows.append(EndToEnd(g.model, len(g.plans), shipped(learned.plan, times["learned"]),
                             shipped(default.plan, times["default"]), round(best.total_us, 1),
                             describe(best.plan), verdict))
        progress(f"eval  {g.model}: learned {rows[-1].learned.median_us:.0f} us ({rows[-1].learned.plan}), "
                 f"default {rows[-1].default.median_us:.0f} us ({rows[-1].default.plan}), "
                 f"best measured {rows[-1].best_us:.0f} us")
    return tuple(rows)


def _folder(model: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in model)


def render(rows: tuple[EndToEnd, ...]) -> str:
    head = ("| model | plans | learned + gate | us | default (greedy, roofline gate) | us | best measured | us | "
            "learned / best | default / best |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r.model} | {r.plans} | {r.learned.plan}, {r.gate} | {r.learned.median_us:.0f} | "
                     f"{r.default.plan} | {r.default.median_us:.0f} | {r.best_plan} | {r.best_us:.0f} | "
                     f"{r.learned.median_us / r.best_us:.2f} | {r.default.median_us / r.best_us:.2f} |")
    return "\n".join(lines)

