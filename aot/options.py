"""What a user can ask of a build: every setting, once. A ``BuildOptions`` field holds the
setting's default, its flag, its help and the parser of its text; the CLI is generated from the
fields (``aot/option_flags.py``), and the partitioner's and the tuner's settings are views of
them with no defaults of their own. Internal choices (which plan to compile, whether a region is
compiled for the host) are plans, not options.
"""

from __future__ import annotations

import enum
from dataclasses import InitVar, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from aot.option_flags import Companion, Flag, Switch, UsageError, option
from aot.partition import calibrations, policies, select
from aot.partition.cost import DEFAULT_PARAMS
from aot.partition.flop_groups import MAX_GROUPS, MIN_GROUPS
from aot.partition.order import OrderMode
from aot.partition.partitioner import PartitionOptions
from aot.partition.plan import GateMode
from aot.partition.support import Overrides, split_names
from aot.runtime import codec
from aot.runtime.target import Target

if TYPE_CHECKING:
    from aot.tune.search import TuneSettings


class FallbackMode(enum.Enum):
    """What serves a call past the largest shape bucket."""

    NONE = "none"          # nothing: the call is refused with a typed error
    DYNAMIC = "dynamic"    # a host module compiled with the symbolic dimensions dynamic


def parse_constant(text: str) -> tuple[str, np.ndarray]:
    """Parse ``name=16000``, ``name=0,2`` (1-D) or ``name=@file.npy`` as given to ``--const-input``."""
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise UsageError(f"bad --const-input {text!r}", hint="write it as NAME=16000, NAME=0,2 or NAME=@values.npy")
    if value.startswith("@"):
        try:
            return name, np.load(value[1:], allow_pickle=False)
        except (OSError, ValueError) as e:
            raise UsageError(f"--const-input {name}: cannot read {value[1:]!r}: {e}") from e
    try:
        parts = [float(v) if any(c in v for c in ".eE") or v.lower() in ("nan", "inf", "-inf") else int(v)
                 for v in value.split(",")]
    except ValueError:
        raise UsageError(f"bad --const-input {text!r}: {value!r} is not a number list",
                         hint="write it as NAME=16000, NAME=0,2 or NAME=@values.npy") from None
    return name, np.array(parts[0] if len(parts) == 1 and "," not in value else parts)


def parse_pair(text: str, flag: str, form: str) -> tuple[str, str]:
    """``NAME=VALUE`` as the repeated flags take it (the name may hold '='; the value may not)."""
    name, sep, value = text.rpartition("=")
    if not sep or not name or not value:
        raise UsageError(f"bad {flag} {text!r}", hint=f"write it as {form}")
    return name, value


def parse_number(text: str, flag: str, form: str) -> tuple[str, float]:
    name, value = parse_pair(text, flag, form)
    try:
        return name, float(value)
    except ValueError:
        raise UsageError(f"bad {flag} {text!r}: {value!r} is not a number", hint=f"write it as {form}") from None


def parse_example_input(text: str) -> tuple[str, tuple[int, ...], str]:
    """Parse ``name=1x3x224x224`` or ``name=1x16:int64`` as given to ``--example-input``."""
    spec, colon, dtype = text.partition(":")
    if colon and not dtype.isidentifier():
        raise UsageError(f"bad --example-input {text!r}", hint="write it as NAME=1x3x224x224 or NAME=1x16:int64")
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
        raise UsageError(f"bad {flag} {text!r}", hint="write it as NAME=1x3x224x224")
    return name, shape


def _accel(text: str, vulkan: str | None = None, cuda: str | None = None) -> Target | None:
    """``--accel`` with the arch ``--vulkan-target``/``--cuda-target`` give for its device."""
    accel = Target.accelerator(text)
    arch = {"cuda": cuda, "vulkan-spirv": vulkan}.get(accel.backend) if accel else None
    if accel and arch and ":" in text and arch != accel.arch:
        raise UsageError(f"--accel {text} and --{accel.backend.split('-')[0]}-target {arch} name two archs",
                         hint="give the arch once")
    return Target.accelerator(text, arch)


def _cost_params(text: str) -> Path:
    """``--cost-params FILE``, or ``shipped`` for the hand-set entries even where a calibration is stored."""
    return DEFAULT_PARAMS if text == "shipped" else Path(text)


def _overrides(_: None, host_ops: str | None = None, accel_ops: str | None = None,
               host_nodes: str | None = None, accel_nodes: str | None = None) -> Overrides:
    return Overrides(frozenset(split_names(host_ops)), frozenset(split_names(accel_ops)),
                     tuple(split_names(host_nodes)), tuple(split_names(accel_nodes)))


def _constant_option(text: str) -> tuple[str, Any]:
    name, value = parse_constant(text)
    return name, value.tolist()


def _number(kind: type, text: str, flag: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise UsageError(f"bad {flag} {text!r}: not {'an integer' if kind is int else 'a number'}") from None


def parse_memory_limits(text: str) -> tuple[tuple[str, int], ...]:
    """``--memory-limit vulkan=64MiB,local-task=1GiB``: read as ``aot run --device-memory`` is
    (``runtime.memory.configured_limits`` owns the syntax), each driver one this build can use."""
    from aot.errors import DeviceError
    from aot.runtime.memory import configured_limits

    drivers = (*dict.fromkeys(Target.parse(b).driver for b in Target.backends()), "local-sync")

    form = "DRIVER=SIZE[,...], e.g. vulkan=64MiB,local-task=1GiB"
    try:
        limits = configured_limits(text)
    except DeviceError as e:
        raise UsageError(f"bad --memory-limit {text!r}: {e.message}", hint=f"write it as {form}") from None
    for driver, size in limits.items():
        if driver not in drivers:
            raise UsageError(f"bad --memory-limit {text!r}: no device has the driver {driver!r}",
                             hint=f"drivers: {', '.join(drivers)}; write it as {form}")
        if size <= 0:
            raise UsageError(f"bad --memory-limit {text!r}: {driver}'s limit must be more than 0 bytes")
    if not limits:
        raise UsageError(f"bad --memory-limit {text!r}: it names no device", hint=f"write it as {form}")
    return tuple(limits.items())


def _group_count(text: str, flag: str) -> int:
    value = int(_number(int, text, flag))
    if value != 0 and not MIN_GROUPS <= value <= MAX_GROUPS:
        raise UsageError(f"bad {flag} {text!r}: give 0 (off) or a group count from {MIN_GROUPS} to {MAX_GROUPS}")
    return value


def _fraction(text: str, flag: str) -> float:
    value = float(_number(float, text, flag))
    if not 0.0 <= value < 1.0:
        raise UsageError(f"bad {flag} {text!r}: give a fraction from 0 to below 1 (0.05: 5%)")
    return value


def _positive(text: str, flag: str) -> int:
    value = _number(int, text, flag)
    if value < 1:
        raise UsageError(f"bad {flag} {text!r}: must be at least 1")
    return int(value)


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """Every setting of a build, each written once: its default, its flag and its help."""

    # Devices, parsed once. None: host only. The default Vulkan arch is Mesa lavapipe's (a
    # module compiled for another GPU's subgroup size returns silently wrong results there).
    accel: Target | None = option(Target.parse("vulkan"), Flag(
        "--accel", "accelerator target: vulkan[:ARCH], cuda[:ARCH] or none (host only)",
        metavar="vulkan|cuda|none[:ARCH]", default_text="vulkan", compose=_accel, companions=(
            Companion("--vulkan-target", "vulkan", "Vulkan arch to compile for; must match the device "
                      f"(default {Target.parse('vulkan').arch}, Mesa lavapipe)"),
            Companion("--cuda-target", "cuda", f"CUDA arch to compile for (default {Target.parse('cuda').arch})"))))
    host: Target = option(Target.host(), Flag(
        "--host-cpu", "llvm-cpu target CPU; e.g. x86-64-v3 for a bundle that runs elsewhere",
        parse=Target.host, default_text="this machine's"))
    # The model
    name: str | None = option(None, Flag(
        "--name", "model name for the manifest and the stub class (default: the graph name)"))
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = option((), Flag(
        "--input-shape", "a static shape for an input with symbolic dimensions", metavar="NAME=1x3x224x224",
        parse=parse_shape, repeated=True))
    example_inputs: tuple[tuple[str, tuple[int, ...], str], ...] = option((), Flag(
        "--example-input", "a PyTorch model (MODEL given as pkg.module:factory or file.py:factory): one per "
        "forward argument, in order; the module is exported for these static shapes",
        metavar="NAME=1x3x224x224[:DTYPE]", parse=parse_example_input, repeated=True))
    constant_inputs: tuple[tuple[str, Any], ...] = option((), Flag(   # (input, number or nested list) baked in
        "--const-input", "bake an input in as a constant (16000, 0,2 or @values.npy); branches and shapes it "
        "decides are folded away", metavar="NAME=VALUE", parse=_constant_option, repeated=True))
    index_guards: bool = option(True, Flag(None, switches=(Switch(
        "--no-index-guards", False, "do not guard indices computed inside the model (an out-of-range one then "
        "reads outside its tensor); indices that are model inputs are still checked"),)))
    # Shape buckets (aot/buckets): symbolic dimensions compiled at a ladder of sizes
    batch_buckets: str = option("1", Flag(
        "--batch-buckets", "sizes a symbolic batch dimension is compiled at (1,2,4,8 | ratio:MAX:1.0,0.5 | "
        "linear:MAX:N | @observed.txt[*0.8])", metavar="LADDER"))
    dim_ladders: tuple[tuple[str, str], ...] = option((), Flag(
        "--dim", "sizes of another symbolic dimension (its name in the model, or INPUT.AXIS when unnamed)",
        metavar="SYMBOL=LADDER", parse=lambda t: parse_pair(t, "--dim", "SYMBOL=1,2,4"), repeated=True))
    pad_values: tuple[tuple[str, float], ...] = option((), Flag(
        "--pad-value", "what padding up to a bucket fills INPUT with (default 0)", metavar="INPUT=VALUE",
        parse=lambda t: parse_number(t, "--pad-value", "INPUT=0"), repeated=True))
    padding_tolerances: tuple[tuple[str, float], ...] = option((), Flag(
        "--accept-padding", "keep a ladder whose padding changes results by up to this much (measured per "
        "bucket)", metavar="SYMBOL=MAX_ABS_DIFF",
        parse=lambda t: parse_number(t, "--accept-padding", "SYMBOL=0.01"), repeated=True))
    fallback: FallbackMode = option(FallbackMode.NONE, Flag(
        "--fallback", "dynamic: also compile the whole model for the host with its symbolic dimensions "
        "dynamic, to serve a call past the largest bucket along a non-batch dimension",
        parse=FallbackMode, choices=lambda: [m.value for m in FallbackMode]))
    # Partitioning
    min_compute: int = option(2, Flag(
        "--min-compute", "accelerator regions with fewer compute nodes stay on the host",
        parse=lambda t: _number(int, t, "--min-compute")))
    policy: str = option("greedy", Flag(
        "--policy", "region-forming policy: cycle-free greedy merging, depth-growth, or learned (a per-node "
        "classifier's candidate plans, merged greedily, ranked by the cost database or the learned cost model; "
        "--cost-model)", choices=lambda: (*policies.names(), policies.LEARNED)))
    select: str = option("all", Flag(
        "--select", "which accelerator regions to keep (the rest run on the host)", choices=lambda: select.MODES))
    threshold: int = option(0, Flag(
        "--threshold", "compute nodes a region needs under --select threshold",
        parse=lambda t: _number(int, t, "--threshold")))
    gate: GateMode = option(GateMode.ROOFLINE, Flag(
        "--gate", "ship the partition only when it beats one device: as the cost model estimates it "
        "(roofline), as timed on the real devices (measured), as the cost database or the learned cost model "
        "says by --gate-margin (learned), or always (off)",
        parse=GateMode, choices=lambda: [m.value for m in GateMode], switches=(
            Switch("--no-gate", GateMode.OFF, "same as --gate off"),
            Switch("--measure", GateMode.MEASURED, "same as --gate measured: time the partition and the whole "
                   "model on the real devices and keep the faster"))))
    gate_margin: float = option(0.05, Flag(
        "--gate-margin", "--gate learned: partition only when its cost is below the whole model on the host "
        "by this fraction (0.05: five percent faster)", metavar="FRACTION", parse=lambda t: _fraction(t, "--gate-margin")))
    cost_model: Path | None = option(None, Flag(
        "--cost-model", "the learned model (`aot learn train`) for --policy/--gate learned (default: the one "
        "shipped in aot/learn, if any; without one the roofline decides)", parse=Path))
    cost_db: Path | None = option(None, Flag(
        "--cost-db", "a cost database (`aot learn collect`) whose measured plans take precedence over "
        "predictions for --policy/--gate learned", parse=Path))
    measure_prediction: bool = option(False, Flag(None, switches=(Switch(
        "--measure-prediction", True, "--gate learned: time the shipped bundle on the real devices and keep the "
        "measured time beside the prediction in the build record"),)))
    min_segment_nodes: int = option(2, Flag(
        "--min-segment-nodes", "key-node segments (runs between nodes every input-to-output path visits) with "
        "fewer nodes fuse into the previous one", metavar="N", parse=lambda t: _positive(t, "--min-segment-nodes")))
    order: OrderMode = option(OrderMode.GREEDY, Flag(
        "--order", "how regions are grouped and issued: the merge's regions in greedy order, or a search per "
        "segment over groupings and orders scored by the lane cost model",
        parse=OrderMode, choices=lambda: [m.value for m in OrderMode]))
    order_budget: int = option(64, Flag(
        "--order-budget", "--order search: node orders tried and distinct plans scored per segment", metavar="N",
        parse=lambda t: _positive(t, "--order-budget")))
    # Each candidate compiles its distinct regions (the cache dedups the rest) and times them on
    # lavapipe here: a handful, not the whole budget.
    measure_plans: int = option(4, Flag(
        "--measure-plans", "--order search --measure: plans compiled and timed region by region (greedy's, then "
        "per segment the next best by estimate); the search then scores with each distinct region's measured "
        "time", metavar="N", parse=lambda t: _positive(t, "--measure-plans")))
    memory_limits: tuple[tuple[str, int], ...] = option((), Flag(
        "--memory-limit", "split every operator whose working set (inputs + weights + outputs) is over its device's "
        "limit into the fewest pieces that fit (batch axis first, then channels; never a reduced axis); one that "
        "cannot be split goes to the host. The splits are pinned in the plan", metavar="DRIVER=SIZE[,...]",
        parse=parse_memory_limits))
    cost_params: Path | None = option(None, Flag(
        "--cost-params", "device parameters JSON for the cost model ('shipped': aot/partition/devices.json; default: "
        "this machine's `aot calibrate` for the devices built for, else the shipped entries)",
        metavar="FILE|shipped", parse=_cost_params))
    overrides: Overrides = option(Overrides(), Flag(None, compose=_overrides, companions=(
        Companion("--host-ops", "host_ops", "comma-separated op types forced to the host"),
        Companion("--accel-ops", "accel_ops", "comma-separated op types forced to the accelerator"),
        Companion("--host-nodes", "host_nodes", "comma-separated node-name globs forced to the host"),
        Companion("--accel-nodes", "accel_nodes", "comma-separated node-name globs forced to the accelerator"))))
    plan_file: Path | None = option(None, Flag(
        "--plan", "build exactly this plan.json (validated first); its pinned decisions are replayed", parse=Path))
    # Compiling and checking
    accel_compile_timeout: float = option(300.0, Flag(   # the SPIR-V pipeline took minutes on some regions
        "--accel-compile-timeout", "an accelerator region still compiling after this falls back to llvm-cpu",
        metavar="SECONDS", parse=lambda t: _number(float, t, "--accel-compile-timeout")))
    verify: bool | None = option(None, Flag(None, switches=(   # None: when the built-for device is here
        Switch("--verify", True, "run each accelerator region on its device against the reference "
               "(onnxruntime, or PyTorch eager for a torch module); move failures to the host "
               "(default: on when the device the regions are built for is on this machine)"),
        Switch("--no-verify", False, "do not check the accelerator regions on their device"))))
    tune: bool = option(False, Flag(None, switches=(Switch(
        "--tune", True, "search each region's compile flags on its device and the host runtime's threading; "
        "keep the fastest that matches the reference (cached: a second run times nothing)"),)))
    # Off by default: a mixed plan only pays where flag sets differ by segment, and it multiplies
    # tuning time (a flag search per group); no zoo measurement says it should be on for everyone.
    tune_segments: int = option(0, Flag(
        "--tune-segments", "with --tune: also cut each large host region at key-node segments into up to N "
        f"groups by FLOP share (N from {MIN_GROUPS} to {MAX_GROUPS}; 0: off), search each group's flags, and keep "
        "the mixed-flag plan only when a whole run measures faster than the best single flag set",
        metavar="N", parse=lambda t: _group_count(t, "--tune-segments")))
    tune_top: int = option(0, Flag(
        "--tune-top", "with --tune: compile and time only the default and K-1 flag sets per host region: those that won "
        "most often in the learned model's training (--cost-model, trained on this machine's host decisions), then "
        "those it predicts fastest (default: every set)",
        metavar="K", parse=lambda t: _positive(t, "--tune-top"), commands=frozenset({"build", "tune"})))
    tune_repeats: int = option(20, Flag(
        "--tune-repeats", "timed calls per tuning candidate (warm medians, interleaved)", metavar="N",
        parse=lambda t: _number(int, t, "--tune-repeats"), commands=frozenset({"build", "tune"})))
    cluster: str | None = option(None, Flag(
        "--cluster", "run compile jobs on this Dask scheduler (tcp://HOST:8786) instead of a local pool",
        metavar="ADDRESS", commands=frozenset({"build", "tune"})))
    dump_after: frozenset[str] = option(frozenset(), Flag(
        "--dump-after", "write the stage's output into OUTPUT/build", choices=lambda: ("plan", "import"),
        repeated=True, collect=frozenset))
    # Compatibility: `BuildOptions(measure=True)` as before the gate was one setting.
    measure: InitVar[bool | None] = None

    def __post_init__(self, measure: bool | None) -> None:
        gate = self.gate
        if isinstance(gate, bool):          # BuildOptions(gate=False), as before
            gate = GateMode.ROOFLINE if gate else GateMode.OFF
        if measure:
            gate = GateMode.MEASURED
        object.__setattr__(self, "gate", GateMode(gate))
        object.__setattr__(self, "fallback", FallbackMode(self.fallback))
        object.__setattr__(self, "order", OrderMode(self.order))

    def partition_options(self) -> PartitionOptions:
        """The partitioner's view of these settings (the limits are memory_limits.py's, before it)."""
        return PartitionOptions(self.accel.backend if self.accel else None, self.min_compute, self.overrides,
                                self.policy, self.select, self.threshold, self.gate,
                                self.cost_params or calibrations.for_build(self),
                                self.min_segment_nodes, self.order, self.order_budget,
                                (),   # no labels decided yet: memory splitting adds its own (memory_limits.py)
                                self.measure_plans, (), False, None)   # nothing timed yet: checks/measured_order.py times

    def tune_settings(self) -> TuneSettings:
        """The tuner's view of these settings."""
        from aot.tune.search import TuneSettings   # the tuner imports the compiler; options stay light

        return TuneSettings(self.tune_repeats, self.accel_compile_timeout, self.tune_segments)

    def with_recipe(self, input_shapes: tuple[tuple[str, tuple[int, ...]], ...],
                    constant_inputs: tuple[tuple[str, Any], ...], name: str) -> "BuildOptions":
        """Apply a model's recipe (a zoo entry's static shapes and baked inputs); what the user
        set wins over the recipe."""
        return replace(self, name=self.name or name,
                       input_shapes=tuple({**dict(input_shapes), **dict(self.input_shapes)}.items()),
                       constant_inputs=tuple({**dict(constant_inputs), **dict(self.constant_inputs)}.items()))

    @classmethod
    def from_record(cls, stored: dict[str, Any]) -> "BuildOptions":
        """The options a build record stored; records written before the gate was one setting
        held ``gate: bool`` and ``measure: bool``."""
        stored = dict(stored)
        if isinstance(stored.get("gate"), bool) or "measure" in stored:
            measured, gated = stored.pop("measure", False), stored.get("gate", True)
            stored["gate"] = (GateMode.MEASURED if measured else GateMode.ROOFLINE if gated else GateMode.OFF).value
        return codec.decode(cls, stored)


DEFAULTS = BuildOptions()


