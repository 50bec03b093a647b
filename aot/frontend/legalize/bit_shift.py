"""BitShift of signed integers by amounts outside [0, width), written out with Where.

Opset 28 allows signed BitShift and defines every amount: one that is negative or at least the
element's width shifts everything out, leaving 0 to the left and the sign (0 or -1) to the right.
IREE 3.13 passes such amounts to LLVM's shift, whose result is then undefined (node tests
``bitshift_{left,right}_int8_{negative_shift,shift_ge_width}`` computed 4, -8, ...). The rewrite
shifts by 0 where the amount is out of range and selects the defined result there; in-range
amounts shift as before, so results are exact.
"""

from __future__ import annotations

import numpy as np
import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs


def _signed(node: onnx.NodeProto, ctx: Context) -> np.dtype | None:
    dtype = ctx.numpy_dtype(node.input[0])
    return dtype if dtype is not None and dtype.kind == "i" else None


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    dtype = _signed(node, ctx)
    if dtype is None:
        return False
    amounts = ctx.const(node.input[1])   # constant amounts all in range need nothing
    return amounts is None or bool(((amounts < 0) | (amounts >= 8 * dtype.itemsize)).any())


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    dtype = _signed(node, ctx)
    if dtype is None:
        return None
    e = Emitter(node)
    x, amount = node.input
    zero = e.const(np.array(0, dtype), hint="zero")
    outside = e.op("Or", [e.op("Less", [amount, zero]),
                          e.op("GreaterOrEqual", [amount, e.const(np.array(8 * dtype.itemsize, dtype), hint="width")])])
    shifted = e.op("BitShift", [x, e.op("Where", [outside, zero, amount])], direction=attrs(node)["direction"])
    if attrs(node)["direction"] == b"LEFT":
        emptied = zero
    else:   # the sign fills every bit
        emptied = e.op("Where", [e.op("Less", [x, zero]), e.const(np.array(-1, dtype), hint="ones"), zero])
    e.op("Where", [outside, emptied, shifted], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization("BitShift", "IREE 3.13 leaves a signed BitShift by an amount outside [0, width) to "
                              "LLVM's undefined shift; the defined result (0, or the sign) is selected there",
                              _applies, _rewrite),)
