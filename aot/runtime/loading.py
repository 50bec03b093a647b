"""Open a bundle: a static one as a ``Session``, a bucketed one as a ``BucketedSession``."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from . import manifest as mf
from . import memory
from .bucketed import BucketedSession
from .errors import BundleError
from .devices import Devices
from .session import Session


def load(bundle_dir: str | Path, *, expect_sha256: str | None = None, devices: "Devices | None" = None,
         device_memory: "str | Mapping[str, int] | None" = None, overlap: bool = True) -> "Session | BucketedSession":
    """Open the bundle (its directory, or the build directory holding it as ``bundle/``): create
    each device once, load the weights and every module once per device. ``expect_sha256`` (from
    a generated stub) guards against a stub/bundle mismatch. ``devices``: share that instance and
    its devices with the other sessions using it (see ``Registry``). ``device_memory``: the bytes
    each device may use (``"vulkan=2GiB"`` or ``{"vulkan": 2 << 30}``; default ``$AOT_DEVICE_MEMORY``,
    else what each device reports); a bundle that needs more fails before any device opens.
    ``overlap=False``: run regions one after another even where the manifest lets regions on
    different devices run at the same time."""
    bundle = mf.bundle_dir(bundle_dir)
    manifest = mf.read(bundle)
    if expect_sha256 is not None and manifest.model.sha256 != expect_sha256:
        raise BundleError(f"bundle {str(bundle)!r} was built from another model than this stub",
                          hint="use the stub that ships inside the bundle")
    limits = memory.configured_limits(device_memory) if isinstance(device_memory, str) or device_memory is None \
        else dict(device_memory)
    if manifest.shapes is not None:
        return BucketedSession(bundle, manifest, devices=devices, memory_limits=limits, overlap=overlap)
    return Session(bundle, manifest, devices=devices, memory_limits=limits, overlap=overlap)
