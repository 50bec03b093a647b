"""A region left to the defaults compiles with the next of ``flags.default_fallbacks`` when IREE
refuses the one before (lower/compile.py): a convolution's data-tiled set, the same split finer
(only where IREE said the split was what it refused), then im2col, then no flags. A region pinned
to flags (the tuner's, a plan's) gets no second try. No IREE involved: the executor refuses by the
flags it is given, in the words it is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from aot.errors import CompileError
from aot.lower import compile as compile_mod
from aot.lower.compile import CompileJob, compile_all
from aot.lower.executor import CompileOutcome, compiler_version
from aot.lower.flags import CONV_UKERNELS, DATA_TILED_CONV, IM2COL, REFUSED_AT_THIS_SPLIT, threads
from aot.runtime.target import Target

CONV = b'%1 = torch.operator "onnx.Conv"(%arg0, %w) : (...)\n'


class Refusing:
    """Fails every task that carries one of ``refused`` flags, compiles the rest to a fake module."""
    description = "refuses by flag"

    def __init__(self, *refused: str, words: str = "error: refused"):
        self.refused, self.words, self.seen = refused, words, []

    def run(self, tasks, done=None):
        outcomes = []
        for task in tasks:
            self.seen.append(task.flags)
            bad = any(f in task.flags for f in self.refused)
            outcomes.append(CompileOutcome(None if bad else b"module " + " ".join(task.flags).encode(),
                                           1 if bad else 0, self.words if bad else "", 0.0, compiler_version()))
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


AT_THIS_SPLIT = f"error: 'vector.transfer_read' op {REFUSED_AT_THIS_SPLIT[0]}"


class RefusingSplits(Refusing):
    """Refuses the data-tiled convolutions at IREE's own work split only, saying so."""

    def __init__(self):
        super().__init__(words=AT_THIS_SPLIT)

    def run(self, tasks, done=None):
        self.refused = () if any(SPLIT_64 in t.flags for t in tasks) else (CONV_UKERNELS,)
        return super().run(tasks, done)


DTC, DTC_64, DTC_256, IM2COL_ONLY, PLAIN = CHAIN


@pytest.mark.parametrize("executor, tried", [
    (Refusing(), [DTC]),                                      # the default compiles: one try
    (RefusingSplits(), [DTC, DTC_64]),                        # IREE takes it split finer (the CRNN)
    (Refusing(CONV_UKERNELS, words=AT_THIS_SPLIT), CHAIN[:4]),  # at no split: then im2col
    (Refusing(CONV_UKERNELS), [DTC, IM2COL_ONLY]),            # refused for something else: no split helps
    (Refusing(CONV_UKERNELS, IM2COL), [DTC, IM2COL_ONLY, PLAIN]),   # and im2col too: no flags
], ids=["default", "finer-split", "every-split", "im2col", "plain"])
def test_a_refused_default_falls_back_in_turn(conv_region, tmp_path, executor, tried):
    (region,) = compile_all([CompileJob("r0", conv_region, Target.host())], tmp_path / "cache",
                            accel_timeout=60, executor=executor)
    assert region.opt_flags == tried[-1]                 # what the manifest records
    assert [tuple(f for f in flags if f in {*DTC, IM2COL, SPLIT_64, SPLIT_256}) for flags in executor.seen] == tried


def test_pinned_flags_get_no_second_try_and_the_last_refusal_is_the_error(conv_region, tmp_path):
    executor = Refusing(CONV_UKERNELS)
    with pytest.raises(CompileError):
        compile_all([CompileJob("r0", conv_region, Target.host(), DATA_TILED_CONV)], tmp_path / "cache",
                    accel_timeout=60, executor=executor)
    assert len(executor.seen) == 1
    for words, tries in (("error: refused", 3), (AT_THIS_SPLIT, len(CHAIN))):
        everything = Refusing("--iree-hal-target-device=local", words=words)
        with pytest.raises(CompileError) as refused:
            compile_all([CompileJob("r0", conv_region, Target.host())], tmp_path / "cache",
                        accel_timeout=60, executor=everything)
        assert len(everything.seen) == tries          # each set of the chain worth trying once, then the error
        # the error is the last refusal's: the compile with no optimisation flags
        assert refused.value.stderr_tail == words and not {*DTC, IM2COL} & set(refused.value.argv)


def test_an_accelerator_region_falls_back_to_the_host_chain(conv_region, tmp_path):
    """A Vulkan region IREE refuses compiles for the host, with the host's chain from its start."""
    executor = Refusing("--iree-hal-target-device=vulkan", CONV_UKERNELS)
    (region,) = compile_all([CompileJob("r0", conv_region, Target.parse("vulkan"))], tmp_path / "cache",
                            accel_timeout=60, executor=executor)
    assert region.target.is_host and region.fallback and region.opt_flags == (IM2COL,)
    assert Path(region.vmfb).read_bytes().startswith(b"module ")
