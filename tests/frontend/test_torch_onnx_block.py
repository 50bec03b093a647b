"""A decoder block as PyTorch's standard ONNX exporter writes it today (torch.onnx.export with
dynamo=True at opset 23 emits RMSNormalization and Attention as single nodes) builds for Vulkan
and for the CPU and computes what onnxruntime computes."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from aot import api, record
from aot.options import BuildOptions
from aot.runtime.target import Target
from conftest import golden

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install .[torch])")
pytestmark = [pytest.mark.device, pytest.mark.full]   # exports with torch, builds twice, runs on lavapipe


def _export(path: Path) -> Path:
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, d: int = 64, heads: int = 4) -> None:
            super().__init__()
            self.heads = heads
            self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            self.up, self.gate, self.down = (nn.Linear(d, 4 * d, bias=False), nn.Linear(d, 4 * d, bias=False),
                                             nn.Linear(4 * d, d, bias=False))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(self.norm1(x)).split(d, -1))
            x = x + self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
            h = self.norm2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    torch.manual_seed(0)
    torch.onnx.export(Block().eval(), (torch.randn(1, 16, 64),), str(path), dynamo=True, opset_version=23)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    return _export(tmp_path_factory.mktemp("block") / "block.onnx")


def test_the_exporter_writes_the_opset_23_ops(exported):
    ops = {n.op_type for n in onnx.load(str(exported), load_external_data=False).graph.node}
    assert {"RMSNormalization", "Attention"} <= ops


@pytest.mark.parametrize("accel", ["vulkan", "none"])
def test_the_exported_block_builds_and_matches_onnxruntime(exported, tmp_path, accel):
    bundle = api.build(exported, tmp_path / accel, BuildOptions(accel=Target.accelerator(accel), min_compute=1)).bundle.path
    rewrites = {r.op for r in record.read(bundle).rewrites}
    assert {"RMSNormalization", "Attention"} <= rewrites
    assert max(golden(bundle, exported).values()) < 1e-4
