"""--memory-limit built for real on lavapipe: the example CNN with a Vulkan limit below its largest
operator's working set builds, iree-compile's stream phase shows every dispatch's working set
under the limit (the unsplit build's are not), onnxruntime agrees, and the published plan.json
replays the same splits."""

from __future__ import annotations

import pytest

from aot import api, record
from aot.checks import golden as check
from aot.lower.dispatches import region_dispatches
from aot.options import BuildOptions
from aot.partition.plan import Plan
from aot.runtime import manifest as mf
from aot.runtime.target import Target
from aot.workspace import Workspace

pytestmark = pytest.mark.device   # compiles for Vulkan and runs on lavapipe (~15 s)

LIMIT = 300 * 1024    # bn1 and relu1 need 512 KiB each, the fused conv1 dispatch ~309 KiB


def _dispatches(bundle, build):
    m = mf.read(bundle)
    r = next(r for r in m.regions if not r.target.is_host)
    return region_dispatches(r, (build / "build" / "regions" / "built" / f"{r.name}.mlir").read_bytes(),
                             Workspace.at(build).cache)


def test_split_build_fits_the_limit_and_matches_onnxruntime(example_model, vulkan_bundle, tmp_path):
    options = BuildOptions(accel=Target.parse("vulkan"), memory_limits=(("vulkan", LIMIT),))
    built = api.build(example_model, tmp_path / "split", options).bundle
    memory = record.read(built.path).partition.memory
    assert memory is not None and len(memory.splits) >= 4 and not memory.hosted
    assert all(s.bytes_before > LIMIT >= s.bytes_after for s in memory.splits)
    (checked,) = memory.dispatches
    assert checked.driver == "vulkan" and checked.dispatches > 0
    assert checked.over == 0 and 0 < checked.largest <= LIMIT, checked
    assert all(d.bytes <= LIMIT for d in _dispatches(built.path, tmp_path / "split"))
    # the same model unsplit has dispatches over the limit: the splits are what shrank them
    unsplit = _dispatches(vulkan_bundle.bundle.path, vulkan_bundle.bundle.path.parent)
    assert any(d.bytes > LIMIT for d in unsplit)
    result = check.check_bundle(built.path, example_model)
    assert result.ok, result

    replayed = api.build(example_model, tmp_path / "replayed",
                         BuildOptions(accel=Target.parse("vulkan"), plan_file=built.path / "plan.json")).bundle
    assert Plan.load(replayed.path / "plan.json").splits == Plan.load(built.path / "plan.json").splits
    assert check.check_bundle(replayed.path, example_model).ok


ONET_LIMIT = 768 * 1024   # ONet's dense_3 MatMul needs 1,187,328 B on Vulkan; nothing else over 600 KiB


@pytest.mark.network
@pytest.mark.full   # the zoo model of issue 27's demonstration; the example CNN above is make test's
def test_a_zoo_model_split_under_its_largest_operator_fits_and_matches_onnxruntime(tmp_path):
    options = BuildOptions(accel=Target.parse("vulkan"), memory_limits=(("vulkan", ONET_LIMIT),))
    split = api.build("zoo:mtcnn-onet", tmp_path / "split", options).bundle
    unsplit = api.build("zoo:mtcnn-onet", tmp_path / "unsplit", BuildOptions(accel=Target.parse("vulkan"))).bundle
    assert any(d.bytes > ONET_LIMIT for d in _dispatches(unsplit.path, tmp_path / "unsplit"))
    memory = record.read(split.path).partition.memory
    assert memory is not None and memory.splits and not memory.hosted
    (checked,) = memory.dispatches
    assert checked.over == 0 and 0 < checked.largest <= ONET_LIMIT, checked
    assert all(d.bytes <= ONET_LIMIT for d in _dispatches(split.path, tmp_path / "split"))
    assert all(r.target.backend == "vulkan-spirv" for r in mf.read(split.path).regions)
    result = check.check_bundle(split.path, None)
    assert result.ok, result
