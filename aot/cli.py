"""The `aot` command. Results and paths go to stdout; `ERROR: ...` to stderr with exit code 1."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aot.errors import AotError
from aot.runtime.target import Target


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except AotError as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ERROR: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `aot report B | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aot", description="Ahead-of-time builds of ONNX models on IREE, "
                                                        "partitioned across an accelerator and the host CPU.")
    sub = p.add_subparsers(required=True, metavar="COMMAND")

    b = sub.add_parser("build", help="build MODEL.onnx, zoo:NAME or a PyTorch pkg.module:factory into a bundle")
    b.add_argument("model", help="an ONNX file, zoo:NAME, or pkg.module:factory / file.py:factory returning "
                                 "an nn.Module (with --example-input)")
    b.add_argument("-o", "--output", required=True, help="artifacts/NAME: the bundle goes to OUTPUT/bundle")
    _add_build_options(b)
    b.set_defaults(func=_cmd_build)

    t = sub.add_parser("tune", help="tune an existing build: search each region's flags and the host runtime")
    t.add_argument("build", help="the directory given to `aot build -o` (its source model must still exist)")
    _add_tune_options(t)
    t.set_defaults(func=_cmd_tune)

    pl = sub.add_parser("plan", help="partition MODEL without compiling; write the plan as JSON")
    pl.add_argument("model")
    pl.add_argument("-o", "--output", help="plan.json to write (default: print it)")
    _add_build_options(pl)
    pl.set_defaults(func=_cmd_plan)

    r = sub.add_parser("run", help="run a bundle on inputs given as name=@file.npy")
    r.add_argument("bundle", help="the bundle, or the directory given to `aot build -o`")
    r.add_argument("--input", action="append", default=[], metavar="NAME=@FILE.npy")
    r.add_argument("--output-dir", help="write each output to DIR/<output>.npy instead of printing it")
    r.add_argument("--device-memory", metavar="DRIVER=SIZE[,...]",
                   help="what each device may use, e.g. vulkan=2GiB (default: $AOT_DEVICE_MEMORY, else what the "
                        "device reports); a bundle that needs more is refused before it loads")
    r.set_defaults(func=_cmd_run)

    rp = sub.add_parser("report", help="regions, devices, node counts, host reasons, boundary bytes")
    rp.add_argument("bundle", help="the bundle, or the directory given to `aot build -o`")
    rp.set_defaults(func=_cmd_report)

    c = sub.add_parser("check", help="run a bundle through its generated stub and compare with onnxruntime")
    c.add_argument("bundle", help="the bundle, or the directory given to `aot build -o`")
    c.add_argument("--model", help="the source ONNX model or torch factory (default: the one the manifest names)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--atol", type=float, default=1e-4)
    c.set_defaults(func=_cmd_check)

    bn = sub.add_parser("bench", help="MODEL: bundle (all regions on host) vs whole-model llvm-cpu vs onnxruntime; "
                                      "no MODEL: every zoo model, default vs tuned vs onnxruntime")
    bn.add_argument("model", nargs="?", help="a model or zoo:NAME (default: the corpus benchmark)")
    bn.add_argument("-o", "--output", default=None, help="workspace for the benchmark builds")
    bn.add_argument("--iterations", type=int, default=None, help="interleaved turns (default 50; corpus 30)")
    bn.add_argument("--models", help="corpus benchmark: comma-separated zoo names (default: all)")
    bn.add_argument("--docs", default="docs", help="corpus benchmark: where the JSON and SVG go")
    _add_build_options(bn)
    bn.set_defaults(func=_cmd_bench)

    bb = sub.add_parser("bench-batch", help="requests one by one vs the same requests in one run_batch "
                                           "(a bundle with batch buckets), medians per request")
    bb.add_argument("bundle", help="the bundle, or the directory given to `aot build -o`")
    bb.add_argument("--requests", type=int, default=8)
    bb.add_argument("--iterations", type=int, default=30)
    bb.set_defaults(func=_cmd_bench_batch)

    rb = sub.add_parser("bench-replay", help="each accelerator region replaying its recorded command buffer "
                                             "vs recording it every call: load, first call and steady state")
    rb.add_argument("out", help="the directory given to `aot build -o` (its build/ holds the region MLIR)")
    rb.add_argument("--trials", type=int, default=5, help="fresh sessions per mode")
    rb.add_argument("--calls", type=int, default=30, help="steady-state calls per session")
    rb.set_defaults(func=_cmd_bench_replay)

    ov = sub.add_parser("bench-overlap", help="regions on different devices run at the same time (a lane per "
                                              "device) vs one after another, medians in one process")
    ov.add_argument("bundle", nargs="?", help="the bundle, or the directory given to `aot build -o` (default: build "
                                              "the two-branch example into artifacts/bench/overlap)")
    ov.add_argument("--iterations", type=int, default=30)
    ov.set_defaults(func=_cmd_bench_overlap)

    pf = sub.add_parser("profile", help="time every dispatch of each region on its device (IREE's HAL profiler) "
                                        "beside onnxruntime's time per operator type")
    pf.add_argument("bundle", help="the bundle, or the directory given to `aot build -o`")
    pf.add_argument("--model", help="the source ONNX model (default: the one named in the manifest)")
    pf.add_argument("--runs", type=int, default=20)
    pf.add_argument("--top", type=int, default=10, help="dispatches listed per region")
    pf.add_argument("--json", help="also write the profile as JSON to this file")
    pf.set_defaults(func=_cmd_profile)

    fz = sub.add_parser("fuzz", help="build mutated models in child processes: every outcome must be a "
                                     "bundle matching onnxruntime or a typed error")
    fz.add_argument("--count", type=int, default=1000)
    fz.add_argument("--seed", type=int, default=0)
    fz.add_argument("--workers", type=int, default=2)
    fz.add_argument("-o", "--output", default="artifacts/fuzz", help="summary.json and the failing mutants")
    fz.set_defaults(func=_cmd_fuzz)

    cf = sub.add_parser("conformance", help="run ONNX node test cases through the whole pipeline")
    cf.add_argument("--target", choices=Target.backends(), default="llvm-cpu")
    cf.add_argument("--filter", help="regular expression on test case names")
    cf.add_argument("--limit", type=int)
    cf.add_argument("--workers", type=int, default=2)
    cf.add_argument("-o", "--output", help="results JSON (default: docs/conformance-TARGET.json)")
    cf.add_argument("--markdown", default="docs/conformance.md", help="summary of every target's results")
    cf.set_defaults(func=_cmd_conformance)

    ex = sub.add_parser("example", help="write the default example model (a small CNN) to a file")
    ex.add_argument("-o", "--output", required=True)
    ex.set_defaults(func=_cmd_example)
    return p


def _add_build_options(p: argparse.ArgumentParser) -> None:
    from aot.options import DEFAULTS as D
    from aot.partition import policies, select

    p.add_argument("--accel", default=str(D.accel) if D.accel else "none", metavar="vulkan|cuda|none[:ARCH]",
                   help=f"accelerator target: vulkan[:ARCH], cuda[:ARCH] or none (host only); default {D.accel}")
    p.add_argument("--vulkan-target", help=f"Vulkan arch to compile for; must match the device "
                                           f"(default {Target.parse('vulkan').arch}, Mesa lavapipe)")
    p.add_argument("--cuda-target", help=f"CUDA arch to compile for (default {Target.parse('cuda').arch})")
    p.add_argument("--host-cpu", default=D.host.arch,
                   help="llvm-cpu target CPU (default: this machine's); e.g. x86-64-v3 for a bundle that runs elsewhere")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=1x3x224x224")
    p.add_argument("--batch-buckets", default=D.batch_buckets, metavar="LADDER",
                   help="sizes a symbolic batch dimension is compiled at (1,2,4,8 | ratio:MAX:1.0,0.5 | "
                        f"linear:MAX:N | @observed.txt[*0.8]); default {D.batch_buckets}")
    p.add_argument("--dim", action="append", default=[], metavar="SYMBOL=LADDER",
                   help="sizes of another symbolic dimension (its name in the model, or INPUT.AXIS when unnamed)")
    p.add_argument("--pad-value", action="append", default=[], metavar="INPUT=VALUE",
                   help="what padding up to a bucket fills INPUT with (default 0)")
    p.add_argument("--accept-padding", action="append", default=[], metavar="SYMBOL=MAX_ABS_DIFF",
                   help="keep a ladder whose padding changes results by up to this much (measured per bucket)")
    p.add_argument("--fallback", choices=("none", "dynamic"), default=D.fallback,
                   help="dynamic: also compile the whole model for the host with its symbolic dimensions "
                        "dynamic, to serve a call past the largest bucket along a non-batch dimension")
    p.add_argument("--example-input", action="append", default=[], metavar="NAME=1x3x224x224[:DTYPE]",
                   help="a PyTorch model (MODEL given as pkg.module:factory or file.py:factory): one per "
                        "forward argument, in order; the module is exported for these static shapes")
    p.add_argument("--const-input", action="append", default=[], metavar="NAME=VALUE",
                   help="bake an input in as a constant (16000, 0,2 or @values.npy); branches and shapes "
                        "it decides are folded away")
    p.add_argument("--no-index-guards", dest="index_guards", action="store_false", default=D.index_guards,
                   help="do not guard indices computed inside the model (an out-of-range one then reads "
                        "outside its tensor); indices that are model inputs are still checked")
    p.add_argument("--min-compute", type=int, default=D.min_compute,
                   help="accelerator regions with fewer compute nodes stay on the host")
    p.add_argument("--policy", choices=policies.names(), default=D.policy,
                   help="region-forming policy: cycle-free greedy merging, or depth-growth")
    p.add_argument("--select", choices=select.MODES, default=D.select,
                   help="which accelerator regions to keep (the rest run on the host)")
    p.add_argument("--threshold", type=int, default=D.threshold,
                   help="compute nodes a region needs under --select threshold")
    p.add_argument("--no-gate", dest="gate", action="store_false", default=D.gate,
                   help="ship the partition even when the cost model says one device would be faster")
    p.add_argument("--cost-params", help="device parameters JSON for the cost model (default: aot/partition/devices.json)")
    p.add_argument("--host-ops", help="comma-separated op types forced to the host")
    p.add_argument("--accel-ops", help="comma-separated op types forced to the accelerator")
    p.add_argument("--host-nodes", help="comma-separated node-name globs forced to the host")
    p.add_argument("--accel-nodes", help="comma-separated node-name globs forced to the accelerator")
    p.add_argument("--accel-compile-timeout", type=float, default=D.accel_compile_timeout, metavar="SECONDS",
                   help="an accelerator region still compiling after this falls back to llvm-cpu")
    p.add_argument("--measure", action="store_true", default=D.measure,
                   help="time every region on its real device and gate on the measurements")
    p.add_argument("--verify", action=argparse.BooleanOptionalAction, default=D.verify,
                   help="run each accelerator region on its device against the reference (onnxruntime, or "
                        "PyTorch eager for a torch module); move failures "
                        "to the host (default: on when the device is present)")
    p.add_argument("--tune", action="store_true", default=D.tune,
                   help="search each region's compile flags on its device and the host runtime's threading; "
                        "keep the fastest that matches onnxruntime (cached: a second run times nothing)")
    _add_tune_options(p)
    p.add_argument("--plan", help="build exactly this plan.json (validated first)")
    p.add_argument("--name", help="model name for the manifest and the stub class (default: the graph name)")
    p.add_argument("--dump-after", action="append", default=[], choices=("plan", "import"),
                   help="write the stage's output into OUTPUT/build")


def _add_tune_options(p: argparse.ArgumentParser) -> None:
    from aot.options import DEFAULTS as D

    p.add_argument("--tune-repeats", type=int, default=D.tune_repeats, metavar="N",
                   help="timed calls per tuning candidate (warm medians, interleaved)")
    p.add_argument("--cluster", default=D.cluster, metavar="ADDRESS",
                   help="run compile jobs on this Dask scheduler (tcp://HOST:8786) instead of a local pool")


def _build_options(args: argparse.Namespace):
    """BuildOptions from the command line; the accelerator target is parsed here, once."""
    from aot.options import (BuildOptions, parse_constant, parse_example_input, parse_number, parse_pair,
                             parse_shape)
    from aot.partition.support import Overrides, split_names

    accel = Target.accelerator(args.accel)
    arch = {"cuda": args.cuda_target, "vulkan-spirv": args.vulkan_target}.get(accel.backend) if accel else None
    if arch and ":" in args.accel and arch != accel.arch:
        raise AotError(f"--accel {args.accel} and --{accel.backend.split('-')[0]}-target {arch} name two archs",
                       hint="give the arch once")
    return BuildOptions(
        accel=Target.accelerator(args.accel, arch), host=Target.host(args.host_cpu),
        input_shapes=tuple(parse_shape(s) for s in args.input_shape), min_compute=args.min_compute,
        example_inputs=tuple(parse_example_input(s) for s in args.example_input),
        constant_inputs=tuple((n, v.tolist()) for n, v in map(parse_constant, args.const_input)),
        policy=args.policy, select=args.select, threshold=args.threshold, gate=args.gate,
        cost_params=Path(args.cost_params) if args.cost_params else None,
        accel_compile_timeout=args.accel_compile_timeout, measure=args.measure, verify=args.verify,
        overrides=Overrides(frozenset(split_names(args.host_ops)), frozenset(split_names(args.accel_ops)),
                            split_names(args.host_nodes), split_names(args.accel_nodes)),
        plan_file=Path(args.plan) if args.plan else None, dump_after=frozenset(args.dump_after), name=args.name,
        tune=args.tune, tune_repeats=args.tune_repeats, cluster=args.cluster, index_guards=args.index_guards,
        batch_buckets=args.batch_buckets,
        dim_ladders=tuple(parse_pair(d, "--dim", "SYMBOL=1,2,4") for d in args.dim),
        pad_values=tuple(parse_number(v, "--pad-value", "INPUT=0") for v in args.pad_value),
        fallback=args.fallback,
        padding_tolerances=tuple(parse_number(v, "--accept-padding", "SYMBOL=0.01") for v in args.accept_padding))


def _cmd_build(args: argparse.Namespace) -> int:
    from aot import api

    result = api.build(args.model, Path(args.output), _build_options(args),
                       progress=lambda s: print(s, file=sys.stderr))
    for r in result.bundle.manifest.regions:
        how = result.bundle.record.region(r.name)
        note = "  (fell back from the accelerator)" if how.fallback else ""
        print(f"region {r.name}: {r.target} {len(how.nodes)} nodes{note}", file=sys.stderr)
    print(result.bundle.path)
    print(result.bundle.stub)
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from aot import api

    result = api.tune(Path(args.build), repeats=args.tune_repeats, cluster=args.cluster,
                      progress=lambda s: print(s, file=sys.stderr))
    from aot import report

    print(report.tuning_text(result.bundle.manifest, result.bundle.record))
    print(result.bundle.path)
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from aot import api, report

    planned = api.plan(args.model, _build_options(args))
    print(report.plan_summary(planned))
    if args.output:
        planned.plan.save(Path(args.output))
        print(args.output)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from aot import runtime
    from aot.errors import RuntimeInputError

    inputs = {}
    for item in args.input:
        name, sep, ref = item.partition("=")
        if not sep or not ref.startswith("@"):
            raise RuntimeInputError(f"bad --input {item!r}", hint="write it as NAME=@file.npy")
        try:
            inputs[name] = np.load(ref[1:], allow_pickle=False)
        except (OSError, ValueError) as e:
            raise RuntimeInputError(f"cannot read input {name!r} from {ref[1:]!r}: {e}") from e
    with runtime.load(args.bundle, device_memory=args.device_memory) as session:
        outputs = session.run(inputs)
        names = [o.name for o in session.manifest.outputs]
    if args.output_dir:
        from aot.bundle.names import file_name

        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for i, (name, arr) in enumerate(zip(names, outputs)):
            path = out / file_name(f"{i}_{name}", ".npy")
            np.save(path, arr)
            print(path)
    else:
        np.set_printoptions(threshold=50, edgeitems=3)
        for name, arr in zip(names, outputs):
            print(f"{name!r}: {arr.dtype}{list(arr.shape)}\n{arr}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from aot import record, report
    from aot.runtime import manifest

    bundle = manifest.bundle_dir(args.bundle)
    data, how = manifest.read(bundle), record.read(bundle)
    print(report.text(data, how))
    page = bundle.parent / "report.html"
    page.write_text(report.html_page(data, how))
    print(page)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from aot.checks import golden as check

    result = check.check_bundle(Path(args.bundle), args.model, seed=args.seed)
    print(result.summary())
    if result.max_abs_error > args.atol:
        print(f"ERROR: max abs error {result.max_abs_error:.3g} exceeds {args.atol:g}", file=sys.stderr)
        return 1
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from aot import api
    from aot.tools import bench

    if args.model is None:
        return _corpus_bench(args)
    if api.is_torch(args.model):
        raise AotError(f"aot bench compares a bundle with onnxruntime on the same ONNX model; {args.model!r} is "
                       "a PyTorch factory", hint="export it with torch.onnx.export and bench that file")
    model, options = api.resolve(args.model, _build_options(args))
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


def _corpus_bench(args: argparse.Namespace) -> int:
    from aot.partition.support import split_names
    from aot.tools import corpus_bench

    out = Path(args.output) if args.output else Path("artifacts") / "bench" / "corpus"
    result = corpus_bench.run(out, tuple(split_names(args.models)), iterations=args.iterations or 30,
                              progress=lambda s: print(s, file=sys.stderr))
    print(corpus_bench.text(result))
    for path in corpus_bench.write(result, Path(args.docs)):
        print(path)
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    import json

    from aot.tools import profile

    result = profile.profile_bundle(args.bundle, Path(args.model) if args.model else None, runs=args.runs)
    print(result.text(args.top))
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=1) + "\n")
        print(args.json)
    return 0


def _cmd_fuzz(args: argparse.Namespace) -> int:
    from aot.tools import fuzz
    from aot.tools.progress import Progress

    with Progress("fuzz", args.count) as bar:
        summary = fuzz.run(args.count, args.seed, Path(args.output), args.workers, lambda done, total, r: bar.advance(
            f"m{r.index:05d} {r.outcome}" + (f": {r.detail[:120]}" if r.outcome in fuzz.FAILURES else ""),
            important=r.outcome in fuzz.FAILURES))
    print(fuzz.text(summary))
    print(Path(args.output) / "summary.json")
    return 1 if summary["failures"] else 0


def _cmd_conformance(args: argparse.Namespace) -> int:
    from aot.tools import conformance

    results = conformance.run(args.target, args.filter, args.limit, args.workers)
    out = Path(args.output or f"docs/conformance-{args.target}.json")
    conformance.write(results, out, Path(args.markdown) if args.markdown else None)
    c = results["counts"]
    print(", ".join(f"{c[k]} {k}" for k in conformance.CATEGORIES) + f" of {results['total']} cases")
    print(out)
    return 0


def _cmd_example(args: argparse.Namespace) -> int:
    from aot.tools import examples

    print(examples.write(Path(args.output)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
