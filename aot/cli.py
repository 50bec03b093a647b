"""The `aot` command. Results and paths go to stdout; `ERROR: ...` to stderr with exit code 1."""

from __future__ import annotations

import argparse
import faulthandler
import sys
from pathlib import Path

from aot import cli_args as args_
from aot import cli_tools
from aot.errors import AotError, UsageError
from aot.runtime.target import Target

# What main prints when an exception that is not an AotError escapes a command: a bug in aot (every
# failure a user can cause must be a typed error naming its cause). Tests look for it.
INTERNAL_ERROR = "ERROR: internal error in aot"


def main(argv: list[str] | None = None) -> int:
    # A crash in native code (the IREE runtime, a Vulkan driver, the compiler) kills the process
    # with a signal before any handler below runs; faulthandler prints where each Python thread
    # was, so the report says which stage died and not only "-11".
    if not faulthandler.is_enabled() and sys.__stderr__ is not None:   # (pytest has its own)
        faulthandler.enable(file=sys.__stderr__, all_threads=True)
    try:
        args = _parser().parse_args(argv)
        return args.func(args) or 0
    except AotError as e:
        print(f"ERROR: {e}", file=sys.stderr)
        if not e.hint and isinstance(e, UsageError):   # a flag's own parser may not say more
            print("  hint: see `aot COMMAND --help` for what each flag takes", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ERROR: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `aot report B | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # noqa: BLE001 - the last guard: no traceback reaches a user, but it says it is a bug
        import os
        import traceback

        print(f"{INTERNAL_ERROR} ({type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''})\n"
              "  hint: please report it with the command line; set AOT_TRACEBACK=1 to print where it happened",
              file=sys.stderr)
        if os.environ.get("AOT_TRACEBACK") == "1":
            traceback.print_exc()
        return 1


def _parser() -> argparse.ArgumentParser:
    p = args_.Parser(prog="aot", description="Ahead-of-time builds of ONNX models on IREE, "
                                             "partitioned across an accelerator and the host CPU.")
    sub = p.add_subparsers(required=True, metavar="COMMAND")

    b = sub.add_parser("build", help="build MODEL.onnx, zoo:NAME, corpus:NAME or a PyTorch pkg.module:factory "
                                      "into a bundle")
    b.add_argument("model", help="an ONNX file, zoo:NAME, corpus:NAME, or pkg.module:factory / file.py:factory "
                                 "returning an nn.Module (with --example-input)")
    b.add_argument("-o", "--output", required=True, help="artifacts/NAME: the bundle goes to OUTPUT/bundle")
    args_.add_options(b)
    b.set_defaults(func=_cmd_build)

    t = sub.add_parser("tune", help="tune an existing build: search each region's flags and the host runtime")
    t.add_argument("build", help="the directory given to `aot build -o` (its source model must still exist)")
    args_.add_options(t, "tune")
    t.set_defaults(func=_cmd_tune)

    pl = sub.add_parser("plan", help="partition MODEL without compiling; write the plan as JSON")
    pl.add_argument("model")
    pl.add_argument("-o", "--output", help="plan.json to write (default: print it)")
    args_.add_options(pl)
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
    c.add_argument("--seed", type=args_.seed, default=0)
    # Unset: aot.checks.golden's defaults (1e-4 and 1e-5), which the help repeats for the reader.
    c.add_argument("--atol", type=args_.finite_non_negative, default=None, help="absolute tolerance (default 1e-4)")
    c.add_argument("--rtol", type=args_.finite_non_negative, default=None,
                   help="relative tolerance: an output may differ by atol + rtol * |reference| (default 1e-5)")
    c.add_argument("--integrity", action="store_true",
                   help="only check every file the manifest names against its size and sha256 (runs nothing)")
    c.set_defaults(func=_cmd_check)

    cli_tools.add_commands(sub)

    ex = sub.add_parser("example", help="write the default example model (a small CNN) to a file")
    ex.add_argument("-o", "--output", required=True)
    ex.set_defaults(func=_cmd_example)
    return p


def _cmd_build(args: argparse.Namespace) -> int:
    from aot import api

    from aot.tune.progress import StepLines

    printer = StepLines()
    try:
        result = api.build(args.model, Path(args.output), args_.build_options(args), progress=printer)
    finally:
        printer.close()
    for r in result.bundle.manifest.regions:
        how = result.bundle.record.region(r.name)
        note = "  (fell back from the accelerator)" if how.fallback else ""
        print(f"region {r.name}: {r.target} {len(how.nodes)} nodes{note}", file=sys.stderr)
    print(result.bundle.path)
    print(result.bundle.stub)
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from aot import api

    given = args_.build_options(args, "tune")
    from aot.tune.progress import StepLines

    printer = StepLines()
    try:
        result = api.tune(Path(args.build), repeats=given.tune_repeats, cluster=given.cluster, progress=printer)
    finally:
        printer.close()
    from aot import report

    print(report.tuning_text(result.bundle.manifest, result.bundle.record))
    print(result.bundle.path)
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from aot import api, report

    planned = api.plan(args.model, args_.build_options(args))
    print(report.plan_summary(planned))
    if args.output:
        planned.plan.save(Path(args.output))
        print(args.output)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from aot import runtime
    from aot.runtime import manifest as mf

    inputs = args_.read_inputs(args.input)
    out = args_.output_folder("--output-dir", args.output_dir) if args.output_dir else None
    args_.check_input_dtypes(mf.read(args.bundle), args.input, inputs)   # before any device opens
    with runtime.load(args.bundle, device_memory=args.device_memory) as session:
        outputs = session.run(inputs)
        names = [o.name for o in session.manifest.outputs]
    if out is not None:
        from aot.bundle.names import file_name

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
    try:
        page.write_text(report.html_page(data, how))
    except OSError as e:
        raise AotError(f"cannot write the report page {str(page)!r}: {e.strerror or e}",
                       hint="the report above is complete; make the bundle's parent folder writable for the page") from None
    print(page)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from aot.checks import golden as check

    if args.integrity:
        return _check_integrity(Path(args.bundle))

    given = {name: value for name in ("atol", "rtol") if (value := getattr(args, name)) is not None}
    result = check.check_bundle(Path(args.bundle), args.model, seed=args.seed, **given)
    print(result.summary())
    if not result.ok:   # NaN or Inf where the reference has a number fails too (compare.compare)
        raise AotError(f"bundle {str(result.bundle)!r} differs from {result.reference} (atol {result.atol:g}, rtol {result.rtol:g}): "
                       + "; ".join(result.failures()),
                       hint="run `aot check --integrity` on it; rebuild with --accel none to rule out the accelerator")
    return 0


def _check_integrity(bundle: Path) -> int:
    from aot.checks import integrity
    from aot.errors import BundleError

    where, checks = integrity.audit(bundle)
    for c in checks:
        print(c.line())
    failed = [c for c in checks if c.error is not None]
    if failed:
        raise BundleError(f"{len(failed)} of {len(checks)} files of bundle {str(where)!r} fail their check: "
                          + ", ".join(c.path for c in failed),
                          hint="copy the bundle again from its source, or rebuild it with `aot build`")
    print(f"{len(checks)} files match the manifest")
    return 0


def _cmd_example(args: argparse.Namespace) -> int:
    from aot.models import examples

    print(examples.write(args_.output_file("-o", args.output)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
