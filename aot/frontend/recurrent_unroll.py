"""An ONNX LSTM or GRU over a short static sequence, unrolled, with every step's input projection
in one product.

IREE 3.13's ONNX importer lowers ``LSTM`` and ``GRU`` to a loop (torch-mlir's expanders) whose
body multiplies the step's input and the previous state by each gate's weights on their own:
eight matrix-vector products per LSTM step and direction, each streaming its weights from memory.
ddddocr's recogniser (512 inputs, 512 hidden, 24 steps each way) spent 3.8 ms of its 12.7 in them,
at ~50 GFLOP/s (`aot profile`). But the input products of all steps read nothing the loop
computes: as one [steps x batch, input] x [input, gates x hidden] product they read the weights
once. So, for a static sequence of at most ``MAX_STEPS``, constant weights and the standard cell,
per direction:

    P = X W^T + the biases outside the recurrence     one Gemm over every step
    LSTM: gates_t = P_t + H R^T (one Gemm, the four gates together; ONNX's order i o f c)
          C_t = f * C + i * g;  H_t = o * tanh(C_t)
    GRU:  z, r from P_t + H R^T (z r h order); n = tanh(P_h + r * (H R_h^T + Rb_h)) with
          ``linear_before_reset`` (torch's), else tanh(P_h + (r * H) R_h^T); H_t = n + z * (H - n)

A constant zero initial state (what torch's exporter passes) is no state: the first step has no
recurrent product. Y, Y_h (and Y_c) come out in ONNX's layout. Left alone: ``layout`` 1, LSTM
peepholes, ``clip``, ``input_forget``, activations other than the defaults, sequence lengths
shorter than the sequence, and longer sequences (the unrolled graph grows by about a dozen nodes a
step, and IREE's compile time with it). RNN is left as it is: no model at hand has one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.conv_rewrite import Constants, Replacement, StaticShapes, rewrite_each
from aot.frontend.expand import Expanded
from aot.frontend.passes import PassResult, run_sequence

MAX_STEPS = 128


@dataclass(frozen=True, slots=True)
class Cell:
    gates: int                       # blocks of hidden_size in W and R, in ONNX's order
    activations: tuple[bytes, ...]   # the defaults, per direction
    states: int                      # initial-state operands and final-state outputs: H (and C)


CELLS = {"LSTM": Cell(4, (b"Sigmoid", b"Tanh", b"Tanh"), 2), "GRU": Cell(3, (b"Sigmoid", b"Tanh"), 1)}


def unroll_recurrences(model: onnx.ModelProto) -> PassResult:
    """Pass: unroll each standard LSTM and GRU over a short static sequence; count them. Their own
    weights go with them (the unrolled nodes read rearranged copies) unless something else reads them."""
    result = rewrite_each(model, _rewrite)
    if result.changed:
        g = result.model.graph
        read = {v for n in g.node for v in n.input} | {v.name for v in g.output}
        replaced = {v for n in model.graph.node if n.op_type in CELLS for v in n.input}
        kept = [t for t in g.initializer if t.name in read or t.name not in replaced]
        del g.initializer[:]
        g.initializer.extend(kept)
    return result


def unroll_and_count(model: onnx.ModelProto, after_change: Callable[[onnx.ModelProto], onnx.ModelProto]
                     ) -> tuple[onnx.ModelProto, tuple[Expanded, ...]]:
    """``unroll_recurrences`` as load runs it (``after_change`` re-checks a changed model), and
    what it did per op for the build record and ``aot plan``."""
    def count(m: onnx.ModelProto) -> Counter[str]:
        return Counter(n.op_type for n in m.graph.node if n.op_type in CELLS)

    result = run_sequence(model, (unroll_recurrences,), after_change=after_change)
    before, after = count(model), count(result.model)
    why = "unrolled over its steps with every step's input product in one matrix product (IREE's loop runs them step by step)"
    return result.model, tuple(Expanded(op, before[op] - after[op], why) for op in sorted(before) if before[op] > after[op])


def _const(name: str, consts: Constants) -> np.ndarray | None:
    return numpy_helper.to_array(consts[name]) if name in consts else None


def _rewrite(node: onnx.NodeProto, shapes: StaticShapes, consts: Constants) -> Replacement | None:
    cell = CELLS.get(node.op_type)
    if cell is None or node.domain not in ("", "ai.onnx"):
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    operands = list(node.input) + [""] * (8 - len(node.input))
    x_shape = shapes.get(operands[0])
    w, r = _const(operands[1], consts), _const(operands[2], consts)
    if x_shape is None or len(x_shape) != 3 or w is None or r is None or w.dtype != np.float32:
        return None
    steps, batch, width = x_shape
    directions, hidden = w.shape[0], int(attrs["hidden_size"]) if "hidden_size" in attrs else r.shape[-1]
    if w.shape != (directions, cell.gates * hidden, width) or r.shape != (directions, cell.gates * hidden, hidden):
        return None       # not a well-formed node: left for the checker and onnxruntime to name
    if (attrs.get("layout", 0) or attrs.get("clip") is not None or attrs.get("input_forget", 0) or operands[7]
            or tuple(attrs.get("activations", cell.activations * directions)) != cell.activations * directions
            or not 1 <= steps <= MAX_STEPS):
        return None
    if operands[4]:
        lengths = _const(operands[4], consts)
        if lengths is None or not np.all(lengths == steps):
            return None
    bias = _const(operands[3], consts) if operands[3] else np.zeros((directions, 2 * cell.gates * hidden), np.float32)
    if bias is None or r.dtype != np.float32 or bias.dtype != np.float32 or bias.shape != (directions, 2 * cell.gates * hidden):
        return None
    # torch's exporter passes zeros as the initial state: a constant zero state is no state at all
    states = ["" if (v := _const(name, consts)) is not None and not np.any(v) else name
              for name in operands[5:5 + cell.states]]
    unrolled = _Unrolled(node, steps, batch, hidden, directions, bool(attrs.get("linear_before_reset", 0)))
    return unrolled.emit(w, r, bias, states)


class _Unrolled:
    """The nodes and initializers of one unrolled LSTM or GRU, named under the node's name."""

    def __init__(self, node: onnx.NodeProto, steps: int, batch: int, hidden: int, directions: int,
                 linear_before_reset: bool) -> None:
        self.node, self.steps, self.batch, self.hidden, self.directions = node, steps, batch, hidden, directions
        self.cell, self.linear_before_reset = CELLS[node.op_type], linear_before_reset
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

    def emit(self, w: np.ndarray, r: np.ndarray, bias: np.ndarray, initial: list[str]) -> Replacement:
        steps, batch, width = self.steps, self.batch, self.cell.gates * self.hidden
        rows = self.add("Reshape", [self.node.input[0], self.constant(np.array([steps * batch, -1], np.int64), "rows")], "x")[0]
        per_step = self.constant(np.full(steps, batch, np.int64), "per_step")
        wanted = list(self.node.output) + [""] * (1 + self.cell.states - len(self.node.output))
        ys: list[str] = []
        finals: list[list[str]] = [[] for _ in range(self.cell.states)]
        for d in range(self.directions):
            outside, inside = self._biases(bias[d, :width], bias[d, width:])
            projected = self.add("Gemm", [rows, self.constant(w[d], f"w{d}"), self.constant(outside, f"b{d}")],
                                 f"projected{d}", transB=1)[0]
            inputs = self.add("Split", [projected, per_step], f"steps{d}", outputs=steps, axis=0)
            states = [self._state(name, d, f"s{k}_") for k, name in enumerate(initial)]
            at, last = self._steps(d, inputs, r[d], inside, states)
            if wanted[0]:          # Y: [steps, directions, batch, hidden]
                both = self.constant(np.array([0, 1], np.int64), f"axes{d}")
                ys.append(self.add("Concat", [self.add("Unsqueeze", [at[t], both], f"y{d}.{t}")[0] for t in range(steps)],
                                   f"y{d}", axis=0)[0])
            # Y_h (and Y_c): [directions, batch, hidden], the state after the last step run
            for k, (out, state) in enumerate(zip(wanted[1:], last)):
                if out:
                    finals[k].append(self.add("Unsqueeze", [state, self.constant(np.array([0], np.int64), f"lead{k}.{d}")],
                                              f"last{k}.{d}")[0])
        for out, parts, axis in zip(self.node.output, (ys, *finals), (1, 0, 0)):
            if out:
                self.nodes.append(helper.make_node("Concat", parts, [out], name=self.name(f"out.{out}"), axis=axis))
        return self.nodes, self.inits

    def _biases(self, wb: np.ndarray, rb: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The bias added with the input product, and (a GRU's with ``linear_before_reset``) the
        recurrent bias of the h gate, which the reset gate scales and so stays inside."""
        if self.cell.gates == 3 and self.linear_before_reset:
            h = self.hidden
            return (wb + np.concatenate([rb[:2 * h], np.zeros(h, rb.dtype)]),
                    np.concatenate([np.zeros(2 * h, rb.dtype), rb[2 * h:]])[None])     # [1, 3h]: a Gemm's C, or split
        return wb + rb, None

    def _steps(self, d: int, inputs: list[str], r: np.ndarray, inside: np.ndarray | None, states: list[str | None]
               ) -> tuple[dict[int, str], list[str]]:
        """Direction ``d``'s steps (the second of a bidirectional node runs back): each step's H by
        position, and the states after the last step run."""
        reverse = self._direction() == b"reverse" or d == 1
        step = self._lstm_step if self.cell.gates == 4 else self._gru_step
        weights = self._recurrent_weights(d, r, inside)
        at: dict[int, str] = {}
        for t in (reversed(range(self.steps)) if reverse else range(self.steps)):
            states = step(f"{d}.{t}", inputs[t], weights, states)
            assert states[0] is not None
            at[t] = states[0]
        assert all(s is not None for s in states)   # at least one step ran
        return at, [s for s in states if s is not None]

    def _recurrent_weights(self, d: int, r: np.ndarray, inside: np.ndarray | None) -> dict[str, str]:
        if self.cell.gates == 4 or self.linear_before_reset:
            out = {"all": self.constant(r, f"r{d}"), "gates": self.constant(np.full(self.cell.gates, self.hidden, np.int64), f"gates{d}")}
            if inside is not None:
                out["inside"] = self.constant(inside, f"rb{d}")
            return out
        h = self.hidden           # a GRU without linear_before_reset: (r * H) R_h^T is a second product
        return {"zr": self.constant(r[:2 * h], f"r_zr{d}"), "h": self.constant(r[2 * h:], f"r_h{d}"),
                "gates": self.constant(np.full(3, h, np.int64), f"gates{d}"),
                "halves": self.constant(np.full(2, h, np.int64), f"halves{d}")}

    def _lstm_step(self, s: str, x: str, weights: dict[str, str], states: list[str | None]) -> list[str | None]:
        h, c = states
        gates = x if h is None else self.add("Gemm", [h, weights["all"], x], f"gates{s}", transB=1)[0]
        i, o, f, g = self.add("Split", [gates, weights["gates"]], f"gate{s}", outputs=4, axis=1)
        i, o, f = (self.add("Sigmoid", [v], f"{k}{s}")[0] for k, v in (("i", i), ("o", o), ("f", f)))
        new = self.add("Mul", [i, self.add("Tanh", [g], f"g{s}")[0]], f"ig{s}")[0]
        if c is not None:
            new = self.add("Add", [self.add("Mul", [f, c], f"fc{s}")[0], new], f"c{s}")[0]
        return [self.add("Mul", [o, self.add("Tanh", [new], f"tanh_c{s}")[0]], f"h{s}")[0], new]

    def _gru_step(self, s: str, x: str, weights: dict[str, str], states: list[str | None]) -> list[str | None]:
        (h,) = states
        pz, pr, ph = self.add("Split", [x, weights["gates"]], f"p{s}", outputs=3, axis=1)

        def gate(k: str, p: str, q: str | None) -> str:
            return self.add("Sigmoid", [p if q is None else self.add("Add", [p, q], f"{k}_sum{s}")[0]], f"{k}{s}")[0]

        if "all" in weights:       # linear_before_reset: one product, the reset gate scales its h part
            rec = weights.get("inside") if h is None else self.add(
                "Gemm", [h, weights["all"], *([weights["inside"]] if "inside" in weights else [])], f"rec{s}", transB=1)[0]
            rz, rr, rh = (None, None, None) if rec is None else self.add("Split", [rec, weights["gates"]], f"rsplit{s}", outputs=3, axis=1)
            z = gate("z", pz, rz)
            inner = ph if rh is None else self.add("Add", [ph, self.add("Mul", [gate("r", pr, rr), rh], f"rh{s}")[0]], f"n_sum{s}")[0]
        else:                      # the reset gate scales the state before the h gate's product
            rz = rr = None
            if h is not None:
                rz, rr = self.add("Split", [self.add("Gemm", [h, weights["zr"]], f"rec{s}", transB=1)[0], weights["halves"]],
                                  f"rsplit{s}", outputs=2, axis=1)
            z = gate("z", pz, rz)
            inner = ph if h is None else self.add("Add", [ph, self.add(
                "Gemm", [self.add("Mul", [gate("r", pr, rr), h], f"rh{s}")[0], weights["h"]], f"rec_h{s}", transB=1)[0]], f"n_sum{s}")[0]
        n = self.add("Tanh", [inner], f"n{s}")[0]
        if h is None:              # H = (1 - z) * n
            return [self.add("Sub", [n, self.add("Mul", [z, n], f"zn{s}")[0]], f"h{s}")[0]]
        return [self.add("Add", [n, self.add("Mul", [z, self.add("Sub", [h, n], f"hn{s}")[0]], f"zhn{s}")[0]], f"h{s}")[0]]

    def _direction(self) -> bytes:
        return next((a.s for a in self.node.attribute if a.name == "direction"), b"forward")

    def _state(self, initial: str, d: int, what: str) -> str | None:
        """Direction ``d``'s initial state [batch, hidden]; None for zeros (absent)."""
        if not initial:
            return None
        starts, ends = self.constant(np.array([d], np.int64), f"{what}start{d}"), self.constant(np.array([d + 1], np.int64), f"{what}end{d}")
        sliced = self.add("Slice", [initial, starts, ends], f"{what}slice{d}")[0]
        return self.add("Squeeze", [sliced, self.constant(np.array([0], np.int64), f"{what}axis{d}")], f"{what}{d}")[0]
