"""RNN, GRU and LSTM run backwards (``direction`` reverse, and bidirectional for RNN and GRU) as
forward ones over the time-reversed sequence.

IREE 3.13's ONNX importer lowers only forward recurrences of these ops (``failed to legalize
operation 'torch.operator'`` for ``onnx.RNN`` / ``onnx.GRU`` / ``onnx.LSTM``: node tests
``simple_rnn_reverse``, ``simple_rnn_bidirectional``, ``gru_reverse``, ``gru_bidirectional``,
``lstm_reverse``). A bidirectional LSTM lowers (``lstm_bidirectional`` passes) and is left alone, as
is every forward recurrence.

By the standard, the reverse direction processes the steps from the last to the first with its
own weights; its Y holds each step's hidden state at that step's position, and Y_h / Y_c the state
after the last step it processed (position 0). So, exactly: reverse X along the sequence axis (a
Gather with constant reversed indices), run the same op forward with the same attributes, reverse
its Y back; Y_h and Y_c are already the reverse direction's. Bidirectional splits W, R, B, P and
the initial states into their two directions (Split on the num_directions axis), runs the forward
half and the reversed half, and concatenates each output on the num_directions axis; the
activations split the same way (the first half is the forward direction's; the alpha and beta
lists hold values only for the functions that read one, so they split where those run out). Both
``layout``s are handled. With ``sequence_lens`` shorter than the sequence for some batch entries,
the reverse starts at a different step per entry: such a node (or one whose lengths are not
constant) is left as it is; constant lengths that all equal the sequence length are dropped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs, operand

_STATES = {"RNN": 1, "GRU": 1, "LSTM": 2}   # outputs after Y: Y_h (and Y_c)
# The activation functions that read an (alpha, beta) from the node's lists (onnxruntime's rule).
_SCALARS = {"affine": (1, 1), "leakyrelu": (1, 0), "thresholdedrelu": (1, 0), "scaledtanh": (1, 1),
            "hardsigmoid": (1, 1), "elu": (1, 0)}


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    direction = attrs(node).get("direction", b"forward")
    failing = direction == b"reverse" or (direction == b"bidirectional" and node.op_type != "LSTM")
    x = ctx.shape(node.input[0])
    if not failing or x is None or len(x) != 3:
        return False
    lengths_name = operand(node, 4)
    if lengths_name:
        lengths = ctx.const(lengths_name)
        seq = x[1] if attrs(node).get("layout", 0) else x[0]
        return lengths is not None and bool(np.all(lengths == seq))
    return True


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    x = ctx.shape(node.input[0])
    if x is None or not _applies(node, ctx):
        return None
    a = attrs(node)
    layout = int(a.get("layout", 0))
    seq_axis, dir_axis_y, dir_axis_state = (1, 2, 1) if layout else (0, 1, 0)
    steps = x[seq_axis]
    n_out = 1 + _STATES[node.op_type]
    outs = list(node.output) + [""] * (n_out - len(node.output))
    wanted = [bool(o) for o in outs]
    e = Emitter(node)
    backwards = e.const(np.arange(steps - 1, -1, -1, dtype=np.int64), hint="reversed_steps")
    inputs = [operand(node, i) for i in range(8 if node.op_type == "LSTM" else 6)]
    inputs[4] = ""                                 # sequence_lens: all full length (see _applies)
    bidirectional = a.get("direction") == b"bidirectional"
    common = {k: v for k, v in a.items() if k not in ("direction", "activations", "activation_alpha",
                                                      "activation_beta")}

    # The activations name the forward direction's functions first, then the reverse one's; the
    # alpha and beta lists hold values only for the functions that take one, in that order.
    per_dir: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    if "activations" in a:
        names = [v.decode() if isinstance(v, bytes) else str(v) for v in a["activations"]]
        half = len(names) // 2 if bidirectional else 0
        per_dir[1]["activations"] = names[half:]
        if half:
            per_dir[0]["activations"] = names[:half]
        for key, which in (("activation_alpha", 0), ("activation_beta", 1)):
            values = [float(v) for v in a.get(key, [])]
            cut = sum(_SCALARS.get(n.lower(), (0, 0))[which] for n in names[:half])
            if values[cut:]:
                per_dir[1][key] = values[cut:]
            if values[:cut]:
                per_dir[0][key] = values[:cut]

    # Operands with a num_directions axis: W, R, B, P on axis 0; initial_h/initial_c on the state axis.
    dir_axes = {1: 0, 2: 0, 3: 0, 5: dir_axis_state, 6: dir_axis_state, 7: 0}
    forward_in, reverse_in = list(inputs), list(inputs)
    if bidirectional:
        for i, axis in dir_axes.items():
            if i < len(inputs) and inputs[i]:
                name = e._name("split")   # noqa: SLF001
                pair = [f"{name}/fwd", f"{name}/bwd"]
                e.nodes.append(helper.make_node("Split", [inputs[i], e.ints([1, 1])], pair, name=name, axis=axis))
                forward_in[i], reverse_in[i] = pair

    reverse_in[0] = e.op("Gather", [node.input[0], backwards], axis=seq_axis)
    if not bidirectional:      # Y_h and Y_c are the forward run's own; Y comes back reversed
        rev = e.ops(node.op_type, reverse_in, [None if wanted[0] else "", *outs[1:]], direction="forward",
                     **common, **per_dir[1])
        if wanted[0]:
            e.op("Gather", [rev[0], backwards], axis=seq_axis, out=outs[0])
        return e.replacement()
    fresh: list[str | None] = [None if w else "" for w in wanted]
    rev = e.ops(node.op_type, reverse_in, fresh, direction="forward", **common, **per_dir[1])
    fwd = e.ops(node.op_type, forward_in, fresh, direction="forward", **common, **per_dir[0])
    if wanted[0]:
        rev[0] = e.op("Gather", [rev[0], backwards], axis=seq_axis)
    for i in range(n_out):
        if wanted[i]:
            e.op("Concat", [fwd[i], rev[i]], out=outs[i], axis=dir_axis_y if i == 0 else dir_axis_state)
    return e.replacement()


LEGALIZATIONS = tuple(
    Legalization(op, f"IREE 3.13 lowers only forward onnx.{op}; the reverse direction as a forward one over "
                     "the time-reversed sequence (bidirectional: both halves, concatenated)", _applies, _rewrite)
    for op in _STATES)
