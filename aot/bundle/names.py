"""Encoders for model-supplied names, one per output context.

Graph, tensor and node names come from the model file and are untrusted: they can hold quotes,
newlines, ``*/``, NUL or thousands of characters. Generated code and file names only ever see them
through these functions.
"""

from __future__ import annotations

import hashlib
import keyword
import re
from typing import Callable

MAX_IDENT = 48
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]+")


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _identifier(name: str, taken: set[str] | None, reserved: Callable[[str], bool], lower: bool = False) -> str:
    """[A-Za-z0-9_], no leading digit or underscore, bounded length, suffixed with ``_`` when
    ``reserved(base)``, and unique against ``taken`` (then added)."""
    base = _NOT_IDENT.sub("_", name).strip("_") or "t"
    base = base.lower() if lower else base
    if len(base) > MAX_IDENT:  # keep it readable; the digest keeps distinct long names apart
        base = f"{base[:MAX_IDENT]}_{_digest(name)}"
    if base[0].isdigit():
        base = f"t_{base}"
    if reserved(base):
        base = f"{base}_"
    ident = base
    if taken is not None:
        i = 2
        while ident in taken:
            ident = f"{base}_{i}"
            i += 1
        taken.add(ident)
    return ident


def py_identifier(name: str, taken: set[str] | None = None) -> str:
    """A valid, readable Python identifier for ``name``, unique against ``taken`` (then added)."""
    return _identifier(name, taken, lambda b: keyword.iskeyword(b) or keyword.issoftkeyword(b) or b in ("self", "np"))


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


# C11 keywords, and names the C stub itself declares or includes; identifiers starting with an
# underscore are reserved (C11 7.1.3), so the encoder never produces one.
_C_RESERVED = frozenset("""auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
    volatile while bool true false alignas alignof noreturn static_assert thread_local
    size_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t NULL errno assert""".split())


def c_identifier(name: str, taken: set[str] | None = None) -> str:
    """A valid, readable, lower-case C identifier for ``name``, unique against ``taken`` (then
    added). Lower case, so the upper-case macros made from it are unique too."""
    return _identifier(name, taken, _C_RESERVED.__contains__, lower=True)


def c_str(name: str) -> str:
    """A C string literal of ``name``'s UTF-8 bytes: printable ASCII as is, except that quote,
    backslash and ``?`` (trigraphs such as ``??/``) are escaped; every other byte, NUL included,
    as a three-digit octal escape, which cannot run into the character after it."""
    out = []
    for b in name.encode("utf-8", "surrogatepass"):
        c = chr(b)
        if c in '"\\?':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def c_comment(name: str, limit: int = 60) -> str:
    """A lossy, display-only form for C comments: no ``*``, ``/``, ``?``, backslash or newline
    survives, so it can neither end the comment nor splice a line through a trigraph."""
    shown = re.sub(r"[^A-Za-z0-9_.,:+ -]", "_", name)
    return shown if len(shown) <= limit else shown[:limit] + "..."
