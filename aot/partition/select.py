"""Which accelerator regions to keep; the rest go to the host.

Modes: ``all`` keeps every region; ``largest`` only the one with the largest compute amount;
``threshold`` those with at least ``--threshold`` compute nodes; ``largest+threshold`` both;
``cost`` those whose estimated saving beats their transfers. ``--min-compute`` applies to all.
"""

from __future__ import annotations

from dataclasses import dataclass

from aot.frontend.graph import GraphView
from aot.partition.cost import CostModel, node_bytes, node_flops, region_dispatches
from aot.partition.plan import boundary
from aot.partition.support import ACCEL, Groups

MODES = ("all", "largest", "threshold", "largest+threshold", "cost")


@dataclass(frozen=True, slots=True)
class Amount:
    compute_nodes: int
    flops: int
    nbytes: int


def amount(nodes: tuple[str, ...], view: GraphView) -> Amount:
    ns = [view.node(n) for n in nodes]
    return Amount(sum(n.is_compute for n in ns), sum(node_flops(n, view) for n in ns), sum(node_bytes(n, view) for n in ns))


def rejected(groups: Groups, view: GraphView, mode: str, min_compute: int,
             threshold: int, cost: CostModel | None) -> dict[int, str]:
    """Index of each accelerator group to demote -> why."""
    accel = [i for i, group in enumerate(groups) if group.device == ACCEL]
    amounts = {i: amount(groups[i].nodes, view) for i in accel}
    out: dict[int, str] = {}
    for i in accel:
        if amounts[i].compute_nodes < min_compute:
            out[i] = (f"its accelerator region had {amounts[i].compute_nodes} compute node(s), fewer than "
                      f"--min-compute {min_compute}: not worth the transfers")
    keep = [i for i in accel if i not in out]
    if not keep or mode == "all":
        return out
    largest = max(keep, key=lambda i: (amounts[i].flops, amounts[i].compute_nodes))
    for i in keep:
        a = amounts[i]
        if mode == "largest" and i != largest:
            out[i] = f"--select largest keeps only the largest accelerator region ({amounts[largest].flops:,} FLOPs)"
        elif mode == "threshold" and a.compute_nodes < threshold:
            out[i] = f"--select threshold: {a.compute_nodes} compute nodes < --threshold {threshold}"
        elif mode == "largest+threshold" and i != largest and a.compute_nodes < threshold:
            out[i] = (f"--select largest+threshold: not the largest region and {a.compute_nodes} compute "
                      f"nodes < --threshold {threshold}")
        elif mode == "cost" and cost is not None:
            saving, transfers = region_saving(groups[i].nodes, view, cost)
            if saving <= transfers:
                out[i] = (f"--select cost: saves {saving:.1f} us of compute but its transfers cost "
                          f"{transfers:.1f} us")
    return out


def region_saving(nodes: tuple[str, ...], view: GraphView, cost: CostModel) -> tuple[float, float]:
    """(host time - accelerator time, transfer time of its boundary) in microseconds."""
    a = amount(nodes, view)
    dispatches = region_dispatches([view.node(n) for n in nodes], view)
    saving = cost.host.time_us(a.flops, a.nbytes, dispatches) - cost.accel.time_us(a.flops, a.nbytes, dispatches)
    b = boundary(nodes, view)
    transfers = sum(cost.transfer_us(view.values[v].nbytes or 0) for v in (*b.inputs, *b.outputs))
    return saving, transfers
