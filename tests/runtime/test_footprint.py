"""Deployment footprint: a bundle copied anywhere runs through its stub in a fresh virtualenv that
holds only iree-base-runtime and numpy (no aot, no compiler, no onnx), and gives onnxruntime's
answer; a damaged shipped runtime is refused by name."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest

from aot.checks.compare import assert_close
from aot.checks import reference
from aot.runtime import manifest as mf

pytestmark = pytest.mark.device  # compiles with IREE and runs on a real device

RUN_STUB = textwrap.dedent("""
    import importlib.util, sys
    import numpy as np
    for absent in ("aot", "onnx", "onnxruntime", "jinja2", "iree.compiler"):
        assert importlib.util.find_spec(absent) is None, absent + " is installed"
    sys.path.insert(0, "stubs/python")
    try:
        import tiny_cnn
    except ImportError as e:
        print("IMPORT", e)
        sys.exit(3)
    x = np.load("x.npy")
    with tiny_cnn.TinyCnn() as m:
        outputs = m(x)
        for i, out in enumerate(outputs):
            np.save(f"out{i}.npy", out)
        try:
            m(x[:, :2])
        except tiny_cnn.RuntimeInputError as e:
            print("REFUSED", e)
    print("RUNTIME", tiny_cnn._runtime.__name__)
""")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """A new virtualenv with the two packages a deployment has, at this environment's versions."""
    venv = tmp_path_factory.mktemp("bare-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pins = [f"iree-base-runtime=={version('iree-base-runtime')}", f"numpy=={version('numpy')}"]
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pins],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"pip install {' '.join(pins)} failed (PyPI is reachable in CI):\n{proc.stderr}"
    return python


def _copy(bundle: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "deployed" / "tiny_cnn"
    shutil.copytree(bundle, copy)
    assert not copy.is_relative_to(Path(__file__).resolve().parents[2])
    return copy


def test_a_copied_bundle_runs_with_only_the_runtime_and_numpy(vulkan_bundle, example_model, bare_python, tmp_path):
    bundle = _copy(vulkan_bundle.bundle.path, tmp_path)
    manifest = mf.read(bundle)
    x = reference.random_inputs(manifest.inputs, seed=3)["image"]
    np.save(bundle / "x.npy", x)
    proc = subprocess.run([str(bare_python), "-c", RUN_STUB], capture_output=True, text=True, cwd=bundle,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RUNTIME aot_runtime_" in proc.stdout                   # the shipped copy, not an installed aot
    assert "REFUSED input 'image'" in proc.stdout                  # its typed errors work there too
    expected = reference.outputs(example_model, {"image": x}, [o.name for o in manifest.outputs], manifest)
    for i, (want, sig) in enumerate(zip(expected, manifest.outputs)):
        got = np.load(bundle / f"out{i}.npy")
        assert got.dtype == want.dtype and got.shape == want.shape, sig.name
        assert_close(got, want, rtol=1e-4, atol=1e-5, what=sig.name)


def test_a_damaged_shipped_runtime_is_refused_by_name(vulkan_bundle, bare_python, tmp_path):
    bundle = _copy(vulkan_bundle.bundle.path, tmp_path)
    session = bundle / "stubs" / "python" / "aot_runtime" / "loading.py"
    session.write_text(session.read_text().replace("def load(", "def load_(", 1))
    np.save(bundle / "x.npy", np.zeros((1, 3, 64, 64), np.float32))
    proc = subprocess.run([str(bare_python), "-c", RUN_STUB], capture_output=True, text=True, cwd=bundle)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "aot_runtime" in proc.stdout and "missing or damaged" in proc.stdout


def test_inside_aot_the_stub_uses_the_installed_runtime_and_its_error_classes(host_bundle):
    from aot.checks import golden
    from aot.errors import RuntimeInputError

    stub_class = golden.load_stub_class(host_bundle.bundle.path)
    module = sys.modules[stub_class.__module__]
    assert module.RuntimeInputError is RuntimeInputError    # `except aot.errors.RuntimeInputError` works
    shipped = host_bundle.bundle.path / "stubs" / "python" / "aot_runtime"
    assert sorted(p.name for p in shipped.glob("*.py")) == sorted(
        p.name for p in (Path(mf.__file__).parent).glob("*.py"))
