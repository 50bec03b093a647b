"""PyTorch eager as the reference for torch-built bundles.

Every graph-view value of a torch source is an FX node of the exported program (``frontend/torch``
names them so), so running that program node by node in eager PyTorch gives each region's inputs
and expected outputs, as onnxruntime's intermediates do for ONNX models. The whole-model golden
output is the user's own module run eagerly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aot.errors import BundleError


def values(program: Any, inputs: dict[str, np.ndarray],
           renamed: tuple[tuple[str, str], ...] = ()) -> dict[str, np.ndarray]:
    """Every tensor the exported ``program`` computes for ``inputs``, by FX node name (a node
    with several results also gives ``name:i`` per result), model outputs also by their
    ``renamed`` public names."""
    import torch

    seen: dict[str, np.ndarray] = {}

    class _Recorder(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:
            out = super().run_node(node)
            if isinstance(out, torch.Tensor):
                seen[node.name] = _numpy(out)
            elif isinstance(out, (tuple, list)):
                seen.update({f"{node.name}:{i}": _numpy(t) for i, t in enumerate(out) if isinstance(t, torch.Tensor)})
            return out

    names = program.graph_signature.user_inputs
    with torch.no_grad():
        _Recorder(program.module()).run(*[torch.from_numpy(np.ascontiguousarray(inputs[n])) for n in names])
    seen.update({public: seen[fx] for fx, public in renamed if fx in seen})
    return seen


def outputs(module: Any, inputs: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
    """The module's eager outputs for the named inputs (in ``forward``'s order)."""
    import torch

    with torch.no_grad():
        out = module(*[torch.from_numpy(np.ascontiguousarray(v)) for v in inputs.values()])
    flat = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(flat) != len(names):
        raise BundleError(f"the module returned {len(flat)} outputs, the bundle has {len(names)}",
                          hint="give the factory the bundle was built from")
    return [_numpy(t) for t in flat]


def _numpy(t: Any) -> np.ndarray:
    return t.detach().cpu().numpy()
