"""The order search (``--order search``): per key-node segment, candidate groupings of its nodes
into regions and orders to issue them in, each scored by the lane model; the winners linked.

One IREE module runs a region whole, so what a plan can still change once every node has its
device is which nodes share a region and the order regions are issued in across the device lanes
(``runtime/lanes.py``). Why per segment: every node of a segment descends from the previous
segment's key node, whose region finishes after every region before it, so a segment starts with
every lane idle and its time adds to the others' (``tests/partition/test_order_search.py`` checks it).
Each segment is searched alone, and the search stays linear in the model's size.

A segment's candidates: the greedy regions cut at its bounds (the baseline); for each of up to
``budget`` topological orders of its nodes (all of them when there are no more, else the list,
depth-first and post-order orders plus seeded random ones, as XLA's memory scheduler tries list,
DFS and post-order), the maximal same-device runs of that order, and the same runs fused wherever
no cycle forms; each grouping issued in its greedy order and in every other order up to the
budget. At most ``budget`` distinct plans (by digest) are scored per segment. Devices stay as the
partition chose them, and a candidate that breaks a partition rule the baseline keeps (a
"specific" result leaving its region, an accelerator region too small) is vetoed. Cutting at
segment bounds costs region calls, so schedule-adjacent regions of one device across a bound
fuse where that is faster; the greedy plan is kept unless the linked one is strictly faster.
Deterministic: seeded and count-bounded.

Measured scoring (``--order search --measure``, ``checks/measured_order.py``): ``candidate_plans``
names a few plans worth timing (greedy's and, per segment, the next-best by estimate); the build
times each distinct region (device + node set) once on its device, and ``search`` runs again with
those durations (``measured``). A region nobody timed keeps its estimate, scaled by how far the
timed regions of its device were from theirs: raw estimates beside measured times would favour
whichever plan has the fewest measured regions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from dataclasses import dataclass
from statistics import median
from typing import Callable, Iterable, Iterator, Mapping

from aot.frontend.graph import GraphView
from aot.partition import order, regions
from aot.partition.cost import CostModel, node_bytes, node_dispatches, node_flops, plan_cost
from aot.partition.order import OrderMode
from aot.partition.plan import Plan, Region, validate
from aot.partition.segments import Segment
from aot.partition.support import Device, Group, Groups
from aot.runtime import lanes

SEED = 27                # random node orders: random.Random(SEED + segment index)
ENUMERATE_MAX_NODES = 200  # larger segments (region graphs) have more orders than any budget: sample them
# regions.fuse tries every pair of regions for a path between them (quadratic in regions, times the
# edges): past this many runs one fusion costs seconds, and an order that scatters a segment
# into so many runs is rarely the one that wins.
FUSE_MAX_RUNS = 48

Moves = Callable[[Groups], Mapping[str, str]]   # the partition rules: node -> why it must move
Schedule = tuple[Group, ...]                    # regions in the order they are issued
RegionKey = tuple[Device, frozenset[str]]       # a region as timed: its device and node set


@dataclass(frozen=True, slots=True)
class SegmentScore:
    """What the search did in one segment (times are the segment's lane time, transfers aside)."""

    index: int
    plans_scored: int     # distinct (grouping, order) plans the lane model scored
    greedy_us: float      # the greedy plan's regions cut at the segment's bounds
    chosen_us: float      # the winner


@dataclass(frozen=True, slots=True)
class MeasuredRegion:
    """One region timed alone on its device (median, microseconds): what ``--measure`` feeds the
    search. Identified by device and node set, not by name: names differ from plan to plan."""

    device: Device
    nodes: tuple[str, ...]
    us: float

    @property
    def key(self) -> RegionKey:
        return self.device, frozenset(self.nodes)


@dataclass(frozen=True, slots=True)
class MeasuredScoring:
    """The search scored again with measured region durations (``--order search --measure``)."""

    plans_timed: int                       # candidate plans compiled and timed region by region
    regions_timed: int                     # distinct regions (device + nodes), each timed once
    scored_measured: int                   # distinct regions the scoring took a measured time for
    scored_estimated: int                  # ... and an estimate for (scaled per device)
    segments: tuple[SegmentScore, ...]     # per segment, greedy vs chosen with measured durations
    greedy_us: float                       # whole plan: measured lanes + estimated transfers
    searched_us: float                     # of the linked winners (kept only if faster and no rule breaks)
    kept: OrderMode                        # what the measured scoring chose
    changed: bool                          # it chose another plan than the estimates did
    seconds: float                         # compiling, timing and scoring the candidates
    rounds: int = 1                        # scorings: the winner's untimed regions timed, then again
    one_lane: bool = False                 # the devices share the host's cores: no lane overlaps another
    hop_us: float | None = None            # one transfer's cost fitted to the candidates' whole runs

    def verdict(self) -> str:
        """Greedy's and the searched plan's scores, and which was kept (and why, when slower)."""
        vetoed = self.kept is OrderMode.GREEDY and self.searched_us < self.greedy_us
        return (f"greedy {self.greedy_us:.1f} us, searched {self.searched_us:.1f} us; kept the {self.kept.value} plan"
                + (" (the searched plan breaks a partition rule)" if vetoed else ""))


@dataclass(frozen=True, slots=True)
class OrderSearch:
    """The search's outcome, as the build record states it."""

    budget: int
    segments: tuple[SegmentScore, ...]
    greedy_us: float      # whole-plan estimate of the greedy plan (plan_cost, transfers included)
    searched_us: float    # of the linked winners
    kept: OrderMode       # SEARCH only when strictly faster and accepted by the partition rules
    fused_bounds: int     # segment bounds whose two regions were fused back into one
    # --measure: both plans built and timed on the devices (medians, fair harness); the faster kept.
    measured_greedy_us: float | None = None
    measured_searched_us: float | None = None
    # --measure: the search scored again with each candidate region timed on its device.
    measured_scoring: MeasuredScoring | None = None

    def measured(self, greedy_us: float, searched_us: float) -> "OrderSearch":
        """This search with both plans' measured times; SEARCH stays only if measured faster."""
        kept = OrderMode.SEARCH if self.kept is OrderMode.SEARCH and searched_us < greedy_us else OrderMode.GREEDY
        return dataclasses.replace(self, measured_greedy_us=greedy_us, measured_searched_us=searched_us, kept=kept)


class _Scorer:
    """Lane time of a schedule of regions, from per-node FLOPs and bytes counted once, or from
    ``measured`` durations where a region was timed. ``one_lane``: the measured devices share the
    host's cores (lavapipe), so the lanes do not overlap (the estimates model a real GPU and do)."""

    def __init__(self, view: GraphView, cost: CostModel, measured: Iterable[MeasuredRegion] = (),
                 one_lane: bool = False) -> None:
        self.view, self.cost = view, cost
        self.flops = {n.name: node_flops(n, view) for n in view.nodes}
        self.nbytes = {n.name: node_bytes(n, view) for n in view.nodes}
        self.dispatches = {n.name: node_dispatches(n, view) for n in view.nodes}
        self.position = {n.name: i for i, n in enumerate(view.nodes)}
        self.measured = {t.key: t.us for t in measured}
        self.one_lane = one_lane and bool(self.measured)
        ratios: dict[Device, list[float]] = {}
        for (dev, nodes), us in self.measured.items():
            ratios.setdefault(dev, []).append(us / self.estimate_us(Group(dev, tuple(nodes))))
        self.scale = {dev: median(rs) for dev, rs in ratios.items()}
        self.hits: set[RegionKey] = set()     # distinct regions scored by measurement
        self.misses: set[RegionKey] = set()   # ... by (scaled) estimate, while some were measured

    def estimate_us(self, group: Group) -> float:
        return self.cost.device(group.device).time_us(sum(self.flops[n] for n in group.nodes),
                                                      sum(self.nbytes[n] for n in group.nodes),
                                                      max(sum(self.dispatches[n] for n in group.nodes), 1))

    def region_us(self, group: Group) -> float:
        if not self.measured:
            return self.estimate_us(group)
        key = (group.device, frozenset(group.nodes))
        if (us := self.measured.get(key)) is not None:
            self.hits.add(key)
            return us
        self.misses.add(key)
        return self.estimate_us(group) * self.scale.get(group.device, 1.0)

    def makespan(self, schedule: Schedule) -> float:
        """When the last region finishes, regions outside ``schedule`` counted as done."""
        owner = {n: str(i) for i, g in enumerate(schedule) for n in g.nodes}
        names = [str(i) for i in range(len(schedule))]
        waits = {name: tuple({owner[p] for n in g.nodes for p in self.view.predecessors(n)
                              if owner.get(p, name) != name})
                 for name, g in zip(names, schedule)}
        return lanes.finish_time(names, {name: g.device for name, g in zip(names, schedule)}, waits,
                                 {name: self.region_us(g) for name, g in zip(names, schedule)}, self.one_lane)

    def group(self, device: Device, nodes: Iterable[str]) -> Group:
        """A region with its nodes in the view's (topological) order: one spelling per grouping."""
        return Group(device, tuple(sorted(nodes, key=self.position.__getitem__)))


def digest(schedule: Schedule) -> str:
    """One plan of a segment: its regions' devices and nodes in issue order."""
    text = json.dumps([[str(g.device), list(g.nodes)] for g in schedule])
    return hashlib.sha256(text.encode()).hexdigest()


def search(view: GraphView, plan: Plan, segs: tuple[Segment, ...], cost: CostModel, budget: int,
           moves: Moves, measured: Iterable[MeasuredRegion] = (), one_lane: bool = False,
           hop_us: float | None = None) -> tuple[Plan, OrderSearch]:
    """The best plan found for ``plan``'s devices, and what the search did. ``moves``: the
    partition rules' verdict on a grouping (nothing: it stands). ``measured``: region durations
    timed on the devices, used in place of the estimates where they exist (the outcome's times
    are then the measured scoring's). ``one_lane``: those were timed on devices sharing the host's
    cores (_Scorer). ``hop_us``: one transfer's measured cost (``fit_hop_us``), in place of the cost
    model's in the whole-plan comparison."""
    if hop_us is not None:
        cost = dataclasses.replace(cost, hop_us=hop_us)
    scorer = _Scorer(view, cost, measured, one_lane)
    device = {n: r.device for r in plan.regions for n in r.nodes}
    greedy = tuple(Group(r.device, r.nodes) for r in map(plan.region, plan.schedule))
    linked: list[Group] = []
    bounds: list[int] = []
    scores: list[SegmentScore] = []
    for seg in segs:
        ranked, score = _search_segment(view, seg, greedy, device, scorer, budget, moves)
        linked += ranked[0]
        bounds.append(len(linked))
        scores.append(score)
    linked, fused = _fuse_bounds(linked, bounds[:-1], scorer)
    searched = _plan_of(linked, plan)
    validate(searched, view)
    greedy_us, searched_us = (_whole_us(p, view, cost, scorer) for p in (plan, searched))
    better = searched_us < greedy_us and not moves(list(linked))
    kept = OrderMode.SEARCH if better else OrderMode.GREEDY
    # The stage that timed the regions fills in what only it knows (plans, seconds, changed).
    scoring = MeasuredScoring(0, len(scorer.measured), len(scorer.hits), len(scorer.misses), tuple(scores),
                              greedy_us, searched_us, kept, False, 0.0,
                              one_lane=scorer.one_lane, hop_us=hop_us) if scorer.measured else None
    outcome = OrderSearch(budget, tuple(scores), greedy_us, searched_us, kept, fused, measured_scoring=scoring)
    return (searched if better else plan), outcome


def candidate_plans(view: GraphView, plan: Plan, segs: tuple[Segment, ...], cost: CostModel, budget: int,
                    moves: Moves, count: int) -> tuple[Plan, ...]:
    """Up to ``count`` distinct plans worth timing, greedy's ``plan`` first: the k-th links each
    segment's k-th best schedule by estimate (a segment with fewer keeps its last), bounds unfused
    (a fused bound is a region no candidate would time). Deterministic, as ``search`` is."""
    scorer = _Scorer(view, cost)
    device = {n: r.device for r in plan.regions for n in r.nodes}
    greedy = tuple(Group(r.device, r.nodes) for r in map(plan.region, plan.schedule))
    per_segment = [_search_segment(view, seg, greedy, device, scorer, budget, moves)[0] for seg in segs]
    plans = {plan.digest(): plan}
    for k in range(max(map(len, per_segment), default=0)):
        if len(plans) >= count:
            break
        linked = _plan_of([g for ranked in per_segment for g in ranked[min(k, len(ranked) - 1)]], plan)
        validate(linked, view)
        plans.setdefault(linked.digest(), linked)
    return tuple(plans.values())


def fit_hop_us(view: GraphView, cost: CostModel, measured: Iterable[MeasuredRegion], one_lane: bool,
               runs: Iterable[tuple[Plan, float]]) -> float | None:
    """The fixed cost of one cross-device transfer that best explains whole runs (``runs``: plans
    and their measured whole-run times) beyond their regions' measured lanes and the transfers'
    per-byte estimate: least squares through the origin over the plans that cross devices, never
    negative; None when none does. What the region-by-region timing cannot see (a copy between
    the devices, a queue submission per hop) is what the whole runs hold beyond it."""
    scorer = _Scorer(view, cost, measured, one_lane)
    weighted, squares = 0.0, 0
    for plan, whole_us in runs:
        if not math.isfinite(whole_us):   # max(0.0, nan) below would hide it as a free transfer
            raise ValueError(f"a whole run of the measured plans took {whole_us} us")
        c = plan_cost({r.name: Group(r.device, r.nodes) for r in plan.regions}, view, cost, plan.schedule,
                      region_us=scorer.region_us, one_lane=scorer.one_lane)
        if c.hops:
            per_byte_us = c.transfer_us - c.hops * cost.hop_us
            weighted += (whole_us - (c.total_us - c.transfer_us) - per_byte_us) * c.hops
            squares += c.hops * c.hops
    return round(max(0.0, weighted / squares), 3) if squares else None


def _plan_of(linked: Iterable[Group], plan: Plan) -> Plan:
    groups = list(linked)
    return Plan(tuple(Region(f"r{i}", g.device, g.nodes) for i, g in enumerate(groups)),
                tuple(f"r{i}" for i in range(len(groups))), plan.reasons)


def _whole_us(plan: Plan, view: GraphView, cost: CostModel, scorer: _Scorer) -> float:
    """The plan's lanes (the scorer's region times) plus its transfers (estimated)."""
    return plan_cost({r.name: Group(r.device, r.nodes) for r in plan.regions}, view, cost, plan.schedule,
                     region_us=scorer.region_us if scorer.measured else None, one_lane=scorer.one_lane).total_us


def _search_segment(view: GraphView, seg: Segment, greedy: Schedule, device: Mapping[str, Device],
                    scorer: _Scorer, budget: int, moves: Moves) -> tuple[list[Schedule], SegmentScore]:
    """The segment's allowed schedules, best first (the baseline when none beats it), and its score."""
    members = set(seg.nodes)
    baseline = tuple(Group(g.device, tuple(n for n in g.nodes if n in members)) for g in greedy
                     if members.intersection(g.nodes))
    outside = [Group(g.device, rest) for g in greedy if (rest := tuple(n for n in g.nodes if n not in members))]

    def broken(schedule: Schedule) -> set[str]:
        return members & moves([*outside, *schedule]).keys()

    scored: dict[str, tuple[float, int, Schedule]] = {}
    for candidate in _candidates(view, seg, baseline, device, scorer, budget):
        key = digest(candidate)
        if key not in scored:
            scored[key] = (scorer.makespan(candidate), len(scored), candidate)
            if len(scored) >= budget:
                break
    base_us, _, _ = scored[digest(baseline)]
    allowed = broken(baseline)   # what the cut at the bounds breaks already is the bounds' doing
    ranked = sorted(scored.values(), key=lambda t: (t[0], t[1]))   # fastest, then first generated
    ok = [(us, schedule) for us, _, schedule in ranked if broken(schedule) <= allowed] or [(base_us, baseline)]
    return [schedule for _, schedule in ok], SegmentScore(seg.index, len(scored), round(base_us, 3), round(ok[0][0], 3))


def _candidates(view: GraphView, seg: Segment, baseline: Schedule, device: Mapping[str, Device],
                scorer: _Scorer, budget: int) -> Iterator[Schedule]:
    """Plans for one segment, most promising first; the caller stops at its budget."""
    yield baseline
    sub = GraphView.build([view.node(n) for n in seg.nodes], [], [], view.values)
    groupings: list[Schedule] = [baseline]
    for nodes in _node_orders(sub, budget, random.Random(SEED + seg.index)):
        runs: list[Group] = []
        for n in nodes:
            if runs and runs[-1].device == device[n]:
                runs[-1] = Group(device[n], (*runs[-1].nodes, n))
            else:
                runs.append(Group(device[n], (n,)))
        spelled = tuple(scorer.group(g.device, g.nodes) for g in runs)
        yield spelled                                      # the runs in the order that made them
        groupings.append(spelled)
        if len(spelled) <= FUSE_MAX_RUNS:
            fused = tuple(regions.fuse(sub, list(spelled)))
            yield _greedy_order(fused, sub)
            groupings.append(fused)
    for grouping in groupings:
        yield from _orders(grouping, sub, budget)


def _edges(groups: Schedule, sub: GraphView) -> dict[str, set[str]]:
    owner = {n: str(i) for i, g in enumerate(groups) for n in g.nodes}
    edges: dict[str, set[str]] = {str(i): set() for i in range(len(groups))}
    for n, r in owner.items():
        for p in sub.predecessors(n):
            if owner[p] != r:
                edges[owner[p]].add(r)
    return edges


def _greedy_order(groups: Schedule, sub: GraphView) -> Schedule:
    position = {n.name: i for i, n in enumerate(sub.nodes)}
    names = {str(i): g for i, g in enumerate(groups)}
    issued = order.schedule({k: g.device for k, g in names.items()}, _edges(groups, sub),
                            {k: position[g.nodes[0]] for k, g in names.items()})
    return tuple(names[k] for k in issued)


def _orders(groups: Schedule, sub: GraphView, limit: int) -> Iterator[Schedule]:
    if len(groups) > ENUMERATE_MAX_NODES:   # the walk recurses once per region
        return
    names = [str(i) for i in range(len(groups))]
    for issued in order.enumerate_orders(names, _edges(groups, sub), limit):
        yield tuple(groups[int(k)] for k in issued)


def _node_orders(sub: GraphView, budget: int, rng: random.Random) -> list[tuple[str, ...]]:
    """Every topological order when there are at most ``budget``; else list, DFS, post-order and
    random ones, ``budget`` distinct at most."""
    if len(sub.nodes) <= ENUMERATE_MAX_NODES:
        every = order.enumerate_node_orders(sub, budget + 1)
        if len(every) <= budget:
            return every
    picks = [order.kahn_order(sub, lifo=False), order.kahn_order(sub, lifo=True), order.post_order(sub)]
    for _ in range(4 * budget):
        if len(dict.fromkeys(picks)) >= budget:
            break
        picks.append(order.kahn_order(sub, rng=rng))
    return list(dict.fromkeys(picks))[:budget]


def _fuse_bounds(linked: list[Group], bounds: list[int], scorer: _Scorer) -> tuple[list[Group], int]:
    """Fuse the last region before a segment bound with the first after it, both on one device,
    where the lane model says it is faster. Schedule-adjacent regions never close a cycle: a path
    between them would pass a region issued in between."""
    fused = 0
    for b in sorted(bounds, reverse=True):   # from the end: earlier bounds keep their indices
        before, after = linked[b - 1], linked[b]
        if before.device != after.device:
            continue
        trial = [*linked[:b - 1], scorer.group(before.device, (*before.nodes, *after.nodes)), *linked[b + 1:]]
        if scorer.makespan(tuple(trial)) < scorer.makespan(tuple(linked)):
            linked, fused = trial, fused + 1
    return linked, fused
