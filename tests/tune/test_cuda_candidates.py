"""The CUDA search space compiles without a GPU, and its tile-and-fuse set gives a module of its
own: IREE 3.13's other CUDA switches compile to O2's module byte for byte (docs/cuda.md), which
the tuner then times once."""

from __future__ import annotations

import pytest

from aot.frontend.source import OpFamily
from aot.lower.compile import CompileJob, CompiledRegion, compile_many
from aot.lower.flags import DATA_TILED_CONV, TILE_AND_FUSE, Holds, default_opt_flags, holds_convolution
from aot.options import BuildOptions
from aot.partition.plan import GateMode
from aot.pipeline import build
from aot.runtime.target import Target
from aot.tune.candidates import candidates

pytestmark = pytest.mark.device  # compiles with IREE


def test_every_cuda_candidate_compiles_and_tile_and_fuse_differs_from_o2(example_model, tmp_path):
    """A convolution region's CUDA default is tile-and-fuse (lower/flags.py): the build records it,
    and IREE's plain defaults are a candidate beside the O2 family."""
    cuda = Target.parse("cuda")
    out = tmp_path / "cuda"
    result = build(example_model, out, BuildOptions(accel=cuda, gate=GateMode.OFF))
    (region,) = [r for r in result.bundle.manifest.regions if r.target == cuda]
    assert region.flags == (TILE_AND_FUSE,)
    mlir = out / "build" / "regions" / "built" / f"{region.name}.mlir"
    sets = candidates(cuda, frozenset({OpFamily.CONVOLUTION}))
    assert [s.name for s in sets] == ["default", "iree-defaults", "O2", "O3", "vector-distribution", "igemm"]
    assert sets[0].flags == (TILE_AND_FUSE,)
    cache = tmp_path / "cache"
    cache.mkdir()
    done = compile_many([CompileJob(region.name, mlir, cuda, s.flags, label=s.name) for s in sets], cache, accel_timeout=300)
    assert all(isinstance(d, CompiledRegion) for d in done), [d for d in done if not isinstance(d, CompiledRegion)]
    module = {s.name: d.sha256 for s, d in zip(sets, done)}
    assert module["default"] != module["O2"] and module["default"] != module["iree-defaults"]
    assert module["default"] == region.sha256   # what the build compiled


def test_regions_without_a_convolution_keep_irees_cuda_defaults():
    cuda = Target.parse("cuda")
    sets = candidates(cuda, frozenset())
    assert sets[0].flags == () and "tile-and-fuse" in {s.name for s in sets}
    assert "iree-defaults" not in {s.name for s in sets}   # the same flags as the default: not timed twice
    assert default_opt_flags(cuda, Holds(convolution=True)) == (TILE_AND_FUSE,) and default_opt_flags(cuda) == ()
    # On the host a convolution region gets IREE's data-tiled convolutions (lower/flags.py).
    assert default_opt_flags(Target.host(), Holds(convolution=True)) == DATA_TILED_CONV


@pytest.mark.parametrize("text, conv", [(b'%1 = torch.operator "onnx.Conv"(%0, %w)', True),
                                        (b'torch.operator "onnx.ConvTranspose"(%0, %w)', True),
                                        (b"%1 = torch.aten.conv2d %0, %w", True),
                                        (b'torch.operator "onnx.MatMul"(%0, %w)', False),
                                        (b"%1 = torch.aten.linear %0, %w", False)])
def test_a_convolution_is_found_in_either_front_ends_mlir(text, conv):
    assert holds_convolution(text) is conv
