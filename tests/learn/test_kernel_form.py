"""Feature version 7: each convolution's kernel form (a window along one axis, a square window over
a padded input), and its share of the FLOPs, appended to the region and plan vectors."""

from __future__ import annotations

import numpy as np

from aot.checks.compare import assert_close
from aot.frontend.graph import GraphView, Node, Value
from aot.learn.features import FORM_SCALARS, PLAN_DIM, REGION_DIM, WIDTHS, encode, shape_of
from aot.learn.geometry import KernelForm, kernel_form
from aot.partition.partitioner import single_region_plan
from aot.partition.support import ACCEL, HOST

# name: (input, weights, output, attributes, op); the input is [1, 16, 16, 16] unless it is 1-D.
CONVOLUTIONS = {
    "padded": ((1, 16, 16, 16), (16, 16, 3, 3), (1, 16, 16, 16), {"pads": (1, 1, 1, 1)}, "Conv"),
    "padded_strided": ((1, 16, 16, 16), (16, 16, 3, 3), (1, 16, 8, 8), {"strides": (2, 2), "pads": (1, 1, 1, 1)}, "Conv"),
    "torch_padded": ((1, 16, 16, 16), (16, 16, 3, 3), (1, 16, 16, 16), {}, "aten.conv2d"),   # its shapes say so
    "valid": ((1, 16, 16, 16), (16, 16, 3, 3), (1, 16, 14, 14), {}, "Conv"),
    "valid_strided": ((1, 16, 16, 16), (16, 16, 3, 3), (1, 16, 7, 7), {"strides": (2, 2)}, "Conv"),
    "valid_dilated": ((1, 16, 16, 16), (16, 16, 3, 3), (1, 16, 12, 12), {"dilations": (2, 2)}, "Conv"),
    "row": ((1, 16, 16, 16), (16, 16, 1, 3), (1, 16, 16, 14), {}, "Conv"),
    "column": ((1, 16, 16, 16), (16, 16, 3, 1), (1, 16, 16, 16), {"pads": (1, 0, 1, 0)}, "Conv"),
    "one_d": ((1, 16, 64), (16, 16, 5), (1, 16, 64), {"pads": (2, 2)}, "Conv"),
    "pointwise": ((1, 16, 16, 16), (16, 16, 1, 1), (1, 16, 16, 16), {}, "Conv"),
    # Upsampling 2x: more outputs than inputs, yet no padding.
    "transposed": ((1, 16, 16, 16), (16, 16, 2, 2), (1, 16, 32, 32), {"strides": (2, 2)}, "ConvTranspose"),
    "torch_transposed": ((1, 16, 16, 16), (16, 16, 2, 2), (1, 16, 32, 32), {}, "aten.conv_transpose2d"),
    "transposed_row": ((1, 16, 16, 16), (16, 16, 1, 3), (1, 16, 16, 18), {}, "ConvTranspose"),
}
EXPECTED = {"padded": KernelForm.PADDED_SQUARE, "padded_strided": KernelForm.PADDED_SQUARE,
            "torch_padded": KernelForm.PADDED_SQUARE, "valid": KernelForm.OTHER, "valid_strided": KernelForm.OTHER,
            "valid_dilated": KernelForm.OTHER, "row": KernelForm.LINE, "column": KernelForm.LINE,
            "one_d": KernelForm.LINE, "pointwise": KernelForm.OTHER, "transposed": KernelForm.OTHER,
            "torch_transposed": KernelForm.OTHER, "transposed_row": KernelForm.LINE, "relu": KernelForm.OTHER}


def _graph() -> GraphView:
    values, nodes = {}, []
    for name, (x, w, out, attrs, op) in CONVOLUTIONS.items():
        for value, shape in ((f"{name}.x", x), (f"{name}.w", w), (f"{name}.out", out)):
            values[value] = Value(value, "float32", shape)
        nodes.append(Node(name, op, (f"{name}.x",), (f"{name}.out",), tuple(attrs.items()), (f"{name}.w",)))
    values["relu.out"] = Value("relu.out", "float32", (1, 16, 16, 16))
    nodes.append(Node("relu", "Relu", ("padded.out",), ("relu.out",)))
    inputs = [f"{name}.x" for name in CONVOLUTIONS]
    return GraphView.build(nodes, inputs, [n.outputs[0] for n in nodes if n.name != "padded"], values)


def test_each_kernel_form_is_told_apart():
    view = _graph()
    assert {n.name: kernel_form(n, view) for n in view.nodes} == EXPECTED


def test_version_7_appends_each_forms_share_of_the_host_flops():
    view = _graph()
    codes = encode(view, None)
    plan = single_region_plan(view, HOST)
    shape = shape_of(plan, view, codes)
    share = {form: codes.flops[codes.form == form].sum() / codes.flops.sum() for form in KernelForm}
    assert 0 < share[KernelForm.LINE] < 1 and 0 < share[KernelForm.PADDED_SQUARE] < 1
    v6 = WIDTHS[6]
    assert (PLAN_DIM, REGION_DIM) == (v6.plan + len(FORM_SCALARS), v6.region + len(FORM_SCALARS))
    expected = np.array([share[KernelForm.LINE], share[KernelForm.PADDED_SQUARE]])
    for block in (shape.plan[v6.plan:], shape.regions[0, v6.region:]):
        assert np.all(np.isfinite(block))
        assert_close(block, expected, rtol=1e-12, atol=1e-12)
    # On the accelerator, none of the host's FLOPs: the plan's shares are 0 (no division by 0).
    accel = shape_of(single_region_plan(view, ACCEL), view, codes)
    assert np.all(np.isfinite(accel.plan)) and not accel.plan[v6.plan:].any()
