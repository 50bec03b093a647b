"""Per-candidate progress of a tuning run: one line per candidate compiled, checked and timed,
each with how many of the run's steps are done and when the rest should be, from the pace so far.
Lines go through the build's progress callback, so a log gets them as they happen."""

from __future__ import annotations

import threading
import time
from typing import Callable


class Steps:
    """``steps.done("r0 compiled data-tiling in 14.2s")``: prints ``tune     [3/33, ETA 1m20s] ...``."""

    def __init__(self, total: int, progress: Callable[[str], None],
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.total, self.count = total, 0
        self._progress, self._clock = progress, clock
        self._start = clock()
        self._lock = threading.Lock()   # compiles finish on pool threads

    def done(self, what: str) -> None:
        with self._lock:
            self.count += 1
            elapsed = self._clock() - self._start
            left = elapsed / self.count * (self.total - self.count) if self.count < self.total else 0.0
            self._progress(f"tune     [{self.count}/{self.total}, ETA {eta_text(left)}] {what}")


def eta_text(seconds: float) -> str:
    whole = int(round(seconds))
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"
