"""Mod with ``fmod=0`` on float64: refused with a ModelError naming the node, not rewritten.

IREE 3.13 lowers the floored float remainder through libm's ``fmod``, which its embedded float64
runtime lacks: the link fails (``iree-lld: error: undefined symbol: fmod``; node tests
``mod_float64_mixed_sign_fmod_0``, ``mod_float_edge_cases_fmod_0_float64``). float16 / float32
link (``fmodf``) and are left alone.

No exact rewrite into ops IREE lowers exists without an exact remainder to start from:
``x - y * trunc(x / y)`` (how IREE computes ``fmod=1`` itself) loses the low bits whenever the
quotient is large or the division rounds (measured on llvm-cpu, float64 ``fmod=1``: 5 mod 0.1
gives -2.8e-16 where the remainder is 0.09999999999999973, (1e17 + 3) mod 3 gives 4, 3 mod -inf
gives NaN). An exact remainder needs an unbounded, data-dependent number of exact reduction steps
(up to ~2,000 for float64 exponents), not a few large ops. So a model holding one gets a clear
error at load instead of a linker error: it names the node and what to change.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto

from aot.errors import ModelError
from aot.frontend.legalize.base import Context, Legalization, Replacement, attrs


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    return int(attrs(node).get("fmod", 0)) == 0 and ctx.dtypes.get(node.input[0]) == TensorProto.DOUBLE


def _refuse(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    raise ModelError(f"node {node.name!r}: Mod with fmod=0 on float64 cannot be built: IREE 3.13 links it "
                     "against libm's fmod, which its float64 runtime lacks, and no exact rewrite into ops it "
                     "lowers exists", hint="compute the remainder in float32 (Cast around the Mod), or outside "
                     "the model")


LEGALIZATIONS = (Legalization("Mod", "IREE 3.13 cannot link a float64 Mod with fmod=0 (no libm fmod); refused "
                              "with a ModelError naming the node", _applies, _refuse),)
