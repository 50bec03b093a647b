"""Operators split to fit a device's memory limit, between the first labelling and merging:

    label -> split (frontend/split.py) -> re-infer shapes -> relabel -> merge

The limit (``--memory-limit DRIVER=SIZE``) bounds one operator's working set on the device its
label picks. A node over it is split along its first cut that fits, into the fewest pieces; the
pieces, their slices and their concat keep the original's label. A node that no cut fits goes to
the host with the reason (split again if the host has a limit too and a cut fits that). No limit,
no splitting. A plan file's splits are replayed as they are: nothing is decided again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import onnx
from onnx import shape_inference

from aot.errors import PartitionError
from aot.frontend.graph import GraphView
from aot.frontend.split import Split, Tensors, apply, choose, working_set
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
    return _made(model, tuple(splits), tuple(hosted), keep)


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
