"""Mod as an exact float64 remainder built from divisions, floors, products and selects.

IREE 3.13 lowers a float64 Mod with fmod=0 (the floored remainder, numpy's ``mod``) through libm's
``fmod``, which its embedded float64 runtime does not link (``iree-lld: error: undefined symbol:
fmod``; node tests ``mod_float64_mixed_sign_fmod_0``, ``mod_float_edge_cases_fmod_0_float64``), and
fmod=1 as ``x - y * trunc(x / y)``, which loses the low bits whenever the division rounds (measured:
5 mod 0.1 gave -2.8e-16, (1e17 + 3) mod 3 gave 4). Both are rewritten here, exactly. A float32,
float16 or bfloat16 Mod with fmod=1 is computed the same way (measured on llvm-cpu, float32: 3,543
of 20,000 random pairs wrong, e.g. -287585312 mod -1.09e-8 gave -6.88 where fmod is -9.07e-9): its
operands are exact in float64, their remainder is exact in their own type, and 12 steps cover
their widest quotient (2**277). fmod=0 in those types links ``fmodf`` and is exact already.

The truncated remainder of two finite doubles is always a double, and it can be computed without
rounding: with A = |a| and B = |b|, reduce A by multiples of B * 2**(25 k) for k from 83 down to 0,
like long division with 25-bit digits. Each step takes q = floor(A / Bk + 1/2), the nearest integer
to the quotient (at most 2**25, because the step before left A < B(k+1) = Bk * 2**25), and subtracts
q * Bk exactly: Bk is split (Veltkamp, once, then scaled by powers of two) into a 26-bit head and a
26-bit tail, so q * head and q * tail are exact products, ``A - q * head`` is a multiple of Bk's
last place no larger than 2**(e+1) (so it is a double), and subtracting ``q * tail`` leaves the
exact A - q * Bk, whose magnitude is at most Bk / 2. A negative result takes Bk back (exact: the
sum is the true remainder modulo Bk, a double below Bk). Where q is 0 or 1 the step is ``A - q * Bk``
instead (exact by Sterbenz's lemma), which also covers a head that overflows next to DBL_MAX.
An A in the top binade is halved first (a rounded-up q could make q * head overflow), and the
result doubled back, less B where it reaches B (Sterbenz again). 84 steps cover every pair of
finite doubles: A / B < 2**1024 / 2**-1074 = 2**2098 < 2**(25 * 84).
So the result is exact for every input, not only for small quotients; the price is about 1,600
elementwise ops, which IREE fuses into one dispatch (a node test compiles in 12-17 s on llvm-cpu).

IREE's float64 arithmetic flushes subnormals to zero (a plain Mul does), so no step may pass
through one unless the result is one: B is split at a scale where its tail is normal, and where B
is below 2**-900 the last 8 steps and the sign corrections run scaled by 2**200. Checked on IREE
(llvm-cpu) against numpy bit for bit on 44,000 pairs: equal wherever the operands and the result
are normal (or zero, infinite, NaN); a subnormal operand counts as 0 and a subnormal result comes
out 0, as in every other IREE float op.

Then the signs and special values, as numpy computes them (``np.fmod``, and ``np.mod`` for fmod=0:
fmod's result, plus b when it is nonzero and its sign differs from b's, and a zero signed like b):
NaN where a is NaN or infinite, or b is NaN or 0; a itself where b is infinite.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs

DIGIT_BITS = 25            # bits of quotient per step: q * head and q * tail stay within 53 bits
STEPS = 84                 # 25 * 84 = 2100 > 2098, the widest exponent gap between two finite doubles
_SPLIT = 2.0 ** 27 + 1     # Veltkamp's constant for a 26 + 26 bit split of a 53-bit significand
# IREE's float64 arithmetic flushes subnormals to zero (measured: a plain Mul returns 0 for a
# subnormal product), so no intermediate may be subnormal unless the result is. B is split at a
# scale in [2**-900, 2**900] (the product with _SPLIT must not overflow, and the tail, down to
# 2**-52 of B, must stay normal): a large B by 2**-100, a small one by 2**200 (= the digit ** 8,
# so the scaled rungs are the true ones 8 places down), powers of two, exact both ways.
_FAR = 2.0 ** 900
_DOWN, _UP = 2.0 ** -100, 2.0 ** 200
_LOW_RUNGS = 8             # 25 * 8 = 200: where B is small, the last 8 steps run scaled by _UP


# narrow float type -> steps that cover its widest quotient (float32: 2**128 / 2**-149 < 2**(25 * 12))
_NARROW_STEPS: dict[int, int] = {T.FLOAT: 12, T.FLOAT16: 12, T.BFLOAT16: 12}


def _steps(node: onnx.NodeProto, ctx: Context) -> int | None:
    dtype = ctx.dtypes.get(node.input[0])
    if dtype != ctx.dtypes.get(node.input[1]):
        return None
    if dtype == T.DOUBLE:
        return STEPS
    return _NARROW_STEPS.get(dtype or 0) if int(attrs(node).get("fmod", 0)) else None


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    return _steps(node, ctx) is not None


def _remainder(e: Emitter, a: str, b: str, steps: int) -> tuple[str, str, str]:
    """|a| mod |b| for finite a and finite nonzero b, exactly (anything, for other inputs), scaled
    by 2**200 where b is small (a subnormal remainder can still give a normal floored result); with
    that scale and its inverse."""
    def c(value: float, hint: str = "c") -> str:
        return e.const(np.float64(value), hint=hint)

    big_a = e.op("Abs", [a])
    big_b = e.op("Abs", [b])
    large, small = e.op("Greater", [big_b, c(_FAR)]), e.op("Less", [big_b, c(1 / _FAR)])

    def per_element(if_large: float, if_small: float, otherwise: float) -> str:
        return e.op("Where", [large, c(if_large), e.op("Where", [small, c(if_small), c(otherwise)])])

    scaled = e.op("Mul", [big_b, per_element(_DOWN, _UP, 1.0)])
    product = e.op("Mul", [scaled, c(_SPLIT, "split")])
    head = e.op("Sub", [product, e.op("Sub", [product, scaled])])
    tail = e.op("Sub", [scaled, head])

    def ladder(rung: tuple[str, str, str], count: int) -> list[tuple[str, str, str]]:
        """``rung`` times 2**(25 k) for k < count, bottom up (exact until it overflows to inf,
        where every quotient is 0)."""
        rungs = [rung]
        for _ in range(1, count):
            bk, hk, tk = (e.op("Mul", [v, digit]) for v in rungs[-1])
            rungs.append((bk, hk, tk))
        return rungs

    digit = c(2.0 ** DIGIT_BITS, "digit")
    # rungs 8..83 in true units: B * 2**200, and its head and tail from the scaled split
    to_true = per_element(_UP / _DOWN, 1.0, _UP)
    high = ladder((e.op("Mul", [big_b, c(_UP)]), e.op("Mul", [head, to_true]), e.op("Mul", [tail, to_true])),
                  steps - _LOW_RUNGS)
    # rungs 0..7: in true units, or scaled by 2**200 where B is small (the rest is then scaled too)
    low_scale = e.op("Where", [small, c(_UP), c(1.0)])
    to_low = per_element(1 / _DOWN, 1.0, 1.0)
    low = ladder((e.op("Mul", [big_b, low_scale]), e.op("Mul", [head, to_low]), e.op("Mul", [tail, to_low])),
                 _LOW_RUNGS)
    half, two, zero, most = c(0.5, "half"), c(2.0, "two"), c(0.0, "zero"), c(np.finfo(np.float64).max, "max")

    def step(rest: str, bk: str, hk: str, tk: str) -> str:
        q = e.op("Floor", [e.op("Add", [e.op("Div", [rest, bk]), half])])
        # q = 0 or 1: one subtraction, exact by Sterbenz; Min keeps 0 * inf (q = 0, Bk overflowed) 0
        one = e.op("Sub", [rest, e.op("Mul", [q, e.op("Min", [bk, most])])])
        many = e.op("Sub", [e.op("Sub", [rest, e.op("Mul", [q, hk])]), e.op("Mul", [q, tk])])
        r = e.op("Where", [e.op("Less", [q, two]), one, many])
        return e.op("Where", [e.op("Less", [r, zero]), e.op("Add", [r, bk]), r])

    # A in the top binade is halved first, so that no product q * head overflows (q rounds to
    # nearest, so q * Bk can pass A); |a| mod |b| is then 2 (A/2 mod B) less B if that reaches B
    top = e.op("GreaterOrEqual", [big_a, c(2.0 ** 1023, "top")])
    rest = e.op("Where", [top, e.op("Mul", [big_a, half]), big_a])
    for rung in reversed(high):
        rest = step(rest, *rung)
    rest = e.op("Mul", [rest, low_scale])   # < B * 2**200 <= 2**-700 where scaled: no overflow
    for rung in reversed(low):
        rest = step(rest, *rung)
    low_b = low[0][0]
    twice = e.op("Mul", [rest, two])   # <= A: rest <= A/2, so it does not overflow
    twice = e.op("Where", [e.op("GreaterOrEqual", [twice, low_b]), e.op("Sub", [twice, low_b]), twice])   # Sterbenz
    return e.op("Where", [top, twice, rest]), low_scale, e.op("Where", [small, c(1 / _UP), c(1.0)])


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    steps = _steps(node, ctx)
    if steps is None:
        return None
    e = Emitter(node)
    dtype = ctx.dtypes[node.input[0]]
    a, b = node.input[0], node.input[1]
    if dtype != T.DOUBLE:   # exact in float64; the remainder is exact in the narrow type again
        a, b = e.op("Cast", [a], to=T.DOUBLE), e.op("Cast", [b], to=T.DOUBLE)
    zero = e.const(np.float64(0.0), hint="zero")
    r, scale, unscale = _remainder(e, a, b, steps)
    exact_zero = e.op("Equal", [r, zero])   # before unscaling, which flushes a subnormal result to 0
    # fmod: the sign of a
    r = e.op("Where", [e.op("Less", [a, zero]), e.op("Neg", [r]), r])
    r = e.op("Where", [e.op("IsInf", [b]), a, r])   # the scale is 1 there
    invalid = e.op("Or", [e.op("Or", [e.op("IsNaN", [a]), e.op("IsInf", [a])]),
                          e.op("Or", [e.op("IsNaN", [b]), e.op("Equal", [b, zero])])])
    if int(attrs(node).get("fmod", 0)):
        # a zero is signed like a (a * 0, for finite a)
        r = e.op("Where", [exact_zero, e.op("Mul", [a, zero]), e.op("Mul", [r, unscale])])
    else:   # floored: numpy's divmod correction, in the same float64 arithmetic (at the same scale)
        negative_b = e.op("Less", [b, zero])
        differ = e.op("And", [e.op("Not", [e.op("Equal", [r, zero])]),
                              e.op("Xor", [e.op("Less", [r, zero]), negative_b])])
        shifted = e.op("Mul", [e.op("Where", [differ, e.op("Add", [r, e.op("Mul", [b, scale])]), r]), unscale])
        signed_zero = e.op("Where", [negative_b, e.const(np.float64(-0.0), hint="minus_zero"), zero])
        r = e.op("Where", [e.op("Equal", [r, zero]), signed_zero, shifted])
    out = node.output[0] if dtype == T.DOUBLE else None
    r = e.op("Where", [invalid, e.const(np.float64(np.nan), hint="nan"), r], out=out)
    if dtype != T.DOUBLE:
        e.op("Cast", [r], out=node.output[0], to=dtype)
    return e.replacement()


LEGALIZATIONS = (Legalization("Mod", "IREE 3.13 links a float64 Mod with fmod=0 against libm's fmod, which its float64 "
                                     "runtime lacks, and computes fmod=1 inexactly in every float type; it is an exact "
                                     "float64 long division",
                              _applies, _rewrite),)
