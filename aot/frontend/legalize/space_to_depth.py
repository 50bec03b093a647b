"""SpaceToDepth in CRD order (opset 28's ``mode="CRD"``) as Reshape, Transpose, Reshape.

IREE 3.13's importer ignores the mode and computes the DCR order, a wrong result without an error
(node test ``spacetodepth_crd_mode_example``). CRD keeps each channel's b x b block together:
``[N, C, H/b, b, W/b, b] -> perm [0, 1, 3, 5, 2, 4] -> [N, C*b*b, H/b, W/b]``, the standard's
own function body with the shapes folded in.
"""

from __future__ import annotations

import onnx

from aot.frontend.legalize.base import Context, Emitter, Legalization, Replacement, attrs


def _applies(node: onnx.NodeProto, ctx: Context) -> bool:
    x = ctx.shape(node.input[0])
    b = int(attrs(node).get("blocksize", 0))
    return (attrs(node).get("mode", b"DCR") == b"CRD" and x is not None and len(x) == 4 and b > 0
            and x[2] % b == 0 and x[3] % b == 0)


def _rewrite(node: onnx.NodeProto, ctx: Context) -> Replacement | None:
    x = ctx.shape(node.input[0])
    if x is None:
        return None
    n, c, h, w = x
    b = int(attrs(node)["blocksize"])
    e = Emitter(node)
    blocks = e.op("Reshape", [node.input[0], e.ints([n, c, h // b, b, w // b, b])])
    moved = e.op("Transpose", [blocks], perm=[0, 1, 3, 5, 2, 4])
    e.op("Reshape", [moved, e.ints([n, c * b * b, h // b, w // b])], out=node.output[0])
    return e.replacement()


LEGALIZATIONS = (Legalization("SpaceToDepth", "IREE 3.13 computes SpaceToDepth mode=CRD in DCR order (a wrong "
                              "result); written out as reshape, transpose, reshape", _applies, _rewrite),)
