"""Encoders for model-supplied names, one per output context.

Graph, tensor and node names come from the model file and are untrusted: they can hold quotes,
newlines, ``*/``, NUL or thousands of characters. Generated code and file names only ever see them
through these functions.
"""

from __future__ import annotations

import hashlib
import keyword
import re

MAX_IDENT = 48
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]+")


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def py_identifier(name: str, taken: set[str] | None = None) -> str:
    """A valid, readable Python identifier for ``name``, unique against ``taken`` (then added)."""
    base = _NOT_IDENT.sub("_", name).strip("_") or "t"
    if len(base) > MAX_IDENT:  # keep it readable; the digest keeps distinct long names apart
        base = f"{base[:MAX_IDENT]}_{_digest(name)}"
    if base[0].isdigit():
        base = f"t_{base}"
    if keyword.iskeyword(base) or keyword.issoftkeyword(base) or base in ("self", "np"):
        base = f"{base}_"
    ident = base
    if taken is not None:
        i = 2
        while ident in taken:
            ident = f"{base}_{i}"
            i += 1
        taken.add(ident)
    return ident


def py_class_name(name: str) -> str:
    """CamelCase class name, e.g. ``tiny_cnn`` -> ``TinyCnn``."""
    parts = [p for p in _NOT_IDENT.sub("_", name).split("_") if p][:8]
    camel = "".join(p[:1].upper() + p[1:] for p in parts)[:MAX_IDENT] or "Model"
    return f"Model{camel}" if camel[0].isdigit() or keyword.iskeyword(camel) else camel


def py_module_name(name: str) -> str:
    """Lower-case module (and file) name, importable as ``from ...stubs.python.<it> import``."""
    return py_identifier(name.lower()).lower()


def py_str(name: str) -> str:
    """A Python string literal for ``name``; ``ascii`` escapes every quote, newline, NUL and
    non-ASCII character, so the literal is one safe line whatever the name holds."""
    return ascii(str(name))


def file_name(name: str, suffix: str = "") -> str:
    """A portable file name: [A-Za-z0-9._-], no leading dot, bounded length."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".-")[:64] or "model"
    return safe + suffix


def py_doc(name: str, limit: int = 60) -> str:
    """A lossy, display-only form for docstrings and comments: no quote, backslash or newline
    can survive, so it cannot end the docstring or comment it sits in."""
    shown = re.sub(r"[^A-Za-z0-9_.,:/+ -]", "?", name)
    return shown if len(shown) <= limit else shown[:limit] + "..."
