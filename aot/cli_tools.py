"""The `aot` subcommands that run developer tools (benchmarks, the harness check, the learned
policy's collection, the soak, profiling, fuzzing, conformance): their flags and handlers. Only
the command line imports this module, and only it imports ``aot.tools`` (tests/test_layout.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from aot import cli_args as args_
from aot.errors import AotError, UsageError
from aot.runtime.target import Target

if TYPE_CHECKING:
    from aot.learn.dataset import Dataset
    from aot.learn.model import ChoiceWeights


def add_commands(sub: "argparse._SubParsersAction[args_.Parser]") -> None:
    """The developer-tool subcommands, added to the `aot` command's subparsers."""
    from aot import cli_calibrate

    cli_calibrate.add_command(sub)
    bn = sub.add_parser("bench", help="MODEL: bundle (all regions on host) vs whole-model llvm-cpu vs onnxruntime; "
                                      "no MODEL: every zoo model, default vs tuned vs onnxruntime")
    bn.add_argument("model", nargs="?", help="a model, zoo:NAME or corpus:NAME (default: the corpus benchmark)")
    bn.add_argument("-o", "--output", default=None, help="workspace for the benchmark builds")
    bn.add_argument("--iterations", type=args_.count, default=None, help="interleaved turns (default 50; corpus 30)")
    bn.add_argument("--models", help="corpus benchmark: comma-separated zoo or corpus names (default: all)")
    bn.add_argument("--fresh", action="store_true", help="corpus benchmark: measure again what an earlier run kept")
    bn.add_argument("--docs", default="docs", help="corpus benchmark: where the JSON and SVG go")
    args_.add_options(bn)
    bn.set_defaults(func=_cmd_bench)

    bb = sub.add_parser("bench-batch", help="requests one by one vs the same requests in one run_batch "
                                           "(a bundle with batch buckets), medians per request")
    bb.add_argument("bundle", help="the bundle, or the directory given to `aot build -o`")
    bb.add_argument("--requests", type=args_.count, default=8)
    bb.add_argument("--iterations", type=args_.count, default=30)
    bb.set_defaults(func=_cmd_bench_batch)

    rb = sub.add_parser("bench-replay", help="each accelerator region replaying its recorded command buffer "
                                             "vs recording it every call: load, first call and steady state")
    rb.add_argument("out", help="the directory given to `aot build -o` (its build/ holds the region MLIR)")
    rb.add_argument("--trials", type=args_.count, default=5, help="fresh sessions per mode")
    rb.add_argument("--calls", type=args_.count, default=30, help="steady-state calls per session")
    rb.set_defaults(func=_cmd_bench_replay)

    ov = sub.add_parser("bench-overlap", help="regions on different devices run at the same time (a lane per "
                                              "device) vs one after another, medians in one process")
    ov.add_argument("bundle", nargs="?", help="the bundle, or the directory given to `aot build -o` (default: build "
                                              "the two-branch example into artifacts/bench/overlap)")
    ov.add_argument("--iterations", type=args_.count, default=30)
    ov.set_defaults(func=_cmd_bench_overlap)

    bh = sub.add_parser("bench-harness", help="is the benchmark harness fair? each contender timed interleaved in "
                                              "one process vs alone in a process of its own, medians")
    bh.add_argument("bundles", nargs="+", help="bundles built from ONNX models (the model must be where it was)")
    bh.add_argument("--iterations", type=args_.count, default=30)
    bh.set_defaults(func=_cmd_bench_harness)

    ln = sub.add_parser("learn", help="the learned partition policy's data: generate training graphs, collect "
                                      "measured plans")
    lsub = ln.add_subparsers(dest="learn_command", required=True)
    lc = lsub.add_parser("collect", help="build and time every distinct candidate plan of each model into a "
                                         "cost database (append-only, resumable)")
    lc.add_argument("models", nargs="+", help="ONNX models, zoo:NAME or corpus:NAME")
    lc.add_argument("--db", default="artifacts/learn/costs.sqlite", help="the cost database (SQLite)")
    lc.add_argument("--perturbations", type=lambda t: args_.count(t, least=0), default=8,
                    help="seeded random boundary perturbations per model")
    lc.add_argument("--seed", type=args_.seed, default=0)
    lc.add_argument("--iterations", type=args_.count, default=20, help="timed runs per plan (median)")
    lc.add_argument("--max-plans", type=args_.count, default=None,
                    help="measure at most this many new plans per model (a later run measures the rest)")
    lc.add_argument("--repeats", type=args_.count, default=1,
                    help="measure each plan until the database holds this many rows of it (its time is their "
                         "median)")
    lc.add_argument("--host-decisions", action="store_true",
                    help="also the host's region cuts x flag sets x local-task/local-sync (cheap to time: "
                         "most rows of a CPU-only database)")
    lc.add_argument("--mixed", type=lambda t: args_.count(t, least=0), default=None,
                    help="--host-decisions: seeded mixed-flag plans per region cut (their regions are "
                         "compiled for the uniform plans already: only timing costs; default 3)")
    lc.add_argument("-o", "--output", default="artifacts/learn/work", help="scratch folder for the builds")
    args_.add_options(lc)
    lc.set_defaults(func=_cmd_learn_collect)
    lr = lsub.add_parser("retime", help="time every plan of each model that one database holds again, side by "
                                        "side in one process, into another database (labels to rank plans by)")
    lr.add_argument("models", nargs="+", help="models as the source database names them (zoo:NAME, a path, ...)")
    lr.add_argument("--db", default="artifacts/learn/costs.sqlite", help="the source cost database (read only)")
    lr.add_argument("--into", required=True, help="the cost database the side-by-side rows go to")
    lr.add_argument("--iterations", type=args_.count, default=100, help="interleaved turns (one run of each plan)")
    lr.add_argument("--rounds", type=args_.count, default=1,
                    help="side-by-side timings each plan ends with in the target (default 1): each missing round "
                         "times again every plan short of it, and a plan's label is the median of its rows")
    lr.add_argument("-o", "--output", default="artifacts/learn/work",
                    help="scratch folder for the builds (its compile cache is the collection's)")
    args_.add_options(lr)
    lr.set_defaults(func=_cmd_learn_retime)
    lt = lsub.add_parser("train", help="fit the learned cost model and proposer on a cost database; write them "
                                       "as JSON trees a build evaluates with numpy (needs the [learn] extra)")
    lt.add_argument("--db", default="artifacts/learn/costs.sqlite", help="the cost database (SQLite)")
    lt.add_argument("-o", "--output", default="artifacts/learn/model.json", help="the model file (written atomically)")
    lt.add_argument("--mode", default="auto", choices=[m.value for m in _learn_modes()],
                    help="regions: region times through the lane simulation; plan: plan times directly; auto: "
                         "regions when the database holds enough region rows")
    lt.add_argument("--with-generated", action="store_true",
                    help="train on the generated graphs too (off: on this machine's host database they made "
                         "the held-out models' picks worse, docs/learned.md)")
    _training_options(lt)
    args_.add_options(lt)
    lt.set_defaults(func=_cmd_learn_train)
    le = lsub.add_parser("eval", help="leave one real model out at a time: Kendall's tau and top-1 regret of the "
                                      "learned model beside three baselines (needs the [learn] extra)")
    le.add_argument("--db", default="artifacts/learn/costs.sqlite", help="the cost database (SQLite)")
    le.add_argument("--mode", default="auto", choices=[m.value for m in _learn_modes()])
    le.add_argument("--json", default=None, help="also write the figures to this JSON file")
    le.add_argument("--end-to-end", action="store_true",
                    help="instead: build each real model held out with --policy learned --gate learned and "
                         "with the defaults, time each alone, and put them beside the best plan "
                         "the database measured")
    le.add_argument("-o", "--output", default="artifacts/learn/end-to-end",
                    help="--end-to-end: folder for the builds")
    le.add_argument("--iterations", type=args_.count, default=20, help="--end-to-end: timed runs per bundle")
    le.add_argument("--models", default=None,
                    help="--end-to-end: only these models, comma-separated as the database names them")
    le.add_argument("--with-generated", action="store_true", help="train on the generated graphs too")
    le.add_argument("--learning-curve", type=args_.graph_counts, default=None, metavar="K,K,...",
                    help="instead: each real model held out, fitted on seeded draws of K of the others for "
                         "each K (and on all of them): does tau still rise with more graphs?")
    le.add_argument("--draws", type=args_.count, default=2, help="--learning-curve: seeded draws per K")
    _training_options(le)
    args_.add_options(le)
    le.set_defaults(func=_cmd_learn_eval)
    lg = lsub.add_parser("generate", help="seeded random graphs of deployed blocks (conv, matmul, attention, "
                                          "elementwise, host-only ops, branches) as ONNX models, for training")
    lg.add_argument("-o", "--output", required=True, help="folder for gen-SEED-INDEX.onnx")
    lg.add_argument("--count", type=args_.count, default=20)
    lg.add_argument("--seed", type=args_.seed, default=0)
    lg.set_defaults(func=_cmd_learn_generate)

    sk = sub.add_parser("soak", help="serving under load: client threads through one Batcher over a bucketed "
                                     "bundle, some requests malformed; nothing wrong, nothing lost")
    sk.add_argument("bundle", help="a bundle with batch buckets")
    sk.add_argument("--requests", type=args_.count, default=10_000)
    sk.add_argument("--clients", type=args_.count, default=16)
    sk.add_argument("--seed", type=args_.seed, default=0)
    sk.set_defaults(func=_cmd_soak)

    pf = sub.add_parser("profile", help="time every dispatch of each region on its device (IREE's HAL profiler) "
                                        "beside onnxruntime's time per operator type")
    pf.add_argument("bundle", help="the bundle, or the directory given to `aot build -o`")
    pf.add_argument("--model", help="the source ONNX model (default: the one named in the manifest)")
    pf.add_argument("--runs", type=args_.count, default=20)
    pf.add_argument("--top", type=args_.count, default=10, help="dispatches listed per region")
    pf.add_argument("--json", help="also write the profile as JSON to this file")
    pf.set_defaults(func=_cmd_profile)

    fz = sub.add_parser("fuzz", help="build mutated models in child processes: every outcome must be a "
                                     "bundle matching onnxruntime or a typed error")
    fz.add_argument("--count", type=args_.count, default=1000)
    fz.add_argument("--seed", type=args_.seed, default=0)
    fz.add_argument("--workers", type=args_.count, default=2)
    fz.add_argument("-o", "--output", default="artifacts/fuzz", help="summary.json and the failing mutants")
    fz.set_defaults(func=_cmd_fuzz)

    cf = sub.add_parser("conformance", help="run ONNX node test cases through the whole pipeline")
    cf.add_argument("--target", choices=Target.backends(), default="llvm-cpu")
    cf.add_argument("--filter", help="regular expression on test case names")
    cf.add_argument("--limit", type=args_.count)
    cf.add_argument("--workers", type=args_.count, default=2)
    cf.add_argument("-o", "--output", help="results JSON (default: docs/conformance-TARGET.json)")
    cf.add_argument("--markdown", help="summary of every target's results beside the JSON (default: "
                    "docs/conformance.md when the JSON goes to docs/, none with -o)")
    cf.add_argument("--merge", action="store_true",
                    help="re-run only the --filter cases and replace them in the existing results JSON")
    cf.set_defaults(func=_cmd_conformance)


def _cmd_bench(args: argparse.Namespace) -> int:
    from aot import api
    from aot.tools import bench

    if args.model is None:
        return _corpus_bench(args)
    if api.is_torch(args.model):
        raise AotError(f"aot bench compares a bundle with onnxruntime on the same ONNX model; {args.model!r} is "
                       "a PyTorch factory", hint="export it with torch.onnx.export and bench that file")
    model, options = api.resolve(args.model, args_.build_options(args))
    out = Path(args.output) if args.output else Path("artifacts") / "bench" / model.stem
    print(bench.run(model, out, options, iterations=args.iterations or 50).text())
    return 0


def _cmd_bench_batch(args: argparse.Namespace) -> int:
    from aot.tools import serving

    print(serving.batch_vs_single(Path(args.bundle), args.requests, args.iterations).text())
    return 0


def _cmd_bench_replay(args: argparse.Namespace) -> int:
    from aot.tools import replay

    print(replay.bench(Path(args.out), args.trials, args.calls).text())
    return 0


def _cmd_bench_overlap(args: argparse.Namespace) -> int:
    from aot.tools import overlap

    bundle = Path(args.bundle) if args.bundle else overlap.build_example(
        Path("artifacts/bench/overlap"), lambda s: print(s, file=sys.stderr))
    print(overlap.bench(bundle, args.iterations).text())
    return 0


def _cmd_bench_harness(args: argparse.Namespace) -> int:
    from aot.tools import harness_check

    for bundle in args.bundles:
        print(harness_check.check(Path(bundle), args.iterations).text(), flush=True)
    return 0


def _cmd_learn_collect(args: argparse.Namespace) -> int:
    from aot.learn import collect, host_plans

    work = args_.output_folder("-o/--output", args.output)
    options = args_.build_options(args)
    for model in args.models:
        done = collect.collect(model, Path(args.db), work, options, args.perturbations,
                               args.seed, args.iterations, progress=lambda s: print(s, file=sys.stderr),
                               max_plans=args.max_plans, host_decisions=args.host_decisions,
                               repeats=args.repeats,
                               mixed=host_plans.MIXED_PER_CUT if args.mixed is None else args.mixed)
        print(f"{model}: {done.candidates} distinct plan(s), {done.measured} measured, {done.skipped} already "
              f"in the database, {len(done.failed)} failed")
    print(args.db)
    return 0


def _cmd_learn_retime(args: argparse.Namespace) -> int:
    from aot.learn import retime

    if not Path(args.db).is_file():
        raise UsageError(f"no cost database at {args.db!r}", hint="name the one `aot learn collect --db` wrote")
    if Path(args.into).resolve() == Path(args.db).resolve():
        raise UsageError("--into names the source database", hint="side-by-side rows go to a database of their own")
    work = args_.output_folder("-o/--output", args.output)
    options = args_.build_options(args)
    for model in args.models:
        done = retime.retime(model, Path(args.db), Path(args.into), work, options, args.iterations,
                             progress=lambda s: print(s, file=sys.stderr), rounds=args.rounds)
        print(f"{model}: {done.plans} plan(s), {done.timed} row(s) timed side by side in {done.groups} group(s), "
              f"{done.skipped} already there, {len(done.left_out)} left out (they no longer fit the graph), "
              f"{len(done.failed)} failed")
    print(args.into)
    return 0


def _training_options(p: argparse.ArgumentParser) -> None:
    from aot.learn.model import PREDICTION_ALONE

    p.add_argument("--leave-out-missing", action="store_true",
                   help="go on without the measured models that cannot be loaded (default: stop and name them)")
    p.add_argument("--risk-weight", type=args_.finite_non_negative, default=PREDICTION_ALONE.risk,
                   help="how much, in log time, a flag set's downside in training weighs when the model chooses "
                        "among plans (default: %(default)s; docs/learned.md)")
    p.add_argument("--prior-weight", type=args_.finite_non_negative, default=PREDICTION_ALONE.prior,
                   help="how much what similar training graphs measured for a plan's flags weighs "
                        "(default: %(default)s)")


def _choice_weights(args: argparse.Namespace) -> "ChoiceWeights":
    from aot.learn.model import ChoiceWeights

    return ChoiceWeights(args.risk_weight, args.prior_weight)


def _learn_modes() -> list:
    from aot.learn.train import ModeChoice

    return list(ModeChoice)


def _training_data(args: argparse.Namespace, say: Callable[[str], None]) -> "Dataset":
    from aot.errors import ModelError
    from aot.learn.dataset import load_dataset

    data = load_dataset(Path(args.db), args_.build_options(args), progress=say)
    if data.unloadable and not args.leave_out_missing:
        # A model missing here (the example not yet built, a corpus package not installed) would
        # quietly change the training set and every mean the evaluation prints.
        names = ", ".join(model for model, _ in data.unloadable)
        first_why = data.unloadable[0][1].removeprefix("cannot load it: ")
        raise ModelError(f"{len(data.unloadable)} model(s) measured in {args.db!r} cannot be loaded: {names} "
                         f"({first_why})",
                         hint="make them available (the example: `make artifacts/tiny_cnn/tiny_cnn.onnx`; the "
                              "corpus: `make setup`), or pass --leave-out-missing to go on without them")
    left_out: dict[str, list[str]] = {}   # said by train and eval alike: nothing is dropped silently
    for model, why in data.left_out():
        left_out.setdefault(model, []).append(why)
    for model, whys in left_out.items():
        say(f"learn  skipped {model} ({len(whys)} stored plan(s) or the model): {whys[0]}")
    return data if args.with_generated else data.real_only()


def _cmd_learn_train(args: argparse.Namespace) -> int:
    from aot.learn.train import ModeChoice, fit

    def say(s: str) -> None:
        print(s, file=sys.stderr)

    data = _training_data(args, say)
    learned = fit(data, ModeChoice(args.mode), weights=_choice_weights(args))
    learned.save(Path(args.output))
    say("learn  " + ", ".join(f"{k} {v}" for k, v in learned.summary) + f"; training set {learned.training_set}")
    print(args.output)
    return 0


def _cmd_learn_eval(args: argparse.Namespace) -> int:
    import dataclasses

    from aot.learn import evaluate
    from aot.learn.train import ModeChoice

    if args.end_to_end and args.learning_curve:
        from aot.errors import UsageError

        raise UsageError("aot learn eval: --end-to-end and --learning-curve are two different evaluations",
                         hint="give one of them")
    data = _training_data(args, lambda s: print(s, file=sys.stderr))
    if args.end_to_end:
        return _end_to_end(args, data)
    if args.learning_curve:
        return _learning_curve(args, data)
    result = evaluate.evaluate(data, ModeChoice(args.mode), progress=lambda s: print(s, file=sys.stderr),
                               weights=_choice_weights(args))
    print(evaluate.render(result))
    if args.json:
        from aot.runtime.atomic import write_json

        write_json(Path(args.json), {
            "graphs": result.graphs, "plans": result.plans, "rows": result.rows, "mode": result.mode,
            "best_classes": dict(result.best_classes),
            "skipped": [{"model": model, "why": why} for model, why in data.left_out()],
            "mean": {p.value: dataclasses.asdict(result.mean(p)) for p in evaluate.Predictor},
            "held_out": [{"model": h.model, "plans": h.plans, **{p.value: dataclasses.asdict(s) for p, s in h.scores},
                          "tune_top": dataclasses.asdict(h.narrowed) if h.narrowed else None,
                          "one_timing": dataclasses.asdict(h.one_timing) if h.one_timing else None}
                         for h in result.held_out]})
    return 0


def _learning_curve(args: argparse.Namespace, data: "Dataset") -> int:
    import dataclasses

    from aot.learn import curve
    from aot.learn.train import ModeChoice

    points = curve.learning_curve(data, args.learning_curve, args.draws, ModeChoice(args.mode),
                                  weights=_choice_weights(args), progress=lambda s: print(s, file=sys.stderr))
    print(curve.render(points))
    if args.json:
        from aot.runtime.atomic import write_json

        write_json(Path(args.json), {"learning_curve": [dataclasses.asdict(p) for p in points]})
    return 0


def _end_to_end(args: argparse.Namespace, data: "Dataset") -> int:
    import dataclasses

    from aot.learn import end_to_end
    from aot.learn.train import ModeChoice

    work = args_.output_folder("-o/--output", args.output)
    rows = end_to_end.run(data, args_.build_options(args), work, ModeChoice(args.mode), args.iterations,
                          tuple(args.models.split(",")) if args.models else (),
                          progress=lambda s: print(s, file=sys.stderr), weights=_choice_weights(args))
    print(end_to_end.render(rows))
    if args.json:
        from aot.runtime.atomic import write_json

        write_json(Path(args.json), {"end_to_end": [dataclasses.asdict(r) for r in rows]})
    return 0


def _cmd_learn_generate(args: argparse.Namespace) -> int:
    from aot.learn import generate

    for path in generate.write(args_.output_folder("-o/--output", args.output), args.count, args.seed):
        print(path)
    return 0


def _cmd_soak(args: argparse.Namespace) -> int:
    from aot.tools import soak

    result = soak.soak(Path(args.bundle), args.requests, args.clients, seed=args.seed)
    print(result.text())
    answered, errors, seconds = soak.close_in_flight(Path(args.bundle), seed=args.seed)
    print(f"closed with {answered + errors} requests in flight: {answered} answered, {errors} errors, "
          f"in {seconds:.2f} s")
    return 0 if result.ok else 1


def _corpus_bench(args: argparse.Namespace) -> int:
    from aot.partition.support import split_names
    from aot.tools import corpus_bench

    names = tuple(split_names(args.models))
    corpus_bench.bench_models(names)   # an unknown name fails now, not after the other models' builds
    docs = args_.output_folder("--docs", args.docs)
    out = Path(args.output) if args.output else Path("artifacts") / "bench" / "corpus"
    result = corpus_bench.run(out, names, iterations=args.iterations or 30,
                              progress=lambda s: print(s, file=sys.stderr), fresh=args.fresh)
    print(corpus_bench.text(result))
    for path in corpus_bench.write(result, docs):
        print(path)
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    import json

    from aot.tools import profile

    json_out = args_.output_file("--json", args.json) if args.json else None
    result = profile.profile_bundle(args.bundle, Path(args.model) if args.model else None, runs=args.runs)
    print(result.text(args.top))
    if json_out:
        json_out.write_text(json.dumps(result.to_json(), indent=1) + "\n")
        print(args.json)
    return 0


def _cmd_fuzz(args: argparse.Namespace) -> int:
    from aot.tools import fuzz
    from aot.tools.progress import Progress

    output = args_.output_folder("-o", args.output)
    with Progress("fuzz", args.count) as bar:
        summary = fuzz.run(args.count, args.seed, output, args.workers, lambda done, total, r: bar.advance(
            f"m{r.index:05d} {r.outcome}" + (f": {r.detail[:120]}" if r.outcome in fuzz.FAILURES else ""),
            important=r.outcome in fuzz.FAILURES))
    print(fuzz.text(summary))
    print(Path(args.output) / "summary.json")
    return 1 if summary["failures"] else 0


def _cmd_conformance(args: argparse.Namespace) -> int:
    from aot.tools import conformance

    out = args_.output_file("-o", args.output or f"docs/conformance-{args.target}.json")
    # An -o elsewhere (a trial run) must not rewrite the published summary unless asked to.
    wanted = args.markdown if args.markdown is not None else ("docs/conformance.md" if args.output is None else "")
    markdown = args_.output_file("--markdown", wanted) if wanted else None
    pattern = args_.pattern("--filter", args.filter)
    if args.merge and (pattern is None or not out.is_file()):
        raise UsageError(f"--merge needs --filter and an earlier full run in {out}",
                         hint=f"run `aot conformance --target {args.target}` once without --filter first")
    results = conformance.run(args.target, pattern, args.limit, args.workers)
    if args.merge:
        results = conformance.merge(json.loads(out.read_text()), results, args.filter)
    conformance.write(results, out, markdown)
    c = results["counts"]
    print(", ".join(f"{c[k]} {k}" for k in conformance.CATEGORIES) + f" of {results['total']} cases")
    print(out)
    return 0
