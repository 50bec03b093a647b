"""The one atomic file writer: a reader (another build sharing a cache, a runtime loading a bundle,
a process killed halfway) sees the old file or the new one, never half of one. Pure standard
library: the runtime ships it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` to a private name beside ``path`` and rename it over ``path``."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json(path: Path, data: Any) -> Path:
    """``data`` as indented ASCII JSON, atomically."""
    return write_atomic(path, (json.dumps(data, indent=2, ensure_ascii=True) + "\n").encode())
