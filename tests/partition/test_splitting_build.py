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


def _stem_model(path):
    """x[1,3,256,256] -> 3x3 Conv to 8 channels -> Relu -> 1x1 Conv to 4: the 1x1 convolution's
    input alone (8 x 256 x 256 floats, 2 MiB) is over a 1.5 MiB limit whatever its output channels."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="stem", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="pw", kernel_shape=[1, 1])]
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in (("w", (8, 3, 3, 3)), ("b", (8,)), ("w2", (4, 8, 1, 1)))]
    graph = helper.make_graph(nodes, "rows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 256, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 256, 256])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("limit", [1536 * 1024, 1024 * 1024])
def test_a_conv_whose_input_alone_is_over_the_limit_splits_by_rows_and_fits(tmp_path, limit):
    """At 1 MiB the Relu alone would cut by channels and the stem by rows: aligned to the 1x1
    convolution's rows, the chain runs piece by piece with no full-size copy between them."""
    model = _stem_model(tmp_path / "rows.onnx")
    options = BuildOptions(accel=Target.parse("vulkan"), memory_limits=(("vulkan", limit),))
    built = api.build(model, tmp_path / "split", options).bundle
    memory = record.read(built.path).partition.memory
    assert memory is not None and not memory.hosted
    kinds = {s.node: s.kind.value for s in memory.splits}
    assert kinds["pw"] == "rows" and all(s.bytes_after <= limit for s in memory.splits)
    pieces = {s.node: s.pieces for s in memory.splits}
    assert pieces["stem"] == pieces["relu"] == pieces["pw"] and {s.axis for s in memory.splits} == {2}
    assert all(d.bytes <= limit for d in _dispatches(built.path, tmp_path / "split"))
    result = check.check_bundle(built.path, model)
    assert result.ok, result


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
