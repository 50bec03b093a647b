"""Cost model: FLOPs and bytes per node, region time per device, transfer time per boundary, and
the plan cost the gate compares. Device parameters live in an editable JSON file."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Callable, Mapping, Sequence, cast

from aot.errors import AotError
from aot.frontend.graph import GraphView, Node
from aot.frontend.torch.ops import ATTENTION, ONNX_EQUIVALENT
from aot.partition import order
from aot.partition.support import ACCEL, HOST, Device, Group
from aot.lower.flags import RECURRENT_GATES, Holds, recurrence
from aot.runtime import lanes

DEFAULT_PARAMS = Path(__file__).with_name("devices.json")
# The convolutions, in ONNX's vocabulary (a torch op is read through ONNX_EQUIVALENT).
CONV_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv"})


def is_convolution(node: Node) -> bool:
    """An ONNX convolution, or a torch op that computes like one."""
    return ONNX_EQUIVALENT.get(node.op_type, node.op_type) in CONV_OPS


# The matrix products, in ONNX's vocabulary: what ``lower.flags.Holds`` counts.
PRODUCT_OPS = frozenset({"MatMul", "Gemm", "MatMulInteger", "QLinearMatMul"})


def holds(view: GraphView, nodes: Sequence[str]) -> Holds:
    """What ``lower.flags.holds`` reads from a region's MLIR, read from the graph (the cost
    database's lookups and the learned features, before there is any MLIR)."""
    held = Holds()
    for n in (view.node(name) for name in nodes):
        if is_convolution(n):
            held += Holds(convolution=True)
        elif ONNX_EQUIVALENT.get(n.op_type, n.op_type) in PRODUCT_OPS:
            held += Holds(False, 1, node_flops(n, view))
        elif n.op_type in RECURRENT_GATES and n.inputs and (x := view.values[n.inputs[0]].shape):
            held += recurrence(n.op_type, x, cast(int, n.attr("hidden_size", 0)),
                               n.attr("direction") == "bidirectional", n.attr("layout", 0) == 1)
    return held


@dataclass(frozen=True, slots=True)
class DeviceModel:
    gflops: float            # sustained GFLOP/s on this kind of model
    gbps: float              # sustained memory bandwidth, GB/s
    call_overhead_us: float  # fixed cost of one region call (its first dispatch, sync)
    # Each further dispatch's launch (``node_dispatches``): measured by `aot calibrate`; 0 in the
    # hand-set entries, whose call cost stood for a typical region's launches.
    dispatch_us: float = 0.0

    def time_us(self, flops: int, nbytes: int, dispatches: int = 1) -> float:
        # Roofline: a region is bound by compute or by memory traffic, whichever is slower.
        return (self.call_overhead_us + self.dispatch_us * max(dispatches - 1, 0)
                + max(flops / (self.gflops * 1e3), nbytes / (self.gbps * 1e3)))


class CostParamsError(AotError):
    """A --cost-params file (or this machine's stored calibration) that cannot be read or is not a
    device parameters file."""


_PARAMS_HINT = ("run `aot calibrate` again (its file replaces a damaged one), give --cost-params a file it wrote, "
                "or --cost-params shipped for the hand-set entries (aot/partition/devices.json shows the form)")


def _positive(value: object, zero: bool = False) -> float:
    """A finite number above 0 (or at least 0, with ``zero``); anything else is a ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (value == 0 and not zero):
        raise ValueError(f"{value!r} is not a finite number {'>= 0' if zero else '> 0'}")
    return float(value)


def _device(entry: dict) -> DeviceModel:
    if set(entry) - {f.name for f in dataclasses.fields(DeviceModel)}:
        raise ValueError(f"unknown keys {sorted(set(entry) - {f.name for f in dataclasses.fields(DeviceModel)})}")
    return DeviceModel(_positive(entry["gflops"]), _positive(entry["gbps"]),
                       _positive(entry["call_overhead_us"], zero=True), _positive(entry.get("dispatch_us", 0.0), zero=True))


@dataclass(frozen=True, slots=True)
class CostModel:
    host: DeviceModel
    accel: DeviceModel
    link_gbps: float         # host <-> accelerator copy bandwidth
    hop_us: float            # fixed cost of one cross-device transfer
    source: str = "defaults"

    @classmethod
    def load(cls, target: str | None, path: Path | None = None) -> "CostModel":
        """Parameters for ``target`` (e.g. ``vulkan-spirv``) from ``path`` or the shipped defaults."""
        p = Path(path) if path else DEFAULT_PARAMS
        try:
            text = p.read_text()
        except OSError as e:
            raise CostParamsError(f"cannot read the cost parameters {str(p)!r}: {e.strerror or e}",
                                  hint=_PARAMS_HINT) from None
        # A given file by its path and content: a record names the very calibration it used.
        source = ("defaults (aot/partition/devices.json)" if path is None or p == DEFAULT_PARAMS
                  else f"{p} (sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]})")
        try:
            data = json.loads(text)
            entries = data["accelerators"]
            accel = entries.get(target or "", entries["default"])
            model = cls(_device(data["host"]), _device(accel["device"]), _positive(accel["link_gbps"]),
                        _positive(accel["hop_us"], zero=True), source)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CostParamsError(f"the cost parameters {str(p)!r} are not a device parameters file "
                                  f"({type(e).__name__}: {e})", hint=_PARAMS_HINT) from None
        return model

    def device(self, which: Device) -> DeviceModel:
        return self.accel if which == ACCEL else self.host

    def transfer_us(self, nbytes: int) -> float:
        return self.hop_us + nbytes / (self.link_gbps * 1e3)


def _numel(shape: tuple[int, ...] | None) -> int:
    return prod(shape) if shape is not None else 0


def node_flops(node: Node, view: GraphView) -> int:
    """Multiply-adds count as two FLOPs; elementwise ops as one per output element. A torch op
    counts as the ONNX op it computes like (``frontend/torch/ops.py``)."""
    out = view.values[node.outputs[0]].shape if node.outputs else None
    ins = [view.values[v].shape for v in (*node.inputs, *node.const_inputs)]
    if out is None:
        return 0
    op = ONNX_EQUIVALENT.get(node.op_type, node.op_type)
    if op in CONV_OPS and len(ins) > 1 and ins[1]:
        w = ins[1]  # [Cout, Cin/group, k...]: every output element costs Cin/group * prod(k) MACs
        per = prod(w[1:]) if op != "ConvTranspose" else prod(w[2:]) * w[0] // max(w[1], 1)
        return 2 * _numel(out) * per
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul", "Gemm") and ins and ins[0]:
        k = ins[0][-1] if not (op == "Gemm" and node.attr("transA", 0)) else ins[0][0]
        return 2 * _numel(out) * k
    if op == ATTENTION and len(ins) > 1 and ins[1]:
        return 4 * _numel(out) * ins[1][-2]   # Q·Kᵀ and P·V over S keys: 2·L·S·E each
    if op in ("MaxPool", "AveragePool"):
        return _numel(out) * prod(cast("tuple[int, ...]", node.attr("kernel_shape", (1,))))   # an ints attribute
    if op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax"):
        return _numel(ins[0]) if ins else 0
    if op in ("Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization"):
        return 5 * _numel(out)
    return _numel(out) if node.is_compute else 0


# Inference normalisation is a per-channel scale and shift: IREE folds it into its neighbours.
_FOLDED = frozenset({"BatchNormalization"})


def node_dispatches(node: Node, view: GraphView) -> int:
    """1 for a node that roots a dispatch of its own (a contraction, reduction or normalisation:
    more than one FLOP per output element), 0 for one that fuses into a neighbour's (elementwise,
    or no compute). An estimate: IREE's dispatch formation decides the real count."""
    out = view.values[node.outputs[0]].shape if node.outputs else None
    if out is None or ONNX_EQUIVALENT.get(node.op_type, node.op_type) in _FOLDED:
        return 0
    return int(node_flops(node, view) > _numel(out))


def region_dispatches(nodes: Sequence[Node], view: GraphView) -> int:
    return max(sum(node_dispatches(n, view) for n in nodes), 1)


def node_bytes(node: Node, view: GraphView) -> int:
    return sum(view.values[v].nbytes or 0 for v in (*node.inputs, *node.const_inputs, *node.outputs))


def nodes_us(nodes: Sequence[Node], view: GraphView, device: DeviceModel) -> float:
    """The roofline time of ``nodes`` as one region on ``device``."""
    return device.time_us(sum(node_flops(n, view) for n in nodes), sum(node_bytes(n, view) for n in nodes),
                          region_dispatches(nodes, view))


@dataclass(frozen=True, slots=True)
class RegionEstimate:
    """What the partitioner knows about one region's work (the manifest and report show it)."""

    compute_nodes: int
    flops: int
    estimated_us: float


def region_estimate(nodes: tuple[str, ...], device: Device, view: GraphView, model: CostModel) -> RegionEstimate:
    ns = [view.node(n) for n in nodes]
    flops = sum(node_flops(n, view) for n in ns)
    return RegionEstimate(sum(n.is_compute for n in ns), flops, round(nodes_us(ns, view, model.device(device)), 3))


@dataclass(frozen=True, slots=True)
class PlanCost:
    total_us: float
    compute_us: tuple[tuple[str, float], ...]   # per region
    transfer_us: float
    transfer_bytes: int
    hops: int


def plan_cost(regions: Mapping[str, Group], view: GraphView, model: CostModel,
              schedule: Sequence[str] | None = None, region_us: Callable[[Group], float] | None = None,
              one_lane: bool = False) -> PlanCost:
    """``regions``: name -> its device and nodes, issued in ``schedule`` (None: the greedy order
    ``order.schedule`` gives them). Graph inputs and outputs live on the host. ``region_us``: a
    region's compute time where it is known better than the roofline (measured on its device).
    ``one_lane``: the devices share the host's cores, so no region overlaps another (lanes.finish_time)."""
    owner = {n: name for name, group in regions.items() for n in group.nodes}
    device = {name: group.device for name, group in regions.items()}
    compute = []
    for name, group in regions.items():
        if region_us is not None:
            compute.append((name, region_us(group)))
            continue
        compute.append((name, nodes_us([view.node(n) for n in group.nodes], view, model.device(group.device))))
    crossings: set[tuple[str, Device]] = set()   # (value, device it must reach)
    waits: dict[str, set[str]] = {name: set() for name in regions}   # region -> regions it reads from
    for node in view.nodes:
        here = device[owner[node.name]]
        for v in node.inputs:
            producer = view.producer(v)
            there = device[owner[producer]] if producer else HOST
            if there != here:
                crossings.add((v, here))
            if producer and owner[producer] != owner[node.name]:
                waits[owner[node.name]].add(owner[producer])
    for v in view.outputs:
        producer = view.producer(v)
        if producer and device[owner[producer]] != HOST:
            crossings.add((v, HOST))
    nbytes = sum(view.values[v].nbytes or 0 for v, _ in crossings)
    transfer = sum(model.transfer_us(view.values[v].nbytes or 0) for v, _ in crossings)
    total = _lanes_us(regions, waits, view, dict(compute), schedule, one_lane) + transfer
    return PlanCost(total, tuple(compute), transfer, nbytes, len(crossings))


def _lanes_us(regions: Mapping[str, Group], waits: Mapping[str, set[str]], view: GraphView,
              compute: Mapping[str, float], schedule: Sequence[str] | None, one_lane: bool = False) -> float:
    """Compute time as the runtime spends it: a lane per device, so regions on different devices
    with no path between them overlap (runtime/lanes.py); a chain costs the sum of its regions."""
    edges: dict[str, set[str]] = {name: set() for name in regions}
    for consumer, producers in waits.items():
        for p in producers:
            edges[p].add(consumer)
    position = {n.name: i for i, n in enumerate(view.nodes)}
    device = {name: group.device for name, group in regions.items()}
    first_seen = {name: min((position[n] for n in group.nodes), default=0) for name, group in regions.items()}
    if schedule is None:
        schedule = order.schedule(device, edges, first_seen)
    return lanes.finish_time(schedule, device, {r: tuple(w) for r, w in waits.items()}, compute, one_lane)
