"""IREE's f32 matrix products against onnxruntime's (MLAS) on this host, on one core and on all.

    python scripts/kernel_floor.py [OUT_DIR] [--shapes MxKxN,...] [--rounds N]

Why: a CNN or transformer on the CPU spends most of its time in matrix products (a pointwise
convolution is one; data tiling and im2col turn the others into ones), so the rate of IREE's best
product code against MLAS's bounds how close any flag set, rewrite or fusion can bring a bundle
to onnxruntime. This measures that bound instead of assuming it from a datasheet.

Each shape is one ONNX MatMul with seeded weights, built by aot (`--accel none --tune`: the tuner
times every host flag set it offers, the packed ones among them, and keeps the fastest), then the
tuned flags pinned in its plan once on IREE's worker pool (local-task) and once on the caller's
thread (local-sync). Four contenders per shape run interleaved in one process (`timing.FAIR`,
medians): the two bundles, onnxruntime at its default threads and at one. Outputs are checked
against onnxruntime first. The rates count 2*M*K*N flops; a bundle's time includes packing its
input and unpacking its result where its set packs, as onnxruntime's includes its own packing.

Then where the bundle's time goes (`aot profile` of the all-cores bundle): the product's own
dispatch against the packing and unpacking around it. Inside a network most of that packing is
fused away (8% of the ResNet's dispatch time is encodings), so the product's share, applied to
the whole-call ratio, bounds what a network of such products can reach.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aot import api, runtime  # noqa: E402
from aot.checks import reference, timing  # noqa: E402
from aot.checks.compare import verified  # noqa: E402
from aot.options import BuildOptions  # noqa: E402
from aot.tools.profile import profile_bundle  # noqa: E402

# Square products, then the pointwise convolutions of a ResNet-50 bottleneck at 224x224 as
# products (pixels x input channels x output channels), then a classifier's 14x14 one.
SHAPES = ("1024x1024x1024", "3136x64x256", "3136x256x64", "784x512x128", "784x128x512",
          "196x1024x256", "196x256x1024", "49x2048x512", "196x256x256")
SCHEDULE = timing.FAIR.with_counts(3, 20)   # per round: 3 untimed turns, then 20 timed ones


def matmul_model(m: int, k: int, n: int, path: Path) -> Path:
    weight = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def tuned_bundles(model: Path, out: Path) -> tuple[str, dict[str, Path]]:
    """The tuner's choice for the model, and its flags pinned on local-task and on local-sync."""
    api.build(model, out / "tuned", BuildOptions(accel=None, tune=True))
    plan = json.loads((out / "tuned" / "bundle" / "plan.json").read_text())
    record = json.loads((out / "tuned" / "bundle" / "record.json").read_text())
    chosen = ", ".join(r["tuning"]["winner"] for r in record["regions"])
    built = {}
    for driver in ("local-task", "local-sync"):
        (out / f"{driver}.json").write_text(json.dumps({**plan, "host_runtime": {"driver": driver, "flags": []}}))
        api.build(model, out / driver, BuildOptions(accel=None, plan_file=out / f"{driver}.json"))
        built[driver] = out / driver / "bundle"
    return chosen, built


def measure(shape: str, work: Path, rounds: int) -> tuple[str, dict[str, float], float]:
    """The tuner's set, the median ms per contender, and the product dispatch's share of the
    all-cores bundle's dispatch time."""
    m, k, n = (int(d) for d in shape.split("x"))
    model = matmul_model(m, k, n, work / f"{shape}.onnx")
    chosen, bundles = tuned_bundles(model, work / shape)
    sessions = {f"aot {d}": runtime.load(b) for d, b in bundles.items()}
    ort = {"onnxruntime": reference.session(model), "onnxruntime 1 thread": reference.session(model, threads=1)}
    x = {"x": np.random.default_rng(1).standard_normal((m, k)).astype(np.float32)}
    want = ort["onnxruntime"].run(None, x)[0]
    for name, s in sessions.items():
        got = s.run(x)[0]
        check = verified(got, want)     # verification's tolerance
        if not (check.ok and np.all(np.isfinite(got))):
            raise SystemExit(f"{shape}: {name} disagrees with onnxruntime: {check.describe()}")
    calls = [*((name, (lambda s=s: s.run(x))) for name, s in sessions.items()),
             *((name, (lambda o=o: o.run(None, x))) for name, o in ort.items())]
    medians = [timing.medians_ms(timing.interleaved(calls, SCHEDULE)) for _ in range(rounds)]
    for s in sessions.values():
        s.close()
    (region,) = profile_bundle(bundles["local-task"], model).regions
    return (chosen, {name: float(np.median([r[name] for r in medians])) for name, _ in calls},
            sum(d.us for d in region.dispatches if d.gflop_per_s) / region.total_us)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, help="keep the builds here (default: a temporary folder)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="MxKxN products, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of interleaved turns (the median is printed)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        print("GFLOP/s, aot / onnxruntime = time ratio, on all cores | on one; the product's share of aot's "
              "dispatch time -> the ratio without packing", flush=True)
        for shape in args.shapes.split(","):
            chosen, t, share = measure(shape, work, args.rounds)
            m, k, n = (int(d) for d in shape.split("x"))
            rate = {name: 2 * m * k * n / (ms * 1e6) for name, ms in t.items()}
            print(f"{shape:<16}{rate['aot local-task']:7.0f} / {rate['onnxruntime']:4.0f} = "
                  f"{t['aot local-task'] / t['onnxruntime']:.2f} | {rate['aot local-sync']:5.0f} / "
                  f"{rate['onnxruntime 1 thread']:4.0f} = {t['aot local-sync'] / t['onnxruntime 1 thread']:.2f}; "
                  f"{100 * share:3.0f}% -> "
                  f"{share * t['aot local-task'] / t['onnxruntime']:.2f}  ({chosen})", flush=True)


if __name__ == "__main__":
    main()
