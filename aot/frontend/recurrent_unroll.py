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

A bidirectional node's two directions are stepped together (``DIRECTIONS_TOGETHER``): step k
runs the forward direction at position k and the backward one at T-1-k as one batched product over
both directions' states and weights, then one set of gate dispatches. Each unrolled step is two or
three dispatches, and on local-task each is a hand-off between the workers: ddddocr's recogniser
runs 133 dispatches a call instead of 244 (docs/performance.md, stop 63).

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

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.frontend.conv_rewrite import Constants, Replacement, StaticShapes, rewrite_each
from aot.frontend.expand import Expanded
from aot.frontend.fold import referenced
from aot.frontend.legalize.base import Emitter
from aot.frontend.passes import PassResult, run_sequence

MAX_STEPS = 128
# A bidirectional node's steps as one chain for both directions (above): T steps of batched
# [2, batch, hidden] x [2, hidden, gates x hidden] products instead of 2T of their own.
DIRECTIONS_TOGETHER = True


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
        read = referenced(g.node) | {v.name for v in g.output}     # a branch's reads count too
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
    why = ("unrolled over its steps with every step's input product in one matrix product, both directions of a "
           "bidirectional one stepped together (IREE's loop runs them step by step)")
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
        self.together = DIRECTIONS_TOGETHER and directions == 2
        self.e = Emitter(node)

    def split(self, x: str, sizes: str, count: int, axis: int) -> list[str]:
        return self.e.ops("Split", [x, sizes], [None] * count, axis=axis)

    def emit(self, w: np.ndarray, r: np.ndarray, bias: np.ndarray, initial: list[str]) -> Replacement:
        if self.together:
            return self._emit_together(w, r, bias, initial)
        steps, batch, width = self.steps, self.batch, self.cell.gates * self.hidden
        rows = self.e.op("Reshape", [self.node.input[0], self.e.const(np.array([steps * batch, -1], np.int64))])
        per_step = self.e.const(np.full(steps, batch, np.int64))
        wanted = list(self.node.output) + [""] * (1 + self.cell.states - len(self.node.output))
        ys: list[str] = []
        finals: list[list[str]] = [[] for _ in range(self.cell.states)]
        for d in range(self.directions):
            outside, inside = self._biases(bias[d, :width], bias[d, width:])
            projected = self.e.op("Gemm", [rows, self.e.const(w[d]), self.e.const(outside)], transB=1)
            inputs = self.split(projected, per_step, steps, 0)
            states = [self._state(name, d) for name in initial]
            at, last = self._steps(d, inputs, r[d], inside, states)
            if wanted[0]:          # Y: [steps, directions, batch, hidden]
                both = self.e.const(np.array([0, 1], np.int64))
                ys.append(self.e.op("Concat", [self.e.op("Unsqueeze", [at[t], both]) for t in range(steps)], axis=0))
            # Y_h (and Y_c): [directions, batch, hidden], the state after the last step run
            for k, (out, state) in enumerate(zip(wanted[1:], last)):
                if out:
                    finals[k].append(self.e.op("Unsqueeze", [state, self.e.const(np.array([0], np.int64))]))
        for out, parts, axis in zip(self.node.output, (ys, *finals), (1, 0, 0)):
            if out:
                self.e.op("Concat", parts, out=out, axis=axis)
        return self.e.replacement()

    def _emit_together(self, w: np.ndarray, r: np.ndarray, bias: np.ndarray, initial: list[str]) -> Replacement:
        """Both directions stepped together (``DIRECTIONS_TOGETHER``): the input reversed along
        the sequence for the backward direction, one batched input product for both, then per step
        one batched recurrent product; Y put back in each direction's order at the end."""
        steps, batch, width = self.steps, self.batch, self.cell.gates * self.hidden
        zero, back = self.e.ints([0]), self.e.ints(range(steps - 1, -1, -1))
        x = self.node.input[0]
        seqs = [self.e.op("Unsqueeze", [v, zero]) for v in (x, self.e.op("Gather", [x, back], axis=0))]
        rows = self.e.op("Reshape", [self.e.op("Concat", seqs, axis=0), self.e.ints([2, steps * batch, -1])])
        outside, inside = zip(*(self._biases(bias[d, :width], bias[d, width:]) for d in range(2)))
        projected = self._product(rows, self._weights(w), self.e.const(np.stack(outside)[:, None]))
        per_step = self.e.op("Reshape", [projected, self.e.ints([2, steps, batch, width])])
        inputs = [self.e.op("Squeeze", [v, self.e.ints([1])])
                  for v in self.split(per_step, self.e.ints([1] * steps), steps, 1)]
        # the initial states are [directions, batch, hidden] already: both at once
        states: list[str | None] = [name or None for name in initial]
        weights = self._recurrent_weights(r, None if inside[0] is None else np.stack(inside))
        step = self._lstm_step if self.cell.gates == 4 else self._gru_step
        hs = []
        for k in range(steps):
            states = step(inputs[k], weights, states)
            assert states[0] is not None
            hs.append(states[0])
        wanted = list(self.node.output) + [""] * (1 + self.cell.states - len(self.node.output))
        if wanted[0]:              # Y: [steps, directions, batch, hidden], the backward half reversed back
            stacked = self.e.op("Concat", [self.e.op("Unsqueeze", [h, zero]) for h in hs], axis=0)
            forward, backward = self.split(stacked, self.e.ints([1, 1]), 2, 1)
            self.e.op("Concat", [forward, self.e.op("Gather", [backward, back], axis=0)], out=wanted[0], axis=1)
        for out, state in zip(wanted[1:], states):      # Y_h (and Y_c): the states after the last step
            if out:
                assert state is not None
                self.e.op("Identity", [state], out=out)
        return self.e.replacement()

    def _product(self, a: str, weight: str, bias: str | None = None) -> str:
        """``a`` times a direction's weights transposed, plus ``bias``: one Gemm for one direction;
        for both directions together (weights stored transposed, [2, k, n]) a batched MatMul."""
        if not self.together:
            return self.e.op("Gemm", [a, weight, *([bias] if bias else [])], transB=1)
        product = self.e.op("MatMul", [a, weight])
        return product if bias is None else self.e.op("Add", [product, bias])

    def _weights(self, w: np.ndarray) -> str:
        """Weights as ``_product`` reads them: [n, k] for one direction, [2, k, n] for two."""
        return self.e.const(np.ascontiguousarray(np.swapaxes(w, -1, -2)) if self.together else w)

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
        weights = self._recurrent_weights(r, inside)
        at: dict[int, str] = {}
        for t in (reversed(range(self.steps)) if reverse else range(self.steps)):
            states = step(inputs[t], weights, states)
            assert states[0] is not None
            at[t] = states[0]
        assert all(s is not None for s in states)   # at least one step ran
        return at, [s for s in states if s is not None]

    def _recurrent_weights(self, r: np.ndarray, inside: np.ndarray | None) -> dict[str, str]:
        if self.cell.gates == 4 or self.linear_before_reset:
            out = {"all": self._weights(r), "gates": self.e.const(np.full(self.cell.gates, self.hidden, np.int64))}
            if inside is not None:
                out["inside"] = self.e.const(inside)
            return out
        h = self.hidden           # a GRU without linear_before_reset: (r * H) R_h^T is a second product
        return {"zr": self._weights(r[..., :2 * h, :]), "h": self._weights(r[..., 2 * h:, :]),
                "gates": self.e.const(np.full(3, h, np.int64)),
                "halves": self.e.const(np.full(2, h, np.int64))}

    def _lstm_step(self, x: str, weights: dict[str, str], states: list[str | None]) -> list[str | None]:
        h, c = states
        gates = x if h is None else self._product(h, weights["all"], x)
        i, o, f, g = self.split(gates, weights["gates"], 4, -1)
        i, o, f = (self.e.op("Sigmoid", [v]) for v in (i, o, f))
        new = self.e.op("Mul", [i, self.e.op("Tanh", [g])])
        if c is not None:
            new = self.e.op("Add", [self.e.op("Mul", [f, c]), new])
        return [self.e.op("Mul", [o, self.e.op("Tanh", [new])]), new]

    def _gru_step(self, x: str, weights: dict[str, str], states: list[str | None]) -> list[str | None]:
        (h,) = states
        pz, pr, ph = self.split(x, weights["gates"], 3, -1)

        def gate(p: str, q: str | None) -> str:
            return self.e.op("Sigmoid", [p if q is None else self.e.op("Add", [p, q])])

        if "all" in weights:       # linear_before_reset: one product, the reset gate scales its h part
            rec = weights.get("inside") if h is None else self._product(h, weights["all"], weights.get("inside"))
            rz, rr, rh = (None, None, None) if rec is None else self.split(rec, weights["gates"], 3, -1)
            z = gate(pz, rz)
            inner = ph if rh is None else self.e.op("Add", [ph, self.e.op("Mul", [gate(pr, rr), rh])])
        else:                      # the reset gate scales the state before the h gate's product
            rz = rr = None
            if h is not None:
                rz, rr = self.split(self._product(h, weights["zr"]), weights["halves"], 2, -1)
            z = gate(pz, rz)
            inner = ph if h is None else self.e.op(
                "Add", [ph, self._product(self.e.op("Mul", [gate(pr, rr), h]), weights["h"])])
        n = self.e.op("Tanh", [inner])
        if h is None:              # H = (1 - z) * n
            return [self.e.op("Sub", [n, self.e.op("Mul", [z, n])])]
        return [self.e.op("Add", [n, self.e.op("Mul", [z, self.e.op("Sub", [h, n])])])]

    def _direction(self) -> bytes:
        return next((a.s for a in self.node.attribute if a.name == "direction"), b"forward")

    def _state(self, initial: str, d: int) -> str | None:
        """Direction ``d``'s initial state [batch, hidden]; None for zeros (absent)."""
        if not initial:
            return None
        starts, ends = self.e.const(np.array([d], np.int64)), self.e.const(np.array([d + 1], np.int64))
        sliced = self.e.op("Slice", [initial, starts, ends])
        return self.e.op("Squeeze", [sliced, self.e.const(np.array([0], np.int64))])
