"""Render the C stub (``stubs/c``): a public header, its implementation over IREE's runtime C
API, a CMake project and an example program, from the manifest alone.

Model-derived names reach the C sources only through ``names.c_identifier`` (fields, macros,
the function prefix), ``names.c_str`` (string literals) and ``names.c_comment`` (comments).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from aot.bundle import names
from aot.bundle.render import Encoded, dtype_name, environment, shape_text
from aot.runtime.invoke import WORKER_DRIVER
from aot.runtime.manifest import IndexStatus, Manifest, TensorSig

# numpy dtype -> (C element type, IREE HAL element type, .npy descr). bool is one byte per element
# in numpy and in IREE; bfloat16 has no numpy descr, so its .npy files hold the raw 16-bit words.
DTYPES = {
    "float32": ("float", "FLOAT_32", "<f4"), "float64": ("double", "FLOAT_64", "<f8"),
    "float16": ("uint16_t", "FLOAT_16", "<f2"), "bfloat16": ("uint16_t", "BFLOAT_16", "<u2"),
    "int8": ("int8_t", "SINT_8", "|i1"), "int16": ("int16_t", "SINT_16", "<i2"), "int32": ("int32_t", "SINT_32", "<i4"),
    "int64": ("int64_t", "SINT_64", "<i8"), "uint8": ("uint8_t", "UINT_8", "|u1"), "uint16": ("uint16_t", "UINT_16", "<u2"),
    "uint32": ("uint32_t", "UINT_32", "<u4"), "uint64": ("uint64_t", "UINT_64", "<u8"), "bool": ("uint8_t", "BOOL_8", "|b1"),
    # The float8 formats have no C type or numpy descr either: their buffers and .npy files hold
    # the raw bytes, and IREE is told the element type.
    "float8_e4m3fn": ("uint8_t", "FLOAT_8_E4M3_FN", "|u1"), "float8_e4m3fnuz": ("uint8_t", "FLOAT_8_E4M3_FNUZ", "|u1"),
    "float8_e5m2": ("uint8_t", "FLOAT_8_E5M2", "|u1"), "float8_e5m2fnuz": ("uint8_t", "FLOAT_8_E5M2_FNUZ", "|u1"),
}
# Template -> the file it renders ("model" becomes the model's C prefix).
TEMPLATES = ("model.h", "model.c", "main.c", "CMakeLists.txt")


def _literal(text: str) -> Encoded:
    return Encoded(names.c_str(text))


def _init(values: Iterable[int]) -> Encoded:
    return Encoded(", ".join(str(int(v)) for v in values) or "0")


def _dtype_of(name: str, dtype: str) -> tuple[str, str, str]:
    dt = dtype_name(dtype)
    if dt not in DTYPES:
        raise TypeError(f"tensor {name!r} has dtype {dt}, which the C stub cannot pass")
    return DTYPES[dt]


def stub_prefix(manifest: Manifest, bucket: int = 0) -> str:
    """The C prefix of the stub of shape bucket ``bucket`` (0: the bundle's own, unsuffixed)."""
    return names.c_identifier(manifest.model.name + (f"_b{bucket}" if bucket else ""))


def _tensors(entries: tuple[TensorSig, ...], index: dict[str, int]) -> list[dict]:
    taken: set[str] = set()
    out = []
    for e in entries:
        ident = names.c_identifier(e.name, taken)
        dtype = e.carrier or e.dtype   # C passes a narrow type (int4, ...) in the carrier the modules take
        ctype, _, descr = _dtype_of(e.name, dtype)
        elements = math.prod(int(d) for d in e.shape)
        out.append({"name": e.name, "ident": Encoded(ident), "macro": Encoded(ident.upper()), "literal": _literal(e.name),
                    "doc": Encoded(names.c_comment(e.name)), "dtype": dtype_name(dtype),
                    "dtype_literal": _literal(dtype_name(dtype)), "ctype": Encoded(ctype), "descr": _literal(descr),
                    "item": np.dtype(dtype_name(dtype)).itemsize,
                    "rank": len(e.shape), "dims": shape_text(e.shape),
                    "shape_init": Encoded("{" + _init(e.shape) + "}"), "elements": elements,
                    "bytes": _nbytes(e.shape, dtype), "value": index[e.name]})
    return out


def _value_index(manifest: Manifest) -> dict[str, int]:
    """Every tensor of a run, numbered: the model inputs, then each region's outputs."""
    names_ = dict.fromkeys([*(s.name for s in manifest.inputs),
                            *(v for n in manifest.schedule for v in manifest.region(n).outputs)])
    return {v: i for i, v in enumerate(names_)}


def _nbytes(shape: Iterable[int], dtype: str) -> int:
    return math.prod(int(d) for d in shape) * np.dtype(dtype_name(dtype)).itemsize


def _schedule(manifest: Manifest, index: dict[str, int]) -> dict:
    """Devices, values and regions of the run, as indices into the C tables."""
    drivers = list(manifest.drivers)
    boundary = dict(manifest.boundary_tensors)
    sigs = {s.name: s for s in (*manifest.inputs, *manifest.outputs)}
    values: list[dict[str, Any]] = []
    for v in index:
        b = boundary.get(v)
        dtype, shape = ((b.dtype, b.shape) if b is not None and b.shape is not None
                        else (sigs[v].carrier or sigs[v].dtype, sigs[v].shape))
        _, element_type, _ = _dtype_of(v, dtype)
        values.append({"literal": _literal(v), "element_type": Encoded(f"IREE_HAL_ELEMENT_TYPE_{element_type}"),
                       "rank": len(shape), "dims_init": Encoded("{" + _init(shape) + "}"),
                       "bytes": _nbytes(shape, dtype)})
    regions: list[dict[str, Any]] = []
    for n in manifest.schedule:
        r = manifest.region(n)
        regions.append({"literal": _literal(r.name), "device": drivers.index(manifest.driver(r)),
                        "module": _literal(r.module), "sha256": _literal(r.sha256), "function": _literal(r.function),
                        "inputs": r.inputs, "outputs": r.outputs, "inputs_init": _init(index[v] for v in r.inputs),
                        "outputs_init": _init(index[v] for v in r.outputs)})
    return {"devices": [_literal(d) for d in drivers], "values": values, "regions": regions,
            "worker_devices_init": _init(d == WORKER_DRIVER for d in drivers),
            "max_rank": max([1, *(v["rank"] for v in values)]),
            "max_region_io": max([1, *(len(r["inputs"]) for r in regions), *(len(r["outputs"]) for r in regions)])}


def _index_checks(manifest: Manifest, inputs: list[dict], index: dict[str, int]) -> tuple[list[dict], list[dict]]:
    """The index ops the stub checks at its boundary (``checked``) and after the run (``guarded``)."""
    by_name = {t["name"]: t for t in inputs}
    checked, guards = [], []
    for op in manifest.index_ops:
        common = {"op_literal": _literal(op.op), "node_literal": _literal(op.node), "dims": op.dims,
                  "dims_init": _init(op.dims), "valid_literal": _literal(op.valid)}
        if op.status == IndexStatus.CHECKED and op.input in by_name:
            t = by_name[op.input]
            checked.append({**common, "op": Encoded(names.c_comment(op.op)),
                            "node_doc": Encoded(names.c_comment(op.node)), "input_doc": t["doc"],
                            "valid_doc": Encoded(names.c_comment(op.valid)), "input_literal": t["literal"],
                            "field": t["ident"], "ctype": t["ctype"], "elements": t["elements"]})
        elif op.status == IndexStatus.GUARDED and op.flag is not None:
            guards.append({**common, "value": index[op.flag]})
    return checked, guards


def c_stub(manifest: Manifest, bucket: tuple[int, str] | None = None) -> dict[str, str]:
    """File name -> source of every file of ``stubs/c`` for ``manifest`` (same manifest, same bytes).
    ``bucket`` (index, label): the stub of one shape bucket of a bucketed bundle; bucket ``i`` > 0
    gets the prefix ``<model>_b<i>`` so that several buckets' stubs link into one program."""
    prefix = stub_prefix(manifest, bucket[0] if bucket else 0)
    index = _value_index(manifest)
    inputs, outputs = _tensors(manifest.inputs, index), _tensors(manifest.outputs, index)
    checked, guards = _index_checks(manifest, inputs, index)
    weights = manifest.weights
    context = dict(
        aot_version=dict(manifest.toolchain)["aot"], model_name=manifest.model.name,
        model_sha256=manifest.model.sha256, prefix=Encoded(prefix), macro=Encoded(prefix.upper()),
        # main.c serves the dispatcher too: its handle is `prefix`, its input/output structs `base`'s.
        base=Encoded(prefix), dispatcher=False,
        guard=Encoded(f"AOT_{prefix.upper()}_H_"), n_regions=len(manifest.regions),
        bucket=None if bucket is None else bucket[1],
        io_kinds=[(Encoded("INPUT"), Encoded("input"), inputs), (Encoded("OUTPUT"), Encoded("output"), outputs)],
        devices_doc=", ".join(sorted(manifest.drivers)), inputs=inputs, outputs=outputs, checked=checked, guards=guards,
        weights={"path": _literal(weights.path), "scope": _literal(weights.scope), "sha256": _literal(weights.sha256)}
        if weights is not None else None,
        host_flags=[_literal(f) for f in (manifest.host_runtime.flags if manifest.host_runtime else ())],
        **_schedule(manifest, index))
    env = environment()
    files = {}
    for template in TEMPLATES:
        stem, _, ext = template.rpartition(".")
        files[f"{prefix}.{ext}" if stem == "model" else template] = env.get_template(f"c/{template}.j2").render(**context)
    return files
