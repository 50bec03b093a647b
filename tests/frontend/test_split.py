"""Memory-driven operator splitting without IREE: which axis, how many pieces, never a reduced
axis, and the rewritten graph computes what the original did (onnxruntime on both)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference

from aot.checks import reference
from aot.checks.compare import compare, within
from aot.frontend.split import Split, Tensors, apply, choose, piece_bytes, working_set
from aot.frontend.split_rules import SplitAxis, cuts
from conftest import onnx_model

F32 = TensorProto.FLOAT


def _model(op: str, shapes: dict[str, list[int]], out_shape: list[int], weights=(), seed: int = 0,
           **attrs) -> onnx.ModelProto:
    """One ``op`` node over float inputs ``shapes`` (graph inputs) and ``weights`` (name, shape)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in weights]
    node = helper.make_node(op, [*shapes, *(n for n, _ in weights)], ["y"], name="op", **attrs)
    model = onnx_model([node], [helper.make_tensor_value_info(n, F32, s) for n, s in shapes.items()],
                       [helper.make_tensor_value_info("y", F32, out_shape)], inits)
    return shape_inference.infer_shapes(model, strict_mode=True)


def _split(model: onnx.ModelProto, limit: int) -> Split | str:
    return choose(model.graph.node[0], Tensors.of(model), "vulkan", limit)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return reference.session(model.SerializeToString(), optimize=False).run(None, feeds)[0]


def _rewritten_matches(model: onnx.ModelProto, split: Split, *, exact: bool) -> onnx.ModelProto:
    rewritten, origin = apply(model, [split])
    onnx.checker.check_model(rewritten, full_check=True)
    rewritten = shape_inference.infer_shapes(rewritten, strict_mode=True)
    assert sum(n.op_type == split.op for n in rewritten.graph.node) == len(split.pieces)
    assert set(origin.values()) == {"op"} and len(origin) == len(rewritten.graph.node)
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}}
    want, got = _run(model, feeds), _run(rewritten, feeds)
    if exact:    # each piece computes exactly the original's arithmetic for its samples
        assert compare(got, want).ok and got.tobytes() == want.tobytes()
    else:
        ok, diff = within(got, want)
        assert ok, diff
    return rewritten


def test_ten_frames_of_a_hundred_channels_split_into_two_times_five_frames():
    model = _model("Relu", {"x": [10, 100]}, [10, 100])
    assert working_set(model.graph.node[0], Tensors.of(model)) == 8000
    split = _split(model, 4000)
    assert isinstance(split, Split)
    assert (split.kind, split.axis, split.pieces, split.bytes_before, split.bytes_after) == \
        (SplitAxis.BATCH, 0, (5, 5), 8000, 4000)
    _rewritten_matches(model, split, exact=True)


def test_one_frame_splits_into_two_times_fifty_channels():
    model = _model("Relu", {"x": [1, 100]}, [1, 100])
    split = _split(model, 400)
    assert isinstance(split, Split)
    assert (split.kind, split.axis, split.pieces) == (SplitAxis.CHANNEL, 1, (50, 50))
    _rewritten_matches(model, split, exact=True)


def test_within_the_limit_is_not_split_by_the_caller_and_an_impossible_limit_says_why():
    model = _model("Relu", {"x": [10, 100]}, [10, 100])
    why = _split(model, 7)     # one element in, one out: 8 bytes
    assert isinstance(why, str) and "10 pieces along batch axis 0" in why and "100 pieces along channel" in why


@pytest.mark.parametrize("limit", [7999, 6000, 4001, 3000, 2001, 1000, 800, 161])
def test_the_fewest_pieces_that_fit_as_equal_as_possible(limit):
    model = _model("Relu", {"x": [10, 100]}, [10, 100])
    node, tensors = model.graph.node[0], Tensors.of(model)
    split = _split(model, limit)
    assert isinstance(split, Split)
    k = len(split.pieces)
    assert max(split.pieces) - min(split.pieces) <= 1 and sum(split.pieces) == (10 if split.axis == 0 else 100)
    assert split.bytes_after <= limit
    cut = next(c for c in cuts(node, tensors.shapes, tensors.consts)[0] if c.axis == split.axis)
    assert k == 2 or piece_bytes(node, cut, -(-cut.units // (k - 1)), tensors) > limit   # k - 1 would not fit
    if limit >= 800:     # 10 frames fit: the batch axis is used
        assert split.kind is SplitAxis.BATCH
    else:
        assert split.kind is SplitAxis.CHANNEL


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_is_never_split_along_its_axis(op):
    model = _model(op, {"x": [1, 100]}, [1, 100], axis=1)
    assert cuts(model.graph.node[0], Tensors.of(model).shapes, {})[0] == ()
    assert "reduced" in _split(model, 400)   # type: ignore[operator]
    model = _model(op, {"x": [10, 100]}, [10, 100], axis=0)
    split = _split(model, 4000)
    assert isinstance(split, Split) and split.axis == 1
    _rewritten_matches(model, split, exact=False)


def test_layer_normalization_is_never_split_along_its_axis_to_the_end():
    model = _model("LayerNormalization", {"x": [1, 8, 64]}, [1, 8, 64], weights=[("s", [8, 64]), ("b", [8, 64])],
                   axis=1)
    assert cuts(model.graph.node[0], Tensors.of(model).shapes, {})[0] == ()
    model = _model("LayerNormalization", {"x": [1, 8, 64]}, [1, 8, 64], weights=[("s", [64]), ("b", [64])])
    found = cuts(model.graph.node[0], Tensors.of(model).shapes, {})[0]
    assert [c.axis for c in found] == [1]
    split = _split(model, 3000)
    assert isinstance(split, Split) and split.axis == 1 and len(split.pieces) == 2
    _rewritten_matches(model, split, exact=False)


def test_conv_splits_by_output_channels_with_its_weights_and_bias():
    model = _model("Conv", {"x": [1, 4, 8, 8]}, [1, 6, 8, 8], weights=[("w", [6, 4, 3, 3]), ("b", [6])],
                   pads=[1, 1, 1, 1])
    found = cuts(model.graph.node[0], Tensors.of(model).shapes, {})[0]
    # input channels are reduced over: never cut (the last resort, rows, follows the input's rows)
    assert [c.kind for c in found] == [SplitAxis.CHANNEL, SplitAxis.ROWS]    # a batch of 1 is no cut
    assert all(c.inputs[0] is None or c.inputs[0].axis == 2 for c in found)
    # x 1024 (1600 padded to 10x10, as IREE pads it) + w 864 + b 24 + y 1536 bytes; 3 channels: 2812
    split = _split(model, 2900)
    assert working_set(model.graph.node[0], Tensors.of(model)) == 1600 + 864 + 24 + 1536
    assert isinstance(split, Split) and (split.kind, split.axis, split.pieces) == (SplitAxis.CHANNEL, 1, (3, 3))
    rewritten = _rewritten_matches(model, split, exact=False)
    shapes = {t.name: list(t.dims) for t in rewritten.graph.initializer}
    assert sorted(s for n, s in shapes.items() if n.startswith("w.")) == [[3, 4, 3, 3]] * 2
    assert sorted(s for n, s in shapes.items() if n.startswith("b.")) == [[3]] * 2
    assert "w" not in shapes       # the whole weight is gone: no byte is shipped twice


def test_conv_batch_first_and_bit_exact():
    model = _model("Conv", {"x": [4, 3, 8, 8]}, [4, 6, 8, 8], weights=[("w", [6, 3, 3, 3])], pads=[1, 1, 1, 1])
    split = _split(model, 5000)
    assert isinstance(split, Split) and split.kind is SplitAxis.BATCH
    _rewritten_matches(model, split, exact=True)


def test_depthwise_conv_splits_whole_groups():
    model = _model("Conv", {"x": [1, 8, 6, 6]}, [1, 8, 6, 6], weights=[("w", [8, 1, 3, 3]), ("b", [8])],
                   group=8, pads=[1, 1, 1, 1])
    split = _split(model, 1000)
    assert isinstance(split, Split) and split.kind is SplitAxis.GROUP and sum(split.pieces) == 8
    rewritten = _rewritten_matches(model, split, exact=False)
    groups = [a.i for n in rewritten.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group"]
    assert groups == list(split.pieces)


def test_matmul_is_never_split_along_k():
    model = _model("MatMul", {"a": [1, 64]}, [1, 32], weights=[("b", [64, 32])])
    node, tensors = model.graph.node[0], Tensors.of(model)
    for c in cuts(node, tensors.shapes, {})[0]:
        assert c.inputs[0] is None or c.inputs[0].axis != 1      # A's K
        assert c.inputs[1] is None or c.inputs[1].axis != 0      # B's K
    split = _split(model, 5000)
    assert isinstance(split, Split) and (split.kind, split.axis) == (SplitAxis.CHANNEL, 1)
    _rewritten_matches(model, split, exact=False)


def test_batched_matmul_splits_the_batch_and_broadcasts():
    model = _model("MatMul", {"a": [6, 4, 16]}, [6, 4, 8], weights=[("b", [16, 8])])
    split = _split(model, 2000)
    assert isinstance(split, Split) and split.kind is SplitAxis.BATCH
    _rewritten_matches(model, split, exact=True)


def test_gemm_splits_n_along_transposed_weights():
    model = _model("Gemm", {"a": [1, 32]}, [1, 48], weights=[("w", [48, 32]), ("c", [48])], transB=1)
    split = _split(model, 4000)
    assert isinstance(split, Split) and (split.kind, split.axis) == (SplitAxis.CHANNEL, 1)
    rewritten = _rewritten_matches(model, split, exact=False)
    assert {tuple(t.dims) for t in rewritten.graph.initializer if t.name.startswith("w.")} == {(24, 32)}


def test_broadcast_inputs_stay_whole():
    model = _model("Add", {"x": [4, 8, 5]}, [4, 8, 5], weights=[("bias", [8, 1])])
    node, tensors = model.graph.node[0], Tensors.of(model)
    by_axis = {c.axis: c for c in cuts(node, tensors.shapes, {})[0]}
    assert by_axis[0].inputs[1] is None and by_axis[1].inputs[1] is not None and by_axis[2].inputs[1] is None
    split = _split(model, 400)
    assert isinstance(split, Split)
    _rewritten_matches(model, split, exact=True)


def test_reduce_is_split_only_along_kept_axes():
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="op", keepdims=0)
    model = shape_inference.infer_shapes(onnx_model(
        [node], [helper.make_tensor_value_info("x", F32, [1, 50, 6])],
        [helper.make_tensor_value_info("y", F32, [1, 6])], [axes]))
    tensors = Tensors.of(model)
    assert [(c.axis, c.inputs[0].axis) for c in cuts(node, tensors.shapes, tensors.consts)[0]] == [(1, 2)]
    split = _split(model, 800)
    assert isinstance(split, Split) and split.axis == 1
    _rewritten_matches(model, split, exact=True)


def test_a_replayed_split_that_does_not_fit_the_model_is_a_partition_error():
    from aot.errors import PartitionError

    model = _model("Relu", {"x": [10, 100]}, [10, 100])
    with pytest.raises(PartitionError):
        apply(model, [Split("op", "Relu", 0, SplitAxis.BATCH, (6, 5), "vulkan", 1, 2, 1)])
    with pytest.raises(PartitionError):
        apply(model, [Split("nope", "Relu", 0, SplitAxis.BATCH, (5, 5), "vulkan", 1, 2, 1)])


def test_a_chain_split_alike_runs_piece_by_piece_with_one_concat_at_its_end():
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="a"), helper.make_node("Sigmoid", ["h"], ["y"], name="b")]
    model = shape_inference.infer_shapes(onnx_model(nodes, [helper.make_tensor_value_info("x", F32, [10, 100])],
                                                    [helper.make_tensor_value_info("y", F32, [10, 100])]))
    tensors = Tensors.of(model)
    splits = [choose(n, tensors, "vulkan", 4000) for n in model.graph.node]
    assert all(isinstance(s, Split) and s.pieces == (5, 5) for s in splits)
    rewritten, origin = apply(model, splits)   # type: ignore[arg-type]
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops.count("Concat") == 1 and ops.count("Slice") == 2 and "a.concat" not in origin
    x = np.random.default_rng(0).standard_normal((10, 100)).astype(np.float32)
    want, got = _run(model, {"x": x}), _run(shape_inference.infer_shapes(rewritten, strict_mode=True), {"x": x})
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose_splits_output_channels_or_groups(group):
    model = _model("ConvTranspose", {"x": [1, 4, 5, 5]}, [1, 6, 10, 10], weights=[("w", [4, 6 // group, 2, 2])],
                   strides=[2, 2], group=group)
    split = _split(model, 3000)
    assert isinstance(split, Split) and split.axis == 1
    assert split.kind is (SplitAxis.CHANNEL if group == 1 else SplitAxis.GROUP)
    _rewritten_matches(model, split, exact=False)


def test_gemm_rows_take_their_rows_of_c():
    model = _model("Gemm", {"a": [6, 8]}, [6, 4], weights=[("w", [8, 4]), ("c", [6, 4])])
    split = _split(model, 250)
    assert isinstance(split, Split) and split.kind is SplitAxis.BATCH
    _rewritten_matches(model, split, exact=False)


@pytest.mark.parametrize("size, kernel, attrs", [
    ((40, 12), 3, dict(pads=[1, 1, 1, 1])),
    ((41, 12), 3, dict(pads=[1, 0, 2, 1], strides=[2, 1])),          # asymmetric padding, a row stride
    ((40, 12), 3, dict(pads=[2, 2, 2, 2], dilations=[2, 2])),
    ((40, 12), 5, dict(pads=[0, 0, 0, 0], strides=[3, 3])),           # no padding: every piece inside
])
def test_a_conv_whose_input_no_channel_split_shrinks_splits_by_rows_with_a_halo(size, kernel, attrs):
    """Batch 1 and an input over the limit: every channel piece reads the whole input, so only the
    rows help. Each piece reads its rows plus the halo, pads only at the image's border, and the
    rows concatenate to the original output."""
    h, w = size
    sh = attrs.get("strides", [1, 1])[0]
    dh = attrs.get("dilations", [1, 1])[0]
    pads = attrs["pads"]
    out_h = (h + pads[0] + pads[2] - dh * (kernel - 1) - 1) // sh + 1
    out_w = (w + pads[1] + pads[3] - attrs.get("dilations", [1, 1])[1] * (kernel - 1) - 1) // attrs.get("strides", [1, 1])[1] + 1
    model = _model("Conv", {"x": [1, 8, h, w]}, [1, 4, out_h, out_w], weights=[("w", [4, 8, kernel, kernel])], **attrs)
    x_bytes = 8 * h * w * 4
    split = _split(model, x_bytes)          # below the input alone: no channel piece can fit
    assert isinstance(split, Split) and (split.kind, split.axis) == (SplitAxis.ROWS, 2), split
    assert split.bytes_after <= x_bytes < split.bytes_before and sum(split.pieces) == out_h
    rewritten = _rewritten_matches(model, split, exact=True)
    pads_of = [next(list(a.ints) for a in n.attribute if a.name == "pads") for n in rewritten.graph.node if n.op_type == "Conv"]
    assert pads_of[0][0] == pads[0] and pads_of[-1][2] <= pads[2]      # padding only where the image ends
    assert all(p[1] == pads[1] and p[3] == pads[3] for p in pads_of)    # the columns keep theirs


def test_auto_padding_is_no_row_cut():
    model = _model("Conv", {"x": [1, 8, 20, 20]}, [1, 4, 20, 20], weights=[("w", [4, 8, 3, 3])], auto_pad="SAME_UPPER")
    assert SplitAxis.ROWS not in {c.kind for c in cuts(model.graph.node[0], Tensors.of(model).shapes, {})[0]}
