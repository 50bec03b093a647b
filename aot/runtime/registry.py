"""Several bundles in one process, by model id: one VM instance and one device per driver shared
by all of them (a pipeline of a detector and a recognizer opens the CPU and the GPU once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .errors import BundleError
from .bucketed import BucketedSession
from .loading import load
from .devices import Devices
from .session import Session


class Registry:
    """``reg.load("det", DIR)``, then ``reg.run("det", inputs)`` or ``reg["det"](x)``.

    Every bundle's regions run on the registry's devices, opened on first use; host runtime
    flags are process-wide in IREE, so the first CPU bundle loaded sets the worker topology."""

    def __init__(self) -> None:
        self.devices = Devices()
        self._sessions: dict[str, Session | BucketedSession] = {}

    def load(self, model_id: str, bundle_dir: str | Path, *, expect_sha256: str | None = None) -> Session | BucketedSession:
        """Load the bundle in ``bundle_dir`` under ``model_id`` (loaded once; a second id for the
        same directory loads it again, with its own weights)."""
        if model_id in self._sessions:
            raise BundleError(f"model id {model_id!r} is already loaded", hint="unload it first, or pick another id")
        session = load(bundle_dir, expect_sha256=expect_sha256, devices=self.devices)
        self._sessions[model_id] = session
        return session

    def __getitem__(self, model_id: str) -> Session | BucketedSession:
        try:
            return self._sessions[model_id]
        except KeyError:
            raise BundleError(f"no model {model_id!r} in this registry",
                              hint=f"loaded: {sorted(self._sessions) or 'none'}") from None

    def __contains__(self, model_id: object) -> bool:
        return model_id in self._sessions

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self._sessions)

    def run(self, model_id: str, inputs: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
        return self[model_id].run(inputs)

    def unload(self, model_id: str) -> None:
        self[model_id].close()
        del self._sessions[model_id]

    def close(self) -> None:
        """Sessions first, then the devices they shared (the teardown order IREE needs)."""
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()
        self.devices.close()

    def __enter__(self) -> "Registry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
