"""A whole build under --policy learned --gate learned on lavapipe: the record keeps the cost
source, the prediction and the measured time, the report shows them, the bundle matches
onnxruntime, and its plan.json replays the choice with no model and no database."""

from __future__ import annotations

import math

import pytest

from conftest import golden
from synthetic import synthetic_db, trained_model  # noqa: F401 - fixtures
from aot import report
from aot.models import examples
from aot.options import BuildOptions
from aot.partition.plan import CostSource, GateMode, Plan
from aot.pipeline import build
from aot.runtime.target import Target

VULKAN = Target.parse("vulkan")


@pytest.mark.device
@pytest.mark.slow     # compiles the example for both devices twice and times it on lavapipe
def test_a_learned_build_records_prediction_and_measurement_and_its_plan_replays(tmp_path, trained_model):
    model = examples.write(tmp_path / "tiny_cnn.onnx")
    options = BuildOptions(accel=VULKAN, policy="learned", gate=GateMode.LEARNED, cost_model=trained_model,
                           measure_prediction=True)
    result = build(model, tmp_path / "learned", options)
    rec = result.bundle.record
    gate = rec.partition.gate
    assert rec.partition.policy == "learned" and gate is not None
    assert gate.source is CostSource.LEARNED and gate.fallback == ""    # the model is for these devices
    assert gate.measured_us is not None and math.isfinite(gate.measured_us) and gate.measured_us > 0
    assert math.isfinite(gate.predicted_us()) and gate.predicted_us() > 0
    text = report.text(result.bundle.manifest, rec)
    assert "cost source: learned" in text and f"measured {gate.measured_us:.1f} us" in text
    golden(result.bundle.path, model)
    pinned = result.bundle.path / "plan.json"
    replay = build(model, tmp_path / "replay", BuildOptions(accel=VULKAN, plan_file=pinned, policy="learned",
                                                            gate=GateMode.LEARNED,
                                                            cost_model=tmp_path / "no-such-model.json",
                                                            cost_db=tmp_path / "no-such.sqlite"))
    assert replay.plan.regions == Plan.load(pinned).regions and replay.bundle.record.partition.gate == gate
