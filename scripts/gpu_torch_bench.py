"""CUDA bundles against PyTorch eager and torch.compile, on the same GPU machine, in one process.

Here (no GPU needed): build each model of tests/torch_models.py for CUDA and for Vulkan
(``NAME@vulkan``) and write its golden inputs and outputs (PyTorch on the CPU); `make
gpu-bundles` does it for the four models of docs/cuda.md::

    python scripts/gpu_torch_bench.py bundles DIR NAME...

There (numpy, torch, iree-base-runtime and this checkout)::

    python scripts/gpu_torch_bench.py run DIR NAME... [--compile MODE...] [--tf32] [--profile CALLS]
                                                      [--iree-flag=--cuda_use_streams=false]

Each model: the bundle's and eager PyTorch's outputs against the golden ones (the same seeded
weights in both), torch.compile's compile time, then every contender interleaved in one process
(aot.checks.timing, medians). Every contender takes numpy inputs and returns numpy outputs, as a
bundle's caller does, so each pays its host-to-device and device-to-host copies; eager PyTorch with
its tensors already on the GPU is timed beside them. PyTorch runs strict fp32 (TF32 off), as the
bundle computes; ``--tf32`` adds eager PyTorch with TF32 on. ``NAME@VARIANT`` adds the bundle in
DIR/NAME@VARIANT (the same model built another way, say with flags pinned in its plan) to NAME's
contenders. ``--profile`` lists the GPU kernels of a bundle and of eager PyTorch. Results print as
lines and go to JSON (``--json``); docs/performance.md has the figures an H100 gave.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aot.checks import timing  # noqa: E402
from aot.checks.compare import compare  # noqa: E402

SCHEDULE = timing.Schedule(warmup=10, iterations=200)   # no spinning runtime here: rotate, no idle


def bundles(folder: Path, names: list[str]) -> None:
    """FOLDER/NAME: each model built for CUDA (sm_80); FOLDER/NAME@vulkan: for Vulkan (ampere,
    the gate off as for CUDA; verification skips itself where the GPU is not this machine's);
    then their golden data (``reference``). Example shapes from tests/torch_models.py."""
    from aot.api import build
    from aot.options import BuildOptions
    from aot.partition.plan import GateMode
    from aot.runtime.target import Target
    from tests import torch_models as tm

    examples = {**tm.EXAMPLES, **tm.GPU_EXAMPLES}
    for name in names:
        common = dict(host=Target.host("x86-64-v3"), example_inputs=examples[name])
        for out, options in ((name, BuildOptions(accel=Target.parse("cuda"), **common)),
                             (f"{name}@vulkan", BuildOptions(accel=Target.parse("vulkan:ampere"),
                                                             gate=GateMode.OFF, **common))):
            result = build(f"tests.torch_models:{name}", folder / out, options)
            print(f"{out}: " + ", ".join(f"{r.name} {r.target}" for r in result.bundle.manifest.regions), flush=True)
    reference(folder, names)


def reference(folder: Path, names: list[str]) -> None:
    """FOLDER/NAME.npz: the example inputs (``in:NAME``) and PyTorch's CPU outputs (``out:i``)."""
    import torch

    from tests import torch_models as tm

    for name in names:
        inputs = tm.example_inputs(name)
        with torch.inference_mode():
            outputs = _as_list(getattr(tm, name)()(*inputs.values()))
        np.savez(folder / f"{name}.npz", **{f"in:{k}": v.numpy() for k, v in inputs.items()},
                 **{f"out:{i}": o.numpy() for i, o in enumerate(outputs)})
        print(f"{name}: {len(inputs)} input(s), {len(outputs)} output(s) -> {folder / name}.npz")


def run(folder: Path, names: list[str], compile_modes: list[str], device: str, profile: int = 0,
        tf32: bool = False, staged_from: tuple[int, ...] = ()) -> list[dict]:
    """NAME times FOLDER/NAME/bundle; NAME@VARIANT also FOLDER/NAME@VARIANT/bundle (the same model
    built another way: flags pinned in its plan), interleaved with the first."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    models: dict[str, list[str]] = {}
    for name in names:
        models.setdefault(name.split("@")[0], []).append(name)
    return [_run_model(folder, model, bundles, compile_modes, device, profile, tf32, staged_from)
            for model, bundles in models.items()]


def _run_model(folder: Path, name: str, bundles: list[str], compile_modes: list[str], device: str,
               profile: int, tf32: bool, staged_from: tuple[int, ...]) -> dict:
    import torch

    from aot import runtime
    from tests import torch_models as tm

    golden = np.load(folder / f"{name}.npz")
    inputs = {k[3:]: golden[k] for k in golden.files if k.startswith("in:")}
    expected = [golden[f"out:{i}"] for i in range(sum(k.startswith("out:") for k in golden.files))]
    model = getattr(tm, name)().to(device)
    on_device = [torch.from_numpy(v).to(device) for v in inputs.values()]

    def from_numpy(fn: Callable) -> Callable[[], list[np.ndarray]]:
        def call() -> list[np.ndarray]:
            with torch.inference_mode():
                return [o.cpu().numpy() for o in _as_list(fn(*[torch.from_numpy(v).to(device)
                                                               for v in inputs.values()]))]
        return call

    def resident() -> None:
        with torch.inference_mode():
            model(*on_device)
        if device == "cuda":
            torch.cuda.synchronize()

    with contextlib.ExitStack() as stack:
        contenders: dict[str, Callable[[], object]] = {}
        for bundle in bundles:
            session = stack.enter_context(runtime.load(folder / bundle / "bundle"))
            contenders[f"aot {bundle}"] = functools.partial(session.run, inputs)
        for min_bytes in staged_from:   # the first bundle again, staging inputs from another size
            session = stack.enter_context(runtime.load(folder / bundles[0] / "bundle"))
            for buffers in session._staging.values():
                buffers.min_bytes = min_bytes
            contenders[f"aot {bundles[0]}, staged from {min_bytes} B"] = functools.partial(session.run, inputs)
        contenders["torch eager"] = from_numpy(model)
        if tf32:
            contenders["torch eager (TF32)"] = _with_tf32(from_numpy(model))
        errors = {label: _error(list(call()), expected) for label, call in contenders.items()}
        compile_s = {}
        for mode in compile_modes:
            label = f"torch.compile ({mode})"
            contenders[label] = from_numpy(torch.compile(model, mode=mode))
            start = time.perf_counter()
            errors[label] = _error(contenders[label](), expected)
            compile_s[label] = round(time.perf_counter() - start, 1)
        contenders["torch eager, tensors on the GPU"] = resident
        medians = timing.medians_ms(timing.interleaved(contenders, SCHEDULE))
        kernels = {label: _kernels(contenders[label], profile, device) for label in (f"aot {bundles[0]}", "torch eager")
                   } if profile else {}
    first = medians[f"aot {bundles[0]}"]
    print(f"{name}:", flush=True)
    for label, ms in medians.items():
        print(f"  {label:34s} {ms:8.3f} ms  {bundles[0]}/this {first / ms:6.2f}"
              + (f"  max abs error {errors[label]:.2e}" if label in errors else "")
              + (f"  compiled in {compile_s[label]} s" if label in compile_s else ""), flush=True)
    for label, rows in kernels.items():
        print(f"  kernels of {label}, per call (us, count):")
        for kernel, us, count in rows[:12]:
            print(f"    {us:9.1f} {count:4d}  {kernel[:110]}")
    return {"model": name, "median_ms": medians, "max_abs_error": errors, "compile_s": compile_s,
            "kernels_us_per_call": kernels}


def _kernels(call: Callable[[], object], calls: int, device: str) -> list[tuple[str, float, int]]:
    """GPU time per call of each kernel ``call`` launches (PyTorch's profiler: CUPTI sees every
    launch in the process, IREE's too), most first. On the CPU (a dry run): PyTorch's own ops."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = device == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if on_gpu else ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            call()
    rows = [(e.key, (e.device_time_total if on_gpu else e.self_cpu_time_total) / calls, e.count // calls)
            for e in prof.key_averages()]
    rows = [r for r in rows if r[1] > 0]
    return sorted(rows, key=lambda r: -r[1])


def _with_tf32(call: Callable[[], list[np.ndarray]]) -> Callable[[], list[np.ndarray]]:
    """``call`` with PyTorch's TF32 tensor-core paths on (10-bit mantissa inputs, f32 sums): the
    counterpart of a bundle whose contractions take bf16 or f16 inputs."""
    import torch

    def tf32() -> list[np.ndarray]:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        try:
            return call()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    return tf32


def _as_list(out: object) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _error(actual: list[np.ndarray], expected: list[np.ndarray]) -> float:
    """Largest absolute difference over every output (aot.checks.compare): infinite where a
    shape, a NaN or an infinity differs from the reference."""
    if len(actual) != len(expected):
        return float("inf")
    return max((compare(a, e).max_abs_diff for a, e in zip(actual, expected)), default=0.0)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verb", choices=("bundles", "reference", "run"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("names", nargs="+")
    parser.add_argument("--iree-flag", action="append", default=[], help="an iree.runtime flag, before any device opens")
    parser.add_argument("--compile", nargs="*", default=["default"], help="torch.compile modes to time")
    parser.add_argument("--device", default="cuda", help="PyTorch's device (cpu: a dry run with llvm-cpu bundles)")
    parser.add_argument("--profile", type=int, default=0, metavar="CALLS",
                        help="also list the GPU kernels of the first bundle and of eager PyTorch over CALLS calls")
    parser.add_argument("--staged-from", type=int, nargs="*", default=[], metavar="BYTES",
                        help="also time the first bundle with inputs staged from these sizes up (runtime/staging.py)")
    parser.add_argument("--tf32", action="store_true", help="also time eager PyTorch with TF32 on")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.verb == "bundles":
        return bundles(args.folder, args.names)
    if args.verb == "reference":
        return reference(args.folder, args.names)
    if args.iree_flag:
        import iree.runtime as rt

        rt.flags.parse_flags(*args.iree_flag)
    results = run(args.folder, args.names, args.compile, args.device, args.profile, args.tf32,
                  tuple(args.staged_from))
    if args.json:
        args.json.write_text(json.dumps({"iree_flags": args.iree_flag, "results": results}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
