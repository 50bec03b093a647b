"""A normal install works: the wheel carries the top-level templates/ as aot/templates, and
`aot build` from another directory renders both stubs and runs the Python one."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.device  # compiles the example with IREE and runs it


def run(*argv, cwd: Path) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_the_wheel_builds_and_runs_the_example_outside_the_source_tree(tmp_path):
    # Build from the tracked files alone: a build/ left in the checkout could ship stale modules.
    source = tmp_path / "source"
    for name in run("git", "ls-files", cwd=ROOT).splitlines():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, source, cwd=tmp_path)
    (wheel,) = dist.glob("aot-*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if n.startswith("aot/")}
    tracked = run("git", "ls-files", "aot", "templates", cwd=ROOT).splitlines()
    # the top-level templates/ ships as aot/templates
    assert shipped == {"aot/" + n if n.startswith("templates/") else n for n in tracked}
    assert any(n.startswith("aot/templates/c/") for n in shipped)
    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", wheel, cwd=tmp_path)
    # The dependencies (IREE, onnx, onnxruntime: hundreds of MB) come from this environment; aot
    # itself only from the wheel: a .pth line adds a directory, not the .pth files inside it, so the
    # development checkout's editable install stays invisible.
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path).strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = run(python, "-c", "import aot.bundle.stubs as s; print(s.__file__)", cwd=work)
    assert where.startswith(str(env)), where
    run(env / "bin" / "aot", "example", "-o", "tiny_cnn.onnx", cwd=work)
    out = run(env / "bin" / "aot", "build", "tiny_cnn.onnx", "--accel", "none", "-o", "out", cwd=work).split()
    assert out == ["out/bundle", "out/bundle/stubs/python/tiny_cnn.py"]
    script = ("import sys, numpy as np; sys.path.insert(0, 'out/bundle/stubs/python'); from tiny_cnn import TinyCnn\n"
              "with TinyCnn() as m: logits, probs, classes = m(np.ones((1, 3, 64, 64), np.float32))\n"
              "print(logits.shape, classes.dtype)")
    assert run(python, "-c", script, cwd=work).strip() == "(1, 10) int64"
    assert "max abs error vs onnxruntime" in run(env / "bin" / "aot", "check", "out", cwd=work)
    assert (work / "out" / "bundle" / "stubs" / "c" / "tiny_cnn.h").is_file()   # the C stub rendered too
    templates = run(python, "-c", "import aot.bundle.render as r; print(r.TEMPLATES)", cwd=work).strip()
    assert templates.startswith(str(env)) and templates.endswith("aot/templates"), templates
