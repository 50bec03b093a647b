"""Pointwise convolutions, few-channel stride-2 stems, stride-1 convolutions with a non-square
kernel or few input channels, and max poolings are rewritten for IREE's data-tiled convolutions
(``lower/packed_conv.py``), only in modules compiled with them: which ops match, that other flags
leave the text alone (but for the strided pointwise convolutions of a channels-last module), and
that host builds pinned to the data-tiled-conv set (all four rewrites in its module) and to the
channels-last one give onnxruntime's values."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.checks.compare import assert_close
from aot.lower import depthwise, packed_conv, packed_pool
from aot.lower.flags import CHANNELS_LAST, DATA_TILING, IM2COL, O2
from aot.lower.importer import import_onnx
from aot.runtime.target import Target
from aot.tune.candidates import DATA_TILED_CONV as TUNER_SET
from conftest import onnx_model

DATA_TILED_CONV = TUNER_SET.flags   # the tuner's data-tiled-conv set
CHANNELS_LAST_SET = (O2, *CHANNELS_LAST, DATA_TILING)   # the tuner's channels-last+data-tiling set


def _single(w_shape: tuple[int, ...], x_shape: tuple[int, ...], **attrs) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones(w_shape, np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=list(w_shape[2:]), **attrs)
    model = onnx_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return onnx.shape_inference.infer_shapes(model)


def _counts(model: onnx.ModelProto, tmp_path) -> tuple[int, int, int]:
    mlir = import_onnx(model, "m", tmp_path, tmp_path / "w.irpa").mlir
    return depthwise.rewrite_ops(mlir, packed_conv.pointwise_body, packed_conv.stem_body, packed_conv.shifted_body)[1]


@pytest.mark.parametrize(("model", "counts"), [
    (_single((64, 32, 1, 1), (1, 32, 14, 14)), (1, 0, 0)),
    (_single((64, 32, 1, 1), (1, 32, 15, 15), strides=[2, 2]), (1, 0, 0)),     # a strided projection
    (_single((64, 32, 1, 1), (1, 32, 14, 14), auto_pad="VALID"), (1, 0, 0)),  # MTCNN's exporter
    (_single((64, 32, 1, 1), (2, 32, 14, 14)), (0, 0, 0)),                     # two images: not one matmul
    (_single((2, 32, 1, 1), (1, 32, 19, 19)), (0, 0, 0)),                      # 46 kFLOP: packing would not pay
    (_single((64, 32, 1, 1), (1, 32, 14, 14), pads=[1, 1, 1, 1]), (0, 0, 0)),  # padded
    (_single((64, 16, 1, 1), (1, 32, 14, 14), group=2), (0, 0, 0)),            # grouped
    (_single((64, 3, 7, 7), (1, 3, 224, 224), strides=[2, 2], pads=[3, 3, 3, 3]), (0, 1, 0)),   # a ResNet stem
    (_single((16, 3, 3, 3), (1, 3, 63, 64), strides=[2, 2], pads=[1, 0, 1, 1]), (0, 1, 0)),     # odd sizes
    (_single((64, 3, 3, 3), (1, 3, 32, 32), pads=[1, 1, 1, 1]), (0, 0, 1)),    # RGB at stride 1: taps
    (_single((32, 3, 3, 3), (1, 3, 48, 48), auto_pad="VALID"), (0, 0, 1)),     # MTCNN's first layer
    (_single((24, 24, 3, 1), (1, 24, 74, 32)), (0, 0, 1)),                     # the embedding's 3x1
    (_single((48, 24, 1, 3), (1, 24, 36, 16), pads=[0, 1, 0, 1]), (0, 0, 1)),  # and its padded 1x3
    (_single((24, 24, 3, 1), (1, 24, 74, 32), strides=[2, 1]), (0, 0, 0)),     # strided
    (_single((24, 24, 3, 1), (1, 24, 74, 32), dilations=[2, 1]), (0, 0, 0)),   # dilated
    (_single((24, 12, 3, 1), (1, 24, 74, 32), group=2), (0, 0, 0)),            # grouped
    (_single((4, 2, 3, 1), (1, 2, 8, 8)), (0, 0, 0)),                          # 1.1 kFLOP: packing would not pay
    (_single((36, 1, 1, 256), (1, 1, 1, 427)), (0, 0, 0)),                     # 256 taps: too many to gather
    (_single((64, 16, 3, 3), (1, 16, 32, 32), strides=[2, 2]), (0, 0, 0)),     # channels fill the kernel's blocks
    (_single((64, 32, 3, 3), (1, 32, 14, 14)), (0, 0, 0)),                     # what the kernel is good at
], ids=["pointwise", "strided-pointwise", "valid-pointwise", "batch-2", "too-small", "padded", "grouped", "stem",
        "odd-stem", "rgb-stride-1", "valid-rgb", "3x1", "padded-1x3", "strided-3x1", "dilated-3x1", "grouped-3x1",
        "small-3x1", "1x256", "16-channels", "3x3"])
def test_only_the_convolutions_the_nchwc_kernel_runs_badly_are_rewritten(model, counts, tmp_path):
    assert _counts(model, tmp_path) == counts


def _pool(x_shape: tuple[int, ...], outputs: int = 1, **attrs) -> onnx.ModelProto:
    node = helper.make_node("MaxPool", ["x"], ["y", "i"][:outputs], name="pool", **attrs)
    model = onnx_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                       [helper.make_tensor_value_info(n, TensorProto.FLOAT if n == "y" else TensorProto.INT64, None)
                        for n in node.output], [])
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize(("model", "rewritten"), [
    (_pool((1, 64, 112, 112), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), True),   # a ResNet's
    (_pool((1, 32, 46, 46), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), True),           # MTCNN's
    (_pool((1, 64, 21, 21), kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID"), True),
    (_pool((1, 128, 20, 20), kernel_shape=[5, 5], pads=[2, 2, 2, 2]), True),                    # YOLO's SPPF
    (_pool((2, 8, 9, 9), kernel_shape=[2, 2], strides=[2, 2]), True),                           # two images
    (_pool((1, 8, 9, 9), kernel_shape=[3, 3], auto_pad="SAME_UPPER"), False),
    (_pool((1, 8, 9, 9), kernel_shape=[3, 3], dilations=[2, 2]), False),
    (_pool((1, 8, 9, 9), outputs=2, kernel_shape=[3, 3]), False),                               # with indices
    (_pool((1, 8, 9, 9, 9), kernel_shape=[3, 3, 3]), False),                                    # 3-D
], ids=["resnet", "ceil", "valid", "stride-1", "batch-2", "same", "dilated", "indices", "3-d"])
def test_max_poolings_are_rewritten_when_static_2d_and_without_indices(model, rewritten, tmp_path):
    mlir = import_onnx(model, "m", tmp_path, tmp_path / "w.irpa").mlir
    text, (count,) = depthwise.rewrite_ops(mlir, packed_pool.max_pool_body)
    assert count == int(rewritten) and ('"onnx.MaxPool"' in text) != rewritten


def test_a_pooled_value_another_op_reads_is_copied_out_behind_a_barrier(tmp_path):
    """torchvision's ResNets add their stem's pooled map to their first block's output: the
    strided read fused into that addition asked 786 KiB of stack and the set failed to compile.
    Read by convolutions alone (the Caffe ResNet's two projections), it stays fused."""
    w = numpy_helper.from_array(np.ones((8, 8, 3, 3), np.float32), "w")
    pool = helper.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    conv = helper.make_node("Conv", ["p", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    for last, barrier in ((helper.make_node("Add", ["c", "p"], ["y"], name="add"), True),
                          (helper.make_node("Conv", ["p", "w"], ["y"], name="other", kernel_shape=[3, 3],
                                            pads=[1, 1, 1, 1]), False)):
        model = onnx.shape_inference.infer_shapes(onnx_model(
            [pool, conv, last], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 20, 20])],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "c")], [w]))
        mlir = import_onnx(model, "m", tmp_path, tmp_path / "w.irpa").mlir
        text, (count,) = depthwise.rewrite_ops(mlir, packed_pool.max_pool_body)
        assert count == 1 and ("util.optimization_barrier" in text) == barrier


def test_a_channels_last_module_gets_its_strided_pointwise_convolutions_as_products(tmp_path):
    """IREE 3.13's channels-last conversion lowers a strided 1x1 convolution to a reduction it
    runs at a few GFLOP/s; the other convolutions (and poolings) are left to it."""
    host = Target.host()
    strided, plain, pooled = (import_onnx(m, "m", tmp_path, tmp_path / "w.irpa").mlir.encode() for m in (
        _single((64, 32, 1, 1), (1, 32, 15, 15), strides=[2, 2]), _single((64, 32, 1, 1), (1, 32, 14, 14)),
        _pool((1, 64, 112, 112), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])))
    rewritten = packed_conv.module_text(host, strided, CHANNELS_LAST_SET)
    assert b'"onnx.Conv"' not in rewritten and b"linalg.matmul" in rewritten
    assert packed_conv.module_text(host, plain, CHANNELS_LAST_SET) == plain
    assert packed_conv.module_text(host, pooled, CHANNELS_LAST_SET) == pooled
    assert packed_conv.key_tag(host, CHANNELS_LAST_SET) == (
        f"channels-last strided pointwise {packed_conv.CHANNELS_LAST_REWRITE_VERSION}",)
    assert packed_conv.module_text(Target.parse("vulkan"), strided, CHANNELS_LAST_SET) is strided


def test_only_a_cpu_module_compiled_with_data_tiled_convolutions_is_rewritten(tmp_path):
    text = import_onnx(_single((64, 32, 1, 1), (1, 32, 14, 14)), "m", tmp_path, tmp_path / "w.irpa").mlir.encode()
    host = Target.host()
    rewritten = packed_conv.module_text(host, text, DATA_TILED_CONV)
    assert b'"onnx.Conv"' in text and b'"onnx.Conv"' not in rewritten and b"linalg.matmul" in rewritten
    for opt in ((IM2COL,), (DATA_TILING, IM2COL), None, ()):
        assert packed_conv.module_text(host, text, opt) is text and packed_conv.key_tag(host, opt) == ()
    vulkan = Target.parse("vulkan")
    assert packed_conv.module_text(vulkan, text, DATA_TILED_CONV) is text and packed_conv.key_tag(vulkan, DATA_TILED_CONV) == ()
    assert packed_conv.key_tag(host, DATA_TILED_CONV) == (f"packed-conv {packed_conv.PACKED_CONV_VERSION}",)


def _corners() -> onnx.ModelProto:
    """A 3x3 convolution over RGB without padding (auto_pad VALID), a stem (7x7, stride 2, four
    channels), a strided and a plain pointwise convolution, a 3x3 one over 16 channels and a padded
    1x3 and a 3x1, each with a bias and a Relu, over an odd-sized image; max poolings in place of
    the first one's Relu (3x3, stride 2, ceil mode: its last windows run into the padding) and the
    last one's (5x5 at stride 1, padded; then 2x2 at stride 2 over an odd size), over signed
    values, so a pooling that padded with zeros would show."""
    rng = np.random.default_rng(0)
    layers = [("rgb", (4, 3, 3, 3), dict(auto_pad="VALID")),
              ("stem", (32, 4, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
              ("project", (64, 32, 1, 1), dict(strides=[2, 2])),
              ("reduce", (16, 64, 1, 1), {}),
              ("spatial", (16, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
              ("row", (16, 16, 1, 3), dict(pads=[0, 1, 0, 1])),
              ("column", (16, 16, 3, 1), {})]
    pooled = {"rgb": [("rgb.pool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1))],
              "column": [("spp", dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2])),
                         ("halve", dict(kernel_shape=[2, 2], strides=[2, 2]))]}
    nodes, inits, x = [], [], "x"
    for name, shape, attrs in layers:
        w = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        inits += [numpy_helper.from_array(w.astype(np.float32), f"{name}.w"),
                  numpy_helper.from_array(rng.standard_normal(shape[0]).astype(np.float32), f"{name}.b")]
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}.c"], name=name,
                                      kernel_shape=list(shape[2:]), **attrs))
        x = f"{name}.c"
        for pool, pool_attrs in pooled.get(name, []):   # in place of the Relu: over signed values
            nodes.append(helper.make_node("MaxPool", [x], [pool], name=pool, **pool_attrs))
            x = pool
        if name not in pooled:
            nodes.append(helper.make_node("Relu", [x], [name], name=f"{name}.relu"))
            x = name
    nodes[-1].output[0] = "y"
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 90, 74])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(model)


def _pinned_corners(tmp_path, flags: tuple[str, ...]):
    """The corner cases built on the host with their one region pinned to ``flags``: the model's
    path, the build, its region's text and the text those flags compile."""
    from aot import api
    from aot.options import BuildOptions

    path = tmp_path / "corner.onnx"
    onnx.save(_corners(), path)
    first = api.build(path, tmp_path / "default", BuildOptions(accel=None))
    plan = json.loads((first.bundle.path / "plan.json").read_text())
    (region,) = plan["regions"]
    region["flags"] = list(flags)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    built = api.build(path, tmp_path / "pinned", BuildOptions(accel=None, plan_file=tmp_path / "plan.json"))
    (entry,) = built.bundle.manifest.regions
    assert tuple(entry.flags) == flags
    text = (built.bundle.path.parent / "build" / "regions" / "built" / "r0.mlir").read_text()
    return path, built, text, packed_conv.module_text(Target.host(), text.encode(), flags).decode()


def _matches_onnxruntime(path, built) -> None:
    from aot import runtime
    from aot.checks import reference

    x = np.random.default_rng(1).standard_normal((1, 3, 90, 74)).astype(np.float32)
    want = reference.session(path).run(None, {"x": x})[0]
    with runtime.load(built.bundle.path) as session:
        got = session.run({"x": x})[0]
    assert got.shape == want.shape and np.isfinite(got).all() and np.abs(got).max() > 0.1
    assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.device
def test_a_build_pinned_to_data_tiled_convolutions_gives_onnxruntimes_values(tmp_path):
    path, built, text, compiled = _pinned_corners(tmp_path, DATA_TILED_CONV)
    # the module holds the rewrites: one convolution is left of the seven, and it is the 3x3 over
    # 16 channels; the stem is a convolution over blocks, the others are matmuls (three over taps);
    # no pooling is left
    assert compiled.count('"onnx.Conv"') == 1 and compiled.count("linalg.matmul") == 5
    assert compiled.count("linalg.conv_2d_nchw_fchw") == 1 and compiled.count("tensor.concat") == 3
    assert '"onnx.MaxPool"' in text and '"onnx.MaxPool"' not in compiled
    _matches_onnxruntime(path, built)


@pytest.mark.device
def test_a_build_pinned_to_channels_last_gives_onnxruntimes_values(tmp_path):
    path, built, _, compiled = _pinned_corners(tmp_path, CHANNELS_LAST_SET)
    # the strided projection alone is a product; the six others stay convolutions
    assert compiled.count('"onnx.Conv"') == 6 and compiled.count("linalg.matmul") == 1
    _matches_onnxruntime(path, built)


def _stems() -> onnx.ModelProto:
    """Four stride-2 stems over one RGB image of odd height, side by side: a ResNet's 7x7 with the
    TensorFlow exporter's asymmetric padding (3 before, 2 after), a 3x3 padded on three sides, an
    unpadded 4x4 (an even kernel) and a 5x5 with an odd leading pad on one axis only."""
    rng = np.random.default_rng(2)
    stems = [((16, 3, 7, 7), [3, 3, 2, 2]), ((8, 3, 3, 3), [1, 0, 1, 1]), ((8, 3, 4, 4), [0, 0, 0, 0]),
             ((8, 3, 5, 5), [2, 1, 2, 2])]
    nodes, inits, outputs = [], [], []
    for i, (shape, pads) in enumerate(stems):
        w = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        inits += [numpy_helper.from_array(w.astype(np.float32), f"s{i}.w"),
                  numpy_helper.from_array(rng.standard_normal(shape[0]).astype(np.float32), f"s{i}.b")]
        nodes.append(helper.make_node("Conv", ["x", f"s{i}.w", f"s{i}.b"], [f"y{i}"], name=f"stem{i}",
                                      kernel_shape=list(shape[2:]), strides=[2, 2], pads=pads))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None))
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 57, 64])], outputs, inits)
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.device
def test_stems_over_blocks_give_onnxruntimes_values(tmp_path):
    """Each stem is written over blocks, the 7x7 and the 5x5 padded after the transpose (an odd
    leading pad as a zero row or column of the kernel), the 3x3 and the 4x4 before, and each gives
    onnxruntime's values."""
    from aot import api, runtime
    from aot.checks import reference
    from aot.options import BuildOptions

    path = tmp_path / "stems.onnx"
    onnx.save(_stems(), path)
    first = api.build(path, tmp_path / "default", BuildOptions(accel=None))
    plan = json.loads((first.bundle.path / "plan.json").read_text())
    for region in plan["regions"]:
        region["flags"] = list(DATA_TILED_CONV)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    built = api.build(path, tmp_path / "tiled", BuildOptions(accel=None, plan_file=tmp_path / "plan.json"))
    text = b"".join(p.read_bytes() for p in sorted((built.bundle.path.parent / "build" / "regions" / "built").glob("*.mlir")))
    compiled = packed_conv.module_text(Target.host(), text, DATA_TILED_CONV).decode()
    assert '"onnx.Conv"' not in compiled and compiled.count("linalg.conv_2d_nchw_fchw") == 4
    x = np.random.default_rng(3).standard_normal((1, 3, 57, 64)).astype(np.float32)
    wants = reference.session(path).run(None, {"x": x})
    with runtime.load(built.bundle.path) as session:
        gots = session.run({"x": x})
    for got, want in zip(gots, wants, strict=True):
        assert got.shape == want.shape and np.isfinite(got).all() and np.abs(got).max() > 0.1
        assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel, pads, early, blocks", [
    (3, (1, 1, 1, 1), True, (113, 113)),      # a 3x3 stem: padded first, 226 x 226 pixels in blocks
    (7, (3, 3, 2, 2), False, (115, 115)),     # ResNet's: 2 blocks before (4 pixels, the kernel shifted by one), 1 after
    (5, (2, 2, 2, 2), False, (114, 114)),
], ids=["3x3", "7x7-asymmetric", "5x5"])
def test_a_wide_stem_is_padded_in_blocks_after_its_space_to_depth(kernel, pads, early, blocks):
    """Which form a stem over a 224 x 224 RGB image takes (``PAD_BLOCKS_FROM_TAPS``), and the grid
    of blocks its convolution runs over: it gives the stem's 112 x 112 output (or one more, cropped)."""
    from aot.lower.depthwise import ConvOperands

    c = ConvOperands(x=(1, 3, 224, 224), w=(64, 3, kernel, kernel), y=(1, 64, 112, 112), group=1, strides=(2, 2),
                     dilations=(1, 1), pads=pads, dtype="f32", bias=True)
    b = packed_conv.stem_blocks(c)
    assert b.early is early and (kernel >= packed_conv.PAD_BLOCKS_FROM_TAPS) is not early
    assert b.grid == blocks and b.output[0] >= 112 and b.output[0] - 112 <= 1
    assert 2 * b.kernel[0] >= kernel + b.shift[0]
