"""Progress of long runs (fuzzing): a bar on a terminal, plain lines in logs (CI)."""

from __future__ import annotations

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

