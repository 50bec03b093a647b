"""``aot fuzz``: mutated models through ``aot plan`` and ``aot build``, each in a child process.

Every mutant must end as a bundle that matches onnxruntime, or a typed ``AotError``. Anything
else is a failure: a bundle that answers differently, an exception that is not an AotError (a
traceback for the user), a signal, or a hang. The parent only writes files and reads results, so
no mutant can take it down. Mutants are a function of (seed, index): ``--seed S`` reproduces a
run, and a failing mutant's model is kept under OUTPUT for its repro line."""

from __future__ import annotations

import json
import multiprocessing
import random
import shutil
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from aot.checks.compare import compare
from aot.tools import mutate
from aot.tools.isolate import in_child

OUTCOMES = ("built, matches onnxruntime", "built, onnxruntime refuses the model", "typed error",
            "built, differs from onnxruntime", "untyped exception", "crash", "timeout")
FAILURES = frozenset(OUTCOMES[3:])
MUTANT_TIMEOUT_S = 300
VULKAN_EVERY = 5   # every fifth mutant is partitioned for lavapipe, the rest build for the host


@dataclass(frozen=True, slots=True)
class FuzzResult:
    index: int
    seed_model: str
    mutations: tuple[str, ...]
    accel: str
    outcome: str
    detail: str
    seconds: float


def run(count: int, seed: int = 0, out: Path = Path("artifacts/fuzz"), workers: int = 2,
        progress: Callable[[int, int, FuzzResult], None] = lambda done, total, r: None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    results = []
    # Spawned workers, each forking one child per mutant (see tools/isolate.py).
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for r in pool.map(_one, [(i, seed, str(out)) for i in range(count)]):
            results.append(r)
            progress(len(results), count, r)
    summary = summarize(results, seed)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def summarize(results: list[FuzzResult], seed: int) -> dict:
    typed = Counter(r.detail.split(":")[0] for r in results if r.outcome == "typed error")
    return {"seed": seed, "mutants": len(results),
            "outcomes": {o: sum(r.outcome == o for r in results) for o in OUTCOMES},
            "typed_errors": dict(typed.most_common()),
            "mutations": dict(Counter(m.split(" ")[0] for r in results for m in r.mutations).most_common()),
            "failures": [asdict(r) for r in results if r.outcome in FAILURES],
            # Not failures, but worth a look: aot built a model onnxruntime will not load or run.
            "onnxruntime_refuses": [asdict(r) for r in results if r.outcome == OUTCOMES[1]]}


def text(summary: dict) -> str:
    lines = [f"fuzz: {summary['mutants']} mutants (seed {summary['seed']})"]
    lines += [f"  {n:5d}  {o}" for o, n in summary["outcomes"].items()]
    lines.append("  typed errors: " + ", ".join(f"{k} {v}" for k, v in summary["typed_errors"].items()))
    for f in summary["failures"][:20]:
        lines.append(f"  FAILED m{f['index']:05d} ({f['seed_model']}: {'; '.join(f['mutations'])}): "
                     f"{f['outcome']}: {f['detail'][:300]}")
    return "\n".join(lines)


def _one(args: tuple[int, int, str]) -> FuzzResult:
    index, seed, out = args
    # Imported once per worker, before the fork, so each child starts warm. Importing creates no
    # IREE devices or onnxruntime sessions: nothing that holds threads across the fork.
    import aot.api, aot.checks.reference, aot.runtime  # noqa: E401, F401
    rng = random.Random(f"{seed}:{index}")
    seeds = mutate.seeds()
    name = rng.choice(sorted(seeds))
    try:
        model, done, files = mutate.mutant(seeds[name], rng)
    except Exception as e:  # noqa: BLE001 - the fuzzer's own bug: reported, and the run goes on
        return FuzzResult(index, name, (), "", "untyped exception", f"the mutator raised {type(e).__name__}: {e}", 0.0)
    accel = "vulkan" if index % VULKAN_EVERY == 0 else "none"
    folder = Path(out) / f"m{index:05d}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    path = folder / "model.onnx"
    path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    for file, data in files.items():
        (folder / file).write_bytes(data)
    start = time.monotonic()
    result, how = in_child(lambda: _build_and_compare(path, folder / "build", accel), MUTANT_TIMEOUT_S)
    if result is not None:
        outcome, detail = result
    elif how is None:      # unreachable: _build_and_compare returns a pair, so no result has a reason
        raise AssertionError("in_child returned neither a result nor a reason")
    elif how == "timed out":
        outcome, detail = "timeout", how
    elif how.startswith("raised"):
        outcome, detail = "untyped exception", how.removeprefix("raised ")
    else:
        outcome, detail = "crash", how
    if outcome not in FAILURES:
        shutil.rmtree(folder, ignore_errors=True)   # keep only what needs a look
    return FuzzResult(index, name, done, accel, outcome, detail, round(time.monotonic() - start, 2))


def _build_and_compare(path: Path, out: Path, accel: str) -> tuple[str, str]:
    """In the child: plan, build, run the bundle and onnxruntime on the same random inputs."""
    from aot import api, runtime
    from aot.checks import reference
    from aot.errors import AotError
    from aot.options import BuildOptions
    from aot.runtime.target import Target

    options = BuildOptions(accel=Target.accelerator(accel))
    try:
        api.plan(path, options)
        bundle = api.build(path, out, options).bundle
        inputs = reference.random_inputs(bundle.manifest.inputs, seed=0)
        with runtime.load(bundle.path) as session:
            got = session.run(inputs)
    except AotError as e:
        return "typed error", f"{type(e).__name__}: {e.message.splitlines()[0][:200]}"
    try:
        want = reference.session(path).run([o.name for o in bundle.manifest.outputs], inputs)
    except Exception as e:  # noqa: BLE001 - onnxruntime's own refusal, whatever its type
        return "built, onnxruntime refuses the model", f"{type(e).__name__}: {str(e)[:200]}"
    for o, g, w in zip(bundle.manifest.outputs, got, want):
        if not (c := compare(g, w, rtol=1e-3, atol=1e-4)).ok:
            return "built, differs from onnxruntime", f"output {o.name!r}: {c.reason}"
    return "built, matches onnxruntime", ""
