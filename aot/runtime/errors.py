"""The errors a deployed bundle can raise, and their base.

Part of the runtime package, which a bundle ships a copy of (``bundle/stubs/python/aot_runtime``):
so it imports nothing outside the package. ``aot.errors`` re-exports these classes for the build.
"""

from __future__ import annotations


class AotError(Exception):
    """Base of every error `aot` raises on purpose."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message}\n  hint: {hint}" if hint else message)


class BundleError(AotError):
    """A bundle on disk is missing files, corrupt, or was built by an incompatible version."""


class DeviceError(AotError):
    """A device named by the bundle cannot be opened, or does not match what was compiled for."""


class DeviceLostError(DeviceError):
    """A device stopped answering during a run (VK_ERROR_DEVICE_LOST, DATA_LOSS from a fence)."""

    def __init__(self, message: str, *, driver: str, hint: str = "") -> None:
        self.driver = driver
        super().__init__(message, hint=hint)


class RuntimeInputError(AotError):
    """Inputs given to a bundle do not match its signature (name, dtype or shape)."""
