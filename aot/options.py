"""What a user can ask of a build: every setting and its default, in one place.

The CLI reads its defaults from ``BuildOptions()``; the pipeline reads nothing else. Internal
choices (which plan to compile, whether a region is compiled for the host) are plans, not options.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aot.partition.partitioner import PartitionOptions
from aot.partition.support import Overrides
from aot.target import Target


@dataclass(frozen=True, slots=True)
class BuildOptions:
    # Devices, parsed once. None: host only. The default Vulkan arch is Mesa lavapipe's (a
    # module compiled for another GPU's subgroup size returns silently wrong results there).
    accel: Target | None = Target.parse("vulkan")
    host: Target = Target.host()
    # The model
    name: str | None = None                  # model name in the manifest and stub (default: graph name)
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    constant_inputs: tuple[tuple[str, Any], ...] = ()  # (input name, number or nested list) baked in
    # Partitioning
    min_compute: int = 2                     # accelerator regions with fewer compute nodes go to the host
    policy: str = "greedy"                   # greedy | depth
    select: str = "all"                      # all | largest | threshold | largest+threshold | cost
    threshold: int = 0
    gate: bool = True
    cost_params: Path | None = None
    overrides: Overrides = Overrides()
    plan_file: Path | None = None            # build exactly this plan (validated first)
    # Compiling and checking
    accel_compile_timeout: float = 300.0     # past this an accelerator region falls back to the host
    verify: bool | None = None               # check accelerator regions on their device (None: when present)
    measure: bool = False                    # time regions on the real devices; gate on measurements
    dump_after: frozenset[str] = frozenset() # stages whose output goes to OUTPUT/build

    def partition_options(self) -> PartitionOptions:
        return PartitionOptions(self.accel.backend if self.accel else None, self.min_compute, self.overrides,
                                self.policy, self.select, self.threshold, self.gate, self.cost_params)

    def with_recipe(self, input_shapes: tuple[tuple[str, tuple[int, ...]], ...],
                    constant_inputs: tuple[tuple[str, Any], ...], name: str) -> "BuildOptions":
        """Apply a model's recipe (a zoo entry's static shapes and baked inputs); what the user
        set wins over the recipe."""
        return replace(self, name=self.name or name,
                       input_shapes=tuple({**dict(input_shapes), **dict(self.input_shapes)}.items()),
                       constant_inputs=tuple({**dict(constant_inputs), **dict(self.constant_inputs)}.items()))


DEFAULTS = BuildOptions()
