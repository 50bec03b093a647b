"""The host lowering's version names what it produces (lower/host_lowering.py): a fixture of the
convolutions it rewrites, lowered, has one recorded digest per LOWERING_VERSION, and a measured
plan's key changes with the version."""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.learn import key
from aot.lower.depthwise import rewrite_ops
from aot.lower.host_lowering import HOST_LOWERINGS, LOWERING_VERSION
from aot.lower.importer import import_onnx
from conftest import onnx_model

# LOWERING_VERSION -> sha256 of the fixture's lowered MLIR (iree-base-compiler 3.13's importer).
LOWERED = {1: "787245a7299d4f5110cfaf0c31dd7331c9b96fb54fe6dfec42a9c527b059a1b8"}


def _fixture() -> onnx.ModelProto:
    """Convolutions of x on either side of each rewrite's rule: a depthwise one, two over the
    direct rule's ratio (K / Cout of 117 and 72, against 64) and two under it (36, and 4.5)."""
    rng = np.random.default_rng(0)
    layers = [("depthwise", (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1])),
              ("wide", (8, 8, 3, 39), dict(pads=[1, 19, 1, 19])),
              ("ratio_72", (1, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
              ("ratio_36", (2, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
              ("ordinary", (16, 8, 3, 3), dict(pads=[1, 1, 1, 1]))]
    inits, nodes = [], []
    for name, shape, attrs in layers:
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), f"w_{name}"))
        nodes.append(helper.make_node("Conv", ["x", f"w_{name}"], [name], name=name, kernel_shape=list(shape[2:]),
                                      **attrs))
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 40])],
                       [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name, _, _ in layers], inits)
    return onnx.shape_inference.infer_shapes(model)


def test_the_lowering_version_names_what_the_lowering_produces(tmp_path):
    mlir = import_onnx(_fixture(), "m", tmp_path, tmp_path / "w.irpa").mlir
    lowered, counts = rewrite_ops(mlir, *(body for body, _ in HOST_LOWERINGS))
    assert counts == (1, 2)   # the depthwise one, then the two over the ratio; im2col keeps the others
    digest = hashlib.sha256(lowered.encode()).hexdigest()
    assert LOWERED.get(LOWERING_VERSION) == digest, (
        f"the host lowering now produces other MLIR ({digest}): if a rewrite changed, bump LOWERING_VERSION in "
        f"aot/lower/host_lowering.py (measured plans' keys change with it) and record the digest under the new "
        f"version here; if only iree-base-compiler changed, record it under the same version")


@pytest.mark.parametrize("version", [2, 3])
def test_a_later_lowering_version_gives_measured_plans_other_keys(version, monkeypatch):
    from aot.frontend.graph import GraphView, Node, Value

    view = GraphView.build([Node("n", "Relu", ("x",), ("y",))], ["x"], ["y"],
                           {"x": Value("x", "float32", (4,)), "y": Value("y", "float32", (4,))})
    regions, schedule = {"r0": ("host", ("n",))}, ("r0",)
    today, region_today = key.plan_key(view, regions, schedule), key.region_digest(view, ("n",), "host")
    monkeypatch.setattr(key, "_LOWERING", {"lowering": version})
    later, region_later = key.plan_key(view, regions, schedule), key.region_digest(view, ("n",), "host")
    assert later.graph == today.graph and later.context != today.context and later.key != today.key
    assert region_later != region_today
