"""Is the in-process harness fair? Each contender timed interleaved in one process (the FAIR
schedule of ``checks/timing.py``) against the same contender timed alone in a process of its own,
where nothing else can leave threads spinning. The two medians should agree within a few percent;
a harness that charges one contender for another's leftovers does not (DESIGN.md section 9).

``aot bench-harness BUNDLE [BUNDLE...]``; the child is ``python -m aot.tools.harness_check``."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aot import runtime
from aot.checks import reference, timing
from aot.errors import AotError
from aot.runtime import manifest as mf

BUNDLE, ORT = "bundle", "onnxruntime"


@dataclass(frozen=True, slots=True)
class HarnessCheck:
    model: str
    iterations: int
    in_process_ms: tuple[tuple[str, float], ...]   # FAIR, interleaved with the other contender
    alone_ms: tuple[tuple[str, float], ...]        # each in a process of its own

    def deviation(self, name: str) -> float:
        """In-process median over alone median, minus one (+0.02: 2% slower in process)."""
        return dict(self.in_process_ms)[name] / dict(self.alone_ms)[name] - 1

    def text(self) -> str:
        lines = [f"model {self.model}: {self.iterations} timed calls per contender"]
        for name, ms in self.in_process_ms:
            lines.append(f"  {name:12s} in process {ms:9.3f} ms   alone {dict(self.alone_ms)[name]:9.3f} ms   "
                         f"deviation {100 * self.deviation(name):+.1f}%")
        return "\n".join(lines)


def check(bundle: Path, iterations: int = 30, warmup: int = 3) -> HarnessCheck:
    where = mf.bundle_dir(bundle)
    m = mf.read(where)
    model = Path(m.model.source)
    if m.model.frontend == "torch" or not model.is_file():
        raise AotError(f"bundle of {m.model.name!r}: its ONNX model {str(model)!r} is not at hand",
                       hint="bench-harness compares with onnxruntime on the model the bundle was built from")
    with tempfile.TemporaryDirectory(prefix="aot-harness-") as tmp:
        data = Path(tmp) / "inputs.npz"
        inputs = reference.random_inputs(m.inputs, seed=0)
        np.savez(data, **inputs)  # type: ignore[arg-type]  # the stub reads **arrays as allow_pickle
        with runtime.load(where) as session:
            times = timing.interleaved(_contenders(m, session, inputs), timing.FAIR.with_counts(warmup, iterations))
        together = timing.medians_ms(times)
        alone = {name: _alone(name, where, data, iterations, warmup) for name in (BUNDLE, ORT)}
    return HarnessCheck(m.model.name, iterations, tuple(together.items()), tuple(alone.items()))


def _alone(name: str, bundle: Path, data: Path, iterations: int, warmup: int) -> float:
    done = subprocess.run([sys.executable, "-m", "aot.tools.harness_check", name, str(bundle), str(data),
                           str(iterations), str(warmup)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise AotError(f"the {name} timing process failed: {done.stderr.strip().splitlines()[-1:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["median_ms"])


def _child(name: str, bundle: str, data: str, iterations: int, warmup: int) -> float:
    """One contender alone in this process: the same calls, the same warm-up and settling."""
    m = mf.read(Path(bundle))
    inputs = dict(np.load(data))
    with runtime.load(Path(bundle)) as session:   # loaded for both, so each process holds the same
        alone = [c for c in _contenders(m, session, inputs) if c[0] == name]
        times = timing.interleaved(alone, timing.FAIR.with_counts(warmup, iterations))
    return timing.median_ms(times[name])


def _contenders(m: mf.Manifest, session: Any, inputs: dict[str, np.ndarray]) -> list[tuple[str, timing.Call]]:
    """The bundle's session and onnxruntime on the model it was built from, on the same inputs."""
    ort, names = reference.session(Path(m.model.source)), [o.name for o in m.outputs]
    feeds = {**inputs, **reference.constant_inputs(m)}
    return [(BUNDLE, lambda: session.run(inputs)), (ORT, lambda: ort.run(names, feeds))]


if __name__ == "__main__":
    who, where, npz, n, w = sys.argv[1:6]
    print(json.dumps({"median_ms": _child(who, where, npz, int(n), int(w))}))
