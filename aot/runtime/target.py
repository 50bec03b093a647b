"""Compile targets as parsed value objects: what a deployment needs to know about a module.

The one device vocabulary: a ``Target`` is a backend (what iree-compile generates), an arch (what
it generates for) and, derived from the backend, the runtime driver that runs it. The manifest
stores all three; the partitioner's labels ("accel"/"host") say only where a region was planned.
Which iree-compile flags a target gets is compiler knowledge and lives in aot/lower/flags.py, not
here: this package ships in every bundle. Pure: the runtime imports this module."""

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
    def on_host_cores(self) -> bool:
        """The device computes on the host's own CPU cores (Mesa lavapipe is llvmpipe's Vulkan): its
        regions cannot overlap with host regions, however the lanes are laid out."""
        return self.is_host or (self.backend == "vulkan-spirv" and self.arch == "llvmpipe")

    def __str__(self) -> str:
        return f"{self.backend}:{self.arch}"
