"""The build record: what a build decided and measured, kept apart from the deploy contract.

A bundle's ``manifest.json`` is what a deployment reads (``aot/runtime/manifest.py``); its
``record.json`` is what the build knew: the resolved options, how the plan was made (policy,
coverage, gate, reasons), the graph as partitioned, per-region estimates and measurements,
verification, tuning and the machine it ran on. ``aot report`` and ``aot tune`` read it; the
runtime never does. The plan itself is ``plan.json`` beside it (``aot build --plan`` replays it).

Bundles built before the record existed (schema-1 manifests) have none: ``read`` returns None
and the report says so.
"""

from __future__ import annotations

import enum
import os
import platform
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aot.errors import BundleError
from aot.frontend.split import Split
from aot.partition.plan import Gate
from aot.partition.search import OrderSearch
from aot.partition.support import Device
from aot.runtime import codec
from aot.runtime.codec import field
from aot.runtime.atomic import write_json
from aot.runtime.manifest import bundle_dir

RECORD = "record.json"
PLAN = "plan.json"
RECORD_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class OpTally:
    """An op type, how many of the model's nodes, and why: ops the accelerator cannot run
    (coverage) and ops the front end wrote out before planning (rewrites) alike."""

    op: str
    count: int
    reason: str


UnsupportedOp = OpTally   # coverage's name for it
Rewrite = OpTally         # a front-end rewrite the build applied


@dataclass(frozen=True, slots=True)
class CoverageRecord:
    """Operator coverage of the accelerator target before any merging or selection."""

    target: str
    supported: int
    total: int
    unsupported: tuple[UnsupportedOp, ...]


@dataclass(frozen=True, slots=True)
class SegmentRecord:
    """A run of the model between key nodes (``partition/segments.py``)."""

    index: int
    nodes: int
    first_key: str | None     # the first and last key node in it; None: no node cuts the run
    last_key: str | None


@dataclass(frozen=True, slots=True)
class DispatchCheck:
    """What the dispatches of one region on a memory-limited device bind, as iree-compile's
    stream phase lays them out (``lower/dispatches.py``): whether the splits really shrank them,
    or IREE fused slice -> op -> concat back into one dispatch."""

    region: str
    driver: str
    limit: int
    dispatches: int
    largest: int            # bytes the region's largest dispatch loads and stores (its working set)
    largest_name: str
    over: int               # dispatches whose working set is over the limit
    largest_bound: int = 0  # bytes the largest binding set spans (a slice of a buffer binds all of it)


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """Memory-driven operator splitting (``--memory-limit``): the limits, each split, the nodes no
    split fits (sent to the host or left whole there), and the compiled dispatches checked."""

    limits: tuple[tuple[str, int], ...] = field(as_map=True)
    splits: tuple[Split, ...] = field()
    hosted: tuple[tuple[str, str], ...] = field(as_map=True)    # (node, why)
    dispatches: tuple[DispatchCheck, ...] = field(default=())

    def lines(self, most: int = 40) -> list[str]:
        """The report's and `aot plan`'s section."""
        from aot.runtime.memory import size_text

        limits = ", ".join(f"{d}={size_text(n)}" for d, n in self.limits) or "replayed from the plan"
        out = [f"memory splits: {len(self.splits)} node(s) split to fit one operator's working set "
               f"(limits: {limits})"]
        out += [f"  {s.text()}" for s in self.splits[:most]]
        out += [f"  ... {len(self.splits) - most} more split(s)"] if len(self.splits) > most else []
        out += [f"  not split: {node}: {why}" for node, why in self.hosted[:most]]
        for c in self.dispatches:
            out.append(f"  {c.region} on {c.driver}: {c.dispatches} dispatch(es), the largest working set "
                       f"{size_text(c.largest)} ({c.largest_name}), "
                       + (f"{c.over} over the limit {size_text(c.limit)}" if c.over else
                          f"all within {size_text(c.limit)}") + f"; bindings span up to {size_text(c.largest_bound)}")
        return out


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    policy: str
    select: str
    min_compute: int
    gate: Gate | None
    coverage: CoverageRecord | None
    suggestions: tuple[str, ...]
    cost_model: str
    segments: tuple[SegmentRecord, ...] = field(default=())   # empty in records written before segments
    order_search: OrderSearch | None = field(default=None, omit_default=True)   # --order search only
    memory: MemoryRecord | None = field(default=None, omit_default=True)         # --memory-limit only


@dataclass(frozen=True, slots=True)
class GraphNode:
    """A node of the model as partitioned (the report's picture)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RegionCheck:
    """One accelerator region run on its device against the reference's tensors."""

    region: str
    ok: bool
    max_abs_diff: float | None   # None when it did not run
    error: str | None


@dataclass(frozen=True, slots=True)
class Verification:
    checked: tuple[RegionCheck, ...]          # the regions that passed, in the shipped bundle
    moved_to_host: tuple[RegionCheck, ...]    # the failures that moved their region to the host
    # Why nothing was checked: the regions' device is not on the build machine (a bundle built on
    # CI for a deployment GPU). `aot check` on the target machine does it there.
    skipped: str | None = field(default=None, omit_default=True)


@dataclass(frozen=True, slots=True)
class TuneCandidate:
    """One flag set tried for a region, and what became of it."""

    name: str
    flags: tuple[str, ...]
    # warm median on the region's device (a run-off's in the first round's terms, search.py); None:
    # rejected before timing
    median_us: float | None
    max_abs_diff: float | None    # against the reference's output for the region
    rejected: str | None          # why (compile failure, crash, timeout, mismatch); None: it ran correctly
    # calls timed: fewer than the others' when it fell far behind the best and was pruned (probe.py)
    timed_calls: int = field(default=0, omit_default=True)
    # The earlier candidate whose module this one compiled to, byte for byte: not checked or timed
    # again, its figures are that one's (IREE 3.13 on CUDA: O3, vector distribution and igemm
    # give O2's module on a ResNet and a transformer encoder).
    same_as: str | None = field(default=None, omit_default=True)

    def pruned(self, of: "Tuning") -> bool:
        most = max((c.timed_calls for c in of.candidates), default=0)
        return 0 < self.timed_calls < most


@dataclass(frozen=True, slots=True)
class Narrowing:
    """``--tune-top``: how often each candidate a region was offered won on the learned model's
    training graphs, and its predicted time; only ``kept`` were compiled and timed (learn/narrow.py)."""

    model: str                                              # the model's training-set digest
    predicted: tuple[tuple[str, float], ...] = field(as_map=True)   # flag set -> predicted plan us
    kept: tuple[str, ...] = ()
    # flag set -> training graphs it was fastest on (empty in records written before wins counted)
    wins: tuple[tuple[str, int], ...] = field(as_map=True, default=())


@dataclass(frozen=True, slots=True)
class Tuning:
    """A region's flag search: the fastest candidate that matched the reference wins."""

    winner: str
    best_us: float | None         # the winner's median; None when no candidate ran correctly
    default_us: float | None      # the default flags' median; None when the default was rejected
    device: str                   # where the candidates were timed
    candidates: tuple[TuneCandidate, ...]
    narrowed: Narrowing | None = field(default=None, omit_default=True)

    @property
    def speedup(self) -> float | None:
        return self.default_us / self.best_us if self.default_us and self.best_us else None


class FlagPlan(enum.Enum):
    """Which plan per-segment tuning kept (``--tune-segments``)."""

    SINGLE = "single"    # each region one flag set (its own tuning's winner)
    MIXED = "mixed"      # large host regions cut into groups, each group its own winner


@dataclass(frozen=True, slots=True)
class SegmentGroup:
    """One group of key-node segments cut from a host region, and its own flag search."""

    region: str                  # its region in the mixed plan
    source: str                  # the region of the single-flag plan it was cut from
    segments: tuple[int, ...]    # the model's key-node segments it holds (every key node a cut: min 1 node)
    nodes: int
    flops: int
    tuning: Tuning               # candidates[0] is the baseline: the source region's winner


@dataclass(frozen=True, slots=True)
class SegmentTuning:
    """Per-segment flag choice: each group's winner and the two whole runs measured against each
    other (interleaved, one process, the chosen host runtime; a group boundary costs a call and
    that is in the mixed time). The mixed plan is kept only when it beats the single one by
    ``margin``."""

    groups: tuple[SegmentGroup, ...]
    single_us: float | None      # median whole run, every region one flag set; None: it did not run
    mixed_us: float | None       # median whole run of the mixed plan; None: it did not run
    kept: FlagPlan
    margin: float                # the fraction the mixed plan had to win by
    bound: int                   # candidates tried per group, the baseline included
    detail: str = ""             # why nothing was measured, when nothing was

    def lines(self) -> list[str]:
        """The report's section."""
        def us(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f} us"

        out = [f"per-segment tuning: kept the {self.kept.value}-flag plan: single {us(self.single_us)} vs mixed "
               f"{us(self.mixed_us)} (whole runs, medians; mixed must win by {self.margin:.0%}; "
               f"up to {self.bound} candidate(s) per group)" + (f"; {self.detail}" if self.detail else "")]
        for g in self.groups:
            t = g.tuning
            base = t.candidates[0].name if t.candidates else "-"
            speed = f"{t.speedup:.2f}x" if t.speedup else "-"
            span = f"{g.segments[0]}..{g.segments[-1]}" if len(g.segments) > 1 else str(g.segments[0])
            out.append(f"  {g.region} (from {g.source}; segments {span}; {g.nodes} nodes; "
                       f"{g.flops / 1e6:.2f} MFLOPs): {t.winner} {us(t.best_us)} vs {base} {us(t.default_us)} ({speed})")
        return out


@dataclass(frozen=True, slots=True)
class RegionRecord:
    """How one region came to be: the nodes the plan gave it, the estimate, and what was measured."""

    name: str
    planned_device: Device    # the partitioner's label: "accel" or "host"
    nodes: tuple[str, ...]
    compute_nodes: int
    flops: int
    estimated_us: float
    fallback: str | None      # why the accelerator compile failed, when it fell back to the host
    measured_us: float | None = field(default=None, omit_default=True)
    tuning: Tuning | None = field(default=None, omit_default=True)


@dataclass(frozen=True, slots=True)
class Machine:
    """Where the build ran and measured (timings in the record are this machine's)."""

    platform: str
    processor: str
    cores: int

    @classmethod
    def this(cls) -> "Machine":
        return cls(platform.platform(), _cpu_model(), os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class BuildRecord:
    opset: int                       # ONNX opset after upgrade; 0 for a PyTorch module
    folded_nodes: int
    options: Any                     # the resolved BuildOptions, as JSON (``aot tune`` rebuilds from them)
    partition: PartitionRecord
    host_reasons: tuple[tuple[str, str], ...] = field(as_map=True)   # (node, why it runs on the host)
    graph: tuple[GraphNode, ...] = field()
    regions: tuple[RegionRecord, ...] = field()
    machine: Machine = field()
    verification: Verification | None = field(default=None, omit_default=True)
    host_runtime_measured: tuple[tuple[str, float], ...] = field(default=(), as_map=True, omit_default=True)
    rewrites: tuple[Rewrite, ...] = field(default=(), omit_default=True)   # ops written out before planning
    segment_tuning: SegmentTuning | None = field(default=None, omit_default=True)   # --tune-segments only

    def region(self, name: str) -> RegionRecord:
        return next(r for r in self.regions if r.name == name)

    def with_measurements(self, per_region: dict[str, float], gate: Gate) -> "BuildRecord":
        """Measured times beside the estimates, and the measured gate's decision."""
        regions = tuple(replace(r, measured_us=round(per_region[r.name], 3)) if r.name in per_region else r
                        for r in self.regions)
        return replace(self, regions=regions, partition=replace(self.partition, gate=gate))

    def with_tuning(self, tunings: dict[str, Tuning]) -> "BuildRecord":
        return replace(self, regions=tuple(replace(r, tuning=tunings.get(r.name, r.tuning)) for r in self.regions))

    def to_json(self) -> dict[str, Any]:
        return {"record_schema": RECORD_SCHEMA, **codec.encode_fields(self)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "BuildRecord":
        found = d.get("record_schema") if isinstance(d, dict) else None
        if found != RECORD_SCHEMA:
            raise BundleError(f"build record has record_schema {found!r}; this aot reads {RECORD_SCHEMA}",
                              hint="rebuild the bundle with this version of aot")
        return codec.decode_fields(cls, d)

    def write(self, bundle: Path, name: str = RECORD) -> Path:
        return write_json(Path(bundle) / name, self.to_json())


def read(bundle: str | Path) -> BuildRecord | None:
    """The build record of a bundle (or of the build directory holding it); None for a bundle
    built before records existed. A record that is present but unreadable is an error."""
    import json

    path = bundle_dir(bundle) / RECORD
    if not path.exists():
        return None
    try:
        return BuildRecord.from_json(json.loads(path.read_text()))
    except BundleError as e:
        raise BundleError(f"{str(path)!r}: {e.message}", hint=e.hint) from e
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise BundleError(f"{str(path)!r} is malformed: {type(e).__name__}: {e}",
                          hint="rebuild the bundle with `aot build`") from e


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
