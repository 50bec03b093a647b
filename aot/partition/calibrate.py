"""``aot calibrate``: the cost model's device parameters measured on the real devices.

The roofline gate and the order search read each device's sustained GFLOP/s, memory bandwidth
and per-call cost, and the link's bandwidth and per-transfer cost, from ``devices.json``. Those
numbers are set by hand for a class of device: on lavapipe, which shares the host's two cores,
the "GPU" entry is wrong by orders of magnitude, and a cross build for CUDA uses the build
machine's host figures for a different host. Calibration builds a few one-operator models through
the normal pipeline (each one region on the device being measured), times them on that device
with the one timing harness, and fits the parameters from the medians:

- the fastest call of any workload bounds the per-call cost;
- matmuls and a 3x3 convolution, less the fastest call, give the sustained GFLOP/s (the geometric
  mean of their rates);
- a fused elementwise chain over 4 MB operands gives the bandwidth (bytes as ``cost.node_bytes``
  counts them, every node's, though IREE fuses the chain into one pass);
- a chain of eight small matmuls, each its own dispatch, against one of them gives each further
  dispatch's launch cost (``DeviceModel.dispatch_us``; ``cost.node_dispatches`` counts a region's);
- on an accelerator, what a whole call holds beyond its region (inputs staged in, outputs back)
  gives the per-transfer cost (a tiny model's) and the link's bandwidth (the chain's operands).

The result is a ``--cost-params`` file: the defaults with the measured entries in their place,
and the measurements beside them. A cross build (CUDA from a machine without it) builds the
workload bundles with ``--build-only`` and times them where the device is with ``--no-build``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from aot.errors import AotError
from aot.partition.cost import DEFAULT_PARAMS, DeviceModel

if TYPE_CHECKING:
    import onnx

    from aot.options import BuildOptions
    from aot.tune.progress import Steps

Progress = Callable[[str], None]
REPEATS = 30


class CalibrationError(AotError):
    """A workload could not be built or measured on the device being calibrated."""


class Role(enum.Enum):
    CALL = "call"          # per-call cost (and, on an accelerator, per-transfer cost)
    COMPUTE = "compute"    # sustained GFLOP/s
    MEMORY = "memory"      # bandwidth (and, on an accelerator, the link's)
    DISPATCH = "dispatch"  # each further dispatch's launch


class Suite(enum.Enum):
    FULL = "full"      # sizes like a model's larger dispatches: seconds per device to time
    QUICK = "quick"    # small sizes: for tests, and a first look


@dataclass(frozen=True, slots=True)
class Node:
    """One node: ``op`` over the previous node's output (the graph input ``x0`` first) and, in
    order, ``extra`` operands: ``x1`` (a second graph input) or a seeded float32 weight's shape."""
    op: str
    extra: tuple[str | tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    role: Role
    inputs: tuple[tuple[int, ...], ...]           # float32 graph inputs x0, x1, ...
    steps: tuple[Node, ...]
    output: tuple[int, ...]

    @property
    def transfers(self) -> int:
        """Values that cross between the host and the device on a whole call."""
        return len(self.inputs) + 1

    @property
    def ops(self) -> frozenset[str]:
        return frozenset(s.op for s in self.steps)


def _matmul(n: int) -> Workload:
    return Workload(f"matmul-{n}", Role.COMPUTE, ((n, n),), (Node("MatMul", ((n, n),)),), (n, n))


def _conv(channels: int, pixels: int) -> Workload:
    x = (1, channels, pixels, pixels)
    return Workload(f"conv3x3-{channels}x{pixels}", Role.COMPUTE, (x,), (Node("Conv", ((channels, channels, 3, 3),)),), x)


def _elementwise(n: int) -> Workload:
    # A fused chain, as a convolution's bias, activation and residual are: the cost model counts
    # every node's bytes and IREE moves them once, so the fitted GB/s is per byte as counted.
    return Workload(f"eltwise-{n}", Role.MEMORY, ((n,), (n,)),
                    (Node("Add", ("x1",)), Node("Relu"), Node("Mul", ("x1",))), (n,))


def _chain(n: int, length: int) -> Workload:
    # Each matmul roots a dispatch of its own: against a chain of one, the cost of the others is
    # ``dispatch_us`` each.
    return Workload(f"chain-{length}x{n}", Role.DISPATCH, ((n, n),), tuple(Node("MatMul", ((n, n),))
                                                                          for _ in range(length)), (n, n))


def _tiny() -> Workload:
    return Workload("relu-64", Role.CALL, ((64,),), (Node("Relu"),), (64,))


def workloads(suite: Suite) -> tuple[Workload, ...]:
    if suite is Suite.QUICK:
        return (_tiny(), _matmul(128), _conv(16, 28), _elementwise(1 << 16), _chain(32, 1), _chain(32, 4))
    return (_tiny(), _matmul(256), _matmul(512), _matmul(1024), _conv(64, 56), _elementwise(1 << 20), _chain(64, 1),
            _chain(64, 8))


def onnx_model(w: Workload) -> "onnx.ModelProto":
    """The workload as an ONNX model with seeded weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inputs = [f"x{i}" for i in range(len(w.inputs))]
    nodes, inits, last = [], [], "x0"
    for i, step in enumerate(w.steps):
        operands = [last]
        for e in step.extra:
            if isinstance(e, str):
                operands.append(e)
                continue
            weight = (rng.standard_normal(e) / np.sqrt(math.prod(e[1:]))).astype(np.float32)
            inits.append(numpy_helper.from_array(weight, f"w{i}"))
            operands.append(f"w{i}")
        out = "y" if i == len(w.steps) - 1 else f"v{i}"
        nodes.append(helper.make_node(step.op, operands, [out], name=f"{step.op.lower()}{i}"))
        if step.op == "Conv":
            nodes[-1].attribute.append(helper.make_attribute("pads", [1, 1, 1, 1]))
        last = out
    graph = helper.make_graph(
        nodes, w.name.replace("-", "_"),
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(inputs, w.inputs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, w.output)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="aot.calibrate")
    onnx.checker.check_model(model, full_check=True)
    return model


@dataclass(frozen=True, slots=True)
class Work:
    """What the cost model counts in a workload (``cost.node_flops`` and friends)."""
    flops: int
    nbytes: int
    dispatches: int


def counted(w: Workload) -> Work:
    from aot.frontend.graph import GraphView
    from aot.partition.cost import node_bytes, node_flops, region_dispatches

    import onnx

    view = GraphView.from_onnx(onnx.shape_inference.infer_shapes(onnx_model(w), strict_mode=True))
    return Work(sum(node_flops(n, view) for n in view.nodes), sum(node_bytes(n, view) for n in view.nodes),
                region_dispatches(view.nodes, view))


@dataclass(frozen=True, slots=True)
class Sample:
    """One workload's medians on one device, microseconds."""
    workload: Workload
    work: Work
    region_us: float    # the region alone, its inputs already on the device
    whole_us: float     # a whole call: inputs staged in, the region, outputs back


def fit_device(samples: Sequence[Sample], device: str, fallback: DeviceModel) -> tuple[DeviceModel, tuple[str, ...]]:
    """The roofline's parameters from one device's samples (see the module docstring), and the
    names of those the samples could not resolve, which keep ``fallback``'s value: where every
    workload of a role ran no longer than the fastest call."""
    if not samples:
        raise CalibrationError(f"nothing was measured on {device}")
    for s in samples:
        if not (np.isfinite(s.region_us) and np.isfinite(s.whole_us) and s.region_us > 0 and s.whole_us > 0):
            raise CalibrationError(f"{s.workload.name} on {device} measured {s.region_us} us",
                                   hint="run `aot calibrate` again on an idle machine")
    # A call's fixed cost is at most the fastest call: on CUDA the 64-element Relu took 170-230 us
    # where a 256^3 matmul took 120 (an H200), so the tiny workload alone would overstate it.
    call = min(s.region_us for s in samples)
    rates: dict[str, float | None] = {}
    for role, field in ((Role.COMPUTE, "gflops"), (Role.MEMORY, "gbps")):
        # Each workload counts alike (a geometric mean of rates): a model's dispatches are mostly
        # the smaller sizes, and a FLOP-weighted mean would be the largest matmul's rate alone.
        logs = [np.log((s.work.flops if role is Role.COMPUTE else s.work.nbytes) / ((s.region_us - call) * 1e3))
                for s in samples if s.workload.role is role and s.region_us > call]
        rates[field] = round(float(np.exp(np.mean(logs))), 2) if logs else None
    gflops = rates["gflops"] or fallback.gflops
    # A chain of matmuls against one of them: the difference is the further dispatches' launches
    # (the fixed cost of a call, and whatever each matmul costs beyond its FLOPs, cancel out).
    chains = sorted((s for s in samples if s.workload.role is Role.DISPATCH), key=lambda s: s.work.dispatches)
    dispatch = None
    if len(chains) > 1 and chains[-1].work.dispatches > chains[0].work.dispatches:
        one, many = chains[0], chains[-1]
        extra_us = many.region_us - one.region_us - (many.work.flops - one.work.flops) / (gflops * 1e3)
        dispatch = max(extra_us / (many.work.dispatches - one.work.dispatches), 0.0)
    unresolved = tuple(k for k, v in (*rates.items(), ("dispatch_us", dispatch)) if v is None)
    return DeviceModel(gflops, rates["gbps"] or fallback.gbps, round(call, 2),
                       round(dispatch if dispatch is not None else fallback.dispatch_us, 2)), unresolved


def _moved(w: Workload) -> int:
    return 4 * (sum(math.prod(i) for i in w.inputs) + math.prod(w.output))


def fit_link(samples: Sequence[Sample]) -> tuple[float | None, float]:
    """(link GB/s, per-transfer us) from what whole calls hold beyond their regions. Either can be
    below what the timing resolves (memory the host and the device share, as lavapipe's): a
    transfer then costs 0 us, and the GB/s is None (the default stays)."""
    calls = [s for s in samples if s.workload.role is Role.CALL]
    memory = [s for s in samples if s.workload.role is Role.MEMORY]
    hop = max(float(np.median([(s.whole_us - s.region_us) / s.workload.transfers for s in calls])), 0.0)
    staged = sum(s.whole_us - s.region_us - hop * s.workload.transfers for s in memory)
    moved = sum(_moved(s.workload) for s in memory)
    return (round(moved / (staged * 1e3), 2) if staged > 0 else None), round(hop, 2)


@dataclass(frozen=True, slots=True)
class Calibration:
    fingerprint: str
    host: DeviceModel
    host_samples: tuple[Sample, ...]
    accel_target: str | None = None
    accel: DeviceModel | None = None
    link_gbps: float | None = None    # None: not resolved (fit_link); the defaults' stays
    hop_us: float = 0.0
    accel_samples: tuple[Sample, ...] = ()
    unresolved: tuple[str, ...] = ()   # "DEVICE FIELD" the timing could not resolve: the defaults' value stays

    def params(self, defaults: Path = DEFAULT_PARAMS) -> dict:
        """``defaults`` with the measured entries in place (what ``CostModel.load`` reads), and the
        samples under ``_calibration`` (which it ignores)."""
        data = json.loads(defaults.read_text())
        data["_comment"] = (f"Measured by `aot calibrate` on {self.fingerprint}; entries it did not measure are "
                            f"{defaults.name}'s. Times in microseconds, GFLOP/s, GB/s.")
        data["host"] = dataclasses.asdict(self.host)
        if self.accel_target and self.accel:
            entry = data["accelerators"].get(self.accel_target, data["accelerators"]["default"])
            data["accelerators"][self.accel_target] = {
                "device": dataclasses.asdict(self.accel), "hop_us": self.hop_us,
                "link_gbps": self.link_gbps if self.link_gbps is not None else entry["link_gbps"]}
        data["_calibration"] = {"fingerprint": self.fingerprint, "defaults_kept": list(self.unresolved), "samples": [
            {"device": device, "workload": s.workload.name, **dataclasses.asdict(s.work),
             "region_us": round(s.region_us, 3), "whole_us": round(s.whole_us, 3)}
            for device, samples in (("host", self.host_samples), (self.accel_target, self.accel_samples))
            for s in samples]}
        return data


class Step(enum.Enum):
    ALL = "all"              # build the workloads, then time them
    BUILD_ONLY = "build"     # build them (a cross build: the device is elsewhere)
    TIME_ONLY = "time"       # time bundles built before (on the device's machine, which may lack the compiler)


def _options(options: "BuildOptions", w: Workload, on_accel: bool) -> "BuildOptions":
    from aot.partition.plan import GateMode
    from aot.partition.support import Overrides

    return dataclasses.replace(
        options, accel=options.accel if on_accel else None, gate=GateMode.OFF, min_compute=1, tune=False,
        overrides=Overrides(accel_ops=w.ops) if on_accel else Overrides(), plan_file=None)


def _bundle(work: Path, w: Workload, device: str) -> Path:
    return work / f"{device}-{w.name}"


def build(options: "BuildOptions", work: Path, suite: Suite, progress: Progress) -> None:
    """Every workload's bundle, on the host and (with ``options.accel``) on the accelerator."""
    import onnx

    from aot import api
    from aot.tune.progress import Steps

    work.mkdir(parents=True, exist_ok=True)
    devices = [False, True] if options.accel else [False]
    steps = Steps(len(devices) * len(workloads(suite)), progress, label="calibrate")
    for on_accel in devices:
        device = options.accel.backend if on_accel and options.accel else "host"
        for w in workloads(suite):
            model = work / f"{w.name}.onnx"
            onnx.save(onnx_model(w), model)
            api.build(model, _bundle(work, w, device), _options(options, w, on_accel))
            steps.done(f"built {w.name} for {device}")


def measure(options: "BuildOptions", work: Path, suite: Suite, repeats: int, progress: Progress) -> Calibration:
    """Time the bundles ``build`` made and fit every device's parameters; what the timing cannot
    resolve keeps the defaults' value (``CostModel.load``'s for the same target)."""
    from aot.learn.key import device_fingerprint
    from aot.partition.cost import CostModel
    from aot.tune.progress import Steps

    backend = options.accel.backend if options.accel else None
    defaults = CostModel.load(backend)
    steps = Steps((2 if backend else 1) * len(workloads(suite)), progress, label="calibrate")
    # The accelerator first: where it cannot be opened, that is said before the host is timed.
    accel = _samples(work, suite, backend, backend, repeats, steps) if backend else ()
    host = _samples(work, suite, "host", "llvm-cpu", repeats, steps)
    host_model, unresolved = fit_device(host, "the host", defaults.host)
    calibration = Calibration(device_fingerprint(options), host_model, host,
                              unresolved=tuple(f"host {u}" for u in unresolved))
    if backend is None:
        return calibration
    accel_model, accel_unresolved = fit_device(accel, backend, defaults.accel)
    link_gbps, hop_us = fit_link(accel)
    unresolved = calibration.unresolved + tuple(f"{backend} {u}" for u in accel_unresolved)
    return dataclasses.replace(calibration, accel_target=backend, accel=accel_model, link_gbps=link_gbps,
                               hop_us=hop_us, accel_samples=accel,
                               unresolved=unresolved + ((f"{backend} link_gbps",) if link_gbps is None else ()))


def _samples(work: Path, suite: Suite, device: str, backend: str, repeats: int, steps: "Steps") -> tuple[Sample, ...]:
    from aot.checks.reference import random_inputs
    from aot.checks.session import CheckSession
    from aot.runtime import manifest as mf

    out = []
    for w in workloads(suite):
        where = _bundle(work, w, device)
        try:
            bundle = mf.bundle_dir(where)
            manifest = mf.read(bundle)
        except AotError as e:
            raise CalibrationError(f"no calibration bundle for {w.name} on {device} in {where}",
                                   hint="build them first: `aot calibrate --build-only` with the same --accel and "
                                        "--work") from e
        regions = manifest.regions
        if len(regions) != 1 or regions[0].target.backend != backend:
            got = ", ".join(r.target.backend for r in regions)
            raise CalibrationError(f"{w.name} was built to run on {got}, not on {backend} alone",
                                   hint="its region fell back or was moved by verification; see "
                                        f"`aot report {where}`")
        try:
            session = CheckSession(bundle, manifest)
        except AotError as e:
            raise CalibrationError(f"cannot open {device} to time the calibration bundles: {e.message}",
                                   hint="calibrate where the device is: `--build-only` here, then `--no-build` "
                                        "with the same --work on the device's machine") from e
        with session:
            inputs = random_inputs(manifest.inputs, seed=0)
            whole_us, region = session.profile(inputs, repeats)
        out.append(Sample(w, counted(w), region[regions[0].name], whole_us))
        steps.done(f"{w.name} on {device}: {out[-1].region_us:.1f} us alone, {whole_us:.1f} us a call")
    return tuple(out)
