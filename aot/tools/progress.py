"""Progress of long runs (fuzzing, tuning): a bar on a terminal, plain lines in logs (CI)."""

from __future__ import annotations

import re
import sys
from typing import Any


class Progress:
    """``with Progress("fuzz", total) as p: p.advance(note, important=False)``. On a terminal a
    rich bar; otherwise one line per ``every`` steps and for every ``important`` step."""

    def __init__(self, label: str, total: int, every: int = 25, stream: Any = None) -> None:
        self.label, self.total, self.every, self.done = label, total, every, 0
        self.stream = stream or sys.stderr
        self._bar: Any = None
        if self.stream.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn

            self._bar = Bar(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                            TextColumn("{task.description}"), transient=False)
            self._task = self._bar.add_task("", total=total)

    def __enter__(self) -> "Progress":
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self, note: str = "", important: bool = False) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=note[:60])
            if important:
                self._bar.console.print(f"{self.label} {note}")
        elif important or self.done % self.every == 0 or self.done == self.total:
            print(f"{self.label} {self.done}/{self.total} {note}", file=self.stream, flush=True)


class StepLines:
    """The build's progress printer. Lines of counted steps (``tune     [3/33, ETA 1m20s] ...``,
    aot/tune/progress.py) drive a rich bar with its own ETA on a terminal; anywhere else, and for
    every other line, the line is printed as it is (CI logs keep each step)."""

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
