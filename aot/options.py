"""What a user can ask of a build: every setting and its default, in one place, and the textual
forms the CLI accepts for them.

The CLI reads its defaults from ``BuildOptions()``; the pipeline reads nothing else. Internal
choices (which plan to compile, whether a region is compiled for the host) are plans, not options.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from aot.errors import ModelError
from aot.partition.partitioner import PartitionOptions
from aot.partition.support import Overrides
from aot.runtime.target import Target


@dataclass(frozen=True, slots=True)
class BuildOptions:
    # Devices, parsed once. None: host only. The default Vulkan arch is Mesa lavapipe's (a
    # module compiled for another GPU's subgroup size returns silently wrong results there).
    accel: Target | None = Target.parse("vulkan")
    host: Target = Target.host()
    # The model
    name: str | None = None                  # model name in the manifest and stub (default: graph name)
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    example_inputs: tuple[tuple[str, tuple[int, ...], str], ...] = ()  # a torch module's: (name, shape, dtype)
    constant_inputs: tuple[tuple[str, Any], ...] = ()  # (input name, number or nested list) baked in
    index_guards: bool = True                # guard indices computed in the graph (frontend/indices.py)
    # Shape buckets (aot/buckets): symbolic dimensions compiled at a ladder of sizes
    batch_buckets: str = "1"                 # the ladder of every batch-like dimension (buckets/ladder.py forms)
    dim_ladders: tuple[tuple[str, str], ...] = ()       # (symbol, ladder): other dimensions (or the batch's)
    pad_values: tuple[tuple[str, float], ...] = ()      # (input, value) padding fills with; default 0
    padding_tolerances: tuple[tuple[str, float], ...] = ()  # (symbol, max abs diff) accepted from padding
    fallback: str = "none"                   # "dynamic": also a host module with the symbolic dims dynamic
    # Partitioning
    min_compute: int = 2                     # accelerator regions with fewer compute nodes go to the host
    policy: str = "greedy"                   # a registered policy (partition/policies.py): greedy, depth
    select: str = "all"                      # all | largest | threshold | largest+threshold | cost
    threshold: int = 0
    gate: bool = True
    cost_params: Path | None = None
    overrides: Overrides = Overrides()
    plan_file: Path | None = None            # build exactly this plan (validated first)
    # Compiling and checking
    accel_compile_timeout: float = 300.0     # past this an accelerator region falls back to the host (the
                                             # SPIR-V pipeline took minutes on some regions)
    verify: bool | None = None               # check accelerator regions on their device (None: when present)
    measure: bool = False                    # time regions on the real devices; gate on measurements
    tune: bool = False                       # search each region's compile flags and the host runtime
    tune_repeats: int = 20                   # timed calls per tuning candidate (warm, interleaved)
    cluster: str | None = None               # a Dask scheduler address: compile jobs run there
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


def parse_constant(text: str) -> tuple[str, np.ndarray]:
    """Parse ``name=16000``, ``name=0,2`` (1-D) or ``name=@file.npy`` as given to ``--const-input``."""
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise ModelError(f"bad --const-input {text!r}", hint="write it as NAME=16000, NAME=0,2 or NAME=@values.npy")
    if value.startswith("@"):
        try:
            return name, np.load(value[1:], allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ModelError(f"--const-input {name}: cannot read {value[1:]!r}: {e}") from e
    try:
        parts = [float(v) if any(c in v for c in ".eE") or v.lower() in ("nan", "inf", "-inf") else int(v)
                 for v in value.split(",")]
    except ValueError:
        raise ModelError(f"bad --const-input {text!r}: {value!r} is not a number list",
                         hint="write it as NAME=16000, NAME=0,2 or NAME=@values.npy") from None
    return name, np.array(parts[0] if len(parts) == 1 and "," not in value else parts)


def parse_pair(text: str, flag: str, form: str) -> tuple[str, str]:
    """``NAME=VALUE`` as the repeated flags take it (the name may hold '='; the value may not)."""
    name, sep, value = text.rpartition("=")
    if not sep or not name or not value:
        raise ModelError(f"bad {flag} {text!r}", hint=f"write it as {form}")
    return name, value


def parse_number(text: str, flag: str, form: str) -> tuple[str, float]:
    name, value = parse_pair(text, flag, form)
    try:
        return name, float(value)
    except ValueError:
        raise ModelError(f"bad {flag} {text!r}: {value!r} is not a number", hint=f"write it as {form}") from None


def parse_example_input(text: str) -> tuple[str, tuple[int, ...], str]:
    """Parse ``name=1x3x224x224`` or ``name=1x16:int64`` as given to ``--example-input``."""
    spec, colon, dtype = text.partition(":")
    if colon and not dtype.isidentifier():
        raise ModelError(f"bad --example-input {text!r}", hint="write it as NAME=1x3x224x224 or NAME=1x16:int64")
    name, shape = parse_shape(spec, "--example-input")
    return name, shape, dtype or "float32"


def parse_shape(text: str, flag: str = "--input-shape") -> tuple[str, tuple[int, ...]]:
    """Parse ``name=1x3x224x224`` as given to ``--input-shape``."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d <= 0 for d in shape):
        raise ModelError(f"bad {flag} {text!r}", hint="write it as NAME=1x3x224x224")
    return name, shape
