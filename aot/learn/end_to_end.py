"""``aot learn eval --end-to-end``: what ``--policy learned --gate learned`` ships, model by model.

Each real model of the database is held out in turn: the learned model is trained on the other
models' rows, and the held-out one is built the way a user would build it (``--policy learned
--gate learned --cost-model``, no database, so nothing it ships was looked up). Beside it, the
default build (greedy merging, the roofline gate). Each bundle is timed on its own, one after the
other (``checks/timing.FAIR``, medians): interleaved with a lavapipe bundle, a host bundle ran
2.3-2.7x slower than alone on the larger zoo models (MiniLM, PP-OCR), lavapipe's runs leaving the
two cores busy past the harness's idle gap. The best plan the database measured for that model
is the third figure; where a shipped plan was collected too, its database time (timed alone at
collection) is kept beside and is what the ratios use, so all three come from one kind of
measurement."""

from __future__ import annotations

import dataclasses
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from aot.checks import reference, timing
from aot.errors import AotError
from aot.learn.dataset import Dataset
from aot.learn.key import key_of
from aot.learn.model import PREDICTION_ALONE, ChoiceWeights
from aot.learn.evaluate import leave_one_out
from aot.learn.train import ModeChoice, fit
from aot.options import BuildOptions
from aot.partition.plan import GateMode, Plan
from aot.partition.support import ACCEL

if TYPE_CHECKING:
    from aot.runtime.bucketed import BucketedSession
    from aot.runtime.session import Session

POLICY = "learned"


@dataclass(frozen=True, slots=True)
class Shipped:
    """One build's plan and its measured time."""

    plan: str                  # "all-host", "all-accel" or "N regions, K on the accelerator"
    median_us: float           # timed now, alone (``_alone_ms``)
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
        progress: Callable[[str], None] = lambda s: None,
        weights: ChoiceWeights = PREDICTION_ALONE) -> tuple[EndToEnd, ...]:
    """Every real model of ``data`` (or those named in ``only``) held out, built both ways under
    ``work``, timed; in the database's order."""
    from aot import api, runtime

    rows = []
    for g, train in leave_one_out(data, progress, only):
        out = work / _folder(g.model)
        shutil.rmtree(out, ignore_errors=True)
        model_file = out / "model.json"
        fit(train, choice, weights=weights).save(model_file)
        learned = api.build(g.model, out / "learned", dataclasses.replace(
            options, policy=POLICY, gate=GateMode.LEARNED, cost_model=model_file, cost_db=None), progress)
        default = api.build(g.model, out / "default", options, progress)
        inputs = reference.random_inputs(default.bundle.manifest.inputs, seed=0)
        times = {name: _alone_ms(runtime.load(bundle.path), inputs, iterations)
                 for name, bundle in (("learned", learned.bundle), ("default", default.bundle))}
        known = {p.key: p.total_us for p in g.plans}
        best = g.best()

        def shipped(plan: Plan, ms: float) -> Shipped:
            return Shipped(describe(plan), round(ms * 1e3, 1), known.get(key_of(g.view, plan, data.fingerprint).key))

        gate = learned.plan.gate
        source = gate.source.value if gate is not None and gate.source else "roofline"
        verdict = "no gate" if gate is None else f"{'partition' if gate.accepted else 'all-host'} ({source})"
        rows.append(EndToEnd(g.model, len(g.plans), shipped(learned.plan, times["learned"]),
                             shipped(default.plan, times["default"]), round(best.total_us, 1),
                             describe(best.plan), verdict))
        progress(f"eval  {g.model}: learned {rows[-1].learned.median_us:.0f} us ({rows[-1].learned.plan}), "
                 f"default {rows[-1].default.median_us:.0f} us ({rows[-1].default.plan}), "
                 f"best measured {rows[-1].best_us:.0f} us")
    return tuple(rows)


def _alone_ms(session: "Session | BucketedSession", inputs: dict[str, Any], iterations: int) -> float:
    with session:
        ms = timing.medians_ms(timing.interleaved([("run", lambda: session.run(inputs))],
                                                  timing.FAIR.with_counts(3, iterations)))["run"]
    if not (math.isfinite(ms) and ms > 0):
        raise AotError(f"a bundle's median time is {ms} ms", hint="time it again")
    return ms


def _folder(model: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in model)


def render(rows: tuple[EndToEnd, ...]) -> str:
    """A markdown table; the ratios over the best measured plan use each shipped plan's database
    time where it was collected (the same measurement as the best), else its time now (marked *)."""
    head = ("| model | plans | learned + gate | us | default (greedy, roofline gate) | us | best measured | us | "
            "learned / best | default / best |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        cells = []
        for s in (r.learned, r.default):
            us = s.database_us if s.database_us is not None else s.median_us
            star = "" if s.database_us is not None else "*"
            cells.append((f"{s.median_us:.0f} (database {s.database_us:.0f})" if s.database_us is not None
                          else f"{s.median_us:.0f}", f"{us / r.best_us:.2f}{star}"))
        lines.append(f"| {r.model} | {r.plans} | {r.learned.plan}, {r.gate} | {cells[0][0]} | "
                     f"{r.default.plan} | {cells[1][0]} | {r.best_plan} | {r.best_us:.0f} | "
                     f"{cells[0][1]} | {cells[1][1]} |")
    return "\n".join(lines)
