"""Render the Python stub from the manifest, and write every stub (Python, C) into a bundle."""

from __future__ import annotations

import ast
import hashlib
import shutil
from pathlib import Path

from aot.bundle import names
from aot.bundle.c_buckets import c_dispatcher
from aot.bundle.c_stub import c_stub
from aot.bundle.render import Encoded, dtype_name, environment, shape_text
from aot.runtime import manifest as mf
from aot.runtime.manifest import Manifest, TensorSig

# The package every bundle ships a copy of, as stubs/python/aot_runtime (one source of truth).
RUNTIME = Path(__file__).resolve().parents[1] / "runtime"


def _example_call(inputs: list[dict[str, Encoded]], outputs: list[dict[str, Encoded]]) -> Encoded:
    outs = ", ".join(o["ident"] for o in outputs) + ("," if len(outputs) == 1 else "")
    return Encoded(f"{outs} = m({', '.join(i['ident'] for i in inputs)})")


def runtime_sha256(folder: Path = RUNTIME) -> str:
    """What the stub checks the shipped runtime against (the stub template hashes the same way)."""
    h = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def python_stub(manifest: Manifest) -> tuple[str, str]:
    """Return (file name, source) of the Python stub for ``manifest``. The source always parses."""
    model = manifest.model.name
    taken: set[str] = set()

    def io(entries: tuple[TensorSig, ...], side: str) -> list[dict[str, Encoded]]:
        return [{"ident": Encoded(names.py_identifier(e.name, taken)), "literal": Encoded(names.py_str(e.name)),
                 "doc": Encoded(names.py_doc(e.name)), "dtype": dtype_name(e.dtype),
                 "shape": shape_text(_declared(manifest, e, side))} for e in entries]

    inputs = io(manifest.inputs, "inputs")
    outputs = io(manifest.outputs, "outputs")
    module = names.py_module_name(model)
    source = environment().get_template("python/stub.py.j2").render(
        aot_version=dict(manifest.toolchain)["aot"], model_name=model, model_sha256=manifest.model.sha256,
        runtime_sha256=runtime_sha256(),
        class_name=Encoded(names.py_class_name(model)), example_call=_example_call(inputs, outputs),
        n_regions=len(manifest.regions), devices=", ".join(sorted(manifest.drivers)),
        inputs=inputs, outputs=outputs,
        # ml_dtypes gives numpy the int4, float4, ... types the runtime converts at the boundary
        needs_ml_dtypes=any(s.carrier for s in (*manifest.inputs, *manifest.outputs)))
    ast.parse(source)  # a generated file that does not parse is our bug: fail the build, not the user
    return f"{module}.py", source


def _declared(manifest: Manifest, sig: TensorSig, side: str) -> tuple[int | str, ...]:
    """A tensor's shape with each bucketed axis shown as its dimension's name (``side``: the
    dimension's "inputs" or "outputs" axes)."""
    shape: list[int | str] = list(sig.shape)
    for d in manifest.shapes.dims if manifest.shapes else ():
        for a in getattr(d, side):
            if a.tensor == sig.name:
                shape[a.axis] = d.symbol
    return tuple(shape)


def _write_all(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for file_name, source in files.items():
        (folder / file_name).write_text(source)


def write_stubs(manifest: Manifest, bundle: Path) -> Path:
    """Write the Python stub and the runtime it imports into ``bundle/stubs/python``, and the C
    stub into ``bundle/stubs/c``; return the Python stub's path."""
    c_dir = bundle / "stubs" / "c"
    buckets = manifest.shapes.buckets if manifest.shapes else ()
    manifests = [manifest, *(mf.read_bucket(bundle, b) for b in buckets[1:])]
    for i, (bucket, m) in enumerate(zip(buckets or (None,), manifests)):
        # A bucketed bundle: a fixed-shape C stub per bucket (the C API has no symbolic shapes)...
        out_dir = c_dir if i == 0 else c_dir / "buckets" / f"b{i}"
        _write_all(out_dir, c_stub(m, None if bucket is None else (i, bucket.label.replace("=", " "))))
    if buckets:
        # ... and one dispatcher over them all that pads, chunks and crops.
        _write_all(c_dir / "buckets", c_dispatcher(manifest, manifests))
    out = bundle / "stubs" / "python"
    out.mkdir(parents=True, exist_ok=True)
    for pkg in (bundle / "stubs", out):
        (pkg / "__init__.py").write_text("")
    shipped = out / "aot_runtime"
    shipped.mkdir()
    for module in sorted(RUNTIME.glob("*.py")):
        shutil.copyfile(module, shipped / module.name)
    name, source = python_stub(manifest)
    path = out / name
    path.write_text(source)
    return path
