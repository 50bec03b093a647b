"""Per-candidate progress of a tuning run: one line per candidate compiled, checked and timed,
each with how many of the run's steps are done and when the rest should be, from the pace so far.
Lines go through the build's progress callback, so a log gets them as they happen; on a terminal
the CLI's printer (``StepLines``) draws them as a rich bar."""

from __future__ import annotations

import re
import sys
import threading
import time
from typing import Any, Callable


class Steps:
    """``steps.done("r0 compiled data-tiling in 14.2s")``: prints ``tune     [3/33, ETA 1m20s] ...``."""

    def __init__(self, total: int, progress: Callable[[str], None],
                 clock: Callable[[], float] = time.perf_counter, label: str = "tune") -> None:
        self.total, self.count, self.label = total, 0, label
        self._progress, self._clock = progress, clock
        self._start = clock()
        self._lock = threading.Lock()   # compiles finish on pool threads

    def done(self, what: str) -> None:
        with self._lock:
            self.count += 1
            elapsed = self._clock() - self._start
            left = elapsed / self.count * (self.total - self.count) if self.count < self.total else 0.0
            self._progress(f"{self.label:<8} [{self.count}/{self.total}, ETA {eta_text(left)}] {what}")


def eta_text(seconds: float) -> str:
    whole = int(round(seconds))
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


class StepLines:
    """The build's progress printer. Lines of counted steps (``Steps``: ``tune     [3/33, ETA 1m20s]
    ...``) drive a rich bar with its own ETA on a terminal; anywhere else, and for every other line,
    the line is printed as it is (CI logs keep each step)."""

    _STEP = re.compile(r"^(\S+)\s+\[(\d+)/(\d+), ETA [^\]]*\] (.*)$")

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, line: str) -> None:
        step = self._STEP.match(line) if self.stream.isatty() else None
        if step is None:
            self.close()
            print(line, file=self.stream, flush=True)
            return
        label, done, total, what = step[1], int(step[2]), int(step[3]), step[4]
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn

            self._bar = Bar(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                            TextColumn("{task.description}"), console=Console(file=self.stream))
            self._task = self._bar.add_task("", total=total)
            self._bar.start()
        self._bar.update(self._task, completed=done, total=total, description=what[:70])
        if done >= total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
