"""A region left to the defaults compiles with the next of ``flags.default_fallbacks`` when IREE
refuses the one before (lower/compile.py): a convolution's data-tiled set, the same split finer,
then im2col, then no flags. A region pinned to flags (the tuner's, a plan's) gets no second try. No IREE involved: the
executor refuses by the flags it is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from aot.errors import CompileError
from aot.lower import compile as compile_mod
from aot.lower.compile import CompileJob, compile_all
from aot.lower.executor import CompileOutcome, compiler_version
from aot.lower.flags import CONV_UKERNELS, DATA_TILED_CONV, IM2COL, threads
from aot.runtime.target import Target

CONV = b'%1 = torch.operator "onnx.Conv"(%arg0, %w) : (...)\n'


class Refusing:
    """Fails every task that carries one of ``refused`` flags, compiles the rest to a fake module."""
    description = "refuses by flag"

    def __init__(self, *refused: str):
        self.refused, self.seen = refused, []

    def run(self, tasks, done=None):
        outcomes = []
        for task in tasks:
            self.seen.append(task.flags)
            bad = any(f in task.flags for f in self.refused)
            outcomes.append(CompileOutcome(None if bad else b"module " + " ".join(task.flags).encode(),
                                           1 if bad else 0, "error: refused" if bad else "", 0.0, compiler_version()))
        return outcomes

    def close(self):
        pass


@pytest.fixture
def conv_region(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_mod.packed_conv, "module_text", lambda target, text, opt: text)
    monkeypatch.setattr(compile_mod, "iree_compile_path", lambda: "iree-compile")   # a refusal's repro names it
    (tmp_path / "cache").mkdir()
    path = tmp_path / "r0.mlir"
    path.write_bytes(CONV)
    return path


SPLIT_64, SPLIT_256 = threads(64), threads(256)
CHAIN = [DATA_TILED_CONV, (*DATA_TILED_CONV, SPLIT_64), (*DATA_TILED_CONV, SPLIT_256), (IM2COL,), ()]


class RefusingSplits(Refusing):
    """Refuses the data-tiled convolutions at IREE's own work split only."""

    def run(self, tasks, done=None):
        self.refused = () if any(SPLIT_64 in t.flags for t in tasks) else (CONV_UKERNELS,)
        return super().run(tasks, done)


@pytest.mark.parametrize("executor, compiled_with", [
    (Refusing(), DATA_TILED_CONV),                            # the default compiles: one try
    (RefusingSplits(), (*DATA_TILED_CONV, SPLIT_64)),         # IREE takes it split finer (the CRNN)
    (Refusing(CONV_UKERNELS), (IM2COL,)),                     # IREE refuses the data-tiled convolutions
    (Refusing(CONV_UKERNELS, IM2COL), ()),                    # and im2col too: no flags
], ids=["default", "finer-split", "im2col", "plain"])
def test_a_refused_default_falls_back_in_turn(conv_region, tmp_path, executor, compiled_with):
    (region,) = compile_all([CompileJob("r0", conv_region, Target.host())], tmp_path / "cache",
                            accel_timeout=60, executor=executor)
    assert region.opt_flags == compiled_with             # what the manifest records
    tried = [tuple(f for f in flags if f in {*DATA_TILED_CONV, IM2COL, SPLIT_64, SPLIT_256}) for flags in executor.seen]
    assert tried == CHAIN[:CHAIN.index(compiled_with) + 1]


def test_pinned_flags_get_no_second_try_and_the_last_refusal_is_the_error(conv_region, tmp_path):
    executor = Refusing(CONV_UKERNELS)
    with pytest.raises(CompileError):
        compile_all([CompileJob("r0", conv_region, Target.host(), DATA_TILED_CONV)], tmp_path / "cache",
                    accel_timeout=60, executor=executor)
    assert len(executor.seen) == 1
    everything = Refusing("--iree-hal-target-device=local")
    with pytest.raises(CompileError):
        compile_all([CompileJob("r0", conv_region, Target.host())], tmp_path / "cache",
                    accel_timeout=60, executor=everything)
    assert len(everything.seen) == len(CHAIN)          # each set of the chain once, then the error


def test_an_accelerator_region_falls_back_to_the_host_chain(conv_region, tmp_path):
    """A Vulkan region IREE refuses compiles for the host, with the host's chain from its start."""
    executor = Refusing("--iree-hal-target-device=vulkan", CONV_UKERNELS)
    (region,) = compile_all([CompileJob("r0", conv_region, Target.parse("vulkan"))], tmp_path / "cache",
                            accel_timeout=60, executor=executor)
    assert region.target.is_host and region.fallback and region.opt_flags == (IM2COL,)
    assert Path(region.vmfb).read_bytes().startswith(b"module ")
