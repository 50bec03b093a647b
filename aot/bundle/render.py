"""The one Jinja2 environment every generated file is rendered with (the only module that
imports jinja2).

Every model-derived string reaches a template through an encoder filter; a raw ``str`` in a
template output raises, so a template cannot print an unencoded name by mistake.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import jinja2
import numpy as np

from aot.bundle import names


def _templates() -> Path:
    """The Jinja2 templates: the repository's top-level ``templates/`` (a checkout, or the
    editable install that points at it), installed by the wheel as ``aot/templates`` (pyproject's
    package-dir maps one to the other; ``templates`` is never an import package of its own)."""
    package = Path(__file__).resolve().parents[1]
    installed, checkout = package / "templates", package.parent / "templates"
    return installed if installed.is_dir() else checkout


TEMPLATES = _templates()


class Encoded(str):
    """A string that went through an encoder and may be printed into generated code."""


class RawStringInTemplate(jinja2.TemplateError):
    pass


def _finalize(value: Any) -> Any:
    if isinstance(value, Encoded) or type(value) in (int, bool):
        return value
    raise RawStringInTemplate(f"unencoded value {value!r:.60} reached a template; pass it through an encoder filter")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), finalize=_finalize,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["pyliteral"] = lambda v: Encoded(names.py_str(v))
    env.filters["pydoc"] = lambda v: Encoded(names.py_doc(v))
    env.filters["cliteral"] = lambda v: Encoded(names.c_str(v))
    env.filters["ccomment"] = lambda v: Encoded(names.c_comment(v))
    return env


def dtype_name(dtype: str) -> Encoded:
    """numpy's name of ``dtype``; raises for anything that is not a real dtype."""
    return Encoded(np.dtype(dtype).name)


def shape_text(shape: Iterable[int | str]) -> Encoded:
    """``[1, 3, 64, 64]`` or ``[N, 3, 64, 64]``: a shape for docs and comments (a symbol's name is
    the model's, shown in the display-only form no comment or docstring can be ended by)."""
    return Encoded("[" + ", ".join(names.py_doc(d, 20) if isinstance(d, str) else str(int(d)) for d in shape) + "]")
