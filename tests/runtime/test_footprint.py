"""Deployment footprint: a bundle and its stub run with iree-base-runtime and numpy alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

pytestmark = pytest.mark.device  # compiles with IREE and runs on a real device

BLOCKER = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = ("onnx", "onnxruntime", "jinja2", "iree.compiler", "hypothesis", "networkx")
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ImportError(f"{name} is not installed in a deployment")
    sys.meta_path.insert(0, Block())
""")


def test_stub_runs_with_only_the_runtime_and_numpy(vulkan_bundle):
    bundle = vulkan_bundle.bundle.path
    script = BLOCKER + textwrap.dedent(f"""
        import numpy as np
        sys.path.insert(0, {str(bundle / 'stubs' / 'python')!r})
        from tiny_cnn import TinyCnn
        with TinyCnn() as m:
            logits, probs, classes = m(np.zeros((1, 3, 64, 64), np.float32))
        assert logits.shape == (1, 10) and classes.dtype == np.int64
        loaded = sorted(k for k in sys.modules if k.split(".")[0] in ("onnx", "jinja2", "onnxruntime")
                        or k.startswith("iree.compiler"))
        print("LOADED", loaded)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout
