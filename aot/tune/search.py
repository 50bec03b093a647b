"""Tune each region of a staged bundle: compile every candidate flag set, check and time them on
the region's device (in a probe process), keep the fastest that matches onnxruntime.

Results are cached by (region MLIR, target, compiler version, device, candidate flags, repeats):
tuning an unchanged region again compiles nothing and times nothing."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from aot.checks.compare import VERIFY_RTOL
from aot.errors import CompileError
from aot.lower import flags, packed_conv
from aot.lower.compile import CompiledRegion, CompileJob, compile_many
from aot.lower.executor import Executor, compiler_version
from aot.frontend.source import OpFamily
from aot.record import TuneCandidate, Tuning
from aot.runtime import codec, heap
from aot.runtime.manifest import Manifest, RegionEntry
from aot.tune.candidates import FlagSet, candidates, split_finer
from aot.tune.progress import Steps
from aot.runtime.atomic import write_json

PROBE_TIMEOUT_S = 600       # one probe process: load, check and time every candidate of a region
# A candidate must beat the default by this much to replace it. Medians of the same module on
# this shared 2-core machine move by a few percent between runs; MiniLM's O2 build won a probe
# by 1% and then measured 16% slower in the corpus benchmark.
MIN_GAIN = 0.03
# A near tie from one round of turns is the noise's to decide: corpus oww-embedding's tuner run
# in stop 53's benchmark put data-tiling+ukernels 3% ahead of data-tiled-conv, which then ran
# 9-17% faster side by side (and won the next tuning by 11%). The candidates within
# RUNOFF_MARGIN of the fastest are timed again head to head, RUNOFF_TURNS times as many turns,
# and those medians rank them (``in_first_round_terms``).
RUNOFF_MARGIN = 0.05
RUNOFF_TURNS = 3


@dataclass(frozen=True, slots=True)
class TuneSettings:
    """The tuner's view of ``BuildOptions`` (``BuildOptions.tune_settings``)."""

    repeats: int            # timed calls per candidate (after warmup), interleaved
    accel_timeout: float    # an accelerator candidate compiling longer than this is dropped
    segments: int           # per-segment tuning: groups a large host region is cut into (0: off)
    warmup: ClassVar[int] = 3


def tune_regions(staged_dir: Path, manifest: Manifest, reference: dict[str, np.ndarray],
                 mlir_of: Callable[[str], Path], families_of: Callable[[str], frozenset[OpFamily]], cache: Path,
                 executor: Executor, settings: TuneSettings,
                 progress: Callable[[str], None] = lambda s: None,
                 choose: Callable[[str, tuple[FlagSet, ...]], tuple[FlagSet, ...] | None] | None = None
                 ) -> dict[str, Tuning]:
    """region -> its Tuning. ``reference``: every tensor of the model as onnxruntime computes it
    for one input (regions are checked on their real intermediates); ``families_of``: the op
    families a region's nodes hold (which content-specific flag sets apply); ``choose``: region,
    its candidates -> the ones to try, the first being the baseline (None: leave the region out;
    per-segment tuning narrows each group's search with it)."""
    store = cache / "tuning"
    store.mkdir(parents=True, exist_ok=True)
    found: dict[str, Tuning] = {}
    todo: list[tuple[RegionEntry, tuple[FlagSet, ...], Path]] = []
    for r in manifest.regions:
        text = mlir_of(r.name).read_text()
        offered = candidates(r.target, families_of(r.name), default=r.flags)
        chosen = choose(r.name, offered) if choose is not None else offered
        if chosen is None:
            continue
        sets = chosen
        key = _key(text, r, manifest.driver(r), sets, settings)
        record = store / f"{key}.json"
        if record.exists():
            # The winner is decided again from the cached measurements: the rule may have changed.
            cached = codec.decode(Tuning, json.loads(record.read_text()))
            found[r.name] = decide(cached.candidates, cached.device)
            progress(f"tune     {r.name}: cached, {found[r.name].winner}")
        else:
            todo.append((r, sets, record))
    if not todo:
        return found
    jobs = [CompileJob(r.name, mlir_of(r.name), r.target, s.flags, label=s.name) for r, sets, _ in todo for s in sets]
    progress(f"tune     compiling {len(jobs)} candidate(s) for {len(todo)} region(s) on {executor.description}")
    # Steps: each candidate compiled, then checked, then each region's timing.
    steps = Steps(2 * len(jobs) + len(todo), progress)

    def compiled_one(job: CompileJob, seconds: float | None, ok: bool) -> None:
        how = "from the cache" if seconds is None else f"in {seconds:.1f}s" if ok else f"FAILED after {seconds:.1f}s"
        steps.done(f"{job.region} compiled {job.label} {how}")

    def compile_(batch: list[CompileJob]) -> list[CompiledRegion | CompileError]:
        return compile_many(batch, cache, accel_timeout=settings.accel_timeout, executor=executor,
                            compiled=compiled_one)

    todo, results = _split_finer_where_refused(todo, jobs, compile_(jobs), compile_, steps)
    compiled = iter(results)
    for r, sets, record in todo:
        outcomes = [next(compiled) for _ in sets]
        tuning = _measure(staged_dir, manifest, r, sets, outcomes, reference, settings, _Reporter(r.name, steps))
        write_json(record, codec.encode(tuning))
        found[r.name] = tuning
        speed = f"{tuning.speedup:.2f}x the default" if tuning.speedup else "no faster candidate"
        progress(f"tune     {r.name}: {tuning.winner} ({speed}; "
                 f"{sum(c.rejected is None for c in tuning.candidates)}/{len(sets)} correct)")
    return found


Todo = list[tuple[RegionEntry, tuple[FlagSet, ...], Path]]


def _split_finer_where_refused(todo: Todo, jobs: list[CompileJob], results: list[CompiledRegion | CompileError],
                               compile_: Callable[[list[CompileJob]], list[CompiledRegion | CompileError]],
                               steps: Steps) -> tuple[Todo, list[CompiledRegion | CompileError]]:
    """Each host candidate IREE refused at its work split (``flags.refused_at_this_split``)
    compiled again split finer, one ``flags.FINER_SPLITS`` step at a time; the first that
    compiles takes its place under the flags it compiled with, and one that never does stays
    rejected as it was.
    ``jobs``: the candidates' compiles, in ``todo``'s order; ``results``: theirs."""
    sets = [s for _, region_sets, _ in todo for s in region_sets]
    results = list(results)
    for split in flags.FINER_SPLITS:
        refused = [i for i, o in enumerate(results) if isinstance(o, CompileError) and jobs[i].target.is_host
                   and flags.refused_at_this_split(o.stderr_tail)]
        if not refused:
            break
        finer = [split_finer(sets[i], split) for i in refused]
        steps.total += len(refused)
        retried = compile_([dataclasses.replace(jobs[i], opt=f.flags, label=f.name) for i, f in zip(refused, finer)])
        for i, f, outcome in zip(refused, finer, retried):
            if isinstance(outcome, CompiledRegion):
                sets[i], results[i] = f, outcome
    regrouped, start = [], 0
    for r, region_sets, record in todo:
        regrouped.append((r, tuple(sets[start:start + len(region_sets)]), record))
        start += len(region_sets)
    return regrouped, results


def _key(text: str, region: RegionEntry, driver: str, sets: tuple[FlagSet, ...], settings: TuneSettings) -> str:
    # The target's own flags too: a change there (say, hoisting limits) changes every candidate.
    # A set whose module is rewritten before it compiles (lower/packed_conv.py) carries the text
    # it compiles: its timings were of that text. A new rewrite retunes the regions it changes, and
    # only those (a version would retune every region the set compiles). The finer splits a
    # refused set is compiled again with: a record kept before them holds its refusal. Timings
    # taken before the probe kept the heap (probe.py) faulted where a session does not.
    digests: dict[tuple[str, ...], list[str]] = {}

    def rewritten(opt: tuple[str, ...]) -> list[str]:
        """The digest of the text ``opt`` compiles where it is rewritten (once per kind of rewrite)."""
        kind = packed_conv.key_tag(region.target, opt)
        if kind and kind not in digests:
            compiled = packed_conv.module_text(region.target, text.encode(), opt)
            digests[kind] = ["rewritten " + hashlib.sha256(compiled).hexdigest()[:32]]
        return digests.get(kind, [])

    parts = [text, str(region.target), " ".join(flags.compile_flags(region.target, opt=())), driver,
             f"heap kept {heap.wanted(os.environ)}",
             device_identity(driver), compiler_version(),
             json.dumps([[s.name, *s.flags, *rewritten(s.flags)] for s in sets]),
             f"{settings.repeats}/{settings.warmup}", f"finer splits {flags.FINER_SPLITS}",
             f"runoff {RUNOFF_MARGIN}/{RUNOFF_TURNS} in first-round terms"]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def device_identity(driver: str) -> str:
    """What the timings were taken on: the CPU model and core count, or the GPU's name."""
    if driver.startswith("local-"):
        return f"{cpu_model()} x{os.cpu_count()}"
    try:
        import iree.runtime as rt

        infos = rt.get_driver(driver).query_available_devices()
        return f"{driver}:{infos[0]['name']}" if infos else driver
    except Exception:
        return driver


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; the platform's processor string elsewhere)."""
    import platform

    try:
        return next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                     if ln.startswith("model name")), platform.processor() or "cpu")
    except OSError:
        return platform.processor() or "cpu"


@dataclass
class _Reporter:
    """The probe's events of one region as progress steps: a candidate checked, the timing done."""

    region: str
    steps: Steps

    def __call__(self, event: dict) -> None:
        if event["event"] == "runoff":   # one more timing, of the near tie
            self.steps.total += 1
        elif event["event"] == "checked":
            diff = event.get("max_abs_diff")
            verdict = (f"ok (max abs diff {diff:.3g})" if diff is not None else "ok") if event["ok"] \
                else f"REJECTED: {event.get('error') or 'mismatch'}"
            self.steps.done(f"{self.region} checked {event['name']}: {verdict}"[:200])
        elif event["event"] == "same":
            self.steps.done(f"{self.region} {event['name']}: the same module as {event['as']}, not timed again")
        elif event["event"] == "timed":
            calls = event.get("calls", {})
            most = max(calls.values(), default=0)
            times = ", ".join(f"{n} {us / 1000:.3g} ms" + (f" (pruned after {calls[n]})" if calls.get(n, most) < most else "")
                              for n, us in sorted(event["medians_us"].items(), key=lambda kv: kv[1]))
            self.steps.done(f"{self.region} timed: {times}"[:300])


def _measure(staged_dir: Path, manifest: Manifest, region: RegionEntry, sets: tuple[FlagSet, ...],
             outcomes: list, reference: dict[str, np.ndarray], settings: TuneSettings,
             report: Callable[[dict], None] = lambda e: None) -> Tuning:
    rejected: dict[str, str] = {}
    diffs: dict[str, float | None] = {}
    runnable: list[tuple[FlagSet, CompiledRegion]] = []
    first_with: dict[str, str] = {}   # module sha256 -> the first candidate that compiled to it
    twin: dict[str, str] = {}         # candidate -> that first one, where it is not itself
    for s, o in zip(sets, outcomes):
        if isinstance(o, CompiledRegion) and o.sha256 in first_with:
            twin[s.name] = first_with[o.sha256]   # flags that changed nothing: timing it again is noise
            report({"event": "same", "name": s.name, "as": twin[s.name]})
        elif isinstance(o, CompiledRegion):
            first_with[o.sha256] = s.name
            runnable.append((s, o))
        else:
            rejected[s.name] = f"compile failed (exit {o.returncode}): {o.stderr_tail.splitlines()[0][:300]}"
            report({"event": "checked", "name": s.name, "ok": False, "error": "did not compile"})
    medians: dict[str, float] = {}
    calls: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="aot-tune-") as tmp:
        data = Path(tmp, "data.npz")
        # Any values: numpy's stub would match **arrays against savez's allow_pickle: bool.
        arrays: dict[str, Any] = {**{f"in{i}": reference[v] for i, v in enumerate(region.inputs)},
                                  **{f"out{i}": reference[v] for i, v in enumerate(region.outputs)}}
        np.savez(data, **arrays)
        request = {"kind": "region", "driver": manifest.driver(region), "function": region.function,
                   "weights": str(staged_dir / manifest.weights.path) if manifest.weights else None,
                   "scope": manifest.weights.scope if manifest.weights else "", "data": str(data),
                   "inputs": len(region.inputs), "outputs": len(region.outputs), "rtol": VERIFY_RTOL,
                   "warmup": settings.warmup, "repeats": settings.repeats}
        pending = [(s.name, str(c.vmfb)) for s, c in runnable]
        while pending:
            events, error = run_probe({**request, "candidates": [{"name": n, "vmfb": v} for n, v in pending]}, report)
            started = None
            for e in events:
                if e["event"] == "start":
                    started = e["name"]
                elif e["event"] == "checked":
                    started = None
                    diffs[e["name"]] = e["max_abs_diff"]
                    if not e["ok"]:
                        rejected[e["name"]] = e["error"]
                elif e["event"] == "timed":
                    medians.update(e["medians_us"])
                    calls.update(e.get("calls", {}))
            if error is None:
                break
            if started is None:  # died while timing: which module did it is unknown
                for n, _ in pending:
                    rejected.setdefault(n, f"the probe process failed while timing: {error}")
                break
            # Again without it; the ones checked before it are checked again and then timed.
            rejected[started] = f"crashed or hung on its first run: {error}"
            pending = [(n, v) for n, v in pending if n not in rejected]
        close = runoff(medians, rejected)
        if len(close) > 1:
            report({"event": "runoff", "names": close})
            vmfbs = {s.name: str(c.vmfb) for s, c in runnable}
            events, error = run_probe({**request, "repeats": settings.repeats * RUNOFF_TURNS,
                                       "candidates": [{"name": n, "vmfb": vmfbs[n]} for n in close]},
                                      lambda e: report(e) if e["event"] == "timed" else None)
            timed = next((e for e in events if e["event"] == "timed"), None)
            if error is None and timed is not None:
                medians.update(in_first_round_terms(medians, timed["medians_us"]))
                calls.update({n: calls.get(n, 0) + k for n, k in timed.get("calls", {}).items()})

    def row(s: FlagSet) -> TuneCandidate:
        name = twin.get(s.name, s.name)   # whose figures
        return TuneCandidate(s.name, s.flags, None if name in rejected else medians.get(name), diffs.get(name),
                             rejected.get(name), calls.get(s.name, 0), same_as=twin.get(s.name))

    table = tuple(row(s) for s in sets)
    return decide(table, device_identity(manifest.driver(region)))


def runoff(medians: dict[str, float], rejected: dict[str, str]) -> list[str]:
    """The correct candidates timed within ``RUNOFF_MARGIN`` of the fastest, fastest first."""
    timed = sorted((us, n) for n, us in medians.items() if n not in rejected)
    return [n for us, n in timed if us <= timed[0][0] * (1 + RUNOFF_MARGIN)] if timed else []


def in_first_round_terms(first: dict[str, float], again: dict[str, float]) -> dict[str, float]:
    """The run-off's medians scaled so that its fastest keeps the first round's fastest figure of
    them. The run-off ranks its own candidates; the sets it left out were timed in the first round
    only, over ``RUNOFF_MARGIN`` behind, and are set against these figures. Its raw medians came
    from another moment of the host: LCNet's run-off of two sets ran in a slower one (4.72 and 4.63
    ms), and a set left out at 3.32 ms from the first round beat both, though it ran 1.14-1.21x
    slower than one of them side by side (docs/performance.md, stop 74)."""
    timed = {n: us for n, us in again.items() if us > 0 and n in first}
    if not timed:
        return {}
    scale = min(first[n] for n in timed) / min(timed.values())
    return {n: us * scale for n, us in timed.items()}


def decide(table: tuple[TuneCandidate, ...], device: str) -> Tuning:
    """The fastest correct candidate, if it beats the default (``table[0]``) by MIN_GAIN; else
    the default when it is correct; else the fastest correct one."""
    timed = [(c, c.median_us) for c in table if c.rejected is None and c.median_us is not None]
    fastest = min(timed, key=lambda t: t[1], default=None)
    default = table[0]
    default_us = next((us for c, us in timed if c == default), None)
    if fastest is not None and default_us is not None and fastest[1] > default_us * (1 - MIN_GAIN):
        fastest = (default, default_us)
    best = fastest[0] if fastest is not None else None
    return Tuning(best.name if best else default.name, best.median_us if best else None, default.median_us,
                  device, table)


def run_probe(request: dict, on_event: Callable[[dict], None] = lambda e: None) -> tuple[list[dict], str | None]:
    """(events, None) or (the events it wrote before failing, why it failed). ``on_event`` hears
    each event as the probe writes it (progress); stderr goes to a file, so no pipe fills up."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "aot.tune.probe"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(PROBE_TIMEOUT_S, kill)
        timer.start()
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(request))
            proc.stdin.close()
            events = []
            for line in proc.stdout:
                for e in _events(line):
                    events.append(e)
                    on_event(e)
            proc.wait()
        finally:
            timer.cancel()
        if killed.is_set():
            return events, f"timed out after {PROBE_TIMEOUT_S}s"
        err.seek(0)
        if proc.returncode != 0 or not any(e["event"] == "timed" for e in events):
            tail = (err.read().strip().splitlines() or ["no output"])[-1][:300]
            return events, f"exit {proc.returncode}: {tail}"
    return events, None


def _events(stdout: str) -> list[dict]:
    events = []
    for line in stdout.splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # IREE or a library wrote to stdout
    return events
