"""``aot calibrate``: measure the cost model's device parameters and write a --cost-params file
(``partition/calibrate.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from aot import cli_args as args_
from aot.option_flags import UsageError
from aot.partition import calibrations

if TYPE_CHECKING:
    from aot.options import BuildOptions


def add_command(sub: "argparse._SubParsersAction[args_.Parser]") -> None:
    c = sub.add_parser("calibrate", help="measure the host's (and with --accel, the accelerator's) GFLOP/s, "
                                         "bandwidth, call and transfer costs; write a --cost-params file")
    c.add_argument("-o", "--output", default=None,
                   help="the --cost-params JSON to write (default: this machine's store, where every later build "
                        "for the same devices finds it; `aot calibrate --where` prints the place)")
    c.add_argument("--where", action="store_true",
                   help="print where the calibration of these devices is stored, and whether one is; measure nothing")
    c.add_argument("--work", default=None, help="where the workload bundles go (default: beside --output)")
    c.add_argument("--suite", default="full", choices=["full", "quick"],
                   help="workload sizes: full (a model's larger dispatches) or quick (small; a first look)")
    c.add_argument("--repeats", type=args_.count, default=None, help="timed calls per workload (default 30)")
    step = c.add_mutually_exclusive_group()
    step.add_argument("--build-only", dest="step", action="store_const", const="build",
                      help="only build the workload bundles (a cross build: time them where the device is)")
    step.add_argument("--no-build", dest="step", action="store_const", const="time",
                      help="time the bundles already in --work (built elsewhere with --build-only)")
    args_.add_options(c)   # the build options: --accel, --host-cpu, ... as each workload is built
    c.set_defaults(func=_cmd_calibrate, step="all")


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from aot.partition import calibrate as cal
    from aot.runtime.atomic import write_json
    from aot.tune.progress import StepLines

    say = StepLines()   # a rich bar on a terminal, a line per workload in a log
    options = args_.build_options(args)
    stored = calibrations.path_for(options)
    if args.where:
        return _where(options, stored)
    target = args.output or stored
    if target is None:
        raise UsageError("there is no home folder to store the calibration in",
                         hint=f"give -o FILE, or set {calibrations.STORE_ENV} to a folder")
    out = args_.output_file("-o/--output", target)
    work = Path(args.work) if args.work else out.with_name(out.stem + ".work")
    suite, step = cal.Suite(args.suite), cal.Step(args.step)
    if step is not cal.Step.TIME_ONLY:
        cal.build(options, args_.output_folder("--work", work), suite, say)
    if step is cal.Step.BUILD_ONLY:
        print(work)
        return 0
    result = cal.measure(options, work, suite, args.repeats or cal.REPEATS, say)
    write_json(out, result.params())
    for name, m in (("host", result.host), (result.accel_target, result.accel)):
        if m is not None:
            say(f"calibrate  {name}: {m.gflops:g} GFLOP/s, {m.gbps:g} GB/s, {m.call_overhead_us:g} us a call, "
                f"{m.dispatch_us:g} us each further dispatch")
    if result.accel is not None:
        link = f"{result.link_gbps:g} GB/s" if result.link_gbps is not None else "not resolved (default kept)"
        say(f"calibrate  link: {link}, {result.hop_us:g} us a transfer")
    for kept in result.unresolved:
        say(f"calibrate  {kept}: below what the timing resolves; the default stays")
    if args.output is None:
        say(f"calibrate  stored for {calibrations.machine_key(options)}: builds for these devices "
            "decide from it unless given --cost-params")
    print(out)
    return 0


def _where(options: "BuildOptions", stored: Path | None) -> int:
    print(f"devices: {calibrations.machine_key(options)}")
    if stored is None:
        print(f"store: none (no home folder; set {calibrations.STORE_ENV})")
    else:
        print(f"calibration: {stored} ({'stored' if stored.is_file() else 'none yet: builds use the shipped entries'})")
    return 0
