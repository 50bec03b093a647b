"""Ladders: the static sizes a symbolic dimension is compiled at, from their textual forms.

    1,2,4,8                 explicit sizes
    ratio:MAX:1.0,0.8,0.6   MAX, 0.8*MAX, 0.6*MAX
    linear:MAX:N            MAX/N, 2*MAX/N, ..., MAX
    @sizes.txt              the largest size observed (a file of sizes, one per line or comma separated)
    @sizes.txt*0.8          80% of it; MAX in the two forms above may be written the same way

Fractional sizes round up, so a ladder never shrinks below what its formula asks for; sizes are
sorted and deduplicated.
"""

from __future__ import annotations

import math
from pathlib import Path

from aot.errors import ModelError

FORMS = "1,2,4,8 | ratio:MAX:1.0,0.8,0.6 | linear:MAX:N | @observed.txt[*0.8]"


def parse(text: str, what: str = "ladder") -> tuple[int, ...]:
    """The ascending sizes ``text`` describes; ModelError naming ``what`` when it is malformed."""
    try:
        kind, _, rest = text.partition(":")
        if kind == "ratio":
            top, _, ratios = rest.partition(":")
            sizes = [math.ceil(_max(top) * float(r)) for r in ratios.split(",")]
        elif kind == "linear":
            top, _, steps = rest.partition(":")
            n, high = int(steps), _max(top)
            if n < 1:
                raise ValueError("N must be at least 1")
            sizes = [math.ceil(high * k / n) for k in range(1, n + 1)]
        elif text.startswith("@"):
            sizes = [math.ceil(_max(text))]
        else:
            sizes = [int(s) for s in text.split(",")]
    except (ValueError, OSError) as e:
        raise ModelError(f"bad {what} {text!r}: {e}", hint=f"write it as {FORMS}") from None
    if not sizes or min(sizes) < 1:
        raise ModelError(f"bad {what} {text!r}: sizes must be at least 1", hint=f"write it as {FORMS}")
    return tuple(sorted(set(sizes)))


def _max(text: str) -> float:
    """``MAX``: a number, or the largest observed size in a file, times an optional ratio."""
    if not text.startswith("@"):
        return float(text)
    path, _, ratio = text[1:].partition("*")
    observed = [int(s) for s in Path(path).read_text().replace(",", " ").split()]
    if not observed:
        raise ValueError(f"{path!r} lists no sizes")
    return max(observed) * (float(ratio) if ratio else 1.0)
