"""The rewrites every llvm-cpu region gets after outlining, in order, and their version.

``LOWERING_VERSION`` names what they produce. A measured plan's key holds it (learn/key.py), so a
cost-database row timed before a rewrite changed the code its plans compile to is not reused as
if it were today's: the key covers the graph, the plan, the flags and the compiler, and without
this nothing would tell the two modules apart (stop 42's direct convolutions changed Basic Pitch's
modules under unchanged keys). Bump it with any change here, in depthwise.py or in direct_conv.py
that changes the MLIR a region compiles to; tests/lower/test_host_lowering.py records the lowered
MLIR's digest of a fixture per version and fails until the bump is made.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from aot.lower.depthwise import CHANNELS_LAST_REASON, Lowering, depthwise_body, rewrite_ops
from aot.lower.direct_conv import DIRECT_REASON, direct_body

if TYPE_CHECKING:
    from aot.lower.outline import OutlinedRegion

# 1: depthwise convolutions channels-last, then few-output-channel convolutions direct.
LOWERING_VERSION = 1
# Depthwise first: a one-channel convolution is depthwise, and lowered channels-last.
HOST_LOWERINGS: tuple[tuple[Lowering, str], ...] = ((depthwise_body, CHANNELS_LAST_REASON),
                                                    (direct_body, DIRECT_REASON))


def lower(outlined: tuple["OutlinedRegion", ...], host: frozenset[str]
          ) -> tuple[tuple["OutlinedRegion", ...], tuple[tuple[str, int], ...]]:
    """Each region in ``host`` (compiled for llvm-cpu) rewritten, in one parse of its MLIR; and
    (the build record's reason, how many ops it rewrote in all) per rewrite."""
    bodies = tuple(body for body, _ in HOST_LOWERINGS)
    lowered, totals = [], [0] * len(bodies)
    for o in outlined:
        mlir, counts = rewrite_ops(o.mlir, *bodies) if o.name in host else (o.mlir, (0,) * len(bodies))
        lowered.append(dataclasses.replace(o, mlir=mlir) if any(counts) else o)
        totals = [t + c for t, c in zip(totals, counts)]
    return tuple(lowered), tuple((reason, n) for (_, reason), n in zip(HOST_LOWERINGS, totals))
