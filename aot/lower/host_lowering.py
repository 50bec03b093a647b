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

from typing import TYPE_CHECKING

from aot.lower.depthwise import CHANNELS_LAST_REASON, Lowering, depthwise_body, lower_host_regions
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
    """Each region in ``host`` rewritten; and (the build record's reason, count) per rewrite."""
    lowered, counts = lower_host_regions(outlined, host, *(body for body, _ in HOST_LOWERINGS))
    return lowered, tuple((reason, n) for (_, reason), n in zip(HOST_LOWERINGS, counts))
