"""The contract every front-end pass follows, and the two ways to run a list of them.

A pass is a named callable ``(model) -> PassResult``. It never mutates the model it is given: it
returns that same object when it changes nothing (``changed == 0``) and a new model otherwise, so
callers may keep, compare or reuse their input. This mirrors onnx-ir's ``PassResult`` and
``PassManager(steps=...)`` on plain ``onnx.ModelProto``s.
"""

from __future__ import annotations

import heapq
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import onnx


@dataclass(frozen=True, slots=True)
class PassResult:
    model: onnx.ModelProto  # the input object itself when changed == 0, else a new model
    changed: int            # how many nodes (or axes, initializers) the pass rewrote; 0 = nothing

    @property
    def modified(self) -> bool:
        return self.changed > 0


class Pass(Protocol):
    """A front-end pass; plain functions qualify (``__name__`` names it in reports)."""

    __name__: str

    def __call__(self, model: onnx.ModelProto, /) -> PassResult: ...


def rewrite_result(model: onnx.ModelProto, nodes: Sequence[onnx.NodeProto],
              initializers: Sequence[onnx.TensorProto], changed: int) -> PassResult:
    """The usual end of a rewriting pass: ``model`` itself when nothing changed, else a copy with
    ``nodes`` for its graph and ``initializers`` added."""
    if not changed:
        return PassResult(model, 0)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(initializers)
    return PassResult(out, changed)


def in_topological_order(nodes: Sequence[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``nodes`` reordered so that every value is made before it is read, keeping the given order
    wherever it already is one (of the nodes ready, the earliest first). A value no node makes (a
    graph input, an initializer, an outer scope's) is ready from the start. ValueError on a cycle."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    readers: dict[int, list[int]] = {}
    waiting = [0] * len(nodes)
    for i, n in enumerate(nodes):
        for p in {producer[v] for v in n.input if v in producer}:
            readers.setdefault(p, []).append(i)
            waiting[i] += 1
    ready = [i for i, w in enumerate(waiting) if w == 0]      # ascending: already a heap
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for r in readers.get(i, ()):
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, r)
    if len(order) != len(nodes):
        raise ValueError("the nodes read each other's outputs in a cycle")
    return [nodes[i] for i in order]


def run_sequence(model: onnx.ModelProto, passes: Sequence[Pass], *,
                 after_change: Callable[[onnx.ModelProto], onnx.ModelProto] = lambda m: m) -> PassResult:
    """Run `passes` once each, in order, each on the previous one's output; sum their counts.
    ``after_change`` runs after each pass that changed something, before the next one: load
    infers shapes there, so that a pass reading static shapes sees the values an earlier pass
    created (a Conv whose input became a Slice's output had no shape, and was left alone)."""
    total = 0
    for p in passes:
        result = p(model)
        model, total = result.model, total + result.changed
        if result.changed:
            model = after_change(model)
    return PassResult(model, total)


def run_to_fixpoint(model: onnx.ModelProto, passes: Sequence[Pass], *,
                    after_change: Callable[[onnx.ModelProto], onnx.ModelProto] = lambda m: m,
                    max_rounds: int = 8) -> PassResult:
    """Run `passes` in rounds (each round: every pass once, in order) until a round changes
    nothing; return the last model and the total changed over all rounds.

    ``after_change`` runs after each round that changed something, before the next one (load uses
    it to name new nodes and re-infer shapes, which can make more values foldable). It receives a
    model a pass created, never `model` itself, so it may modify it in place.

    A round that still changes something at ``max_rounds`` ends the loop with a RuntimeWarning
    naming the passes still at work, and the result is returned as it stands. Not an error:
    these passes only simplify, every round's model went through ``after_change`` (load's check),
    so the model is valid, merely less simplified; raising would refuse models that built fine.
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be at least 1, not {max_rounds}")
    total = 0
    for _ in range(max_rounds):
        busy: list[str] = []  # the passes that changed something this round
        for p in passes:
            result = p(model)
            model, total = result.model, total + result.changed
            if result.modified:
                busy.append(p.__name__)
        if not busy:
            return PassResult(model, total)
        model = after_change(model)
    warnings.warn(f"{', '.join(busy)} still changed the model after {max_rounds} rounds; "
                  "continuing with the model as it stands", RuntimeWarning, stacklevel=2)
    return PassResult(model, total)
