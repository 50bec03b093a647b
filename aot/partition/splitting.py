"""Operators split to fit a device's memory limit, between the first labelling and merging:

    label -> split (frontend/split.py) -> re-infer shapes -> relabel -> merge

The limit (``--memory-limit DRIVER=SIZE``) bounds one operator's working set on the device its
label picks. A node over it is split along its first cut that fits, into the fewest pieces; the
pieces, their slices and their concat keep the original's label. A node that no cut fits goes to
the host with the reason (split again if the host has a limit too and a cut fits that). No limit,
no splitting. A plan file's splits are replayed as they are: nothing is decided again.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Mapping

import onnx
from onnx import shape_inference

from aot.errors import PartitionError
from aot.frontend.graph import GraphView
from aot.frontend.split import Split, Tensors, apply, choose, piece_bytes, working_set
from aot.frontend.split_rules import cuts
from aot.partition.support import ACCEL, HOST, Device, Label, Overrides, SupportTable, label
from aot.runtime.memory import size_text


@dataclass(frozen=True, slots=True)
class Hosted:
    """A node over its device's limit that no cut fits: where it went and why."""

    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class SplitOutcome:
    """The model with its splits made, and the labels they decided."""

    model: onnx.ModelProto
    splits: tuple[Split, ...]
    hosted: tuple[Hosted, ...]
    labels: tuple[tuple[str, Label], ...]   # node -> label the relabelling must keep (pieces, hosted nodes)


def split_for_memory(model: onnx.ModelProto, table: SupportTable | None, overrides: Overrides,
                     limits: Mapping[str, int], drivers: Mapping[Device, str]) -> SplitOutcome:
    """Split every node of ``model`` (checked, shape-inferred) over the limit of the driver its
    first label gives it; ``drivers``: the runtime driver of each device of this build."""
    view = GraphView.from_onnx(model)
    first = label(view, table, overrides)
    tensors = Tensors.of(model)
    protos = {n.name: n for n in model.graph.node}
    splits: list[Split] = []
    hosted: list[Hosted] = []
    keep: dict[str, Label] = {}
    for node in view.nodes:
        proto, lab = protos[node.name], first[node.name]
        decided = _fit(proto, tensors, drivers[lab.device], limits)
        if decided is None:
            continue
        if isinstance(decided, Split):
            splits.append(decided)
            keep[node.name] = lab
            continue
        if lab.device == ACCEL:
            why = f"over the {drivers[ACCEL]} memory limit and cannot be split to fit: {decided}"
            on_host = _fit(proto, tensors, drivers[HOST], limits)
            if isinstance(on_host, Split):
                splits.append(on_host)
            keep[node.name] = Label(HOST, why)
            hosted.append(Hosted(node.name, why + (f"; split for the host instead" if isinstance(on_host, Split)
                                                   else "; runs whole on the host")))
        else:
            hosted.append(Hosted(node.name, f"over the {drivers[HOST]} memory limit and cannot be split to fit: "
                                            f"{decided}; runs whole on the host"))
    if not splits:
        return SplitOutcome(model, (), tuple(hosted), tuple(keep.items()))
    return _made(model, aligned(tuple(splits), protos, tensors), tuple(hosted), keep)


def aligned(splits: tuple[Split, ...], protos: Mapping[str, onnx.NodeProto], tensors: Tensors) -> tuple[Split, ...]:
    """Each node chose its cut alone; where a split node reads a split producer along another axis
    (a Relu cut by channels feeding a 1x1 Conv cut by rows), the producer's pieces are joined into
    the whole tensor and sliced again: two full-size copies, each a dispatch over the limit the
    splits were for. So, last node first, a producer is re-cut along its consumer's axis into
    exactly the ranges the consumer reads, when the producer allows that cut and each piece still
    fits its limit; the consumer then reads the pieces directly (``apply``: no Concat, no Slice)."""
    by_node = {s.node: s for s in splits}
    producer_of = {v: n.name for n in protos.values() for v in n.output}
    for consumer in reversed(splits):
        c = by_node[consumer.node]
        node = protos[c.node]
        producer = by_node.get(producer_of.get(node.input[0], ""))
        if producer is None:
            continue
        wanted = _input_ranges(node, c, tensors)
        if wanted is None:
            continue
        axis, ranges = wanted
        recut = _recut(protos[producer.node], producer, axis, ranges, tensors)
        if recut is not None:
            by_node[producer.node] = recut
    return tuple(by_node[s.node] for s in splits)


def _input_ranges(node: onnx.NodeProto, split: Split, tensors: Tensors) -> tuple[int, tuple[tuple[int, int], ...]] | None:
    """The axis of input 0 the split slices and each piece's range of it (a convolution's rows
    with their halo: ranges that overlap no producer can make); None when input 0 goes whole to
    every piece."""
    found, _ = cuts(node, tensors.shapes, tensors.consts)
    cut = next((c for c in found if c.axis == split.axis and c.kind == split.kind), None)
    follow = cut.inputs[0] if cut is not None and cut.inputs else None
    if cut is None or follow is None:
        return None
    bounds = list(itertools.accumulate(split.pieces, initial=0))
    if cut.halo is not None:
        return follow.axis, tuple(cut.halo.rows(a, b)[:2] for a, b in zip(bounds, bounds[1:]))
    return follow.axis, tuple((a * follow.step, b * follow.step) for a, b in zip(bounds, bounds[1:]))


def _recut(node: onnx.NodeProto, split: Split, axis: int, ranges: tuple[tuple[int, int], ...],
           tensors: Tensors) -> Split | None:
    """``split`` made again along output ``axis`` into pieces that produce exactly ``ranges``."""
    found, _ = cuts(node, tensors.shapes, tensors.consts)
    for cut in found:
        if cut.axis != axis or any(a % cut.out_step or b % cut.out_step for a, b in ranges):
            continue
        pieces = tuple((b - a) // cut.out_step for a, b in ranges)
        if sum(pieces) != cut.units:
            continue
        largest = piece_bytes(node, cut, max(pieces), tensors)
        if largest <= split.limit:
            return dataclasses.replace(split, axis=cut.axis, kind=cut.kind, pieces=pieces, bytes_after=largest)
    return None


def replay(model: onnx.ModelProto, splits: tuple[Split, ...]) -> SplitOutcome:
    """A plan file's splits, made again on the freshly loaded model (its labels are the plan's)."""
    return _made(model, splits, (), {}) if splits else SplitOutcome(model, (), (), ())


def _fit(node: onnx.NodeProto, tensors: Tensors, driver: str, limits: Mapping[str, int]) -> Split | str | None:
    """None: within the driver's limit (or no limit); else the split that fits, or why none does."""
    limit = limits.get(driver)
    size = working_set(node, tensors)
    if limit is None or size is None or size <= limit:
        return None
    decided = choose(node, tensors, driver, limit)
    return decided if isinstance(decided, Split) else f"{node.op_type} needs {size_text(size)}; {decided}"


def _made(model: onnx.ModelProto, splits: tuple[Split, ...], hosted: tuple[Hosted, ...],
          keep: Mapping[str, Label]) -> SplitOutcome:
    rewritten, origin = apply(model, splits)
    try:
        onnx.checker.check_model(rewritten, full_check=True)
        rewritten = shape_inference.infer_shapes(rewritten, check_type=True, strict_mode=True, data_prop=True)
    except (onnx.checker.ValidationError, shape_inference.InferenceError) as e:   # a bug of the rewrite
        raise PartitionError(f"splitting {', '.join(s.node for s in splits)} made an invalid model: "
                             f"{str(e).strip().splitlines()[0]}", hint="build without --memory-limit") from e
    labels = dict(keep)
    for new, old in origin.items():
        if old in keep:
            labels[new] = keep[old]
    for old in {s.node for s in splits}:
        labels.pop(old, None)
    return SplitOutcome(rewritten, splits, hosted, tuple(labels.items()))
