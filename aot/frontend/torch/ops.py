"""Torch op types as the partitioner and the cost model see them (pure data, no torch import).

A node's op type is its ATen overload packet without the ``torch.`` dialect prefix or overload
suffix: ``torch.aten.softmax.int`` -> ``aten.softmax``. The support tables name ops that way
(``partition/support.py``); this module says which ONNX op each computes like, so FLOP counts and
"is this compute?" have one definition for both front ends.
"""

from __future__ import annotations

# torch op type -> the ONNX op whose FLOP formula and compute class it shares.
ONNX_EQUIVALENT: dict[str, str] = {
    **{f"aten.{op}": "Conv" for op in ("conv1d", "conv2d", "conv3d", "convolution")},
    **{f"aten.{op}": "ConvTranspose" for op in ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")},
    **{f"aten.{op}": "MatMul" for op in ("linear", "matmul", "mm", "bmm")},
    **{f"aten.{op}": "Softmax" for op in ("softmax", "_softmax", "log_softmax", "_log_softmax")},
    **{f"aten.{op}": "LayerNormalization" for op in ("layer_norm", "native_layer_norm")},
    **{f"aten.{op}": "BatchNormalization" for op in ("batch_norm", "_native_batch_norm_legit_no_training")},
    "aten.group_norm": "GroupNormalization",
    "aten.max_pool2d": "MaxPool", "aten.avg_pool2d": "AveragePool",
    "aten.adaptive_avg_pool2d": "GlobalAveragePool",
    "aten.mean": "ReduceMean", "aten.sum": "ReduceSum", "aten.amax": "ReduceMax", "aten.amin": "ReduceMin",
    **{f"aten.{op}": onnx for op, onnx in (
        ("add", "Add"), ("sub", "Sub"), ("mul", "Mul"), ("div", "Div"), ("pow", "Pow"), ("sqrt", "Sqrt"),
        ("rsqrt", "Sqrt"), ("exp", "Exp"), ("log", "Log"), ("tanh", "Tanh"), ("sigmoid", "Sigmoid"),
        ("erf", "Erf"), ("relu", "Relu"), ("leaky_relu", "LeakyRelu"), ("prelu", "PRelu"), ("elu", "Elu"),
        ("hardsigmoid", "HardSigmoid"), ("hardswish", "HardSwish"), ("gelu", "Gelu"), ("silu", "Sigmoid"),
        ("softplus", "Softplus"), ("mish", "Mish"), ("neg", "Neg"), ("abs", "Abs"),
        ("reciprocal", "Reciprocal"), ("sin", "Sin"), ("cos", "Cos"), ("clamp", "Clip"))},
}

# Attention: Q·Kᵀ and the weighted sum of V, each 2·L·S·E FLOPs per batch and head.
ATTENTION = "aten.scaled_dot_product_attention"


def op_type(mlir_op: str, packet: str | None = None) -> str:
    """``packet`` (``aten.add``, from the exported program) when known; otherwise the MLIR op
    name without its dialect prefix (``torch.aten.add.Tensor`` -> ``aten.add.Tensor``)."""
    return packet or mlir_op.removeprefix("torch.")
