"""Regions on different devices that may run at the same time, and the runner that lets them.

The schedule is one topological order of the region graph. Two regions on different devices
overlap when neither reads, directly or through other regions, what the other writes: nothing
orders them, so while one device works on the first the other can work on the second.

The runner gives each device a lane: a thread that runs that device's regions in schedule order,
waiting before each one for the regions it reads from. A device runs one region at a time anyway,
so a lane per device loses nothing, and because every lane follows the schedule and the schedule
is topological, no lane can wait for a region that waits for it.

Pure Python and threading: IREE's ``VmContext.invoke`` releases the GIL while a module runs, so
two lanes really do run at once.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Mapping, Sequence


def waits(inputs: Mapping[str, Sequence[str]], outputs: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Region -> the regions whose outputs it reads (model inputs come from no region)."""
    producer = {v: region for region, vs in outputs.items() for v in vs}
    return {region: tuple(dict.fromkeys(producer[v] for v in vs if v in producer)) for region, vs in inputs.items()}


def overlapping(schedule: Sequence[str], waits_for: Mapping[str, Sequence[str]],
                device: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Pairs of regions, each in schedule order, on different devices with no path between them."""
    before: dict[str, set[str]] = {}   # region -> every region it depends on, directly or not
    for region in schedule:
        before[region] = set().union(*({w, *before[w]} for w in waits_for[region])) if waits_for[region] else set()
    return tuple((a, b) for i, a in enumerate(schedule) for b in schedule[i + 1:]
                 if device[a] != device[b] and a not in before[b])


def lanes(schedule: Sequence[str], device: Mapping[str, str]) -> tuple[tuple[str, ...], ...]:
    """The schedule split per device, each lane in schedule order; the first lane holds the first region."""
    by_device: dict[str, list[str]] = {}
    for region in schedule:
        by_device.setdefault(device[region], []).append(region)
    return tuple(map(tuple, by_device.values()))


def finish_time(schedule: Sequence[str], device: Mapping[str, str], waits_for: Mapping[str, Sequence[str]],
                duration: Mapping[str, float], one_lane: bool = False) -> float:
    """When the last region would finish if each device ran its lane as ``LaneRunner`` does, each
    region taking ``duration`` and no device slowing another (the bound overlap can reach).
    ``one_lane``: the devices compute on the same cores (an accelerator emulated on the host CPU),
    so nothing overlaps: the regions' durations add up in schedule order."""
    free: dict[str, float] = {}
    finish: dict[str, float] = {}
    for region in schedule:
        lane = "" if one_lane else device[region]
        start = max([free.get(lane, 0.0), *(finish[w] for w in waits_for[region])])
        finish[region] = free[lane] = start + duration[region]
    return max(finish.values(), default=0.0)


class LaneRunner:
    """Runs lanes of regions concurrently: the calling thread takes the first lane, a pool thread
    each other one. One runner serves every call of a session; calls may come from several threads."""

    def __init__(self, lanes_: tuple[tuple[str, ...], ...], waits_for: Mapping[str, Sequence[str]]) -> None:
        self.lanes = lanes_
        self._waits = dict(waits_for)
        self._pool = ThreadPoolExecutor(max_workers=max(len(lanes_) - 1, 1), thread_name_prefix="aot-lane")

    def run(self, run_region: Callable[[str], None]) -> None:
        """Run every region once. A failing region stops every lane before its next region; its
        error is raised once all lanes have stopped, so nothing still runs on the call's buffers."""
        done = {region: threading.Event() for lane in self.lanes for region in lane}
        failed = threading.Event()

        def run_lane(lane: tuple[str, ...]) -> None:
            try:
                for region in lane:
                    for w in self._waits[region]:
                        done[w].wait()
                    if failed.is_set():
                        return
                    run_region(region)
                    done[region].set()
            except BaseException:
                failed.set()
                for event in done.values():   # wake every waiting lane so that it sees the failure
                    event.set()
                raise

        others: list[Future[None]] = [self._pool.submit(run_lane, lane) for lane in self.lanes[1:]]
        errors: list[BaseException] = []
        try:
            run_lane(self.lanes[0])
        except BaseException as e:
            errors.append(e)
        for f in others:
            try:
                f.result()
            except BaseException as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def close(self) -> None:
        self._pool.shutdown(wait=True)
