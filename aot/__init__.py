"""aot: ahead-of-time build system for ONNX models and PyTorch modules on IREE, partitioned across devices.

    import aot
    result = aot.build("zoo:minilm", "artifacts/minilm", aot.BuildOptions(accel=aot.Target.parse("vulkan")))
    result = aot.build_torch(model, (torch.randn(1, 3, 64, 64),), "artifacts/model", accel="vulkan")

The names below load on first use, so ``import aot.runtime`` in a deployment pulls in nothing of
the build (no compiler, onnx or jinja2).
"""

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {"build": "aot.api", "plan": "aot.api", "build_torch": "aot.api", "BuildOptions": "aot.options", "GateMode": "aot.partition.plan",
         "FallbackMode": "aot.options", "Target": "aot.runtime.target"}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'aot' has no attribute {name!r}")
