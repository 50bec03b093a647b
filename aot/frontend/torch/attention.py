"""Scaled dot-product attention as two matmuls and a softmax, for Vulkan builds.

IREE 3.13 lowers ``aten.scaled_dot_product_attention`` to ``iree_linalg_ext.online_attention``,
which its SPIR-V pipeline cannot compile ("result #0 must be variadic of ranked tensor ... but got
'memref<...workgroup>'"); the region then falls back to the host whole. Written out as
``softmax(Q·Kᵀ·scale + mask)·V``, as the ONNX exporter writes attention, every op has a SPIR-V
lowering. CUDA and the CPU keep the fused op.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def sdpa_as_matmuls(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
                    dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                    enable_gqa: bool = False) -> torch.Tensor:
    """The math of ``torch.nn.functional.scaled_dot_product_attention`` (eval: no dropout)."""
    import torch

    if dropout_p:
        raise ValueError("attention dropout must be 0 when exporting for inference (call model.eval())")
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], -3)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = (scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                  else scores + attn_mask)
    return torch.matmul(torch.softmax(scores, -1), v)
