"""Reproducible builds: one model built with the same options in two output folders, from two
copies of the model file, gives byte-identical modules, weights, plan and stubs, a manifest that
differs only in the model's source path, and a build record that differs only in what was timed
(docs/reproducible.md calls both volatile)."""

from __future__ import annotations

import json
import shutil

import pytest

from aot import api
from aot.options import BuildOptions
from aot.runtime.target import Target
from aot.partition.plan import GateMode

pytestmark = pytest.mark.device  # compiles with IREE (and --measure runs on the device)

# Volatile: where the model was read from (the contract), and what was timed on the build machine
# (the record).
VOLATILE_ALWAYS = (("model", "source"),)
VOLATILE_MEASURED = (("partition", "gate"), ("regions", "*", "measured_us"))


def _files(bundle):
    return {p.relative_to(bundle).as_posix(): p.read_bytes() for p in sorted(bundle.rglob("*")) if p.is_file()}


def _drop(d, path):
    head, *rest = path
    if head == "*":
        for item in d:
            _drop(item, rest)
    elif not rest:
        d.pop(head, None)
    else:
        _drop(d[head], rest)


@pytest.mark.parametrize("accel, gate", [("vulkan", GateMode.ROOFLINE), ("none", GateMode.MEASURED)])
def test_two_folders_give_the_same_bundle(example_model, tmp_path, accel, gate):
    options = BuildOptions(accel=Target.accelerator(accel), gate=gate)
    built = []
    for name in ("a", "b"):
        model = tmp_path / f"model-{name}" / "tiny_cnn.onnx"
        model.parent.mkdir()
        shutil.copy(example_model, model)
        built.append(api.build(model, tmp_path / f"out-{name}" / "deep" if name == "b" else tmp_path / "out-a",
                               options).bundle.path)
    a, b = map(_files, built)
    assert sorted(a) == sorted(b)
    differing = [name for name in a if a[name] != b[name]]
    # the source path at least differs; the record only where something was timed
    assert "manifest.json" in differing and set(differing) <= {"manifest.json", "record.json"}
    manifests = [json.loads(x["manifest.json"]) for x in (a, b)]
    assert manifests[0]["model"]["source"] != manifests[1]["model"]["source"]
    for m in manifests:
        _drop(m, VOLATILE_ALWAYS[0])
    assert manifests[0] == manifests[1]
    records = [json.loads(x["record.json"]) for x in (a, b)]
    for r in records:
        for path in VOLATILE_MEASURED:
            _drop(r, path)
    assert records[0] == records[1]
