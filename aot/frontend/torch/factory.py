"""Where a PyTorch model comes from on the command line: ``pkg.module:factory`` (importable from
the working directory, as ``python -m`` would) or ``path/to/file.py:factory``. The factory takes
no arguments and returns the ``nn.Module``."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from aot.errors import ModelError

_SPEC = re.compile(r"^(?P<module>[\w.\-/\\]+?):(?P<attr>[A-Za-z_]\w*)$")


def is_factory(spec: str) -> bool:
    """``pkg.module:factory`` or ``file.py:factory`` (and not a zoo or corpus name, ``corpus:magika``
    included, or an existing file)."""
    return not spec.startswith(("zoo:", "corpus:")) and not Path(spec).exists() and _SPEC.match(spec) is not None


def load(spec: str) -> Any:
    """Import the factory named by ``spec``, call it, and return the module it builds."""
    m = _SPEC.match(spec)
    if m is None:
        raise ModelError(f"{spec!r} is not a model factory", hint="write it as pkg.module:factory or file.py:factory")
    where, attr = m.group("module"), m.group("attr")
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise ModelError(f"model factory file {where!r} does not exist")
            spec_ = importlib.util.spec_from_file_location(f"_aot_factory_{path.stem}", path)
            if spec_ is None or spec_.loader is None:
                raise ModelError(f"model factory file {where!r} cannot be imported", hint="name a .py file")
            module = importlib.util.module_from_spec(spec_)
            spec_.loader.exec_module(module)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))   # as `python -m` does: the working directory's packages
            module = importlib.import_module(where)
    except ModelError:
        raise
    except Exception as e:
        raise ModelError(f"cannot import {where!r} for {spec!r}: {type(e).__name__}: {e}",
                         hint="the module must be importable from the working directory (or give a .py path)") from e
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ModelError(f"{where!r} has no callable {attr!r}", hint="name a function that returns the nn.Module")
    try:
        return factory()
    except Exception as e:
        raise ModelError(f"the factory {spec!r} raised {type(e).__name__}: {e}") from e


def example_tensors(specs: tuple[tuple[str, tuple[int, ...], str], ...]) -> dict[str, Any]:
    """Example tensors for export: only their shapes and dtypes matter (the export is static)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    out = {}
    for name, shape, dtype in specs:
        kind = getattr(torch, dtype, None)
        if not isinstance(kind, torch.dtype):
            raise ModelError(f"--example-input {name}: unknown dtype {dtype!r}", hint="e.g. float32, int64")
        out[name] = (torch.randn(shape, generator=gen).to(kind) if kind.is_floating_point
                     else torch.zeros(shape, dtype=kind))
    return out
