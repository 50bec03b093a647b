"""Compile targets as parsed value objects that own their ``iree-compile`` flags.

The one device vocabulary: a ``Target`` is a backend (what iree-compile generates), an arch (what
it generates for) and, derived from the backend, the runtime driver that runs it. The manifest
stores all three; the partitioner's labels ("accel"/"host") say only where a region was planned.
Pure: the runtime imports this module."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import AotError

# backend -> (runtime driver, default arch). The default Vulkan arch is llvmpipe because a module
# compiled for a real GPU's subgroup size returns silently wrong results on lavapipe (DESIGN §3).
_BACKENDS = {
    "llvm-cpu": ("local-task", "host"),
    "vulkan-spirv": ("vulkan", "llvmpipe"),
    "cuda": ("cuda", "sm_80"),
}
# Up to this many bytes of load-time constants per expression (see Target._device_flags).
HOIST_LIMIT = 256 << 20
# Replay: an accelerator region's command buffer is recorded once, when its module loads
# (memoization), with its buffers as indirect bindings, and each call submits it again with that
# call's buffers (hal.device.queue.execute.indirect) instead of re-recording every dispatch. IREE
# 3.13 does this by default; the flags say so explicitly so that a changed default cannot turn it
# off unnoticed. `aot bench-replay` measures first call and steady state with and without.
REPLAY_FLAGS = ("--iree-hal-memoization=true", "--iree-hal-indirect-command-buffers=true")
RECORD_EVERY_CALL_FLAGS = ("--iree-hal-memoization=false", "--iree-hal-indirect-command-buffers=false")

# Optimisation flags every region gets unless tuning picked others (see docs/performance.md for
# the measurements). llvm-cpu: im2col turns convolutions into matmuls, 1.6-2.0x on the corpus'
# CNNs (PP-OCR, MTCNN) and neutral on MiniLM. Not here, because they do not hold for every model:
# --iree-opt-level=O2/O3 (MiniLM's int8 attention then exceeds the 32 KiB stack-allocation limit
# and fails to compile) and --iree-opt-data-tiling (0.8-0.9x on MiniLM, 1.05x on PP-OCR for 3x
# the compile time). The tuner tries both per region, where a failure only rejects a candidate.
_DEFAULT_OPT = {
    "llvm-cpu": ("--iree-global-opt-use-im2col-for-convs=true",),
    "vulkan-spirv": (),
    "cuda": (),
}
_ALIASES = {"cpu": "llvm-cpu", "host": "llvm-cpu", "vulkan": "vulkan-spirv", "llvm-cpu": "llvm-cpu",
            "vulkan-spirv": "vulkan-spirv", "cuda": "cuda"}


@dataclass(frozen=True, slots=True)
class Target:
    """One IREE backend plus the architecture it compiles for (``vulkan-spirv:llvmpipe``)."""

    backend: str
    arch: str

    @classmethod
    def parse(cls, text: str) -> "Target":
        """Parse ``backend[:arch]``; backends accept the aliases cpu/host/vulkan."""
        name, _, arch = text.partition(":")
        backend = _ALIASES.get(name.strip().lower())
        if backend is None:
            raise AotError(f"unknown target {text!r}",
                           hint="use llvm-cpu[:CPU], vulkan-spirv[:ARCH] or cuda[:sm_XX]")
        return cls(backend, arch.strip() or _BACKENDS[backend][1])

    @staticmethod
    def backends() -> tuple[str, ...]:
        """Every backend aot compiles for (llvm-cpu, vulkan-spirv, cuda)."""
        return tuple(_BACKENDS)

    @classmethod
    def host(cls, cpu: str = "host") -> "Target":
        """llvm-cpu for ``cpu`` ("host": this machine's CPU; x86-64-v3 for a bundle that runs elsewhere)."""
        return cls("llvm-cpu", cpu)

    @classmethod
    def accelerator(cls, text: str, arch: str | None = None) -> "Target | None":
        """Parse ``--accel``: ``vulkan[:ARCH]``, ``cuda[:ARCH]`` or ``none`` (None: host only);
        ``arch`` (``--vulkan-target``/``--cuda-target``) fills in an arch the text leaves out."""
        if text.strip().lower() == "none":
            return None
        target = cls.parse(text)
        if target.is_host:
            raise AotError(f"{text!r} is the host, not an accelerator", hint="use --accel vulkan, cuda or none")
        return target if ":" in text or not arch else cls(target.backend, arch)

    @property
    def driver(self) -> str:
        """The IREE runtime HAL driver that runs modules compiled for this target."""
        return _BACKENDS[self.backend][0]

    @property
    def is_host(self) -> bool:
        return self.backend == "llvm-cpu"

    @property
    def default_opt_flags(self) -> tuple[str, ...]:
        """The optimisation flags a region gets when it was not tuned."""
        return _DEFAULT_OPT[self.backend]

    def compile_flags(self, keep_f64: bool = False, opt: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """The target's own flags, then ``opt`` (optimisation flags; None: the defaults).

        `keep_f64`: the region has float64 tensors. IREE demotes f64 to f32 by default, so such a
        region would return f32 bytes where the manifest promises f64; CPUs and CUDA compute f64
        natively. Only then: without demotion, the f64 scalars IREE's torch lowering makes for
        other models (MTCNN) do not legalize on the host VM."""
        return (*self._device_flags(keep_f64), *(self.default_opt_flags if opt is None else opt))

    def flags_for(self, mlir: bytes, opt: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """``compile_flags`` for one region's MLIR text: f64 is kept when it has a float64 tensor type."""
        return self.compile_flags(b",f64>" in mlir, opt)

    def _device_flags(self, keep_f64: bool) -> tuple[str, ...]:
        f64 = ("--iree-input-demote-f64-to-f32=false",) if keep_f64 else ()
        # IREE 3.13 hoists a constant expression such as dequantizing int8 weights (i8 -> f32, 4x
        # the bytes) into a load-time initializer only if it grows the module's constants by less
        # than 1 MiB; larger ones stay fused into their matmul's dispatch and run on every call.
        hoist = f"--iree-opt-const-expr-max-size-increase-threshold={HOIST_LIMIT}"
        if self.backend == "llvm-cpu":
            # On the CPU that per-call dequantization was 14-17% of MiniLM's dispatch time
            # (`aot profile`); onnxruntime folds the same constants once, at session creation.
            return ("--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu",
                    f"--iree-llvmcpu-target-cpu={self.arch}", hoist, *f64)
        if self.backend == "vulkan-spirv":
            # Mappable results let the host read Vulkan outputs without the 4096-byte
            # minImportedHostPointerAlignment trap (DESIGN §3). Hoisting: the SPIR-V pipeline
            # needs 6.5 minutes to bufferize one fused dequantize+matmul dispatch (MiniLM's
            # 384x1536 FFN weights) against 0.6 s for the plain f32 matmul; hoisted, MiniLM's whole
            # Vulkan compile takes 6.5 s. The price, on every backend: memory for the f32 copies.
            return ("--iree-hal-target-device=vulkan",
                    f"--iree-vulkan-target={self.arch}",
                    "--iree-hal-external-resources-mappable", hoist, *REPLAY_FLAGS)
        # The cuda driver replays such a command buffer as a CUDA graph only when the runtime is
        # told --cuda_use_streams=false; its default (streams) re-issues the kernels each call.
        return ("--iree-hal-target-device=cuda", f"--iree-cuda-target={self.arch}", *REPLAY_FLAGS, *f64)

    def __str__(self) -> str:
        return f"{self.backend}:{self.arch}"
