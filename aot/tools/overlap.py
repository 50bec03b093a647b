"""Overlap of regions on different devices, measured: a bundle run with one lane per device
against the same bundle run region after region, interleaved in one process.

With no bundle given, it builds its own example: two convolution branches over one image, the
first pinned to the accelerator and the second to the host by a plan file, joined on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aot import runtime
from aot.checks import reference, timing
from aot.checks.compare import compare
from aot.checks.session import CheckSession
from aot.errors import AotError
from aot.partition.plan import Plan, Region
from aot.partition.support import ACCEL, HOST

NAME = "two_branch"
INPUT_SHAPE = (1, 3, 96, 96)
# Output channels of each branch's convolutions. Lavapipe runs a convolution about 40x slower per
# multiply-add than llvm-cpu on the same cores, so the accelerator's branch is the lighter one:
# on 2 cores both branches then take 20-35 ms and neither hides the other.
CHANNELS = {"a": (1, 24), "b": (24, 24, 24)}


def _branch(tag: str, rng: np.random.Generator) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Conv-ReLU layers, global pooling, flatten: ``image`` -> ``{tag}.feat`` [1, C]."""
    nodes, inits, x, cin = [], [], "image", INPUT_SHAPE[1]
    for i, cout in enumerate(CHANNELS[tag]):
        w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) / np.float32(np.sqrt(cin * 9))
        inits += [numpy_helper.from_array(w, f"{tag}.w{i}"),
                  numpy_helper.from_array(np.zeros(cout, np.float32), f"{tag}.b{i}")]
        nodes += [helper.make_node("Conv", [x, f"{tag}.w{i}", f"{tag}.b{i}"], [f"{tag}.c{i}"], name=f"{tag}.conv{i}",
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"{tag}.c{i}"], [f"{tag}.r{i}"], name=f"{tag}.relu{i}")]
        x, cin = f"{tag}.r{i}", cout
    nodes += [helper.make_node("GlobalAveragePool", [x], [f"{tag}.gap"], name=f"{tag}.gap"),
              helper.make_node("Flatten", [f"{tag}.gap"], [f"{tag}.feat"], name=f"{tag}.flatten")]
    return nodes, inits


def two_branch(seed: int = 0) -> onnx.ModelProto:
    """Two independent branches over one input, added and normalised at the end."""
    rng = np.random.default_rng(seed)
    a_nodes, a_inits = _branch("a", rng)
    b_nodes, b_inits = _branch("b", rng)
    join = [helper.make_node("Add", ["a.feat", "b.feat"], ["sum"], name="join"),
            helper.make_node("Softmax", ["sum"], ["probs"], name="softmax", axis=1)]
    graph = helper.make_graph(
        [*a_nodes, *b_nodes, *join], NAME,
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, CHANNELS["a"][-1]])],
        [*a_inits, *b_inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="aot.tools.overlap")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def two_branch_plan(model: onnx.ModelProto) -> Plan:
    """Branch ``a`` on the accelerator, branch ``b`` and the join on the host, in three regions:
    a region holding the join would wait for both branches, so it stays apart."""
    names = [n.name for n in model.graph.node]
    a = Region("r0", ACCEL, tuple(n for n in names if n.startswith("a.")))
    b = Region("r1", HOST, tuple(n for n in names if n.startswith("b.")))
    join = Region("r2", HOST, tuple(n for n in names if "." not in n))
    return Plan((a, b, join), ("r0", "r1", "r2"))


def write(folder: Path, seed: int = 0) -> tuple[Path, Path]:
    """The example model and its plan, written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    model = two_branch(seed)
    onnx.save(model, str(folder / f"{NAME}.onnx"))
    two_branch_plan(model).save(folder / "plan.json")
    return folder / f"{NAME}.onnx", folder / "plan.json"



@dataclass(frozen=True, slots=True)
class OverlapBench:
    model: str
    lanes: tuple[tuple[str, tuple[str, ...]], ...]   # (driver, its regions in schedule order)
    overlap: tuple[tuple[str, str], ...]
    iterations: int
    region_ms: tuple[tuple[str, float], ...]          # each region alone on its device, median
    bound_ms: float                                   # the lanes replayed with those times
    serial_ms: float
    overlapped_ms: float
    max_abs_diff: float                                # overlapped outputs against serial ones

    def text(self) -> str:
        times = dict(self.region_ms)
        lines = [f"model {self.model}: {self.iterations} interleaved iterations; overlap "
                 + ", ".join(f"{a} || {b}" for a, b in self.overlap)]
        lines += [f"  lane {driver:10s} " + " -> ".join(f"{r} ({times[r]:.1f} ms alone)" for r in regions)
                  for driver, regions in self.lanes]
        lines.append(f"  serial (region after region)  median {self.serial_ms:9.3f} ms")
        lines.append(f"  overlapped (a lane per device) median {self.overlapped_ms:9.3f} ms")
        lines.append(f"ratio serial/overlapped: {self.serial_ms / self.overlapped_ms:.3f}")
        lines.append(f"devices that shared no cores would need: {self.bound_ms:.1f} ms (the lanes with each "
                     f"region's time alone) against {sum(times.values()):.1f} ms region after region")
        lines.append(f"outputs of both modes: max abs diff {self.max_abs_diff:.3g}")
        return "\n".join(lines)


def bench(bundle: Path, iterations: int = 30, warmup: int = 3) -> OverlapBench:
    """The bundle run with a lane per device against the same bundle run region after region,
    interleaved in one process (``checks.timing``), on seeded random inputs."""
    from aot.runtime import lanes
    from aot.runtime import manifest as mf

    where = mf.bundle_dir(bundle)
    m = mf.read(where)   # refuse before loading anything
    if m.shapes is not None:
        raise AotError(f"{str(bundle)!r} is a bucketed bundle; aot bench-overlap times a static one",
                       hint="build with --input-shape to fix the symbolic dimensions")
    if not m.overlap:
        raise AotError(f"bundle of {m.model.name!r} has no regions on different devices that may overlap "
                       f"(schedule {' -> '.join(m.schedule)})",
                       hint="run `aot bench-overlap` with no bundle for the two-branch example")
    with runtime.load(bundle) as overlapped, CheckSession(where, m, overlap=False) as serial:
        inputs = reference.random_inputs(m.inputs, seed=0)
        diff = max(compare(a, b).max_abs_diff   # inf where NaN/Inf differ
                   for a, b in zip(overlapped.run(inputs), serial.run(inputs)))
        times = timing.interleaved([("overlapped", lambda: overlapped.run(inputs)),
                                    ("serial", lambda: serial.run(inputs))], timing.Schedule(warmup, iterations))
        _, per_region_us = serial.profile(inputs, repeats=iterations)
    driver = {r.name: m.driver(r) for r in m.regions}
    region_ms = {r: us / 1e3 for r, us in per_region_us.items()}
    waits = lanes.waits({r.name: r.inputs for r in m.regions}, {r.name: r.outputs for r in m.regions})
    return OverlapBench(
        m.model.name, tuple((driver[lane[0]], lane) for lane in lanes.lanes(m.schedule, driver)), m.overlap,
        iterations, tuple((r, region_ms[r]) for r in m.schedule),
        lanes.finish_time(m.schedule, driver, waits, region_ms),
        timing.median_ms(times["serial"]), timing.median_ms(times["overlapped"]), diff)


def build_example(out: Path, progress: Callable[[str], None] = lambda s: None) -> Path:
    """Build the two-branch example with its plan into ``out`` (sources in ``out/model``)."""
    from aot import api
    from aot.options import BuildOptions

    model, plan = write(out / "model")
    return api.build(model, out, BuildOptions(plan_file=plan), progress).bundle.path
