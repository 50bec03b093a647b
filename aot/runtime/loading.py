"""Open a bundle: a static one as a ``Session``, a bucketed one as a ``BucketedSession``."""

from __future__ import annotations

from pathlib import Path

from . import manifest as mf
from .bucketed import BucketedSession
from .errors import BundleError
from .session import Devices, Session


def load(bundle_dir: str | Path, *, expect_sha256: str | None = None, check_device: bool = True,
         devices: "Devices | None" = None) -> "Session | BucketedSession":
    """Open the bundle (its directory, or the build directory holding it as ``bundle/``): create
    each device once, load the weights and every module once per device. ``expect_sha256`` (from
    a generated stub) guards against a stub/bundle mismatch. ``devices``: share that instance and
    its devices with the other sessions using it (see ``Registry``)."""
    bundle = mf.bundle_dir(bundle_dir)
    manifest = mf.read(bundle)
    if expect_sha256 is not None and manifest.model.sha256 != expect_sha256:
        raise BundleError(f"bundle {str(bundle)!r} was built from another model than this stub",
                          hint="use the stub that ships inside the bundle")
    if manifest.shapes is not None:
        return BucketedSession(bundle, manifest, check_device=check_device, devices=devices)
    return Session(bundle, manifest, check_device=check_device, devices=devices)
