"""``--measure``: replace cost estimates with times measured on the real devices, and let the
gate decide on them: the partitioned bundle must beat the whole model compiled for the host."""

from __future__ import annotations

import json
import os
from pathlib import Path

from aot.runtime import manifest as mf
from aot import runtime
from aot.checks.golden import random_inputs


def profile_bundle(bundle: Path, cache: Path, repeats: int = 20) -> tuple[float, dict[str, float]]:
    """(median whole-run us, region -> median us); region times cached by module hash and driver."""
    data = mf.read(bundle)
    store = cache / "measurements.json"
    known: dict[str, float] = json.loads(store.read_text()) if store.exists() else {}
    with runtime.load(bundle) as session:
        total, per_region = session.profile(random_inputs(data["inputs"], seed=0), repeats)
    for r in data["regions"]:
        known[f"{r['sha256']}:{r['driver']}"] = per_region[r["name"]]
    tmp = store.with_name(store.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(known, indent=1))
    os.replace(tmp, store)
    return total, per_region
