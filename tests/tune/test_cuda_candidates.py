"""The CUDA search space compiles without a GPU, and its tile-and-fuse set gives a module of its
own: IREE 3.13's other CUDA switches compile to O2's module byte for byte (docs/cuda.md), which
the tuner then times once."""

from __future__ import annotations

import pytest

from aot.frontend.source import OpFamily
from aot.lower.compile import CompileJob, CompiledRegion, compile_many
from aot.options import BuildOptions
from aot.partition.plan import GateMode
from aot.pipeline import build
from aot.runtime.target import Target
from aot.tune.candidates import candidates

pytestmark = pytest.mark.device  # compiles with IREE


def test_every_cuda_candidate_compiles_and_tile_and_fuse_differs_from_o2(example_model, tmp_path):
    cuda = Target.parse("cuda")
    out = tmp_path / "cuda"
    build(example_model, out, BuildOptions(accel=cuda, gate=GateMode.OFF))
    mlir = out / "build" / "regions" / "built" / "r0.mlir"
    sets = candidates(cuda, frozenset({OpFamily.CONVOLUTION}))
    assert [s.name for s in sets] == ["default", "O2", "O3", "vector-distribution", "tile-and-fuse", "igemm"]
    cache = tmp_path / "cache"
    cache.mkdir()
    done = compile_many([CompileJob("r0", mlir, cuda, s.flags, label=s.name) for s in sets], cache, accel_timeout=300)
    assert all(isinstance(d, CompiledRegion) for d in done), [d for d in done if not isinstance(d, CompiledRegion)]
    module = {s.name: d.sha256 for s, d in zip(sets, done)}
    assert module["tile-and-fuse"] != module["O2"]
