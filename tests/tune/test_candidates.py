"""The tuner's search space: the default first, content-specific sets only where they apply,
and every set a real iree-compile accepts (the device-marked test compiles each one)."""

from __future__ import annotations

import pytest

from aot.frontend.graph import GraphView, Node, Value
from aot.frontend.load import ModelSource
from aot.frontend.source import OpFamily, region_families
from aot.frontend.torch.export import TorchSource
from aot.runtime.target import Target
from aot.lower.flags import DATA_TILING, IM2COL, Holds, default_opt_flags
from aot.tune.candidates import DATA_TILED_CONV, candidates

CONV = frozenset({OpFamily.CONVOLUTION})
MATMUL: frozenset[OpFamily] = frozenset()
INT8 = frozenset({OpFamily.QUANTIZED})


@pytest.mark.parametrize("backend", Target.backends())
def test_the_default_comes_first_and_no_set_repeats(backend):
    target = Target.parse(backend)
    sets = candidates(target, CONV)
    assert sets[0].name == "default" and sets[0].flags == default_opt_flags(target, Holds(convolution=True))
    assert len(sets) >= 3
    assert len({s.flags for s in sets}) == len(sets) and len({s.name for s in sets}) == len(sets)


def test_convolution_sets_only_for_regions_with_convolutions():
    host = Target.host()
    with_conv = {s.name for s in candidates(host, CONV)}
    without = {s.name for s in candidates(host, MATMUL)}
    assert {"direct-conv", "channels-last", "channels-last+data-tiling", "im2col"} <= with_conv
    assert not {"direct-conv", "channels-last", "channels-last+data-tiling", "data-tiled-conv", "im2col"} & without
    # A convolution region's default is the data-tiled-conv set; where IREE refused it and the
    # region compiled with im2col, that set is offered under its name.
    assert candidates(host, CONV)[0].flags == DATA_TILED_CONV.flags and "data-tiled-conv" not in with_conv
    fell_back = {s.name for s in candidates(host, CONV, default=(IM2COL,))}
    assert "data-tiled-conv" in fell_back and "im2col" not in fell_back
    # im2col rides along with the other sets only where there is a convolution to rewrite
    assert all(IM2COL not in s.flags for s in candidates(host, MATMUL)[1:])
    # a conv-free region whose default is data tiling keeps IREE's own defaults as a candidate;
    # one whose default is the plain module (im2col: a no-op there) is not offered it twice
    sets = candidates(host, MATMUL, default=(DATA_TILING,))
    assert sets[0].flags == (DATA_TILING,) and ("iree-defaults", ()) in {(s.name, s.flags) for s in sets}
    assert "iree-defaults" not in {s.name for s in candidates(host, MATMUL)}
    assert "iree-defaults" not in with_conv   # there, direct-conv is the plain module


def test_256_bit_code_is_a_convolution_candidate_only_for_an_avx512_target(monkeypatch):
    """IREE tiles a direct convolution for the vector width: on AVX-512, 256-bit code is a
    candidate worth timing; on a target without it, it would be the same code again."""
    from aot.tune import candidates as module

    names = lambda target, families: {s.name for s in candidates(target, families)}   # noqa: E731
    assert "data-tiling+ukernels+256-bit" in names(Target.host("x86-64-v4"), CONV)
    assert "data-tiling+ukernels+256-bit" not in names(Target.host("x86-64-v4"), MATMUL)
    assert "data-tiling+ukernels+256-bit" not in names(Target.host("x86-64-v3"), CONV)
    for flags, offered in ((("avx2", "avx512f"), True), (("avx2",), False)):
        monkeypatch.setattr(module, "cpu_flags", lambda flags=flags: flags)
        assert ("data-tiling+ukernels+256-bit" in names(Target.host(), CONV)) is offered


def test_quantised_sets_only_for_int8_regions():
    assert {"quantized-reassoc", "qdq-integer"} <= {s.name for s in candidates(Target.host(), INT8)}
    assert "quantized-reassoc" not in {s.name for s in candidates(Target.host(), MATMUL)}


def test_thread_distribution_names_the_core_count():
    names = {s.name for s in candidates(Target.host(), MATMUL, cores=16)}
    assert "O2+threads=16" in names


def test_the_default_is_what_the_untuned_region_got():
    # PP-OCR-det's region fails with im2col and is compiled without it: that is its default.
    sets = candidates(Target.host(), CONV, default=())
    assert sets[0].flags == () and "direct-conv" not in {s.name for s in sets}


def _view(op: str, dtype: str = "float32") -> GraphView:
    return GraphView.build([Node("n", op, ("x",), ("y",))], ["x"], ["y"],
                           {"x": Value("x", dtype, (1, 8)), "y": Value("y", "float32", (1, 8))})


ONNX = ModelSource(None, "m", "", 17, None, (), ())   # type: ignore[arg-type]  # only op_families is asked
TORCH = TorchSource("m", "", "", "", (), (), (), None, None, ())


@pytest.mark.parametrize("source, conv, matmul", [(ONNX, "Conv", "MatMul"), (TORCH, "aten.convolution", "aten.mm")])
def test_both_front_ends_name_the_same_families(source, conv, matmul):
    """The tuner's "has convolutions" comes from the front end: a PyTorch region gets the
    convolution candidates too (a regex on "onnx.Conv" in the MLIR never matched it)."""
    assert region_families(source, _view(conv), ["n"]) == CONV
    assert region_families(source, _view(matmul), ["n"]) == MATMUL
    assert region_families(source, _view(matmul, "int8"), ["n"]) == INT8
    names = {s.name for s in candidates(Target.host(), region_families(source, _view(conv), ["n"]))}
    assert {"direct-conv", "channels-last", "im2col"} <= names
