"""The one front-end interface: what the build asks of a loaded model, whichever front end made it.

``ModelSource`` (ONNX, ``frontend/load.py``) and ``TorchSource`` (PyTorch through iree-turbine,
``frontend/torch/export.py``) both implement ``FrontEnd``. The stages after loading ask the
interface and never which front end they hold: what the manifest states about the model, and
which op families a node belongs to (the tuner offers convolution or quantised-matmul flag sets
only to regions that hold them). The references (onnxruntime, PyTorch eager) and the importers
live with the stages that use them (``checks/``, ``lower/``), keyed by ``FrontEndKind``.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Iterable, Protocol

from aot.frontend.graph import GraphView

if TYPE_CHECKING:
    from aot.frontend.expand import Expanded


class FrontEndKind(str, enum.Enum):
    """Which front end loaded a model; the value is what the manifest writes."""

    ONNX = "onnx"
    TORCH = "torch"


class OpFamily(enum.Enum):
    CONVOLUTION = "convolution"
    QUANTIZED = "quantized"     # integer matmuls/convolutions and (de)quantisation


class FrontEnd(Protocol):
    """A loaded model, as every stage after loading sees it."""

    @property
    def name(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    @property
    def opset(self) -> int: ...
    @property
    def folded_nodes(self) -> int: ...
    @property
    def frontend(self) -> str: ...
    @property
    def expanded(self) -> tuple[Expanded, ...]:
        """Ops written out as their function bodies before planning (``frontend/expand.py``)."""
        ...

    def op_families(self, op_type: str) -> frozenset[OpFamily]:
        """The families of an op type of this front end's vocabulary (``Conv``, ``aten.conv2d``)."""
        ...


_CONV, _QUANT = frozenset({OpFamily.CONVOLUTION}), frozenset({OpFamily.QUANTIZED})
ONNX_FAMILIES = {
    "Conv": _CONV, "ConvTranspose": _CONV, "ConvInteger": _CONV | _QUANT, "QLinearConv": _CONV | _QUANT,
    "MatMulInteger": _QUANT, "QLinearMatMul": _QUANT, "DequantizeLinear": _QUANT, "DynamicQuantizeLinear": _QUANT,
}
TORCH_FAMILIES = {
    **{f"aten.{op}": _CONV for op in ("convolution", "_convolution", "conv1d", "conv2d", "conv3d",
                                      "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")},
    "aten._int_mm": _QUANT,
}
# Integer tensors of these types mark a node as quantised whatever its op (int8 weights -> matmul).
_QUANTIZED_DTYPES = frozenset({"int8", "uint8"})


def region_families(source: FrontEnd, view: GraphView, nodes: Iterable[str]) -> frozenset[OpFamily]:
    """The op families among ``nodes`` of ``view``: by op type, and quantised wherever a node
    reads or writes an 8-bit integer tensor."""
    found: set[OpFamily] = set()
    for name in nodes:
        node = view.node(name)
        found |= source.op_families(node.op_type)
        if any(view.values[v].dtype in _QUANTIZED_DTYPES for v in (*node.inputs, *node.outputs) if v in view.values):
            found.add(OpFamily.QUANTIZED)
    return frozenset(found)
