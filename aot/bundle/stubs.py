"""Render host stubs from the manifest with Jinja2 (the only module that imports jinja2).

Every model-derived string reaches a template through an encoder filter; a raw ``str`` in a
template output raises, so a template cannot print an unencoded name by mistake.
"""

from __future__ import annotations

import ast
import hashlib
import shutil
from pathlib import Path
from typing import Any

import jinja2

from aot.bundle import names
from aot.runtime.manifest import Manifest, TensorSig

# Package data: setuptools ships them in the wheel, so stubs render outside the source tree too.
TEMPLATES = Path(__file__).resolve().parent / "templates"
# The package every bundle ships a copy of, as stubs/python/aot_runtime (one source of truth).
RUNTIME = Path(__file__).resolve().parents[1] / "runtime"


class Encoded(str):
    """A string that went through an encoder and may be printed into generated code."""


class RawStringInTemplate(jinja2.TemplateError):
    pass


def _finalize(value: Any) -> Any:
    if isinstance(value, Encoded) or type(value) in (int, bool):
        return value
    raise RawStringInTemplate(f"unencoded value {value!r:.60} reached a template; pass it through an encoder filter")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), finalize=_finalize,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["pyliteral"] = lambda v: Encoded(names.py_str(v))
    env.filters["pydoc"] = lambda v: Encoded(names.py_doc(v))
    env.filters["cliteral"] = lambda v: Encoded(names.c_str(v))
    env.filters["ccomment"] = lambda v: Encoded(names.c_comment(v))
    return env


def _shape(shape: tuple[int, ...]) -> Encoded:
    return Encoded("[" + ", ".join(str(int(d)) for d in shape) + "]")


def _dtype(dtype: str) -> Encoded:
    import numpy as np

    return Encoded(np.dtype(dtype).name)  # raises for anything that is not a real dtype


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

    def io(entries: tuple[TensorSig, ...]) -> list[dict[str, Encoded]]:
        return [{"ident": Encoded(names.py_identifier(e.name, taken)), "literal": Encoded(names.py_str(e.name)),
                 "doc": Encoded(names.py_doc(e.name)), "dtype": _dtype(e.dtype), "shape": _shape(e.shape)}
                for e in entries]

    inputs = io(manifest.inputs)
    outputs = io(manifest.outputs)
    module = names.py_module_name(model)
    source = _environment().get_template("python/stub.py.j2").render(
        aot_version=dict(manifest.toolchain)["aot"], model_name=model, model_sha256=manifest.model.sha256,
        runtime_sha256=runtime_sha256(),
        class_name=Encoded(names.py_class_name(model)), example_call=_example_call(inputs, outputs),
        n_regions=len(manifest.regions), devices=", ".join(sorted(manifest.drivers)),
        inputs=inputs, outputs=outputs)
    ast.parse(source)  # a generated file that does not parse is our bug: fail the build, not the user
    return f"{module}.py", source


def write_stubs(manifest: Manifest, bundle: Path) -> Path:
    """Write the Python stub and the runtime it imports into ``bundle/stubs/python``."""
    out = bundle / "stubs" / "python"
    out.mkdir(parents=True, exist_ok=True)
    for pkg in (bundle / "stubs", out):
        (pkg / "__init__.py").write_text("")
    shipped = out / "aot_runtime"
    shipped.mkdir()
    for source in sorted(RUNTIME.glob("*.py")):
        shutil.copyfile(source, shipped / source.name)
    name, source = python_stub(manifest)
    path = out / name
    path.write_text(source)
    return path
