"""An ONNX LSTM over a short static sequence, unrolled, with every step's input projection in one
product.

IREE 3.13's ONNX importer lowers ``LSTM`` to a loop (torch-mlir's ``OnnxLstmExpander``) whose body
multiplies the step's input and the previous state by each gate's weights: eight matrix-vector
products per step and direction, each streaming its weights from memory. ddddocr's recogniser
(512 inputs, 512 hidden, 24 steps each way) spent 3.8 ms of its 12.7 in them, at ~50 GFLOP/s
(`aot profile`). But the input products of all steps read nothing the loop computes: as one
[steps x batch, input] x [input, 4 x hidden] product they read the weights once. So, for a
static sequence of at most ``MAX_STEPS``, constant weights and the standard cell, per direction:

    P = X W^T + (Wb + Rb)                          one Gemm over every step
    gates_t = P_t + H_{t-1} R^T                    one Gemm per step, the four gates together
    i, o, f, g = sigma, sigma, sigma, tanh of the four quarters (ONNX's order: i o f c)
    C_t = f * C_{t-1} + i * g;   H_t = o * tanh(C_t)

with the zero initial state's first product left out. Y, Y_h and Y_c are assembled in ONNX's
layout. What is left alone: ``layout`` 1, peepholes, ``clip``, ``input_forget``, activations other
than the defaults, sequence lengths shorter than the sequence, and longer sequences (the unrolled
graph grows by about twelve nodes a step, and IREE's compile time with it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.conv_rewrite import Constants, Replacement, StaticShapes, rewrite_each
from aot.frontend.passes import PassResult

MAX_STEPS = 128
_DEFAULT_ACTIVATIONS = (b"Sigmoid", b"Tanh", b"Tanh")


def unroll_lstms(model: onnx.ModelProto) -> PassResult:
    """Pass: unroll each standard LSTM over a short static sequence; count them. The LSTMs' own
    weights go with them (the unrolled nodes read rearranged copies) unless something else reads them."""
    result = rewrite_each(model, _rewrite)
    if result.changed:
        g = result.model.graph
        read = {v for n in g.node for v in n.input} | {v.name for v in g.output}
        replaced = {v for n in model.graph.node if n.op_type == "LSTM" for v in n.input}
        kept = [t for t in g.initializer if t.name in read or t.name not in replaced]
        del g.initializer[:]
        g.initializer.extend(kept)
    return result


def _const(name: str, consts: Constants) -> np.ndarray | None:
    return numpy_helper.to_array(consts[name]) if name in consts else None


def _rewrite(node: onnx.NodeProto, shapes: StaticShapes, consts: Constants) -> Replacement | None:
    if node.op_type != "LSTM" or node.domain not in ("", "ai.onnx"):
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    operands = list(node.input) + [""] * (8 - len(node.input))
    x_shape = shapes.get(operands[0])
    w, r = _const(operands[1], consts), _const(operands[2], consts)
    if x_shape is None or len(x_shape) != 3 or w is None or r is None or w.dtype != np.float32:
        return None
    steps, batch, _ = x_shape
    directions, hidden = w.shape[0], int(attrs["hidden_size"])
    activations = tuple(attrs.get("activations", _DEFAULT_ACTIVATIONS * directions))
    if (attrs.get("layout", 0) or attrs.get("clip") is not None or attrs.get("input_forget", 0) or operands[7]
            or activations != _DEFAULT_ACTIVATIONS * directions or steps > MAX_STEPS or steps < 1):
        return None
    if operands[4]:
        lengths = _const(operands[4], consts)
        if lengths is None or not np.all(lengths == steps):
            return None
    bias = _const(operands[3], consts) if operands[3] else np.zeros((directions, 8 * hidden), np.float32)
    if bias is None:
        return None
    # torch's exporter passes zeros as the initial state: a constant zero state is no state at all
    states = ["" if (v := _const(name, consts)) is not None and not np.any(v) else name for name in operands[5:7]]
    return _Unrolled(node, steps, batch, hidden, directions).emit(w, r, bias, *states)


class _Unrolled:
    """The nodes and initializers of one unrolled LSTM, named under the LSTM's name."""

    def __init__(self, node: onnx.NodeProto, steps: int, batch: int, hidden: int, directions: int) -> None:
        self.node, self.steps, self.batch, self.hidden, self.directions = node, steps, batch, hidden, directions
        self.prefix = node.name or node.output[0]
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def name(self, what: str) -> str:
        return f"{self.prefix}.unrolled.{what}"

    def add(self, op: str, inputs: list[str], what: str, outputs: int = 1, **attributes: Any) -> list[str]:
        names = [self.name(what if outputs == 1 else f"{what}.{i}") for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=self.name(what), **attributes))
        return names

    def constant(self, array: np.ndarray, what: str) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), self.name(what)))
        return self.name(what)

    def emit(self, w: np.ndarray, r: np.ndarray, bias: np.ndarray, initial_h: str, initial_c: str) -> Replacement:
        steps, batch, hidden = self.steps, self.batch, self.hidden
        rows = self.add("Reshape", [self.node.input[0], self.constant(np.array([steps * batch, -1], np.int64), "rows")], "x")[0]
        per_step = self.constant(np.full(steps, batch, np.int64), "per_step")
        per_gate = self.constant(np.full(4, hidden, np.int64), "per_gate")
        ys: list[str] = []
        hs: list[str] = []
        cs: list[str] = []
        for d in range(self.directions):
            projected = self.add("Gemm", [rows, self.constant(w[d], f"w{d}"),
                                          self.constant(bias[d, :4 * hidden] + bias[d, 4 * hidden:], f"b{d}")],
                                 f"projected{d}", transB=1)[0]
            inputs = self.add("Split", [projected, per_step], f"steps{d}", outputs=steps, axis=0)
            at, h, c = self._steps(d, inputs, self.constant(r[d], f"r{d}"), per_gate,
                                   self._state(initial_h, d, "h0"), self._state(initial_c, d, "c0"))
            wanted = list(self.node.output) + [""] * (3 - len(self.node.output))
            if wanted[0]:          # Y: [steps, directions, batch, hidden]
                both = self.constant(np.array([0, 1], np.int64), f"axes{d}")
                ys.append(self.add("Concat", [self.add("Unsqueeze", [at[t], both], f"y{d}.{t}")[0] for t in range(steps)],
                                   f"y{d}", axis=0)[0])
            # Y_h and Y_c: [directions, batch, hidden], the state after the last step run
            for out, state, what, last in zip(wanted[1:], (h, c), "hc", (hs, cs)):
                if out:
                    last.append(self.add("Unsqueeze", [state, self.constant(np.array([0], np.int64), f"lead_{what}{d}")],
                                         f"last_{what}{d}")[0])
        for out, parts, axis in zip(self.node.output, (ys, hs, cs), (1, 0, 0)):
            if out:
                self.nodes.append(helper.make_node("Concat", parts, [out], name=self.name(f"out.{out}"), axis=axis))
        return self.nodes, self.inits

    def _steps(self, d: int, inputs: list[str], recurrent: str, per_gate: str, h: str | None, c: str | None
               ) -> tuple[dict[int, str], str, str]:
        """Direction ``d``'s steps (the second of a bidirectional LSTM runs back): each step's H by
        position, and the H and C after the last step run."""
        reverse = self._direction() == b"reverse" or d == 1
        at: dict[int, str] = {}
        for t in (reversed(range(self.steps)) if reverse else range(self.steps)):
            step = f"{d}.{t}"
            gates = inputs[t] if h is None else self.add("Gemm", [h, recurrent, inputs[t]], f"gates{step}", transB=1)[0]
            i, o, f, g = self.add("Split", [gates, per_gate], f"gate{step}", outputs=4, axis=1)
            i, o, f = (self.add("Sigmoid", [v], f"{k}{step}")[0] for k, v in (("i", i), ("o", o), ("f", f)))
            g = self.add("Tanh", [g], f"g{step}")[0]
            new = self.add("Mul", [i, g], f"ig{step}")[0]
            if c is not None:
                new = self.add("Add", [self.add("Mul", [f, c], f"fc{step}")[0], new], f"c{step}")[0]
            c = new
            h = at[t] = self.add("Mul", [o, self.add("Tanh", [c], f"tanh_c{step}")[0]], f"h{step}")[0]
        assert h is not None and c is not None   # at least one step ran
        return at, h, c

    def _direction(self) -> bytes:
        return next((a.s for a in self.node.attribute if a.name == "direction"), b"forward")

    def _state(self, initial: str, d: int, what: str) -> str | None:
        """Direction ``d``'s initial state [batch, hidden]; None for zeros (absent)."""
        if not initial:
            return None
        starts, ends = self.constant(np.array([d], np.int64), f"{what}.start{d}"), self.constant(np.array([d + 1], np.int64), f"{what}.end{d}")
        sliced = self.add("Slice", [initial, starts, ends], f"{what}.slice{d}")[0]
        return self.add("Squeeze", [sliced, self.constant(np.array([0], np.int64), f"{what}.axis{d}")], f"{what}{d}")[0]
