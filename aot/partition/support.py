"""Per-target operator support tables. Every decision carries a reason, never a bare bool."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from aot.frontend.graph import GraphView, Node
from aot.runtime.codec import TextEnum


class Device(TextEnum):
    """Where the partitioner places a node or a region: the accelerator or the host CPU. The
    value is what plan.json and record.json hold."""

    ACCEL = "accel"
    HOST = "host"


ACCEL = Device.ACCEL   # the short names the partitioner reads
HOST = Device.HOST


@dataclass(frozen=True, slots=True)
class Group:
    """Nodes a merge policy keeps together on one device: a region before the partitioner names
    and schedules it (``partitioner.plan_from_groups``)."""

    device: Device
    nodes: tuple[str, ...]      # node names in topological order


Groups = list[Group]            # what a merge policy returns: in order of each group's first node


@dataclass(frozen=True, slots=True)
class Decision:
    supported: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Label:
    device: Device
    reason: str


_SELECTION = ("selection/sort op: IREE lowers it to a sequential iree_linalg_ext sort/topk that "
              "gains nothing on a GPU; the host runs it")
_DATA_DEPENDENT = "output shape depends on the data: needs dynamic shapes, which aot compiles on the host only"
_CONTROL_FLOW = "control flow (nested graph): kept whole on the host"
_RANDOM = "random number generation: kept on the host so results stay reproducible across devices"

# Ops that stay on the host for every accelerator, registered under "<target>.<Op>" below.
_COMMON_HOST_OPS: Mapping[str, str] = {
    "TopK": _SELECTION, "ArgMax": _SELECTION, "ArgMin": _SELECTION,
    "NonZero": _DATA_DEPENDENT, "Unique": _DATA_DEPENDENT, "NonMaxSuppression": _DATA_DEPENDENT,
    "Compress": _DATA_DEPENDENT,
    "If": _CONTROL_FLOW, "Loop": _CONTROL_FLOW, "Scan": _CONTROL_FLOW,
    "RandomNormal": _RANDOM, "RandomUniform": _RANDOM, "RandomNormalLike": _RANDOM,
    "RandomUniformLike": _RANDOM, "Multinomial": _RANDOM, "Bernoulli": _RANDOM,
}

# The same ops as the torch front end names them (``frontend/torch/ops.py``: ATen overload packets).
_COMMON_HOST_TORCH_OPS: Mapping[str, str] = {
    **{f"aten.{op}": _SELECTION for op in ("topk", "sort", "argsort", "argmax", "argmin", "kthvalue", "msort")},
    **{f"aten.{op}": _DATA_DEPENDENT for op in ("nonzero", "unique_consecutive", "_unique2", "unique_dim",
                                                "masked_select", "nonzero_numpy")},
    **{f"aten.{op}": _RANDOM for op in ("rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
                                        "bernoulli", "multinomial", "normal", "uniform", "randperm")},
}

# Registry of host-only ops under dotted names, e.g. "vulkan-spirv.TopK" -> reason.
HOST_ONLY: dict[str, str] = {f"{t}.{op}": r for t in ("vulkan-spirv", "cuda")
                             for op, r in {**_COMMON_HOST_OPS, **_COMMON_HOST_TORCH_OPS}.items()}

_RECURRENT = ("recurrent op: IREE lowers it to a loop over time steps that launches one small "
              "dispatch per step; the host runs it with less overhead")
HOST_ONLY.update({f"vulkan-spirv.{op}": _RECURRENT
                  for op in ("LSTM", "GRU", "RNN", "aten.lstm", "aten.gru", "aten.rnn_tanh", "aten.rnn_relu")})
_BICUBIC = "bicubic resize gathers 16 taps per output through scalar loads on SPIR-V"
HOST_ONLY["vulkan-spirv.aten.upsample_bicubic2d"] = _BICUBIC
# A Vulkan build exports attention as matmuls (frontend/torch/attention.py); a source exported
# for another target may still hold the fused op.
HOST_ONLY["vulkan-spirv.aten.scaled_dot_product_attention"] = (
    "IREE 3.13's SPIR-V pipeline cannot compile iree_linalg_ext.online_attention; export for Vulkan "
    "writes attention as matmuls instead")

# Measured wrong on lavapipe (onnx node test ``matmulinteger``: -1 where the answer is -38);
# llvm-cpu computes it exactly.
HOST_ONLY["vulkan-spirv.MatMulInteger"] = "IREE 3.13's SPIR-V code computes MatMulInteger wrongly (measured)"

# Attribute predicates: (op, attribute, values that send the node to the host, reason).
ATTRIBUTE_RULES: dict[str, tuple[tuple[str, str, frozenset, str], ...]] = {
    "vulkan-spirv": (
        ("Resize", "mode", frozenset({"cubic"}), _BICUBIC),
        ("Resize", "coordinate_transformation_mode", frozenset({"tf_crop_and_resize"}),
         "tf_crop_and_resize is not lowered by the ONNX importer for GPU targets"),
        # onnx node test gridsample_zeros_padding: 4e18 where the answer is 0 (an out-of-range
        # tap is read instead of masked); llvm-cpu computes it.
        ("GridSample", "padding_mode", frozenset({None, "zeros"}),
         "IREE 3.13's SPIR-V code reads out-of-range taps of a zeros-padded GridSample (measured wrong)"),
    ),
    "cuda": (
        ("Resize", "coordinate_transformation_mode", frozenset({"tf_crop_and_resize"}),
         "tf_crop_and_resize is not lowered by the ONNX importer for GPU targets"),
    ),
}

# Ops whose integer form a target computes wrongly: measured on lavapipe, a MatMul over int32
# (QLinearMatMul's legalized form: node tests qlinearmatmul_3D_*, off by up to 83) and
# MatMulInteger (-1 where the answer is -38); llvm-cpu computes both exactly.
_INTEGER_MATMUL = "IREE 3.13's SPIR-V code computes integer matrix products wrongly (measured)"
INTEGER_HOST_OPS: dict[str, dict[str, str]] = {
    "vulkan-spirv": {"MatMul": _INTEGER_MATMUL, "MatMulInteger": _INTEGER_MATMUL, "Gemm": _INTEGER_MATMUL},
}

# Targets that cannot reduce a tensor with no elements: lavapipe crashed (SIGSEGV) running a
# ReduceSum over a [3, 0, 4]-shaped input (node test reduce_sum_empty_set_non_reduced_axis_zero).
# Other ops with an empty operand run there (RotaryEmbedding's body splits off an empty part).
EMPTY_TENSORS: dict[str, str] = {"vulkan-spirv": "IREE 3.13's Vulkan runtime crashes reducing an empty tensor "
                                                  "(measured)"}

# Element types an accelerator target cannot compute with.
BANNED_DTYPES: dict[str, dict[str, str]] = {
    "vulkan-spirv": {"float64": "float64 is not supported by SPIR-V targets without Float64"},
    "cuda": {},
}
# Element types that may be computed inside a region but must not cross a region boundary.
BOUNDARY_BANNED_DTYPES: dict[str, dict[str, str]] = {
    "vulkan-spirv": {"bool": "bool (i1) tensors are repacked as i8 in Vulkan buffers; aot keeps them inside a region"},
    "cuda": {},
}
# "Specific" ops: their results must not be a region's output (DESIGN §5). Masks, comparisons and
# shape arithmetic are cheap to compute and awkward to ship between devices; a region that would
# hand one on is merged with its consumer and the union goes to the host.
SPECIFIC_OPS: Mapping[str, str] = {
    **{op: "logical op" for op in ("And", "Or", "Xor", "Not")},
    **{op: "comparison op" for op in ("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "IsNaN", "IsInf")},
    **{op: "shape op" for op in ("Shape", "Size")},
    **{f"aten.{op}": "logical op" for op in ("logical_and", "logical_or", "logical_xor", "logical_not",
                                             "bitwise_and", "bitwise_or", "bitwise_not")},
    **{f"aten.{op}": "comparison op" for op in ("eq", "ne", "gt", "ge", "lt", "le", "isnan", "isinf")},
    **{f"aten.{op}": "shape op" for op in ("size", "sym_size", "numel")},
}


@dataclass(frozen=True, slots=True)
class SupportTable:
    """Support for one accelerator target: host-only ops plus dtype and shape predicates."""

    target: str
    host_only: Mapping[str, str] = field(default_factory=dict)
    banned_dtypes: Mapping[str, str] = field(default_factory=dict)
    boundary_banned_dtypes: Mapping[str, str] = field(default_factory=dict)
    attribute_rules: tuple[tuple[str, str, frozenset, str], ...] = ()
    integer_host_ops: Mapping[str, str] = field(default_factory=dict)   # op -> why its integer form stays home
    empty_tensors: str = ""   # why a reduction over an empty tensor stays on the host ("": it need not)
    max_rank: int = 6

    @classmethod
    def for_target(cls, target: str) -> "SupportTable":
        prefix = f"{target}."
        ops = {k[len(prefix):]: v for k, v in HOST_ONLY.items() if k.startswith(prefix)}
        return cls(target, ops, BANNED_DTYPES.get(target, {}), BOUNDARY_BANNED_DTYPES.get(target, {}),
                   ATTRIBUTE_RULES.get(target, ()), INTEGER_HOST_OPS.get(target, {}), EMPTY_TENSORS.get(target, ""))

    def may_cross(self, node: Node, value: str, view: GraphView) -> Decision:
        """May ``value`` (an output of ``node``) leave its region?"""
        if node.op_type in SPECIFIC_OPS:
            return Decision(False, f"{node.op_type} is a {SPECIFIC_OPS[node.op_type]}: its result stays in its region")
        dtype = view.values[value].dtype
        if dtype in self.boundary_banned_dtypes:
            return Decision(False, f"tensor {value!r} is {dtype}: {self.boundary_banned_dtypes[dtype]}")
        return Decision(True, "")

    def decide(self, node: Node, view: GraphView) -> Decision:
        if node.op_type in self.host_only:
            return Decision(False, f"{self.target}.{node.op_type}: {self.host_only[node.op_type]}")
        for op, attr, values, why in self.attribute_rules:
            if node.op_type == op and node.attr(attr) in values:
                return Decision(False, f"{self.target}.{op} with {attr}={node.attr(attr)}: {why}")
        if node.op_type in self.integer_host_ops and any(
                view.values[v].dtype.startswith(("int", "uint")) for v in node.inputs[:2]):
            return Decision(False, f"{self.target}.{node.op_type} on integers: {self.integer_host_ops[node.op_type]}")
        for v in (*node.inputs, *node.outputs):
            value = view.values[v]
            if node.op_type.startswith("Reduce") and value.shape is not None and 0 in value.shape \
                    and self.empty_tensors:
                return Decision(False, f"{self.target}: tensor {v!r} has no elements ({list(value.shape)}): "
                                       f"{self.empty_tensors}")
            if value.dtype in self.banned_dtypes:
                return Decision(False, f"{self.target}: tensor {v!r} is {value.dtype}: {self.banned_dtypes[value.dtype]}")
            if value.shape is None:
                return Decision(False, f"{self.target}: tensor {v!r} has no static shape")
            if len(value.shape) > self.max_rank:
                return Decision(False, f"{self.target}: tensor {v!r} has rank {len(value.shape)} > {self.max_rank}")
        return Decision(True, f"{self.target}.{node.op_type}: supported")


@dataclass(frozen=True, slots=True)
class Overrides:
    """User overrides: op types and node-name globs forced to the host or to the accelerator."""

    host_ops: frozenset[str] = frozenset()
    accel_ops: frozenset[str] = frozenset()
    host_nodes: tuple[str, ...] = ()
    accel_nodes: tuple[str, ...] = ()

    def decide(self, node: Node) -> Label | None:
        # Node globs beat op types: the more specific instruction wins.
        if any(fnmatch.fnmatchcase(node.name, g) for g in self.host_nodes):
            return Label(HOST, "forced to the host by --host-nodes")
        if any(fnmatch.fnmatchcase(node.name, g) for g in self.accel_nodes):
            return Label(ACCEL, "forced to the accelerator by --accel-nodes")
        if node.op_type in self.host_ops:
            return Label(HOST, f"op type {node.op_type} forced to the host by --host-ops")
        if node.op_type in self.accel_ops:
            return Label(ACCEL, f"op type {node.op_type} forced to the accelerator by --accel-ops")
        return None


def label(view: GraphView, table: SupportTable | None, overrides: Overrides = Overrides()) -> dict[str, Label]:
    """Label each node accel or host; with no table (no accelerator) every node is host."""
    labels: dict[str, Label] = {}
    for node in view.nodes:
        if table is None:
            labels[node.name] = Label(HOST, "no accelerator requested (--accel none)")
            continue
        forced = overrides.decide(node)
        if forced is not None:
            labels[node.name] = forced
            continue
        d = table.decide(node, view)
        labels[node.name] = Label(ACCEL if d.supported else HOST, d.reason)
    return labels


def split_names(text: str | None) -> Iterable[str]:
    return tuple(s.strip() for s in (text or "").split(",") if s.strip())


@dataclass(frozen=True, slots=True)
class Coverage:
    """Operator coverage of one target before any merging or selection."""

    target: str
    supported: int
    total: int
    unsupported: tuple[tuple[str, int, str], ...]   # (op type, count, first reason)



def coverage(view: GraphView, table: SupportTable) -> Coverage:
    by_op: dict[str, list[str]] = {}
    supported = 0
    for node in view.nodes:
        d = table.decide(node, view)
        if d.supported:
            supported += 1
        else:
            by_op.setdefault(node.op_type, []).append(d.reason)
    rows = sorted(((op, len(rs), rs[0]) for op, rs in by_op.items()), key=lambda r: (-r[1], r[0]))
    return Coverage(table.target, supported, len(view.nodes), tuple(rows))
