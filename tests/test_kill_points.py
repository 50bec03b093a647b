"""A build killed with SIGKILL anywhere (import, each compile, staging, verification, publish)
leaves the previous bundle intact and loadable, never a partial one, and the next build
succeeds; N concurrent builds of one model into one folder leave one valid bundle."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from aot import runtime
from aot.checks import reference
from aot.runtime import manifest as mf

# Builds with IREE and runs the bundles on the Vulkan device; each build compiles (the points lie
# inside the compiles), so none reuses the session's shared compile cache.
pytestmark = [pytest.mark.device, pytest.mark.usefixtures("private_compile_cache")]

BUILD = ("--accel", "vulkan")
DELAYS = (0.0, 0.05, 0.15, 0.4)         # after a progress line, before the kill
START_DELAYS = (0.2, 0.6, 1.2)      # after the start, before the first line (loading, importing)


def _build(model, out, args=BUILD, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "aot.cli", "build", str(model), "-o", str(out), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)   # its own group: iree-compile dies with it


def _kill_after(model, out, line: int, delay: float, args=BUILD) -> list[str]:
    """Start a build from an empty compile cache (so it compiles), SIGKILL its process group
    ``delay`` seconds after its ``line``-th progress line (0: after the start); return the lines."""
    shutil.rmtree(out / "build" / "cache", ignore_errors=True)
    proc = _build(model, out, args)
    seen: list[str] = []
    if line == 0:
        time.sleep(delay)
    else:
        for text in proc.stderr:
            seen.append(text.strip())
            if len(seen) == line:
                time.sleep(delay)
                break
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:   # it finished first: the point lies past the end of this build
        pass
    proc.wait()
    proc.stderr.close()
    return seen


def _answers(bundle, inputs):
    with runtime.load(bundle) as session:
        return [a.tobytes() for a in session.run(inputs)]


def _visible(out):
    """What a reader of the output folder sees: hidden staging folders aside."""
    return sorted(p.name for p in out.iterdir() if not p.name.startswith("."))


@pytest.mark.slow   # twenty builds, each killed at a different point (~35-70 s); make test kills at every fourth
@pytest.mark.parametrize("stride", [pytest.param(1, marks=pytest.mark.full), 4])
def test_sigkill_at_twenty_points_keeps_the_previous_bundle(example_model, tmp_path, stride):
    out = tmp_path / "out"
    first = subprocess.run([sys.executable, "-m", "aot.cli", "build", str(example_model), "-o", str(out), *BUILD],
                           capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    stages = [s.split()[0] for s in first.stderr.splitlines() if s.strip()]
    lines = stages.index("publish")          # the points: before each line up to publishing
    bundle = out / "bundle"
    inputs = reference.random_inputs(mf.read(bundle).inputs, seed=1)
    good = _answers(bundle, inputs)
    points = [(0, d) for d in START_DELAYS] + [(n, d) for n in range(1, lines + 1) for d in DELAYS]
    assert len(points) >= 20, points
    reached = set()
    for line, delay in points[::stride]:
        seen = _kill_after(example_model, out, line, delay)
        reached.add(seen[-1].split()[0] if seen else "start")
        assert _visible(out) == ["build", "bundle"], (line, delay, _visible(out))
        mf.read(bundle).validate(bundle)                  # every module matches its sha256
        assert _answers(bundle, inputs) == good, (line, delay)
    assert {"plan", "import", "outline", "compile"} <= reached or stride > 1, reached
    assert len(reached) >= 3, reached
    again = subprocess.run([sys.executable, "-m", "aot.cli", "build", str(example_model), "-o", str(out), *BUILD],
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert _answers(bundle, inputs) == good
    assert not list(out.glob(".bundle.staging-*"))        # the killed builds' leftovers are cleaned up


SPLIT = (*BUILD, "--memory-limit", "vulkan=300KiB")   # splits six of the example's nodes


@pytest.mark.slow   # three builds with --memory-limit (~10 s each)
def test_sigkill_while_splitting_or_checking_dispatches_keeps_the_previous_bundle(example_model, tmp_path):
    """Splitting is an in-memory step of the plan stage; the dispatch check (iree-compile's stream
    phase per region, cached by module) runs after the memory stage: killed there, a build leaves
    the previous split bundle as it was."""
    out = tmp_path / "out"
    first = subprocess.run([sys.executable, "-m", "aot.cli", "build", str(example_model), "-o", str(out), *SPLIT],
                           capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    stages = [s.split()[0] for s in first.stderr.splitlines() if s.strip()]
    bundle = out / "bundle"
    inputs = reference.random_inputs(mf.read(bundle).inputs, seed=1)
    good = _answers(bundle, inputs)
    for stage in ("plan", "memory"):        # killed while splitting is done / while dispatches are checked
        seen = _kill_after(example_model, out, stages.index(stage) + 1, 0.05, SPLIT)
        assert seen and seen[-1].split()[0] == stage
        assert _visible(out) == ["build", "bundle"]
        mf.read(bundle).validate(bundle)
        assert _answers(bundle, inputs) == good, stage


@pytest.mark.parametrize("n", [2, 5, pytest.param(8, marks=pytest.mark.full)])
def test_concurrent_builds_into_one_folder_leave_one_valid_bundle(example_model, tmp_path, n):
    out = tmp_path / "out"

    def one(_):
        proc = _build(example_model, out)
        _, err = proc.communicate()
        return proc.returncode, err

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(one, range(n)))
    assert all(rc == 0 for rc, _ in results), [err[-500:] for rc, err in results if rc]
    bundle = out / "bundle"
    mf.read(bundle).validate(bundle)
    assert _visible(out) == ["build", "bundle"] and not list(out.glob(".bundle.staging-*"))
    inputs = reference.random_inputs(mf.read(bundle).inputs, seed=1)
    with runtime.load(bundle) as session:
        outputs = session.run(inputs)
    assert all(np.isfinite(o).all() for o in outputs if o.dtype.kind == "f")
