"""The flag sets the tuner tries for one region: pure, from the region's target and the op
families its nodes hold (``frontend/source.py``: the same answer for an ONNX and a PyTorch region).

Each set replaces the target's default optimisation flags (``lower.flags.default_opt_flags``);
the target's device flags always stay. Sets that only matter for some content (convolutions,
quantised matmuls) are offered only to regions that hold it, so a region compiles no candidate
that could not differ from another. The spellings are lower/flags.py's; this module only picks."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

from aot.frontend.source import OpFamily
from aot.lower import flags
from aot.lower.flags import (CHANNELS_LAST, DATA_TILING, FINER_SPLITS, IGEMM, IM2COL, O2, O3,
                             QDQ_INTEGER, QUANT_REASSOC, STACK_128K, TILE_AND_FUSE, UKERNELS, VECTOR_256,
                             VECTOR_DISTRIBUTION, Holds, default_opt_flags, threads)
from aot.runtime.manifest import cpu_flags
from aot.runtime.target import Target


@dataclass(frozen=True, slots=True)
class FlagSet:
    name: str
    flags: tuple[str, ...]      # optimisation flags, in place of the target's defaults


# IREE's NCHWc convolution kernel (lower/flags.py), a convolution region's default since stop 72.
DATA_TILED_CONV = FlagSet("data-tiled-conv", flags.DATA_TILED_CONV)
# Sets the tuner offered once and offers no more. Cost databases keep what was measured with them,
# and they train a learned model, but no choice is scored on them and they win nothing
# (learn/narrow_eval.offered): ``--tune-top`` times the sets that won most often, and a win for a
# set never offered again would be a slot lost.
RETIRED_HOST_SETS: tuple[FlagSet, ...] = (
    FlagSet("data-tiled-conv at O2 (until 2026-11-29, stop 56)", (O2, *DATA_TILED_CONV.flags)),
)


def candidates(target: Target, families: frozenset[OpFamily], cores: int | None = None,
               default: tuple[str, ...] | None = None) -> tuple[FlagSet, ...]:
    """The default first (every other set is measured against it), then the target's search space.
    ``default``: the flags the untuned region really got (a region whose defaults IREE refused got
    the next of ``default_fallbacks``); None: the target's defaults for a region of these
    ``families`` whose products are too small to pay for packing (on llvm-cpu the data-tiled-conv
    set with a convolution, im2col without). The learned collector passes im2col alone, the
    reference set of its databases (learn/host_plans.py)."""
    conv, quant = OpFamily.CONVOLUTION in families, OpFamily.QUANTIZED in families
    first = FlagSet("default", default_opt_flags(target, Holds(convolution=conv)) if default is None else default)
    if target.backend == "llvm-cpu":
        found = _llvm_cpu(conv, quant, cores or os.cpu_count() or 1, wide=_has_512_bit_vectors(target))
        if not conv and first.flags not in {(), (IM2COL,)}:
            # IREE's own defaults (im2col is a no-op without convolutions): a conv-free region
            # whose products are large gets data tiling by default (lower/flags.py), which lost on
            # none of the models measured; the plain module stays a candidate all the same.
            found.append(FlagSet("iree-defaults", ()))
    elif target.backend == "cuda":
        # IREE's own defaults: a convolution region's default is tile-and-fuse, which lost 8% on
        # one CNN of eight (docs/cuda.md), so the plain module stays a candidate.
        found = [FlagSet("iree-defaults", ()), FlagSet("O2", (O2,)), FlagSet("O3", (O3,)),
                 FlagSet("vector-distribution", (O2, VECTOR_DISTRIBUTION)),
                 FlagSet("tile-and-fuse", (TILE_AND_FUSE,))]
        if conv:
            found.append(FlagSet("igemm", (O2, IGEMM)))
    else:  # vulkan-spirv: IREE's SPIR-V backend offers the global optimisation levels
        found = [FlagSet("O2", (O2,)), FlagSet("O3", (O3,))]
    return (first, *(f for f in found if f.flags != first.flags))


def _has_512_bit_vectors(target: Target) -> bool:
    """The llvm-cpu target has AVX-512: this machine when it builds for its own CPU, or the named
    ISA level. Elsewhere 256-bit code is what the target gets anyway."""
    return target.arch == "x86-64-v4" or (target.arch == "host" and "avx512f" in cpu_flags())


def _llvm_cpu(conv: bool, quant: bool, cores: int, wide: bool = False) -> list[FlagSet]:
    base = (IM2COL,) if conv else ()
    found = [
        FlagSet("O2", (O2, *base)),
        FlagSet("O3", (O3, *base)),
        FlagSet("data-tiling", (DATA_TILING, *base)),
        FlagSet("data-tiling+ukernels", (DATA_TILING, UKERNELS, *base)),
        FlagSet("O3+data-tiling+ukernels", (O3, DATA_TILING, UKERNELS, *base)),
        # Codegen distributes work for this many threads (the build machine's cores).
        FlagSet(f"O2+threads={cores}", (O2, threads(cores), *base)),
        # O2 on MiniLM's attention needs 37 KiB of stack per dispatch, over IREE's 32 KiB limit;
        # IREE's worker threads have far more. A dispatch that overflowed would crash its probe.
        FlagSet("O2+stack=128k", (O2, STACK_128K, *base)),
    ]
    if conv:
        found += [
            FlagSet("direct-conv", ()),
            FlagSet("channels-last", (O2, *CHANNELS_LAST)),
            # PicoDet's 1x1 convolutions become 4-D contractions channels-last; data tiling packs
            # them (iree-benchmark-module: 91 -> 79 ms for the whole detector).
            FlagSet("channels-last+data-tiling", (O2, *CHANNELS_LAST, DATA_TILING)),
            DATA_TILED_CONV,
            # The default until stop 72 (lower/flags.py), the best set on PP-OCR-cls; dropped
            # as a duplicate where it is still the region's default.
            FlagSet("im2col", (IM2COL,)),
        ]
    if conv and wide:
        found.append(FlagSet("data-tiling+ukernels+256-bit", (DATA_TILING, UKERNELS, IM2COL, VECTOR_256)))
    if quant:
        found += [
            FlagSet("quantized-reassoc", (O2, DATA_TILING, QUANT_REASSOC, *base)),
            FlagSet("qdq-integer", (QDQ_INTEGER, *base)),
        ]
    return found


# A set IREE refuses at its work split (``flags.refused_at_this_split``) is compiled again with
# its work split for more threads, in turn, and kept with the first that compiles (the flags it
# compiled with are the ones pinned), at each of lower/flags.py's FINER_SPLITS.
SPLIT_TAG = "+split="   # data-tiling+split=64: the set offered, compiled with the split named


def split_finer(s: FlagSet, split: int) -> FlagSet:
    """``s`` with its work split for ``split`` threads (``flags.at_split``)."""
    return FlagSet(f"{s.name}{SPLIT_TAG}{split}", flags.at_split(s.flags, split))


def finer_splits(s: FlagSet) -> Iterator[FlagSet]:
    """``s`` at each of ``FINER_SPLITS`` in turn: what a set refused at its work split is tried as."""
    return (split_finer(s, split) for split in FINER_SPLITS)


def offered_as(name: str) -> str:
    """The set a candidate was offered as: ``data-tiling+split=64`` -> ``data-tiling``."""
    return name.split(SPLIT_TAG)[0]
