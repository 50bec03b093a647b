"""Each node's shape class for the learned features: its op class (what a flag acts on) and,
finer, its geometry (the shapes each flag set lowers differently)."""

from __future__ import annotations

import enum
import math

from aot.frontend.graph import GraphView, Node
from aot.frontend.torch.ops import ATTENTION, ONNX_EQUIVALENT
from aot.partition.cost import is_convolution


class OpClass(enum.IntEnum):
    """What a flag acts on: data tiling, im2col and channels-last change convolutions and matmuls,
    and each kind differently. The hashed WL bins mix op types; these name them."""

    CONV = 0
    GROUPED_CONV = 1     # depthwise and other grouped convolutions (lowered channels-last on the host)
    MATMUL = 2
    OTHER = 3


# In ONNX's vocabulary: a torch op is read as the ONNX op it computes like (``ONNX_EQUIVALENT``,
# as ``partition/cost.node_flops`` reads it).
_MATMUL_OPS = frozenset({"MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "Einsum", "Attention", ATTENTION})


class Geometry(enum.IntEnum):
    """Finer than ``OpClass``: the shapes each flag set lowers differently. im2col, channels-last
    and data-tiled convolutions each turn 1 x 1, k x k, strided, stem and grouped convolutions
    into other loops, and data tiling pays on wide products and costs on thin ones (one row: a
    recurrent step, a vector through a classifier). Version 3 saw the op classes alone and could
    not tell the CNNs where channels-last won from those where it lost."""

    POINTWISE = 0        # a 1 x 1 convolution at stride 1
    SPATIAL = 1          # a k x k convolution at stride 1 over at least NARROW_CHANNELS input channels
    STRIDED = 2          # a convolution at stride > 1
    NARROW = 3           # a convolution over fewer than NARROW_CHANNELS input channels (a stem)
    GROUPED = 4          # depthwise and other grouped convolutions
    THIN_PRODUCT = 5     # a matrix product of at most THIN_ROWS rows
    PRODUCT = 6
    OTHER = 7


NARROW_CHANNELS = 16
THIN_ROWS = 16


class KernelForm(enum.IntEnum):
    """How a convolution's window lies over its input, which ``Geometry`` does not say. Channels-last
    won on the example's 3 x 3 convolutions over padded inputs and lost 1.9-6.7x on MTCNN's
    unpadded ones and openWakeWord's 1 x 3 and 3 x 1 ones, at like channels and pixels: the pad
    and the one-axis window are what told them apart (docs/learned.md, stop 71)."""

    LINE = 0             # the window extends along one spatial axis only
    PADDED_SQUARE = 1    # a window over two or more axes, on a padded input
    OTHER = 2            # an unpadded square window, a 1 x 1 one, a transposed one, or no convolution


def op_class(node: Node, view: GraphView) -> OpClass:
    op = ONNX_EQUIVALENT.get(node.op_type, node.op_type)
    if is_convolution(node):
        return OpClass.GROUPED_CONV if _grouped(node, op, view) else OpClass.CONV
    return OpClass.MATMUL if op in _MATMUL_OPS else OpClass.OTHER


def geometry(node: Node, view: GraphView) -> Geometry:
    """The node's shape class (``Geometry``); a stride decides before the channels and the kernel."""
    cls = op_class(node, view)
    if cls is OpClass.GROUPED_CONV:
        return Geometry.GROUPED
    if cls is OpClass.MATMUL:
        out = view.values[node.outputs[0]].shape if node.outputs else None
        return Geometry.THIN_PRODUCT if out and len(out) >= 2 and out[-2] <= THIN_ROWS else Geometry.PRODUCT
    if cls is not OpClass.CONV:
        return Geometry.OTHER
    x, w = _input_and_weights(node, view)
    if _strided(node, x, w, view.values[node.outputs[0]].shape if node.outputs else None):
        return Geometry.STRIDED
    if w and len(w) > 2 and w[1] < NARROW_CHANNELS:
        return Geometry.NARROW
    return Geometry.POINTWISE if w and len(w) > 2 and all(k == 1 for k in w[2:]) else Geometry.SPATIAL


def extent(node: Node, view: GraphView) -> tuple[float, float]:
    """A convolution's log2 input channels and output pixels (0, 0 for any other node)."""
    if not is_convolution(node) or not node.inputs or not node.outputs:
        return (0.0, 0.0)
    x, out = view.values[node.inputs[0]].shape, view.values[node.outputs[0]].shape
    if not x or not out or len(x) < 3 or len(out) < 3:
        return (0.0, 0.0)
    return (math.log2(max(x[1], 1)), math.log2(max(math.prod(out[2:]), 1)))


def kernel_form(node: Node, view: GraphView) -> KernelForm:
    """The convolution's ``KernelForm`` (OTHER for any other node)."""
    if not is_convolution(node) or not node.outputs:
        return KernelForm.OTHER
    x, w = _input_and_weights(node, view)
    out = view.values[node.outputs[0]].shape
    if not (x and w and out) or not len(x) == len(w) == len(out) or len(w) < 3:
        return KernelForm.OTHER
    window = [k for k in w[2:] if k > 1]
    if len(window) == 1:
        return KernelForm.LINE
    # A transposed convolution's output outgrows its input by design: no pad to read from it.
    if not window or ONNX_EQUIVALENT.get(node.op_type, node.op_type) == "ConvTranspose":
        return KernelForm.OTHER
    strides = node.attr("strides", None)
    dilations = node.attr("dilations", None)
    spatial = len(w) - 2
    s = [int(v) for v in strides] if isinstance(strides, (list, tuple)) else [1] * spatial
    d = [int(v) for v in dilations] if isinstance(dilations, (list, tuple)) else [1] * spatial
    # An unpadded window leaves floor((i - span) / s) + 1 outputs per axis; more means padding. A
    # torch op names no strides and is read at stride 1: a strided padded one reads as unpadded.
    padded = any(o > (i - (dd * (k - 1) + 1)) // ss + 1 for i, o, k, ss, dd in zip(x[2:], out[2:], w[2:], s, d))
    return KernelForm.PADDED_SQUARE if padded else KernelForm.OTHER


def _strided(node: Node, x: tuple[int, ...] | None, w: tuple[int, ...] | None, out: tuple[int, ...] | None) -> bool:
    """ONNX says so in ``strides``; a torch op (no attributes) by an output smaller than even an
    unpadded stride-1 window leaves."""
    strides = node.attr("strides", None)
    if isinstance(strides, (list, tuple)):
        return any(int(s) > 1 for s in strides)
    if not (x and w and out) or not len(x) == len(w) == len(out):
        return False
    return any(o < i - (k - 1) for i, o, k in zip(x[2:], out[2:], w[2:]))


def _grouped(node: Node, op: str, view: GraphView) -> bool:
    """A ``group`` attribute over 1, or (any front end) weights [Cout, Cin/group, k...] that see
    fewer channels than the input [N, Cin, ...] has (a transposed convolution's weights are
    [Cin, Cout/group, k...]: its attribute alone decides)."""
    group = node.attr("group", 1)
    if isinstance(group, int) and group > 1:
        return True
    x, w = _input_and_weights(node, view)
    return bool(x and w and len(x) > 1 and len(w) > 1 and op != "ConvTranspose" and w[1] < x[1])


def _input_and_weights(node: Node, view: GraphView) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """A convolution's input [N, Cin, ...] and weights [Cout, Cin/group, k...] shapes (a weight may
    be a graph input or a constant), or (None, None) with fewer than two operands."""
    shapes = [view.values[v].shape for v in (*node.inputs, *node.const_inputs)]
    return (shapes[0], shapes[1]) if len(shapes) > 1 else (None, None)
