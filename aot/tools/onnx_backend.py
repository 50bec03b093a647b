"""`aot` as an ONNX backend (``onnx.backend.base.Backend``), so ``onnx.backend.test`` can drive it.

``prepare`` builds the model into a bundle in a scratch folder (device "CPU": llvm-cpu only;
"VULKAN": partitioned for lavapipe/Vulkan) and returns a rep that runs it through aot's runtime.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

_ACCEL = {"CPU": "none", "VULKAN": "vulkan"}


class AotRep(BackendRep):
    def __init__(self, scratch: Path, bundle: Path) -> None:
        from aot import runtime

        self._scratch = scratch
        self._session = runtime.load(bundle)
        self._names = [s.name for s in self._session.manifest.inputs]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            feed = dict(zip(self._names, inputs if isinstance(inputs, (list, tuple)) else [inputs]))
        return self._session.run(feed)

    def __del__(self) -> None:
        try:
            self._session.close()
        finally:
            shutil.rmtree(self._scratch, ignore_errors=True)


class AotBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> AotRep:
        from aot.options import BuildOptions
        from aot.partition.plan import GateMode
        from aot.pipeline import build
        from aot.runtime.target import Target

        scratch = Path(tempfile.mkdtemp(prefix="aot-backend-"))
        path = scratch / "model.onnx"
        onnx.save(model, str(path))
        options = BuildOptions(accel=Target.accelerator(_ACCEL[device.upper()]), min_compute=1, gate=GateMode.OFF,
                               verify=False)
        result = build(path, scratch / "out", options)
        return AotRep(scratch, result.bundle.path)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() in _ACCEL


prepare = AotBackend.prepare
run_model = AotBackend.run_model
supports_device = AotBackend.supports_device
