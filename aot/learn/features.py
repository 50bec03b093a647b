"""Coarse features of a graph, its regions and its plans, for the learned cost model and proposer.

Unlike the exact key (``key.py``), these are meant to generalise: a node's label is its op type
with its FLOPs and bytes bucketed on a log2 scale, and its Weisfeiler-Lehman subtree hashes over
those labels (the node's neighbourhood up to ``WL_ITERATIONS`` hops, both directions) are hashed
into ``BUCKETS`` bins. A region is the histogram of its nodes' bins plus its FLOPs, bytes, node
counts and boundary bytes, and what its flags compile: each op class's FLOP share, alone and
under each flag (``MIX_SCALARS``); a plan (``Mode.PLAN`` models) the same per device plus the
global figures: regions, transfers and the bytes crossing devices. From version 4, the same shares
per ``Geometry`` (the convolution's or product's shape class) follow; from version 5, the bits of
the decisions named later (``LATE_DECISIONS``: 256-bit code on an AVX-512 host) and each
geometry's share under them follow; from version 6, local-sync against the FLOPs of an average
node (``DISPATCH_SCALARS``); from version 7, each convolution kernel form's FLOP share
(``FORM_SCALARS``) closes each vector. All numbers go through ``log1p`` so a tree splits
on orders of magnitude. Pure numpy and networkx: a build evaluates these with no learning library
installed.

A version only appends columns to the one before it, so a model fitted on an older version reads
the leading columns of today's vectors (``WIDTHS``): retraining one device's model does not
invalidate another's whose database is elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from aot.frontend.graph import GraphView
from aot.learn.geometry import Geometry, KernelForm, OpClass, extent, geometry, kernel_form, op_class
from aot.learn.key import compiled_flags
from aot.lower.flags import DECISIONS, LATE_DECISIONS
from aot.partition.cost import node_bytes, node_flops
from aot.partition.plan import Plan, boundary, region_edges
from aot.partition.support import ACCEL, HOST, SupportTable, label

FEATURE_VERSION = 7     # bump when columns are appended below (never moved or removed): see WIDTHS
BUCKETS = 64
WL_ITERATIONS = 2
# What a region's compile flags decide, one bit each (lower/flags.py owns the spellings). Regions
# without pinned flags got their target's defaults.
FLAG_BITS = DECISIONS
# 1 where the plan runs its host regions on IREE's local-sync driver (the caller's thread).
RUNTIME_SCALARS = ("local_sync",)


# Per op class, its FLOP share and that share under each flag (a flag's effect depends on what it
# compiles), and local-sync against the work's size (it wins on small models, loses on big ones).
MIX_SCALARS = (*(f"share_{c.name.lower()}" for c in OpClass),
               *(f"share_{c.name.lower()}_{name}" for c in OpClass for name, _ in FLAG_BITS), "local_sync_log_flops")
REGION_SCALARS = ("accel", "flops", "bytes", "nodes", "compute_nodes", "in_bytes", "out_bytes",
                  *(f"flag_{name}" for name, _ in FLAG_BITS), *RUNTIME_SCALARS, *MIX_SCALARS)
# The flag bits of a plan are the host FLOP share compiled with each.
PLAN_SCALARS = ("host_flops", "host_bytes", "host_nodes", "accel_flops", "accel_bytes", "accel_nodes",
                "regions", "accel_regions", "hops", "crossing_bytes", "accel_flop_share",
                *(f"host_share_{name}" for name, _ in FLAG_BITS), *RUNTIME_SCALARS, *MIX_SCALARS)
NODE_SCALARS = ("accel_ok", "compute", "flops", "bytes", "graph_flops", "flop_share", "fanin", "fanout")
# Appended in version 4: each geometry's FLOP share, alone and under each flag.
GEOMETRY_SCALARS = (*(f"geometry_{g.name.lower()}" for g in Geometry),
                    *(f"geometry_{g.name.lower()}_{name}" for g in Geometry for name, _ in FLAG_BITS),
                    "conv_log_channels", "conv_log_pixels")
# Appended in version 5: each later decision's bit (a region) or host FLOP share (a plan), and
# each geometry's FLOP share under it.
LATE_BITS = LATE_DECISIONS
LATE_SCALARS = (*(f"flag_{name}" for name, _ in LATE_BITS),
                *(f"geometry_{g.name.lower()}_{name}" for g in Geometry for name, _ in LATE_BITS))
# Appended in version 6: local-sync against the work of an average node. Whether the task pool's
# hand-offs pay depends on how much each dispatch computes, not on the model's size alone: a
# 600 us classifier of 236 small nodes ran fastest on local-sync, a 620 us one of fewer, larger
# convolutions 1.5x slower on it (docs/learned.md, stop 61).
DISPATCH_SCALARS = ("local_sync_log_flops_per_node",)
# Appended in version 7: each kernel form's FLOP share (``KernelForm``: a window along one axis, a
# square one over a padded input). Under each flag as well, those shares helped on the side-by-side
# labels and cost 9.5 points of top-1 regret on the separately timed ones; alone, they helped on
# both (docs/learned.md, stop 71).
_FORMS = (KernelForm.LINE, KernelForm.PADDED_SQUARE)
FORM_SCALARS = tuple(f"form_{f.name.lower()}" for f in _FORMS)
_APPENDED = (GEOMETRY_SCALARS, LATE_SCALARS, DISPATCH_SCALARS, FORM_SCALARS)   # by version, from 4
REGION_DIM = len(REGION_SCALARS) + BUCKETS + sum(map(len, _APPENDED))
PLAN_DIM = len(PLAN_SCALARS) + 2 * BUCKETS + sum(map(len, _APPENDED))
NODE_DIM = len(NODE_SCALARS) + BUCKETS


@dataclass(frozen=True, slots=True)
class Widths:
    """How many leading columns of each vector a model of one feature version reads."""

    region: int
    plan: int
    node: int


def _widths(appended: int) -> Widths:
    """The widths before the last ``appended`` columns of each plan and region vector."""
    return Widths(REGION_DIM - appended, PLAN_DIM - appended, NODE_DIM)


WIDTHS = {3 + i: _widths(sum(map(len, _APPENDED[i:]))) for i in range(len(_APPENDED) + 1)}


@dataclass(frozen=True, slots=True)
class GraphCodes:
    """Every node's encoding, independent of any plan (computed once per graph)."""

    names: tuple[str, ...]            # the view's nodes, in its order
    flops: np.ndarray                 # per node
    nbytes: np.ndarray                # per node
    compute: np.ndarray               # per node, bool
    accel_ok: np.ndarray              # per node, bool: the support table lets it run on the accelerator
    op_class: np.ndarray              # per node, an OpClass value
    bins: np.ndarray                  # [nodes, BUCKETS]: counts of its WL subtree hashes per bin
    geometry: np.ndarray              # per node, a Geometry value
    extent: np.ndarray                # [nodes, 2]: a convolution's log2 input channels and output pixels
    form: np.ndarray                  # per node, a KernelForm value

    def index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}


def _bin(text: str) -> int:
    # sha256, not hash(): Python's string hash changes per process.
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % BUCKETS


def _log2_bucket(x: float) -> int:
    return 0 if x <= 0 else int(math.log2(x))


def encode(view: GraphView, accel_target: str | None = "vulkan-spirv") -> GraphCodes:
    """Each node's coarse label, FLOPs, bytes, whether it may go to the accelerator, and its
    WL subtree bins."""
    import networkx as nx

    names = tuple(n.name for n in view.nodes)
    flops = np.array([node_flops(n, view) for n in view.nodes], dtype=np.float64)
    nbytes = np.array([node_bytes(n, view) for n in view.nodes], dtype=np.float64)
    table = SupportTable.for_target(accel_target) if accel_target else None
    labels = label(view, table) if table else {}
    accel_ok = np.array([labels[n].device == ACCEL if labels else False for n in names], dtype=bool)
    g = nx.DiGraph()
    for i, n in enumerate(view.nodes):
        g.add_node(n.name, label=f"{n.op_type}|f{_log2_bucket(flops[i])}|b{_log2_bucket(nbytes[i])}")
    for n in view.nodes:
        for port, v in enumerate(n.inputs):
            p = view.producer(v)
            if p is not None:
                g.add_edge(p, n.name, d=f">{port}")
                g.add_edge(n.name, p, d=f"<{port}")
    bins = np.zeros((len(names), BUCKETS), dtype=np.float64)
    if names:
        with warnings.catch_warnings():   # networkx >= 3.5 warns that hash values changed: our bins are ours
            warnings.simplefilter("ignore", UserWarning)
            hashes = nx.weisfeiler_lehman_subgraph_hashes(g, edge_attr="d", node_attr="label",
                                                          iterations=WL_ITERATIONS, digest_size=8)
        for i, name in enumerate(names):
            for h in (g.nodes[name]["label"], *hashes[name]):
                bins[i, _bin(h)] += 1
    return GraphCodes(names, flops, nbytes, np.array([n.is_compute for n in view.nodes], dtype=bool), accel_ok,
                      np.array([op_class(n, view) for n in view.nodes], dtype=np.int64), bins,
                      np.array([geometry(n, view) for n in view.nodes], dtype=np.int64),
                      np.array([extent(n, view) for n in view.nodes], dtype=np.float64).reshape(len(names), 2),
                      np.array([kernel_form(n, view) for n in view.nodes], dtype=np.int64))


@dataclass(frozen=True, slots=True)
class PlanShape:
    """What the cost model needs of a plan: each region's features, who waits for whom, and the
    transfers between devices."""

    names: tuple[str, ...]                         # regions, in schedule order
    device: Mapping[str, str]                      # region -> "accel" | "host"
    waits: Mapping[str, tuple[str, ...]]           # region -> regions it reads from
    regions: np.ndarray                            # [regions, REGION_DIM], schedule order
    hops: int                                      # values crossing devices (graph inputs/outputs on the host)
    crossing_bytes: float
    plan: np.ndarray                               # [PLAN_DIM]


def shape_of(plan: Plan, view: GraphView, codes: GraphCodes) -> PlanShape:
    """The features of ``plan`` over ``view`` (``codes`` = ``encode(view)``)."""
    at = codes.index()
    owner = {n: r.name for r in plan.regions for n in r.nodes}
    device = {r.name: r.device.value for r in plan.regions}
    edges = region_edges(plan, view)
    waits = {r: tuple(sorted(p for p, cs in edges.items() if r in cs)) for r in plan.schedule}
    # A host region left to the defaults: the flags it compiles with (only then is what it holds read).
    compiled = {r.name: compiled_flags(view, r) if r.device == HOST else r.flags for r in plan.regions}
    bits_of = {name: flag_bits(flags) for name, flags in compiled.items()}
    late_of = {name: flag_bits(flags, LATE_BITS) for name, flags in compiled.items()}
    rows = []
    for name in plan.schedule:
        r = plan.region(name)
        idx = [at[n] for n in r.nodes]
        bits = bits_of[r.name]
        sync = local_sync(plan) if r.device == HOST else 0.0
        b = boundary(r.nodes, view)
        in_bytes = sum(view.values[v].nbytes or 0 for v in b.inputs if v in view.values)
        out_bytes = sum(view.values[v].nbytes or 0 for v in b.outputs if v in view.values)
        rows.append(np.concatenate([
            [1.0 if r.device == ACCEL else 0.0],
            np.log1p([codes.flops[idx].sum(), codes.nbytes[idx].sum(), len(idx), codes.compute[idx].sum(),
                      in_bytes, out_bytes]),
            bits, [sync], _mix(codes, [(idx, bits)], sync),
            np.log1p(codes.bins[idx].sum(axis=0)), _shares(codes, [(idx, bits)], codes.geometry, len(Geometry)),
            _extent(codes, idx), late_of[r.name], _late_shares(codes, [(idx, late_of[r.name])]),
            [sync * _log_flops_per_node(codes, idx)],
            _form_shares(codes, idx)]))
    crossings: set[tuple[str, str]] = set()
    for node in view.nodes:
        here = device[owner[node.name]]
        for v in node.inputs:
            p = view.producer(v)
            there = device[owner[p]] if p else HOST.value
            if there != here and v in view.values:
                crossings.add((v, here))
    for v in view.outputs:
        p = view.producer(v)
        if p and device[owner[p]] != HOST.value:
            crossings.add((v, HOST.value))
    crossing = float(sum(view.values[v].nbytes or 0 for v, _ in crossings))
    return PlanShape(tuple(plan.schedule), device, waits, np.array(rows).reshape(len(rows), REGION_DIM),
                     len(crossings), crossing, _plan_vector(plan, codes, at, bits_of, late_of, len(crossings), crossing))


def _plan_vector(plan: Plan, codes: GraphCodes, at: Mapping[str, int], bits_of: Mapping[str, np.ndarray],
                 late_of: Mapping[str, np.ndarray], hops: int, crossing: float) -> np.ndarray:
    on = {ACCEL: [at[n] for r in plan.regions if r.device == ACCEL for n in r.nodes],
          HOST: [at[n] for r in plan.regions if r.device == HOST for n in r.nodes]}
    total = float(codes.flops.sum())
    per = []
    for dev in (HOST, ACCEL):
        idx = on[dev]
        per += [codes.flops[idx].sum(), codes.nbytes[idx].sum(), len(idx)]
    accel_regions = sum(r.device == ACCEL for r in plan.regions)
    share = float(codes.flops[on[ACCEL]].sum()) / total if total > 0 else len(on[ACCEL]) / max(len(codes.names), 1)
    host_flops = codes.flops[on[HOST]].sum()
    host = [([at[n] for n in r.nodes], bits_of[r.name]) for r in plan.regions if r.device == HOST]
    late = [([at[n] for n in r.nodes], late_of[r.name]) for r in plan.regions if r.device == HOST]
    return np.concatenate([np.log1p(per), np.log1p([len(plan.regions), accel_regions, hops, crossing]), [share],
                           _flag_share(codes, host, host_flops), [local_sync(plan)], _mix(codes, host, local_sync(plan)),
                           np.log1p(codes.bins[on[HOST]].sum(axis=0)), np.log1p(codes.bins[on[ACCEL]].sum(axis=0)),
                           _shares(codes, host, codes.geometry, len(Geometry)),
                           _extent(codes, [i for idx, _ in host for i in idx]),
                           _flag_share(codes, late, host_flops, len(LATE_BITS)), _late_shares(codes, late),
                           [local_sync(plan) * _log_flops_per_node(codes, on[HOST])],
                           _form_shares(codes, on[HOST])])


def _flag_share(codes: GraphCodes, parts: Sequence[tuple[Sequence[int], np.ndarray]], flops: float,
                decisions: int = len(FLAG_BITS)) -> np.ndarray:
    """Each of the ``decisions`` flag bits' share of ``flops`` (the parts' total): FLOP-weighted,
    plus one per part so a region of no FLOPs still counts a little."""
    share = np.zeros(decisions)
    for idx, bits in parts:
        share += bits * (codes.flops[idx].sum() + 1.0)
    return share / (flops + len(parts) or 1.0)


def _late_shares(codes: GraphCodes, parts: Sequence[tuple[Sequence[int], np.ndarray]]) -> np.ndarray:
    """Each geometry's FLOP share under each ``LATE_BITS`` decision."""
    return _shares(codes, parts, codes.geometry, len(Geometry), len(LATE_BITS))[len(Geometry):]


def _form_shares(codes: GraphCodes, idx: Sequence[int]) -> np.ndarray:
    """``FORM_SCALARS``: each kernel form's share of the FLOPs of the nodes ``idx`` (no flags)."""
    return _shares(codes, [(idx, np.zeros(0))], codes.form, len(KernelForm), decisions=0)[list(_FORMS)]


def _log_flops_per_node(codes: GraphCodes, idx: Sequence[int]) -> float:
    return math.log1p(float(codes.flops[idx].sum()) / max(len(idx), 1))


def _extent(codes: GraphCodes, idx: Sequence[int]) -> np.ndarray:
    w = codes.flops[idx] * (codes.extent[idx, 0] > 0)
    return (w @ codes.extent[idx]) / w.sum() if w.sum() > 0 else np.zeros(2)


def _mix(codes: GraphCodes, parts: Sequence[tuple[Sequence[int], np.ndarray]], sync: float) -> np.ndarray:
    """``MIX_SCALARS`` over ``parts`` (each: node indices and the flag bits they compile with)."""
    total = sum(float(codes.flops[idx].sum()) for idx, _ in parts)
    return np.concatenate([_shares(codes, parts, codes.op_class, len(OpClass)), [sync * math.log1p(total)]])


def _shares(codes: GraphCodes, parts: Sequence[tuple[Sequence[int], np.ndarray]], classes: np.ndarray,
            count: int, decisions: int = len(FLAG_BITS)) -> np.ndarray:
    """Each class's share of the parts' FLOPs (``classes``: per node, one of ``count``), alone
    and under each of the ``decisions`` flag bits the parts carry."""
    total = sum(float(codes.flops[idx].sum()) for idx, _ in parts)
    share = np.zeros(count)
    under = np.zeros((count, decisions))
    for idx, bits in parts:
        per_class = np.bincount(classes[idx], weights=codes.flops[idx], minlength=count) / (total or 1.0)
        share += per_class
        under += np.outer(per_class, bits)
    return np.concatenate([share, under.ravel()])


def flag_bits(flags: tuple[str, ...] | None,
              decisions: Sequence[tuple[str, str]] = FLAG_BITS) -> np.ndarray:
    """One bit per ``decisions`` entry: the region's flags hold it (None: an accelerator region's
    defaults, none of these llvm-cpu decisions)."""
    return np.array([float(any(f.startswith(prefix) for f in flags or ())) for _, prefix in decisions])


def local_sync(plan: Plan) -> float:
    return 1.0 if plan.host_runtime is not None and plan.host_runtime.driver == "local-sync" else 0.0


def accel_share(shape: PlanShape) -> float:
    """The fraction of the graph's FLOPs a plan puts on the accelerator (a baseline ranks by it)."""
    return float(shape.plan[PLAN_SCALARS.index("accel_flop_share")])


def node_features(view: GraphView, codes: GraphCodes) -> np.ndarray:
    """[nodes, NODE_DIM]: what the proposer sees of each node (``codes`` = ``encode(view)``)."""
    n = len(codes.names)
    if not n:
        return np.zeros((0, NODE_DIM))
    total = float(codes.flops.sum())
    share = codes.flops / total if total > 0 else np.zeros(n)
    fanin = [len(view.predecessors(name)) for name in codes.names]
    fanout = [len(view.successors(name)) for name in codes.names]
    scalars = np.column_stack([codes.accel_ok.astype(float), codes.compute.astype(float), np.log1p(codes.flops),
                               np.log1p(codes.nbytes), np.full(n, math.log1p(total)), share,
                               np.log1p(fanin), np.log1p(fanout)])
    return np.hstack([scalars, np.log1p(codes.bins)])


def lane_time(shape: PlanShape, region_us: Sequence[float]) -> float:
    """The plan's compute time as the runtime's lanes spend it (``runtime/lanes.py``)."""
    from aot.runtime import lanes

    return lanes.finish_time(shape.names, shape.device, shape.waits, dict(zip(shape.names, region_us)))


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
