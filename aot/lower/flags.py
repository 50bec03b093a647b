"""Every ``iree-compile`` flag aot passes, and the rules that pick them for a target.

The one owner of compiler knowledge: a ``Target`` (runtime/target.py) says only what a deployment
needs (backend, arch, driver); which flags compile for it lives here, and so do the spellings the
tuner, the memory statistics and ``aot bench-replay`` add. Pure. Compile caches are keyed on the
flags, so a changed spelling or order here recompiles every region."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from aot.runtime.target import Target

# Up to this many bytes of load-time constants per expression (see target_flags).
HOIST_LIMIT = 256 << 20
# Replay: an accelerator region's command buffer is recorded once, when its module loads
# (memoization), with its buffers as indirect bindings, and each call submits it again with that
# call's buffers (hal.device.queue.execute.indirect) instead of re-recording every dispatch. IREE
# 3.13 does this by default; the flags say so explicitly so that a changed default cannot turn it
# off unnoticed. `aot bench-replay` measures first call and steady state with and without.
REPLAY_FLAGS = ("--iree-hal-memoization=true", "--iree-hal-indirect-command-buffers=true")
RECORD_EVERY_CALL_FLAGS = ("--iree-hal-memoization=false", "--iree-hal-indirect-command-buffers=false")
# Only executables built for the BDA dispatch ABI let IREE 3.13's Vulkan driver keep recorded
# VkCommandBuffers across calls (tools/replay.py compares it; no build uses it).
BDA_FLAGS = ("--iree-vulkan-dispatch-abi=bda",)
KEEP_F64 = "--iree-input-demote-f64-to-f32=false"

# Optimisation flags the tuner tries (tune/candidates.py decides which, per region and target).
O2, O3 = "--iree-opt-level=O2", "--iree-opt-level=O3"
DATA_TILING = "--iree-opt-data-tiling=true"
UKERNELS = "--iree-llvmcpu-enable-ukernels=all"
CONV_UKERNELS = "--iree-llvmcpu-enable-ukernels=mmt4d,conv_nchwc"
IM2COL = "--iree-global-opt-use-im2col-for-convs=true"
# A bit-set option: one occurrence per op family (a comma list is refused).
CONV_DATA_TILING = tuple(f"--iree-dispatch-creation-experimental-set-data-tiling-ops={f}"
                         for f in ("matmul", "scaled_matmul", "convolution"))
# IREE's NCHWc convolution kernel; its module gets lower/packed_conv.py's rewrites for the
# convolutions that fall off that kernel (pointwise ones, RGB stems, non-square kernels and few
# input channels at stride 1) and for max poolings. At IREE's default optimisation level, not O2
# (stop 57): the kernels are ukernels either way (the ResNet-50 and MTCNN's three networks ran
# 0.99-1.01x without O2), while O2 turned the banded rewrite's product over a batch
# (frontend/long_filter.py) into one product per image: ICLabel's ran at 36 GFLOP/s, the model
# 134 ms at O2 against 51 without.
DATA_TILED_CONV = (DATA_TILING, *CONV_DATA_TILING, CONV_UKERNELS)
CHANNELS_LAST = ("--iree-preprocessing-pass-pipeline=builtin.module(util.func("
                 "iree-preprocessing-convert-conv-to-channels-last))", "--iree-global-opt-propagate-transposes=true")
QUANT_REASSOC = "--iree-global-opt-enable-quantized-matmul-reassociation=true"
QDQ_INTEGER = "--iree-global-opt-enable-qdq-to-integer-math=true"
VECTOR_DISTRIBUTION = "--iree-codegen-llvmgpu-use-vector-distribution=true"
IGEMM = "--iree-codegen-llvmgpu-use-igemm=true"
# The one CUDA codegen switch of IREE 3.13 that changed the module of a ResNet and a transformer
# encoder (the others above gave O2's module byte for byte): +3% and -13% on an H100 (docs/cuda.md).
TILE_AND_FUSE = "--iree-codegen-llvmgpu-test-tile-and-fuse-vectorize=true"
# O2 on MiniLM's attention needs 37 KiB of stack per dispatch, over IREE's 32 KiB limit.
STACK_128K = "--iree-llvmcpu-stack-allocation-limit=131072"
# Code for 256-bit vectors on an AVX-512 host. IREE 3.13 tiles a direct NCHW convolution (the
# generics of lower/direct_conv.py, a convolution left out of im2col) 4 output pixels wide for
# 512-bit vectors and 8 wide for 256-bit ones: Basic Pitch's 8 -> 8 convolution over 3x39 runs
# 2x faster with this flag, a 64 -> 4 one over 3x3 2.9x slower (docs/performance.md), so it is a
# tuning candidate, never a default.
VECTOR_256 = "--iree-llvmcpu-target-vector-width-in-bytes=32"


# Each optimisation decision, by the prefix its spellings share (the ukernel, thread and stack
# settings have several values): the learned cost model's features name them (learn/features.py).
DECISIONS = (("O2", O2), ("O3", O3), ("data_tiling", DATA_TILING), ("ukernels", UKERNELS.split("=")[0]),
             ("im2col", IM2COL), ("channels_last", CHANNELS_LAST[0]), ("conv_data_tiling", CONV_DATA_TILING[0]),
             ("threads", "--iree-llvmcpu-number-of-threads"), ("stack", STACK_128K.split("=")[0]))


# Decisions the learned model's features name from version 5 on, in columns appended after the
# older ones (learn/features.WIDTHS: a model of an older version reads the columns before them).
LATE_DECISIONS = (("vector_256", VECTOR_256),)
# Decisions the tuner offers that the features do not name yet: a plan compiled with one would
# look to the model like its base set, so its collection leaves them out until a feature version
# appends their bits (as version 5 did for ``LATE_DECISIONS``). None today.
UNLEARNED_DECISIONS: tuple[tuple[str, str], ...] = ()


def threads(cores: int) -> str:
    """Codegen distributes work for this many threads."""
    return f"{dict(DECISIONS)['threads']}={cores}"


# The finer work splits a host set IREE refuses at its own split is compiled again with, in turn
# (tune/candidates.py, and a region's defaults by ``default_fallbacks``: the size IREE vectorises a
# packing at follows the split). A set compiled at one is still that set: ``flag_key`` leaves the
# split out.
FINER_SPLITS = (64, 256)


def at_split(opt: tuple[str, ...], split: int) -> tuple[str, ...]:
    """``opt`` with its work split for ``split`` threads (in place of any split it names)."""
    name = threads(split).split("=")[0]
    return (*(f for f in opt if f.split("=")[0] != name), threads(split))


# IREE refuses a dispatch whose vectors or stack outgrow its limits (32 KiB each), and the size it
# vectorises at follows its work split: data tiling's packing of a 1x1 convolution's input over a
# map whose pixels are no multiple of 16 (PP-OCR-det's 48 x 6,400) is read as one 48 x 640
# vector at IREE's default split and at 16 threads, 48 x 160 at 64 (docs/performance.md).
# These are its words for it; a set refused otherwise is refused at every split.
REFUSED_AT_THIS_SPLIT = ("operations with large vector sizes", "exceeded stack allocation limit")


def refused_at_this_split(stderr: str) -> bool:
    """IREE's diagnostics say the dispatch outgrew a limit a finer work split may keep it under."""
    return any(words in stderr for words in REFUSED_AT_THIS_SPLIT)


def at_a_finer_split_of(opt: tuple[str, ...], first: tuple[str, ...]) -> bool:
    """``opt`` is ``first`` at one of ``FINER_SPLITS``: worth a compile only after IREE refused the
    set before it at that set's split (``refused_at_this_split``)."""
    return opt != first and any(opt == at_split(first, split) for split in FINER_SPLITS)


# IREE's static scheduling statistics (CSV). Every compile prints them into its log (an empty file
# name is stderr) and the memory record reads each module's transient bytes from them
# (lower/footprint.py); a statistics-only compile prints them to stdout instead.
STATS_FORMAT = "--iree-scheduling-dump-statistics-format=csv"
STATS_FLAGS = (STATS_FORMAT, "--iree-scheduling-dump-statistics-file=")
STATS_TO_STDOUT = (STATS_FORMAT, "--iree-scheduling-dump-statistics-file=-")
# Stop after a phase: the stream phase has the statistics, the VM phase the code each call runs.
COMPILE_TO_STREAM = "--compile-to=stream"
COMPILE_TO_VM = "--compile-to=vm"

# Optimisation flags every region gets unless tuning picked others (see docs/performance.md for
# the measurements). Not among them, because they do not hold for every model: O2/O3 (MiniLM's
# int8 attention then exceeds the 32 KiB stack-allocation limit and fails to compile). A region
# whose defaults fail to compile is compiled again with the next set of ``default_fallbacks``.
# llvm-cpu, a region with a convolution: IREE's data-tiled convolutions (``DATA_TILED_CONV``).
# Side by side (the host cost database: every whole-model plan of 17 convolution networks timed
# interleaved; docs/performance.md, "Data-tiled convolutions by default") they ran in 0.37-0.94
# of im2col's time on 14 of the 15 networks IREE compiles them for at its own work split
# (geometric mean 0.60), and 1.22x on PP-OCR-cls; default builds before and after, side by side:
# 0.27-0.73 on seven networks, the two held-out corpus models among them, and 1.07 and 1.67 on
# LCNet and PP-OCR-cls. PP-OCR-det's and the CRNN's compile split finer; Basic Pitch's at no
# split, and it keeps im2col, the default until 2026-12-03 (1.6-2.0x over no flags on PP-OCR and
# MTCNN). Data tiling over im2col ran anywhere from 0.67 to 1.57 of its time, so the tuner tries
# that per region.
# llvm-cpu, a region without one whose matrix products are large (Holds.pays_for_packing): data
# tiling (packed matmul operands). Side by side under the fair harness (docs/performance.md,
# "Data tiling on conv-free host regions") it ran MiniLM at 0.70x of im2col's time, MiniLM-L3
# 0.75x, the openWakeWord melspectrogram 0.23x, chains of Linear layers 0.45-0.9x, and Magika and
# two torch transformers within noise. It packs each product's activation in a dispatch of its
# own, about two more dispatches per product at ~2 us each, and where the products are tiny that
# is the whole cost: the torch recurrent layers (LSTM, GRU, RNN; 5-10 kFLOP per product) ran
# 1.4-2.0x slower. Other conv-free regions keep im2col, a no-op without convolutions.
# CUDA: a region that holds a convolution gets IREE's tile-and-fuse vectorisation. Measured on an
# H200 side by side against IREE's defaults (docs/cuda.md), it ran six of eight public CNNs 8-37%
# faster (PicoDet 12.3 -> 7.8 ms, YOLOv8n 3.6 -> 2.5, PP-OCR-det 2.5 -> 1.8, LCNet 1.5 -> 1.1),
# gave Basic Pitch the same module and the openWakeWord embedding 8% slower; on an H100 the torch
# ResNet 3% faster. Without convolutions it split: Magika 24% faster, the torch transformer encoder
# 13% slower (H100), so those regions keep IREE's defaults. Vulkan: IREE's defaults.
# Until 2026-11-28 every llvm-cpu region got im2col alone (a convolution region until 2026-12-03,
# stop 72); the learned model's databases measured
# their flag effects against that set (learn/narrow_eval.py), and stored plans that left a host
# region's flags to the defaults were compiled with it (learn/dataset.py).
LEGACY_HOST_DEFAULT = (IM2COL,)
# The mean FLOPs per matrix product from which data tiling is a conv-free region's default. Below
# it, the products measured gained at most ~15% from data tiling (a chain of 64-wide Linear
# layers, 8 kFLOP each: 0.83-1.12x) or lost up to 2x (the recurrent layers, 5-10 kFLOP); from
# 130 kFLOP (a 256-wide chain: 0.79-0.87x) up, none lost beyond the noise of this machine (the
# worst, a chain of 4x256 by 256x256 products: 0.89-1.13x one day, 0.94x the next). A mean,
# because the flags are the region's: one large product pays for the dispatches of a few small ones.
PACKING_PAYS_FROM_FLOPS = 100_000


@dataclass(frozen=True, slots=True)
class Holds:
    """What a region holds that its default optimisation flags depend on: read from its MLIR
    (``holds``) when it compiles, and from the graph (``partition.cost.holds``) before there is
    any MLIR. Products: matrix products (ONNX MatMul, Gemm and their integer forms; ATen linear,
    mm, bmm, matmul; each step of an ONNX recurrence, ``recurrence``) and their FLOPs, two per
    multiply-add."""

    convolution: bool = False
    products: int = 0
    product_flops: int = 0

    @property
    def pays_for_packing(self) -> bool:
        """Data tiling's extra dispatches are paid back (``PACKING_PAYS_FROM_FLOPS``)."""
        return self.products > 0 and self.product_flops >= PACKING_PAYS_FROM_FLOPS * self.products

    def __add__(self, other: "Holds") -> "Holds":
        return Holds(self.convolution or other.convolution, self.products + other.products,
                     self.product_flops + other.product_flops)


# The ONNX recurrences and their gates. IREE runs one of them as a loop of small products, step by
# step (the torch front end unrolls them into the same products: ATen linear per step).
RECURRENT_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def recurrence(op: str, x: tuple[int, ...], hidden: int, bidirectional: bool, batch_first: bool) -> Holds:
    """An ONNX ``op`` (``RECURRENT_GATES``) over X ``x`` ([seq, batch, input], or [batch, seq,
    input] with ``batch_first``): one product per step and direction, of its gates' weights with
    the step's input and hidden state."""
    seq, batch = (x[1], x[0]) if batch_first else (x[0], x[1])
    steps = seq * (2 if bidirectional else 1)
    return Holds(False, steps, steps * 2 * batch * RECURRENT_GATES[op] * hidden * (x[2] + hidden))


def flag_key(flags: tuple[str, ...]) -> tuple[str, ...]:
    """A flag set's identity on any model, for counting wins and losses across models: its flags
    sorted, without the convolution base every conv region's sets carry (IM2COL: a no-op without
    convolutions) or a finer work split it was compiled at where IREE refused its own
    (``FINER_SPLITS``); no flags at all is its own set."""
    return tuple(sorted(set(flags) - {IM2COL, *map(threads, FINER_SPLITS)})) if flags else ("(no optimisation flags)",)


def default_opt_flags(target: Target, held: Holds = Holds()) -> tuple[str, ...]:
    """The optimisation flags a region compiled for ``target`` gets when it was not tuned, by what
    it ``held`` (see above)."""
    if target.backend == "llvm-cpu":
        if held.convolution:
            return DATA_TILED_CONV
        return (DATA_TILING,) if held.pays_for_packing else (IM2COL,)
    if target.backend == "cuda" and held.convolution:
        return (TILE_AND_FUSE,)
    return ()


def default_fallbacks(target: Target, held: Holds = Holds()) -> tuple[tuple[str, ...], ...]:
    """The flag sets a region left to the defaults is compiled with, in turn, until one compiles:
    ``default_opt_flags`` first; then, for a convolution region on llvm-cpu, its data-tiled
    convolutions at each of ``FINER_SPLITS`` (IREE refuses some packings at its own work split and
    takes them split finer: PP-OCR-det's and the CRNN's, as the tuner compiles them; lower/compile.py
    tries these only after such a refusal, ``at_a_finer_split_of``), then im2col; last no
    optimisation flags (im2col breaks PP-OCR-det's workgroup distribution on llvm-cpu)."""
    first = default_opt_flags(target, held)
    then: tuple[tuple[str, ...], ...] = ()
    if target.backend == "llvm-cpu" and held.convolution:
        then = (*(at_split(first, split) for split in FINER_SPLITS), (IM2COL,))
    return tuple(dict.fromkeys((first, *then, ())))


def region_defaults(target: Target, mlir: bytes) -> tuple[str, ...]:
    """``default_opt_flags`` for a region, from its MLIR text."""
    return default_opt_flags(target, holds(mlir))


def region_fallbacks(target: Target, mlir: bytes) -> tuple[tuple[str, ...], ...]:
    """``default_fallbacks`` for a region, from its MLIR text."""
    return default_fallbacks(target, holds(mlir))


def holds_convolution(mlir: bytes) -> bool:
    """The region's MLIR text has a convolution (an ONNX Conv family op or an ATen one)."""
    return b'"onnx.Conv' in mlir or b'"onnx.QLinearConv' in mlir or b"torch.aten.conv" in mlir


# One matrix product in a region's MLIR (the torch dialect, as both front ends import it): the op,
# then its operand types and result type, e.g. `torch.aten.linear %1, %2, %3 : !torch.vtensor<[2,16],
# f32>, ... -> !torch.vtensor<[2,128],f32>` or `torch.operator "onnx.MatMul"(%1, %2) : (...) -> ...`.
_PRODUCT = re.compile(r'(?:torch\.operator "onnx\.(?:MatMul|Gemm|MatMulInteger|QLinearMatMul)"'
                      r'|torch\.aten\.(?:linear|matmul|mm|bmm) )(?P<rest>.*)$', re.M)
_VTENSOR = re.compile(r"!torch\.vtensor<\[([^\]]*)\]")
_RECURRENCE = re.compile(r'torch\.operator "onnx\.(?P<op>LSTM|GRU|RNN)"(?P<rest>.*)$', re.M)
_ATTR = re.compile(r"torch\.onnx\.(\w+) = (\d+|\"\w+\")")


def holds(mlir: bytes) -> Holds:
    """What a region's MLIR text holds (``Holds``). A product's FLOPs: two per element of its
    result per element of its first operand's last dimension (its first, for a Gemm with transA);
    a dimension that is not a number counts it as 0."""
    text = mlir.decode(errors="replace")
    held = Holds(holds_convolution(mlir))
    for m in _PRODUCT.finditer(text):
        rest = m.group("rest")
        types = _shapes(rest)
        k = (types[0][0] if "transA = 1" in rest else types[0][-1]) if len(types) >= 2 and types[0] else 0
        held += Holds(False, 1, 2 * k * math.prod(types[-1]) if k else 0)
    for m in _RECURRENCE.finditer(text):
        attrs = dict(_ATTR.findall(m.group("rest")))
        x = _shapes(m.group("rest"))[0]
        held += recurrence(m.group("op"), tuple(x), int(attrs.get("hidden_size", 0)),
                           attrs.get("direction") == '"bidirectional"', attrs.get("layout") == "1")
    return held


def _shapes(signature: str) -> list[list[int]]:
    """The shape of each tensor type in an op's signature; a dimension that is not a number: 0."""
    return [[int(d) if d.isdigit() else 0 for d in t.split(",")] for t in _VTENSOR.findall(signature)]


def keeps_f64(mlir: bytes) -> bool:
    """The region's MLIR text has a float64 tensor type (see compile_flags)."""
    return b",f64>" in mlir


def compile_flags(target: Target, keep_f64: bool = False, opt: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The target's own flags, then ``opt`` (optimisation flags; None: the defaults of a region
    that holds nothing they depend on).

    `keep_f64`: the region has float64 tensors. IREE demotes f64 to f32 by default, so such a
    region would return f32 bytes where the manifest promises f64; CPUs and CUDA compute f64
    natively. Only then: without demotion, the f64 scalars IREE's torch lowering makes for
    other models (MTCNN) do not legalize on the host VM."""
    return (*target_flags(target, keep_f64), *(default_opt_flags(target) if opt is None else opt))


def flags_for(target: Target, mlir: bytes, opt: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """``compile_flags`` for one region's MLIR text: f64 is kept when it has a float64 tensor type,
    and the defaults are those for what it holds."""
    return compile_flags(target, keeps_f64(mlir), region_defaults(target, mlir) if opt is None else opt)


def target_flags(target: Target, keep_f64: bool = False) -> tuple[str, ...]:
    """The device flags of ``target``: what every region compiled for it gets, tuned or not."""
    f64 = (KEEP_F64,) if keep_f64 else ()
    # IREE 3.13 hoists a constant expression such as dequantizing int8 weights (i8 -> f32, 4x
    # the bytes) into a load-time initializer only if it grows the module's constants by less
    # than 1 MiB; larger ones stay fused into their matmul's dispatch and run on every call.
    hoist = f"--iree-opt-const-expr-max-size-increase-threshold={HOIST_LIMIT}"
    if target.backend == "llvm-cpu":
        # On the CPU that per-call dequantization was 14-17% of MiniLM's dispatch time
        # (`aot profile`); onnxruntime folds the same constants once, at session creation.
        return ("--iree-hal-target-device=local",
                "--iree-hal-local-target-device-backends=llvm-cpu",
                f"--iree-llvmcpu-target-cpu={target.arch}", hoist, *f64)
    if target.backend == "vulkan-spirv":
        # Mappable results let the host read Vulkan outputs without the 4096-byte
        # minImportedHostPointerAlignment trap (DESIGN §3). Hoisting: the SPIR-V pipeline
        # needs 6.5 minutes to bufferize one fused dequantize+matmul dispatch (MiniLM's
        # 384x1536 FFN weights) against 0.6 s for the plain f32 matmul; hoisted, MiniLM's whole
        # Vulkan compile takes 6.5 s. The price, on every backend: memory for the f32 copies.
        return ("--iree-hal-target-device=vulkan",
                f"--iree-vulkan-target={target.arch}",
                "--iree-hal-external-resources-mappable", hoist, *REPLAY_FLAGS)
    # The cuda driver replays such a command buffer as a CUDA graph only when the runtime is
    # told --cuda_use_streams=false; its default (streams) re-issues the kernels each call.
    return ("--iree-hal-target-device=cuda", f"--iree-cuda-target={target.arch}", *REPLAY_FLAGS, *f64)
