"""The build's progress printer: counted steps drive a bar on a terminal and stay plain lines in
a log; every other line is printed as it is, and a bar never swallows one."""

from __future__ import annotations

import io

from aot.tune.progress import StepLines

STEPS = ["tune     [1/3, ETA 4s] r0 compiled O2 in 2.0s", "tune     [2/3, ETA 2s] r0 checked O2: ok",
         "tune     [3/3, ETA 0s] r0 timed: O2 1 ms"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_log_every_line_is_printed_as_it_is():
    log = io.StringIO()
    printer = StepLines(log)
    for line in ["tune     compiling 1 candidate(s)", *STEPS, "tune     r0: O2 (1.10x the default)"]:
        printer(line)
    printer.close()
    assert log.getvalue().splitlines() == ["tune     compiling 1 candidate(s)", *STEPS, "tune     r0: O2 (1.10x the default)"]


def test_on_a_terminal_the_steps_are_a_bar_and_other_lines_still_print():
    term = _Terminal()
    printer = StepLines(term)
    printer("tune     compiling 1 candidate(s)")
    for line in STEPS[:2]:
        printer(line)
    assert printer._bar is not None                   # a bar, not lines, while steps are left
    printer(STEPS[2])
    assert printer._bar is None                       # the last step closes it
    printer("tune     r0: O2 (1.10x the default)")
    out = term.getvalue()
    assert "tune     compiling 1 candidate(s)" in out and "tune     r0: O2 (1.10x the default)" in out
    assert "3/3" in out and "[1/3, ETA 4s]" not in out   # the bar's count, not the raw step lines
