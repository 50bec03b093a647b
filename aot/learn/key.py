"""The exact key of a measured plan: what must be equal for a measurement to be reused.

The graph part is a Weisfeiler-Lehman hash over exact node labels (op type, attributes, input and
output shapes and dtypes, the device the plan assigns and the node's region's place in the
schedule), with each edge labelled by the consumer's input port (so ``Sub(a, b)`` and
``Sub(b, a)`` differ) and by whether it crosses regions (so the same devices grouped into other
regions differ). Node and value names do not enter it: a renamed but otherwise identical graph
hits. Everything else that changes a timing joins the hash: flags, the host runtime, the device
fingerprint, and the versions of the compiler, aot, this key's pipeline, aot's host-region
lowering (``lower/host_lowering.py``) and networkx (whose WL hash values changed in 3.5).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings
from dataclasses import dataclass
from importlib.metadata import version
from typing import TYPE_CHECKING, Mapping

from aot.frontend.graph import GraphView, Node
from aot.lower import packed_conv
from aot.lower.flags import LEGACY_HOST_DEFAULT, default_opt_flags
from aot.lower.host_lowering import LOWERING_VERSION
from aot.partition.cost import holds
from aot.partition.support import HOST
from aot.runtime.target import Target

if TYPE_CHECKING:
    from aot.options import BuildOptions
    from aot.partition.plan import Plan, Region

KEY_VERSION = 1       # bump when the labels or the pass pipeline before planning change
# The lowering after outlining joins the key from its second version on: every row measured so far
# was measured with (or, for the models it does not touch, is unchanged by) version 1.
_LOWERING = {"lowering": LOWERING_VERSION} if LOWERING_VERSION > 1 else {}
WL_ITERATIONS = 4


@dataclass(frozen=True, slots=True)
class PlanKey:
    graph: str     # WL hash of the labelled graph (devices and region cuts included)
    context: str   # digest of flags, host runtime, device fingerprint and tool versions
    key: str       # the two together: the database's lookup key


def node_label(node: Node, view: GraphView, device: str, slot: int) -> str:
    """Everything about a node that changes its cost, nothing that names it."""
    def values(names: tuple[str, ...]) -> list[str]:
        return [value_label(view, v) for v in names]

    attrs = sorted((k, repr(v)) for k, v in node.attrs)
    return json.dumps([node.op_type, attrs, values(node.inputs), values(node.const_inputs), values(node.outputs),
                       device, slot])


def graph_hash(view: GraphView, device_of: Mapping[str, str], slot_of: Mapping[str, int]) -> str:
    """WL hash of ``view`` labelled with each node's device and its region's place in the schedule."""
    import networkx as nx

    g = nx.DiGraph()
    for n in view.nodes:
        g.add_node(n.name, label=node_label(n, view, device_of.get(n.name, "?"), slot_of.get(n.name, -1)))
    for i, v in enumerate(view.inputs):
        g.add_node(f"\0in{i}", label=f"input {i} {value_label(view, v)}")
    for i, v in enumerate(view.outputs):
        g.add_node(f"\0out{i}", label=f"output {i}")
    ports: dict[tuple[str, str], list[str]] = {}
    input_node = {v: f"\0in{i}" for i, v in enumerate(view.inputs)}
    for n in view.nodes:
        for port, v in enumerate(n.inputs):
            source = view.producer(v) or input_node.get(v)
            if source is None:
                continue
            cut = "cut" if slot_of.get(source, -2) != slot_of.get(n.name, -3) and source in slot_of else "same"
            ports.setdefault((source, n.name), []).append(f"{port}:{cut}")
    for i, v in enumerate(view.outputs):
        if (p := view.producer(v)) is not None:
            ports.setdefault((p, f"\0out{i}"), []).append("out")
    # Both directions, each with its port list: a node's WL label then sees what feeds it (and
    # through which operand) as well as what it feeds.
    for (a, b), labels in ports.items():
        text = ",".join(sorted(labels))
        g.add_edge(a, b, port=f">{text}")
        g.add_edge(b, a, port=f"<{text}")
    with warnings.catch_warnings():   # "hashes changed in 3.5": the version is in the key's context
        warnings.simplefilter("ignore", UserWarning)
        return str(nx.weisfeiler_lehman_graph_hash(g, edge_attr="port", node_attr="label",
                                                   iterations=WL_ITERATIONS, digest_size=16))


def value_label(view: GraphView, v: str) -> str:
    """A value's dtype and shape (``float32[1, 3, 8, 8]``), or ``?`` where unknown."""
    val = view.values.get(v)
    if val is None:
        return "?"
    return f"{val.dtype}{list(val.shape) if val.shape is not None else '?'}"


def plan_key(view: GraphView, regions: Mapping[str, tuple[str, tuple[str, ...]]], schedule: tuple[str, ...],
             flags: Mapping[str, tuple[str, ...]] | None = None, host_runtime: str = "",
             fingerprint: str = "") -> PlanKey:
    """The key of a plan: ``regions`` maps a region name to (device, its nodes); ``flags`` maps a
    region to its pinned optimisation flags. Region names do not enter the key, only positions."""
    import networkx as nx

    slot = {name: i for i, name in enumerate(schedule)}
    device_of = {n: dev for name, (dev, nodes) in regions.items() for n in nodes}
    slot_of = {n: slot[name] for name, (_, nodes) in regions.items() for n in nodes}
    graph = graph_hash(view, device_of, slot_of)
    context = hashlib.sha256(json.dumps({
        "flags": [_flags(flags or {}, name) + _lowered(regions[name][0], (flags or {}).get(name)) for name in schedule],
        "host_runtime": host_runtime,
        "fingerprint": fingerprint, "key_version": KEY_VERSION, "networkx": nx.__version__,
        "compiler": compiler_version(), "aot": _aot_version(), **_LOWERING,
    }, sort_keys=True).encode()).hexdigest()[:32]
    return PlanKey(graph, context, hashlib.sha256(f"{graph}/{context}".encode()).hexdigest()[:40])


def key_of(view: GraphView, plan: "Plan", fingerprint: str) -> PlanKey:
    """``plan_key`` of a whole plan: its regions, schedule, flags and host runtime. A host region
    left to the defaults is keyed by the defaults it compiles with (``compiled_flags``): they differ
    by what it holds, and they changed once (rows measured before keyed such a region ``[]``)."""
    regions = {r.name: (r.device.value, r.nodes) for r in plan.regions}
    flags = {**plan.pinned_flags, **{r.name: compiled_flags(view, r) for r in plan.regions if r.device == HOST}}
    return plan_key(view, regions, plan.schedule, flags,
                    host_runtime=plan.host_runtime.label if plan.host_runtime else "", fingerprint=fingerprint)


def compiled_flags(view: GraphView, region: "Region", target: Target = Target.host()) -> tuple[str, ...]:
    """The optimisation flags a region compiles with for ``target`` (the host's, unless told
    otherwise): its pinned ones, else the target's defaults for what it holds
    (``lower.flags.default_opt_flags`` of ``partition.cost.holds``, as the compile reads them)."""
    if region.flags is not None:
        return region.flags
    return default_opt_flags(target, holds(view, region.nodes))


def as_stored(plan: "Plan", compiled: Mapping[str, tuple[str, ...]]) -> "Plan":
    """``plan`` as the database keeps it: each host region pinned to the flags it compiled with
    (``compiled``: region -> the manifest's flags), so that a row never depends on defaults that
    may change."""
    return dataclasses.replace(plan, regions=tuple(
        dataclasses.replace(r, flags=compiled.get(r.name, ())) if r.device == HOST and r.flags is None else r
        for r in plan.regions))


def as_measured(plan: "Plan") -> "Plan":
    """A stored plan as it was compiled. A host region without flags is from a row measured
    before ``as_stored`` (2026-11-28), when every untuned host region compiled with
    ``LEGACY_HOST_DEFAULT``."""
    return dataclasses.replace(plan, regions=tuple(
        dataclasses.replace(r, flags=LEGACY_HOST_DEFAULT) if r.device == HOST and r.flags is None else r
        for r in plan.regions))


def stored_plan(plan_json: str, view: GraphView) -> "Plan | str":
    """The plan a database row measured, as compiled (``as_measured``), when it still fits today's
    graph ``view``; otherwise why not. The key hashes the graph's labels, not its node names, so a
    front-end change that only renames nodes keeps the keys while the stored plans stop fitting:
    such rows neither count as measured nor train."""
    from aot.errors import AotError
    from aot.partition.plan import Plan, validate

    try:
        plan = as_measured(Plan.from_json(json.loads(plan_json)))
        validate(plan, view)
    except (AotError, KeyError, ValueError) as e:
        return f"the stored plan no longer fits the model: {e}"
    return plan


def _flags(pinned: Mapping[str, tuple[str, ...]], region: str) -> list[str]:
    """An unpinned region (an accelerator's defaults) is ``[]``, as keys have always had it; a
    region pinned to no optimisation flags at all (the tuner's direct-conv set) compiles
    otherwise, so it gets a marker of its own."""
    if region not in pinned:
        return []
    return list(pinned[region]) or ["(no optimisation flags)"]


def _lowered(device: str, flags: tuple[str, ...] | None) -> list[str]:
    """What a host region's flags change in the module it compiles from (lower/packed_conv.py):
    nothing for almost every set, so no other key changes."""
    return list(packed_conv.key_tag(Target.host(), flags)) if device == HOST.value else []


def region_digest(view: GraphView, nodes: tuple[str, ...], device: str, flags: tuple[str, ...] = ()) -> str:
    """A region's identity wherever it appears: the WL hash of the subgraph its nodes induce
    (exact labels, inputs and outputs cut where the region's edges leave it), its device and its
    flags. Names and the region's place in a schedule do not enter it, so the same region in two
    plans (or two models) has the same digest: what a per-region cost model trains on."""
    inside = set(nodes)
    members = [n for n in view.nodes if n.name in inside]
    produced = {v for n in members for v in n.outputs}
    inputs = dict.fromkeys(v for n in members for v in n.inputs
                           if v and v not in produced and v not in view.constants)
    outputs = [v for n in members for v in n.outputs
               if v in view.outputs or any(c not in inside for c in view.consumers(v))]
    sub = GraphView.build(members, inputs, outputs, view.values, view.constants)
    graph = graph_hash(sub, {n: device for n in inside}, {n: 0 for n in inside})
    keyed = [*flags, *_lowered(device, flags)]
    return hashlib.sha256(json.dumps([graph, device, keyed, KEY_VERSION, *_LOWERING.values()]).encode()
                          ).hexdigest()[:32]


def compiler_version() -> str:
    """The iree-base-compiler that compiles this build's code (as a bundle's toolchain names it)."""
    return _version("iree-base-compiler")


def _version(package: str) -> str:
    try:
        return version(package)
    except Exception:  # noqa: BLE001 - a missing package is part of the context, not an error
        return "none"


def _aot_version() -> str:
    import aot

    return aot.__version__


def device_fingerprint(options: "BuildOptions") -> str:
    """The devices a plan's timings belong to, coarsely: the accelerator's backend and arch, the
    host's ISA class and core count (``vulkan-spirv:llvmpipe host=x86-64-v4 cores=2``)."""
    from aot.runtime.fingerprint import devices

    return devices(options.accel)
