"""Ops written out before import, because the torch-dialect path cannot take them whole.

- ``nn.LSTM``, ``nn.GRU``, ``nn.RNN``: iree-turbine writes ``aten.lstm``/``aten.gru``/``aten.rnn_*``
  as opaque ``torch.operator`` ops that nothing lowers. torch's own decompositions give their
  per-step matmuls and gates (unrolled over the static sequence, as an exported ONNX LSTM's loop
  is in IREE).
- ``nn.InstanceNorm*`` without affine parameters (the default): torch-mlir's lowering of
  ``aten.instance_norm`` unsqueezes the absent weight ("'torch.aten.unsqueeze' op operand #0 must
  be Any Torch tensor type, but got '!torch.none'") and the region fails to compile. Written out
  as mean, variance and a scale per instance and channel.
- ``nn.PReLU`` with one slope per channel: torch-mlir's lowering of ``aten.prelu`` broadcasts the
  slopes along the last dimension instead of the channel one ("'linalg.generic' op inferred
  input/output operand #1 has shape's dimension #0 to be 5, but found 16"). Written out as a
  ``where`` with the slopes shaped for dimension 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def table() -> dict[Any, Any]:
    """ATen overload -> its decomposition, for ``ExportedProgram.run_decompositions``."""
    import torch
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    return {**get_decompositions([aten.lstm.input, aten.lstm.data, aten.gru.input, aten.gru.data,
                                  aten.rnn_tanh.input, aten.rnn_relu.input]),
            aten.instance_norm.default: instance_norm, aten.prelu.default: prelu}


def instance_norm(x: "torch.Tensor", weight: "torch.Tensor | None", bias: "torch.Tensor | None",
                  running_mean: "torch.Tensor | None", running_var: "torch.Tensor | None", use_input_stats: bool,
                  momentum: float, eps: float, cudnn_enabled: bool) -> "torch.Tensor":
    """The math of ``aten.instance_norm`` in eval: each instance and channel normalised over its
    own positions (or by the running statistics when they are tracked and not used to train)."""
    import torch

    per_channel = (1, x.shape[1], *([1] * (x.dim() - 2)))
    if use_input_stats or running_mean is None or running_var is None:
        dims = tuple(range(2, x.dim()))
        mean = x.mean(dims, keepdim=True)
        var = x.var(dims, unbiased=False, keepdim=True)
    else:
        mean, var = running_mean.reshape(per_channel), running_var.reshape(per_channel)
    y = (x - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.reshape(per_channel)
    if bias is not None:
        y = y + bias.reshape(per_channel)
    return y


def prelu(x: "torch.Tensor", weight: "torch.Tensor") -> "torch.Tensor":
    """``aten.prelu``: x where it is positive, else x times its channel's slope (dimension 1; one
    slope for every channel when there is one)."""
    import torch

    if weight.numel() > 1 and x.dim() > 1:
        weight = weight.reshape(1, -1, *([1] * (x.dim() - 2)))
    return torch.where(x > 0, x, x * weight)
