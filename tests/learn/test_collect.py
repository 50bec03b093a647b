"""`aot learn collect`: distinct candidate plans built and timed into the cost database, resumably."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from aot.learn import collect, db as costdb
from aot.options import BuildOptions
from aot.partition.plan import Plan
from aot.runtime.target import Target


def _mlp(path):
    """MatMul -> Relu -> TopK (host-only on Vulkan) -> Add: small enough to time on lavapipe."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "w")
    k = numpy_helper.from_array(np.array([4], np.int64), "k")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("TopK", ["r", "k"], ["v", "i"], name="topk"),
             helper.make_node("Add", ["v", "v"], ["y"], name="add")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", T.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 4])], [w, k])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.device   # builds every candidate with IREE and times it on lavapipe
def test_collect_measures_each_distinct_plan_once_and_resumes(tmp_path):
    model, database = _mlp(tmp_path / "mlp.onnx"), tmp_path / "costs.sqlite"
    options = BuildOptions(accel=Target.parse("vulkan"))
    first = collect.collect(model, database, tmp_path / "work", options, perturbations=2, iterations=2)
    assert first.failed == () and first.measured == first.candidates >= 3
    with costdb.CostDatabase(database) as db:
        rows = db.rows()
        assert len(rows) == first.measured and len({r.key for r in rows}) == len(rows)
        assert all(r.total_us > 0 and np.isfinite(r.total_us) for r in rows)
        plans = [Plan.from_json(json.loads(r.plan)) for r in rows]
        assert {len(p.regions) for p in plans} >= {1, 2}      # all-host and at least one partition
        assert all(r.fingerprint.startswith("vulkan-spirv:") for r in rows)
    again = collect.collect(model, database, tmp_path / "work", options, perturbations=2, iterations=2)
    assert (again.measured, again.skipped) == (0, first.candidates)   # resumed: nothing measured twice
