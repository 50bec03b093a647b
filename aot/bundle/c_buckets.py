"""Render the C dispatcher of a bucketed bundle (``stubs/c/buckets``): one call at any size along
the symbolic dimensions, served by the fixed-shape stubs of every shape bucket, with the Python
runtime's rules (``runtime/shapes.py``): the smallest bucket that holds the call, inputs padded
with their declared values, outputs cropped, a batch past the largest bucket run in chunks.

The C side only moves bytes: which bucket serves which sizes, and every shape, are decided here
and written as tables.
"""

from __future__ import annotations

import math

import numpy as np

from aot.bundle import names
from aot.bundle.c_stub import _init, _literal, _nbytes, _tensors, stub_prefix
from aot.bundle.render import Encoded, dtype_name, environment
from aot.runtime.manifest import Manifest, TensorSig

TEMPLATES = ("any.h", "any.c", "main.c", "any_CMakeLists.txt")


def _pad_bytes(value: float, dtype: str) -> Encoded:
    """The pad value as the bytes of one element of ``dtype`` (bfloat16: float32's upper half)."""
    dt = dtype_name(dtype)
    raw = (np.array(value, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes() if dt == "bfloat16" \
        else np.array(value).astype(np.dtype(dt).newbyteorder("<")).tobytes()
    return Encoded("{" + ", ".join(f"0x{b:02x}" for b in raw) + "}")


def _axes(manifest: Manifest, side: str, sig: TensorSig) -> list[int]:
    """Per axis of ``sig``: the index of the symbolic dimension it follows, or -1."""
    assert manifest.shapes is not None
    dim_of = [-1] * len(sig.shape)
    for i, d in enumerate(manifest.shapes.dims):
        for a in getattr(d, side):
            if a.tensor == sig.name:
                dim_of[a.axis] = i
    return dim_of


def _io(manifest: Manifest, buckets: list[Manifest], side: str) -> list[dict]:
    shapes = manifest.shapes
    assert shapes is not None
    sigs = getattr(manifest, side)
    tensors = _tensors(sigs, {s.name: i for i, s in enumerate(sigs)})
    for t, sig in zip(tensors, sigs):
        dim_of = _axes(manifest, side, sig)
        biggest = max(_nbytes(next(s for s in getattr(m, side) if s.name == sig.name).shape, sig.dtype)
                      for m in buckets)
        t.update(dim_of=Encoded("{" + _init(dim_of) + "}"), scratch=biggest,
                 pad=_pad_bytes(shapes.pad_value(sig.name) if side == "inputs" else 0, sig.dtype))
    return tensors


def _bucket(manifest: Manifest, index: int, label: str, sizes: list[int]) -> dict:
    """Bucket ``index``'s stub: its prefix and its folder relative to ``stubs/c/buckets``."""
    prefix = stub_prefix(manifest, index)
    folder = ".." if index == 0 else f"b{index}"
    return {"prefix": Encoded(prefix), "dir": Encoded(folder), "source": Encoded(f"{folder}/{prefix}.c"),
            "label": _literal(label), "doc": Encoded(names.c_comment(label)), "sizes": Encoded("{" + _init(sizes) + "}")}


def c_dispatcher(manifest: Manifest, buckets: list[Manifest]) -> dict[str, str]:
    """File name -> source of ``stubs/c/buckets``'s own files, for a bundle whose manifest is
    ``manifest`` and whose buckets' manifests are ``buckets`` (in the manifest's order)."""
    shapes = manifest.shapes
    assert shapes is not None and len(buckets) == len(shapes.buckets)
    prefix = names.c_identifier(manifest.model.name + "_any")
    taken: set[str] = set()
    dims = []
    for d in shapes.dims:
        ident = names.c_identifier(d.symbol, taken)
        first = d.inputs[0]
        dims.append({"ident": Encoded(ident), "macro": Encoded(ident.upper()), "literal": _literal(d.symbol),
                     "doc": Encoded(names.c_comment(d.symbol)), "sizes": Encoded(", ".join(map(str, d.sizes))),
                     "largest": d.largest, "batch": int(d.batch), "input_literal": _literal(first.tensor),
                     "axis": first.axis,
                     "carriers": [(Encoded(names.c_comment(a.tensor)), a.axis) for a in d.inputs]})
    sizes = [[b.size(d.symbol) for d in shapes.dims] for b in shapes.buckets]
    # The order a call tries them in: fewest elements first, as runtime/shapes.fitting picks.
    order = sorted(range(len(sizes)), key=lambda i: (math.prod(sizes[i]), sizes[i]))
    inputs, outputs = _io(manifest, buckets, "inputs"), _io(manifest, buckets, "outputs")
    input_index = {t["name"]: i for i, t in enumerate(inputs)}
    context = dict(
        aot_version=dict(manifest.toolchain)["aot"], model_name=manifest.model.name, prefix=Encoded(prefix),
        macro=Encoded(prefix.upper()), guard=Encoded(f"AOT_{prefix.upper()}_H_"), base=Encoded(stub_prefix(manifest)),
        dims=dims, inputs=inputs, outputs=outputs, dispatcher=True,
        max_rank=max([1, *(t["rank"] for t in (*inputs, *outputs))]),
        # Where the example reads each dimension's size: every input axis that carries it.
        size_sources=[[(input_index[a.tensor], a.axis) for a in d.inputs] for d in shapes.dims],
        buckets=[_bucket(manifest, i, b.label, sizes[i]) for i, b in enumerate(shapes.buckets)],
        order=Encoded(_init(order)))
    env = environment()
    files = {}
    for template in TEMPLATES:
        stem, _, ext = template.rpartition(".")
        name = {"any": f"{prefix}.{ext}", "main": "main.c", "any_CMakeLists": "CMakeLists.txt"}[stem]
        files[name] = env.get_template(f"c/{template}.j2").render(**context)
    return files
