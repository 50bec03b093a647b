"""The ops no IREE 3.13 target compiles in any variant, even after function expansion and
legalization: a model holding one is refused when it is loaded, with a ``ModelError`` naming the
node, the op and the limitation, instead of a compile error with MLIR in it after partitioning.

An op is listed only when every onnx 1.23 node test holding it fails on llvm-cpu with no lowering
pattern for it (docs/conformance.md; counts below), so no model that builds today is refused. An
op with any variant that compiles (Loop, Compress, Unique, ...) is not listed: its failing
variants still reach the compiler, which names the problem.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import onnx

from aot.frontend.legalize.base import Context

_NO_PATTERN = "IREE 3.13's ONNX import has no lowering for it"
_STRINGS = "IREE compiles numeric tensors only; string processing belongs before or after the model"

# op -> why no target compiles it (and how many node tests, all failing, hold it).
UNLOWERABLE: Mapping[str, str] = {
    "LinearAttention": f"{_NO_PATTERN}, and its function body holds ops that have none either (0 of 28 node tests)",
    "BitCast": f"{_NO_PATTERN} (0 of 10 node tests)",
    "ImageDecoder": f"{_NO_PATTERN}; decode images before calling the model (0 of 9 node tests)",
    "StringSplit": _STRINGS, "StringNormalizer": _STRINGS, "StringConcat": _STRINGS, "RegexFullMatch": _STRINGS,
    "TensorScatter": f"{_NO_PATTERN} (0 of 3 node tests)",
    # 2-D DeformConv over static shapes is legalized (legalize/deform_conv.py); any other is refused.
    "DeformConv": f"{_NO_PATTERN}, and aot rewrites only the 2-D form with static shapes",
    "RoiAlign": f"{_NO_PATTERN} (0 of 3 node tests)",
    "MaxUnpool": f"{_NO_PATTERN} (0 of 2 node tests)",
}


def _peepholes(node: onnx.NodeProto, ctx: Context) -> bool:
    """An LSTM with peephole weights that are not known to be all zero."""
    if len(node.input) < 8 or not node.input[7]:
        return False
    weights = ctx.const(node.input[7])
    return weights is None or bool(weights.any())


# Variants of ops that otherwise compile but compute wrong in every variant IREE 3.13 lowers:
# (op, condition, limitation). Float64 Mod with fmod=0, refused here before (IREE links it against
# libm's fmod, which its float64 runtime lacks), is now an exact long division (legalize/exact_mod.py).
REFUSED_VARIANTS: tuple[tuple[str, Callable[[onnx.NodeProto, Context], bool], str], ...] = (
    ("LSTM", _peepholes, "its peephole weights P: IREE 3.13's LSTM leaves them out and computes another result "
                         "(node test lstm_with_peepholes, off by up to 0.0055)"),
)


def unlowerable_nodes(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, str]]:
    """The graph's standard-domain nodes no target compiles, each with its limitation."""
    ctx = Context.of(model)
    found = []
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        if n.op_type in UNLOWERABLE:
            found.append((n, UNLOWERABLE[n.op_type]))
        found += [(n, why) for op, applies, why in REFUSED_VARIANTS if n.op_type == op and applies(n, ctx)]
    return found
