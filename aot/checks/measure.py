"""``--measure``: replace cost estimates with times measured on the real devices, so the gate can
decide on them: the partitioned bundle must beat the whole model compiled for the host."""

from __future__ import annotations

import json
from pathlib import Path

from aot.checks.reference import random_inputs
from aot.checks.session import CheckSession
from aot.runtime.manifest import Manifest
from aot.runtime.atomic import write_json


def profile(bundle: Path, manifest: Manifest, cache: Path, repeats: int = 20) -> tuple[float, dict[str, float]]:
    """(median whole-run us, region -> median us) of the (staged) bundle at ``bundle``; region
    times are also recorded in ``cache`` by module hash and driver."""
    store = cache / "measurements.json"
    known: dict[str, float] = json.loads(store.read_text()) if store.exists() else {}
    with CheckSession(bundle, manifest) as session:
        total, per_region = session.profile(random_inputs(manifest.inputs, seed=0), repeats)
    for r in manifest.regions:
        known[f"{r.sha256}:{r.target.driver}"] = per_region[r.name]
    write_json(store, known)
    return total, per_region
