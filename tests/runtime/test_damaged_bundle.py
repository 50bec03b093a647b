"""A real bundle (the example CNN on the host) damaged after its build: its generated stub refuses
flipped or truncated weights at load, and `aot check` fails a bundle whose weights turned to NaN
(a damage the digests cannot see, because the manifest was rewritten to match)."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from aot import cli
from aot.checks import golden
from aot.errors import BundleError

pytestmark = pytest.mark.device


@pytest.fixture
def copy(host_bundle, tmp_path):
    """A copy of the bundle (its weights are hard-linked into the build cache: never damage them in place)."""
    dest = tmp_path / "bundle"
    shutil.copytree(host_bundle.bundle.path, dest)
    return dest


@pytest.mark.parametrize("damage, message", [
    (lambda data: data[:len(data) // 2], r"does not match its size in the manifest: .* \(truncated\)"),
    (lambda data: data[:4096] + bytes(b ^ 0xFF for b in data[4096:8192]) + data[8192:],
     "does not match its sha256 in the manifest: the file .*weights.irpa' has sha256 [0-9a-f]{64}, the manifest "
     "says [0-9a-f]{64}"),
])
def test_the_generated_stub_refuses_damaged_weights(copy, damage, message):
    weights = copy / "weights.irpa"
    weights.write_bytes(damage(weights.read_bytes()))
    stub = golden.load_stub_class(copy)
    with pytest.raises(BundleError, match=message):
        stub(copy)
    assert cli.main(["check", "--integrity", str(copy)]) == 1


def test_aot_check_fails_a_bundle_whose_weights_are_nan(copy, example_model, capsys):
    weights = copy / "weights.irpa"
    data = bytearray(weights.read_bytes())
    init = onnx.load(example_model).graph.initializer[0]
    raw = numpy_helper.to_array(init).astype(np.float32).tobytes()
    at = bytes(data).find(raw)
    assert at > 0, f"initializer {init.name!r} not found in the archive"
    data[at:at + len(raw)] = np.full(len(raw) // 4, np.nan, np.float32).tobytes()
    weights.write_bytes(bytes(data))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["weights"]["sha256"] = hashlib.sha256(bytes(data)).hexdigest()   # the digests cannot see it
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["check", str(copy), "--model", str(example_model)]) == 1
    out, err = capsys.readouterr()
    assert "ERROR: bundle" in err and "nan at [" in err and "Traceback" not in err


def test_aot_run_names_a_wrong_shape_and_writes_outputs(copy, tmp_path, capsys):
    np.save(tmp_path / "small.npy", np.zeros((1, 3, 8, 8), np.float32))
    assert cli.main(["run", str(copy), "--input", f"image=@{tmp_path / 'small.npy'}"]) == 1
    assert "expected shape [1, 3, 64, 64], got [1, 3, 8, 8]" in capsys.readouterr().err
    np.save(tmp_path / "image.npy", np.zeros((1, 3, 64, 64), np.float32))
    assert cli.main(["run", str(copy), "--input", f"image=@{tmp_path / 'image.npy'}",
                     "--output-dir", str(tmp_path / "out")]) == 0
    assert sorted(p.suffix for p in (tmp_path / "out").iterdir()) == [".npy"] * len(list((tmp_path / "out").iterdir()))
