"""PyTorch models for the torch front end's tests and the GPU comparison (scripts/gpu_torch_bench.py),
defined here with seeded weights (no downloads).

Each factory returns a fresh module in eval mode with deterministic weights, so the CLI can build
one by name: ``aot build tests.torch_models:resnet_like --example-input x=1x3x64x64``.
"""

from __future__ import annotations

import torch
from torch import nn

# Example inputs per factory: (name, shape, dtype), as --example-input takes them.
EXAMPLES = {
    "resnet_like": (("x", (1, 3, 64, 64), "float32"),),
    "encoder": (("tokens", (1, 16), "int64"),),
    "topk_pool": (("x", (1, 3, 32, 32), "float32"),),
}
# GPU-sized (batch 8), for scripts/gpu_torch_bench.py rather than the tests (lavapipe would take
# minutes): enough work per call for a GPU to show more than launch overhead, and weights small
# enough (11-14 MB) to carry to the GPU machine beside the runtime.
GPU_EXAMPLES = {
    "resnet18_half": (("x", (8, 3, 224, 224), "float32"),),
    "encoder_base": (("tokens", (8, 128), "int64"),),
    "decoder": (("x", (4, 256, 384), "float32"),),
}


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


class ResNetLike(nn.Module):
    """A small ResNet classifier that returns its logits and the indices of the top 5 classes:
    the top-k runs on the host (a selection op), the network on the accelerator."""

    def __init__(self, classes: int = 100) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.layer1 = BasicBlock(32, 32, 1)
        self.layer2 = BasicBlock(32, 64, 2)
        self.layer3 = BasicBlock(64, 128, 2)
        self.head = nn.Linear(128, classes)

    def forward(self, x):
        logits = self.head(self.layer3(self.layer2(self.layer1(self.stem(x)))).mean((2, 3)))
        return logits, torch.topk(logits, 5).indices


class Encoder(nn.Module):
    """A two-layer transformer encoder: token embedding, multi-head attention, LayerNorm, GELU."""

    def __init__(self, d: int = 64, heads: int = 4, layers: int = 2, vocab: int = 100, seq: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, tokens):
        return self.norm(self.encoder(self.embed(tokens) + self.pos))


class DecoderLayer(nn.Module):
    """A current decoder layer (Llama's shape): RMSNorm, rotary positions, causal attention, a
    SiLU-gated MLP; the ops the ONNX exporter writes at opset 23 as RMSNormalization and Attention."""

    def __init__(self, d: int, heads: int, hidden: int, seq: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.gate_up, self.down = nn.Linear(d, 2 * hidden, bias=False), nn.Linear(hidden, d, bias=False)
        half = d // heads // 2
        angles = torch.arange(seq)[:, None] / 10000 ** (torch.arange(half)[None, :] / half)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def rotate(self, t):   # [batch, heads, seq, head_dim], the halves rotated (RotaryEmbedding, not interleaved)
        a, b = t.chunk(2, dim=-1)
        cos, sin = self.cos[: t.shape[-2]], self.sin[: t.shape[-2]]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def forward(self, x):
        n, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(self.rotate(q), self.rotate(k), v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(n, s, d))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(nn.functional.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self, d: int = 384, heads: int = 6, hidden: int = 1024, layers: int = 2, seq: int = 256) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[DecoderLayer(d, heads, hidden, seq) for _ in range(layers)])
        self.norm = nn.RMSNorm(d, eps=1e-5)

    def forward(self, x):
        return self.norm(self.layers(x))


class ResNet18Half(nn.Module):
    """ResNet-18's topology (stem, 2-2-2-2 basic blocks, global pool, linear head) at half its
    widths (32-256 channels): 3.1 M parameters, 0.5 GFLOP per 224x224 image."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 7, 2, 3, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        widths = (32, 64, 128, 256)
        blocks: list[nn.Module] = []
        for i, w in enumerate(widths):
            cin = widths[max(i - 1, 0)]
            blocks += [BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(256, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class TopKPool(nn.Module):
    """Convolutional features, pooled by order statistics (each channel's 8 largest activations,
    in order) beside their mean, then an MLP: accelerator -> host (the top-k) -> accelerator. The
    concatenation reads a tensor list, which the outliner must keep with the op that reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1),
                                      nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4))
        self.mlp = nn.Sequential(nn.Linear(32 * 9, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(),
                                 nn.Linear(256, 10))

    def forward(self, x):
        f = self.features(x).flatten(2)
        top = torch.topk(f, 8, dim=-1).values
        return self.mlp(torch.cat([top.flatten(1), f.mean(-1)], 1))


class Literals(nn.Module):
    """Tensors that are not parameters (a non-persistent buffer, an inline constant) read on both
    sides of a host op: the outliner must copy each literal into every region that reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.register_buffer("ramp", torch.linspace(-1, 1, 64), persistent=False)
        self.fc1 = nn.Linear(16 * 8, 32)
        self.fc2 = nn.Linear(32, 32)

    def forward(self, x):
        f = torch.relu(self.conv(x)).flatten(2) * self.ramp
        top = torch.topk(f, 8, dim=-1).values
        return self.fc2(torch.relu(self.fc1(top.flatten(1)))) + self.ramp[:32] * torch.tensor(0.5)


class Chunked(nn.Module):
    """A tensor chunked into three (as attention splits its fused q, k, v projection), the parts
    read on both sides of a host op: ``aten.split`` returns a list that ``prim.ListUnpack`` splits."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 3 * 16)

    def forward(self, x):
        a, b, c = self.proj(x).chunk(3, dim=-1)
        top = torch.topk(torch.relu(a), 4, dim=-1).values
        return top.sum(-1, keepdim=True) * b + c


class Recurrent(nn.Module):
    """An LSTM, then a bidirectional GRU and a tanh RNN over its sequence, and a head on the last
    step: the layers torch.export writes as single ``aten.lstm``/``aten.gru``/``aten.rnn_tanh`` ops."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(16, 32, batch_first=True)
        self.gru = nn.GRU(32, 16, batch_first=True, bidirectional=True)
        self.rnn = nn.RNN(32, 8, batch_first=True)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        y, _ = self.rnn(y)
        return self.head(y[:, -1])


class InstanceNormed(nn.Module):
    """Instance normalisation both ways: without affine parameters (the default) over each image's
    own statistics, and with them and tracked running statistics, which eval mode uses; between
    them a PReLU with a slope per channel."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.plain = nn.InstanceNorm2d(8)
        self.tracked = nn.InstanceNorm2d(8, affine=True, track_running_stats=True)
        self.act = nn.PReLU(8)   # a slope per channel (dimension 1)
        with torch.no_grad():
            self.act.weight.uniform_(0.05, 0.5)
            self.tracked.running_mean.uniform_(-0.5, 0.5)
            self.tracked.running_var.uniform_(0.5, 1.5)
            self.tracked.weight.uniform_(0.5, 1.5)
            self.tracked.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.tracked(self.act(self.plain(self.conv(x))))


def _seeded(cls: type[nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    model = cls().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):   # running statistics that are not the identity
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model


def resnet_like() -> nn.Module:
    return _seeded(ResNetLike)


def encoder() -> nn.Module:
    return _seeded(Encoder)


def resnet18_half() -> nn.Module:
    return _seeded(ResNet18Half)


def encoder_base() -> nn.Module:
    """Four encoder layers at width 256 (4 heads, FFN 1024) over 128 tokens: 3.4 M parameters."""
    torch.manual_seed(0)
    return Encoder(d=256, heads=4, layers=4, vocab=1000, seq=128).eval()


def decoder() -> nn.Module:
    """Two decoder layers at width 384 (6 heads, gated MLP 1024) over 256 positions: 3.5 M parameters."""
    return _seeded(Decoder)


def topk_pool() -> nn.Module:
    return _seeded(TopKPool)


def literals() -> nn.Module:
    return _seeded(Literals)


def chunked() -> nn.Module:
    return _seeded(Chunked)


def recurrent() -> nn.Module:
    return _seeded(Recurrent)


def instance_normed() -> nn.Module:
    return _seeded(InstanceNormed)


def example_inputs(name: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """Inputs for a factory's model: normal floats, in-vocabulary token ids."""
    gen = torch.Generator().manual_seed(seed)
    return {n: (torch.randn(shape, generator=gen) if dtype == "float32"
                else torch.randint(0, 100, shape, generator=gen))
            for n, shape, dtype in {**EXAMPLES, **GPU_EXAMPLES}[name]}


def export_onnx(name: str, path, inputs: dict[str, torch.Tensor]) -> None:
    """The same model through torch.onnx.export, for the ONNX path. The TorchScript exporter:
    torch 2.13's default (dynamo) exporter needs onnxscript, which aot does not depend on."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # the legacy exporter's notice
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shapes are static here
        torch.onnx.export(globals()[name](), tuple(inputs.values()), str(path), dynamo=False, opset_version=17,
                          input_names=list(inputs))
