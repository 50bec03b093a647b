"""A 1-D convolution with a long kernel as one matmul with a banded (Toeplitz) matrix.

Basic Pitch's constant-Q front end halves the sample rate eight times with a 256-tap low-pass Conv
(stride 2, one channel in and out) over the raw audio; PESTO's pitch network runs 39-tap Convs over
40 channels along 219 frequency bins of each frame, and ends in a 1040-tap one-channel Conv.
IREE 3.13's CPU code ran these at 5-14 GFLOP/s: its direct convolution vectorises along the
channels (one here, or 40 over 100 frames of 219 bins), and its im2col, written as a 2-D
convolution, gathers a matrix 39 times the input (137 MB for PESTO's; 47 ms to write). For
outputs cut into blocks of ``B`` the same sums are one product:

    y[co, t*B + r] = sum_(ci, m) X[t, ci, m] * W[ci, m, co, r]
    X[t, ci] = x[ci, s*B*t : s*B*t + s*(B-1) + taps],   W[ci, m, co, r] = w[co, ci, m - s*r]

(``s`` the stride, ``W`` zero outside the band). The rows of ``X`` overlap: ``q`` consecutive rows
of ``x`` cut into rows of ``s*B``, concatenated (the last cut short), about ``1 + s*B / taps``
times the input instead of ``taps`` times. ``B`` near ``taps / s`` keeps the band at half of ``W``
or more (at most twice the multiply-adds; more where ``taps / s`` is under ``MIN_BLOCK``, which a
strided short filter pays for a product wide enough to run well); of it and its halvings under
``MAX_BAND`` elements of ``W``, the block whose product, copies and weights cost least is taken
(``Band.cost``: a small block copies a many-channel input often, CREPE's 128 channels 17 times at
``B = 4``). A filter under ``MIN_TAPS`` over one image stays with IREE's convolution (a band
would be mostly zeros, and ``B = 1`` is IREE's own im2col); over a batch it is rewritten too,
mostly at ``B = 1``: IREE runs a batched convolution as one product per image (ICLabel's 128 -> 256
1 x 3 over 80 x 100 bins at 178 GFLOP/s), and the product here runs over the whole batch's rows.
That takes PESTO's 1 x 1 layers over 100 x 219 too; ``banded_layout`` then keeps the chain of
rewritten convolutions channels last (without it the transposes at the products' ends ran at
1 GB/s, and PESTO's tuned build lost 31 -> 36 ms).
Measured (docs/performance.md, stop 55): Basic Pitch's first filter alone 1.02 ms -> 0.16; PESTO's
frame network (whose 40-channel convolutions widened the rule from one channel) 548 ms -> 47-54 at
the default flags, 400 -> 34 tuned; CREPE's (not looked at; its kernels run down the rows of a
one-column input, so the filter's axis is whichever has the taps) 379 -> 64 tuned; with the
block chosen by cost (stop 56) CREPE 70 -> 41 ms, Basic Pitch 0.89x (default) and 0.94x (tuned).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.conv_rewrite import Constants, Replacement, StaticShapes, conv_operands, rewrite_each
from aot.frontend.passes import PassResult

MIN_TAPS = 32      # over one image, a shorter filter leaves W mostly zeros: s*(B-1) + taps multiply-adds per output for `taps`
MIN_BLOCK, MAX_BLOCK = 16, 128   # outputs per product row (times the output channels: N of the matmul)
ROW_ALIGN = 16     # floats in a row of X, the product's K: at IREE's default flags PESTO's ran at
                   # 105 GFLOP/s with K = 1880 and at 195 with 1920
MAX_BAND = 1 << 22               # elements of W (16 MiB of float32): a bundle should not grow past that
# Which block: the one whose product, copies of X and reads of W cost least, in multiply-add
# equivalents. Measured on CREPE's tiny model (docs/performance.md, stop 56): the copies wrote X at
# 6.7 GB/s, data tiling packed it at 15 GB/s and the products ran at 320-370 GFLOP/s, so a float of X
# (written, packed, read) costs about 1.2 ns, 360 flops at 300 GFLOP/s, and a float of W (read) 120.
X_FLOAT_COST = 360
W_FLOAT_COST = 120


def long_filters_as_matmuls(model: onnx.ModelProto) -> PassResult:
    """Pass: rewrite each ungrouped Conv along one axis (every other spatial axis of size one in
    the input and the kernel; a kernel of ``MIN_TAPS`` or more taps along it, or any kernel over a
    batch of images) as a banded matmul; count them."""
    return rewrite_each(model, _rewrite)


def _rewrite(node: onnx.NodeProto, shapes: StaticShapes, consts: Constants) -> Replacement | None:
    ops = conv_operands(node, shapes, consts, "Conv")
    if ops is None:
        return None
    x, attrs, w, spatial = ops.x, ops.attrs, ops.w, len(ops.x) - 2
    pads = tuple(attrs.get("pads", (0,) * 2 * spatial))
    axis = int(np.argmax(w.shape[2:]))      # the filter's axis; every other one must be of size one
    others = [a for a in range(spatial) if a != axis]
    if (w.shape[1] != x[1] or attrs.get("group", 1) != 1 or (w.shape[2 + axis] < MIN_TAPS and x[0] == 1)
            or any(x[2 + a] != 1 or w.shape[2 + a] != 1 or pads[a] or pads[spatial + a] for a in others)
            or any(d != 1 for d in attrs.get("dilations", ()))
            or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID")):
        return None
    band = Band(batch=x[0], channels=x[1], length=x[2 + axis], begin=pads[axis], end=pads[spatial + axis],
                 taps=w.shape[2 + axis], stride=tuple(attrs.get("strides", (1,) * spatial))[axis], filters=w.shape[0])
    if band.outputs < 2:
        return None
    if (chosen := cheapest_block(band)) is None:
        return None
    band = chosen
    out_shape = [band.batch, band.filters] + [band.outputs if a == axis else 1 for a in range(spatial)]
    return _decompose(node, band, w.reshape(w.shape[0], w.shape[1], -1), ops.b, out_shape)


def block_choices(band: Band) -> list[Band]:
    """`band` at its own block and each halving of it down to 1, those whose ``W`` fits ``MAX_BAND``."""
    bands = [band]
    while bands[-1].block > 1:
        bands.append(replace(band, block_limit=bands[-1].block // 2))
    return [b for b in bands if b.elements <= MAX_BAND]


def cheapest_block(band: Band) -> Band | None:
    """Of ``block_choices``, the block of least ``cost``; None when none fits."""
    return min(block_choices(band), key=lambda b: b.cost, default=None)


@dataclass(frozen=True)
class Band:
    """The block geometry of one convolution: ``rows`` product rows (per image) of ``block``
    outputs each, each row reading ``pieces`` consecutive input rows of ``stride * block`` samples."""

    batch: int
    channels: int   # in
    length: int     # samples, before padding
    begin: int      # zeros before them
    end: int        # zeros after them
    taps: int
    stride: int
    filters: int    # output channels
    block_limit: int = MAX_BLOCK

    @property
    def outputs(self) -> int:
        return (self.length + self.begin + self.end - self.taps) // self.stride + 1

    @property
    def block(self) -> int:
        return min(self.outputs, self.block_limit, max(MIN_BLOCK, math.ceil(self.taps / self.stride)))

    @property
    def rows(self) -> int:
        return math.ceil(self.outputs / self.block)

    @property
    def row_len(self) -> int:
        return self.stride * self.block

    @property
    def pieces(self) -> int:
        return math.ceil((self.stride * (self.block - 1) + self.taps) / self.row_len)

    @property
    def window(self) -> int:
        """Samples per channel in one row of X: the last piece cut to what the row's outputs read,
        rounded up so that a row (``window * channels``) is a multiple of ``ROW_ALIGN`` floats."""
        align = ROW_ALIGN // math.gcd(self.channels, ROW_ALIGN)
        return min(-(-(self.stride * (self.block - 1) + self.taps) // align) * align, self.pieces * self.row_len)

    @property
    def padded(self) -> int:
        """Samples the rows read, from the first leading zero on."""
        return (self.rows + self.pieces - 1) * self.row_len

    @property
    def elements(self) -> int:
        """Of W."""
        return self.channels * self.window * self.filters * self.block

    @property
    def x_elements(self) -> int:
        return self.batch * self.rows * self.window * self.channels

    @property
    def cost(self) -> int:
        """Multiply-add equivalents of the product, X's copies and W's reads (``X_FLOAT_COST``):
        a smaller block copies the input more often (about ``taps / (s*B)`` times), a larger one
        multiplies more zeros and reads a larger W."""
        flops = 2 * self.x_elements * self.block * self.filters
        return flops + X_FLOAT_COST * self.x_elements + W_FLOAT_COST * self.elements

    def matrix(self, w: np.ndarray) -> np.ndarray:
        """W as [window * channels, block * filters] from weights [filters, channels, taps]: rows in
        the order of a channels-last window, columns in that of channels-last outputs."""
        band = np.zeros((self.window, self.channels, self.block, self.filters), np.float32)
        for r in range(self.block):
            band[self.stride * r: self.stride * r + self.taps, :, r, :] = w.transpose(2, 1, 0)
        return band.reshape(self.window * self.channels, self.block * self.filters)


def _decompose(node: onnx.NodeProto, band: Band, w: np.ndarray, b: np.ndarray | None,
               out_shape: list[int]) -> Replacement:
    """The nodes, channels last throughout: the input is transposed once (where a row of ``X``
    would be transposed ``pieces`` times over), and the output once, from [outputs, filters]."""
    p = f"{node.name}.banded"
    n, c, f = band.batch, band.channels, band.filters

    def const(name: str, values: list[int]) -> str:
        inits.append(numpy_helper.from_array(np.array(values, np.int64), f"{p}.const.{name}"))
        return f"{p}.const.{name}"

    def op(op_type: str, inputs: list[str], output: str, **kw: Any) -> str:
        nodes.append(helper.make_node(op_type, inputs, [output], name=f"{p}.{output.rsplit('.', 1)[-1]}", **kw))
        return output

    inits: list[onnx.TensorProto] = [numpy_helper.from_array(band.matrix(w), f"{p}.w")]
    nodes: list[onnx.NodeProto] = []
    axis, zero = const("axis", [1]), const("zero", [0])    # every Slice below cuts along axis 1
    if c > 1:
        flat = op("Transpose", [op("Reshape", [node.input[0], const("flat", [n, c, band.length])], f"{p}.samples")],
                  f"{p}.channels_last", perm=[0, 2, 1])
    else:       # one channel: channels last is a Reshape
        flat = op("Reshape", [node.input[0], const("flat", [n, band.length, 1])], f"{p}.channels_last")
    extra = band.padded - band.begin - band.length
    if band.begin or extra > 0:
        flat = op("Pad", [flat, const("pads", [0, band.begin, 0, 0, max(extra, 0), 0])], f"{p}.padded")
    if extra < 0:   # samples past the last output's window
        flat = op("Slice", [flat, zero, const("used", [band.padded]), axis], f"{p}.used")
    rows = op("Reshape", [flat, const("rows", [n, band.rows + band.pieces - 1, band.row_len * c])], f"{p}.rows")
    last = band.pieces - 1
    pieces = [op("Slice", [rows, const(f"from{j}", [j]), const(f"to{j}", [j + band.rows]), axis], f"{p}.piece{j}")
              for j in range(last)]
    tail = (band.window - last * band.row_len) * c
    pieces.append(op("Slice", [rows, const("from_last", [last, 0]), const("to_last", [last + band.rows, tail]),
                               const("last_axes", [1, 2])], f"{p}.piece{last}"))
    windows = op("Concat", pieces, f"{p}.windows", axis=2) if len(pieces) > 1 else pieces[0]
    product = op("MatMul", [windows, f"{p}.w"], f"{p}.product")
    y = op("Reshape", [product, const("outputs", [n, band.rows * band.block, f])], f"{p}.flat_out")
    if band.rows * band.block != band.outputs:
        y = op("Slice", [y, zero, const("end", [band.outputs]), axis], f"{p}.cropped")
    if b is not None:
        inits.append(numpy_helper.from_array(b.astype(np.float32).reshape(1, 1, f), f"{p}.bias"))
        y = op("Add", [y, f"{p}.bias"], f"{p}.biased")
    if f > 1:
        y = op("Transpose", [y], f"{p}.channels_first", perm=[0, 2, 1])
    nodes.append(helper.make_node("Reshape", [y, const("shape", out_shape)], [node.output[0]], name=f"{p}.shape"))
    return nodes, inits
