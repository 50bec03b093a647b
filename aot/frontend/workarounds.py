"""Rewrites at the ONNX level that keep valid models away from known IREE 3.13 miscompiles.

Each rewrite preserves the model's values exactly and names the bug it avoids, so it can be
deleted once IREE fixes it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from aot.frontend.fold import static_shapes
from aot.frontend.passes import PassResult, rewrite_result


def trim_conv_end_padding(model: onnx.ModelProto) -> PassResult:
    """Pass: drop the end padding a strided Conv never reads; count the spatial axes trimmed.

    IREE 3.13 fails to compile a strided Conv whose padded input is longer than the windows it
    covers when the output has one position (``'linalg.generic' op inferred input/output operand
    #1 has shape's dimension #2 to be 4, but found 3``; e.g. Conv1d k=3 s=2 pads=[1,1] on length
    2, in Silero VAD's encoder). Trailing pad elements past the last window do not change any
    output, so removing them gives the same values and a shape IREE handles. Where the unread
    tail is longer than the end padding, a Slice drops the unread input elements too.
    """
    shapes = {name: list(dims) for name, dims in static_shapes(model.graph).items()}
    shapes.update({t.name: list(t.dims) for t in model.graph.initializer})
    changed = 0
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    for node in model.graph.node:
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        x, w = shapes.get(node.input[0]), shapes.get(node.input[1])
        attrs = {a.name: a for a in node.attribute}
        auto_pad = attrs["auto_pad"].s if "auto_pad" in attrs else b"NOTSET"
        if not x or not w or 0 in x or "pads" not in attrs or auto_pad not in (b"", b"NOTSET"):
            nodes.append(node)
            continue
        rank = len(x) - 2
        kernel = list(attrs["kernel_shape"].ints) if "kernel_shape" in attrs else w[2:]
        strides = list(attrs["strides"].ints) if "strides" in attrs else [1] * rank
        dilations = list(attrs["dilations"].ints) if "dilations" in attrs else [1] * rank
        pads, ends = list(attrs["pads"].ints), list(x[2:])
        trimmed = 0
        for i in range(rank):
            span = x[2 + i] + pads[i] + pads[rank + i] - dilations[i] * (kernel[i] - 1) - 1
            unused = span % strides[i] if span >= 0 else 0
            cut = min(unused, pads[rank + i])
            pads[rank + i] -= cut
            ends[i] -= unused - cut
            trimmed += unused > 0
        if not trimmed:
            nodes.append(node)
            continue
        conv = onnx.NodeProto()  # a copy: the input model stays as it was
        conv.CopyFrom(node)
        next(a for a in conv.attribute if a.name == "pads").ints[:] = pads
        if ends != x[2:]:
            nodes.append(_slice_input(conv, ends, inits))
        nodes.append(conv)
        changed += trimmed
    return rewrite_result(model, nodes, inits, changed)


def _slice_input(conv: onnx.NodeProto, ends: list[int], inits: list[onnx.TensorProto]) -> onnx.NodeProto:
    """A Slice keeping the first `ends` elements of `conv`'s spatial axes, its constants appended
    to `inits`; rewires `conv` to read it."""
    base = f"{conv.name}/unread_tail"
    for suffix, values in (("ends", ends), ("starts", [0] * len(ends)), ("axes", list(range(2, 2 + len(ends))))):
        inits.append(numpy_helper.from_array(np.array(values, np.int64), f"{base}/{suffix}"))
    sliced = onnx.helper.make_node("Slice", [conv.input[0], f"{base}/starts", f"{base}/ends", f"{base}/axes"],
                                   [f"{base}/out"], name=base)
    conv.input[0] = f"{base}/out"
    return sliced


def expand_reflect_pad(model: onnx.ModelProto) -> PassResult:
    """Pass: rewrite ``Pad(mode="reflect")`` as reversed Slices concatenated around the input;
    count the Pads rewritten.

    IREE 3.13's llvm-cpu codegen fails on many reflect pads (``'linalg.generic' op inferred
    input/output operand #0 has shape's dimension #0 to be greater than or equal to 64, but found
    57`` for a [1,576] input padded by 64 at the end, as in Silero VAD's STFT; 16, 32, 33 and 63
    fail too, 8, 9 and 17 do not). A reflected border is the input read backwards, ``x[p:0:-1]``
    in front and ``x[-2:-2-p:-1]`` behind, which IREE compiles for every size.
    """
    shapes = {name: list(dims) for name, dims in static_shapes(model.graph).items()}
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    rewritten = 0
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    for node in model.graph.node:
        mode = next((a.s for a in node.attribute if a.name == "mode"), b"constant")
        x = shapes.get(node.input[0]) if node.op_type == "Pad" and mode == b"reflect" else None
        pads = consts.get(node.input[1]) if x and len(node.input) > 1 else None
        if x is None or pads is None or 0 in x or (len(node.input) > 3 and node.input[3]) or (pads < 0).any() \
                or any(p >= n for p, n in zip(pads, x * 2)):
            nodes.append(node)
            continue
        current = node.input[0]
        axes = [i for i in range(len(x)) if pads[i] or pads[len(x) + i]]
        for k, axis in enumerate(axes):
            before, after, n = int(pads[axis]), int(pads[len(x) + axis]), x[axis]
            parts = [current]
            if before:
                parts.insert(0, _reversed_slice(inits, nodes, f"{node.name}/ax{axis}/front", current, axis, before, 0))
            if after:
                # An end of -1 would mean "the last element" to Slice; -(n+1) means "before the first".
                end = n - 2 - after if n - 2 - after >= 0 else -(n + 1)
                parts.append(_reversed_slice(inits, nodes, f"{node.name}/ax{axis}/back", current, axis, n - 2, end))
            out = node.output[0] if k == len(axes) - 1 else f"{node.name}/ax{axis}/out"
            nodes.append(onnx.helper.make_node("Concat", parts, [out], name=f"{node.name}/ax{axis}", axis=axis))
            current = out
        rewritten += 1
    return rewrite_result(model, nodes, inits, rewritten)


def _reversed_slice(inits: list[onnx.TensorProto], nodes: list[onnx.NodeProto], base: str, value: str, axis: int,
                    start: int, end: int) -> str:
    """Append to `nodes` a Slice reading `value` backwards along `axis` from `start` down to `end`
    (exclusive), and its constants to `inits`."""
    for suffix, v in (("starts", start), ("ends", end), ("axes", axis), ("steps", -1)):
        inits.append(numpy_helper.from_array(np.array([v], np.int64), f"{base}/{suffix}"))
    nodes.append(onnx.helper.make_node("Slice", [value, *(f"{base}/{s}" for s in ("starts", "ends", "axes", "steps"))],
                                       [f"{base}/out"], name=base))
    return f"{base}/out"
