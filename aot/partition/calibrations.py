"""Where this machine's calibrations live, and which one a build uses.

``aot calibrate`` without ``-o`` files what it measured under this machine's devices: the
accelerator it built for (backend and arch) and the host's ISA class, core count and CPU model.
A build with no ``--cost-params`` for the same devices uses that file instead of the hand-set
``devices.json``, so once a machine is calibrated its plans are decided from its own figures, as a
TensorRT timing cache or a TVM tuning log is found by the device it was measured on. The build
record names the file and its sha256 (``CostModel.source``). ``--plan`` replays the plan's pinned
decisions whatever the store holds; the calibration then only prices them for the record.

Only a build for the devices at hand finds one: a cross build (``--host-cpu`` another CPU, or an
accelerator arch other than the one calibrated) keeps the hand-set class entries, which describe
the devices it is built for better than this machine's figures do.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Protocol

from aot.runtime import fingerprint
from aot.runtime.target import Target


class BuildDevices(Protocol):
    """What of ``BuildOptions`` decides which calibration applies (no import of options: it imports us)."""

    @property
    def accel(self) -> Target | None: ...
    @property
    def host(self) -> Target: ...
    @property
    def cost_params(self) -> Path | None: ...


# Where calibrations go: $AOT_CALIBRATIONS, else $XDG_DATA_HOME/aot/calibrations, else
# ~/.local/share/aot/calibrations. Data, not cache: it took a measurement to make.
STORE_ENV = "AOT_CALIBRATIONS"


def store() -> Path | None:
    """The folder of this machine's calibrations; None when there is no home to keep one in."""
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME")
    if not base:
        try:
            base = str(Path.home() / ".local" / "share")
        except RuntimeError:   # no $HOME and no password entry
            return None
    return Path(base) / "aot" / "calibrations"


def machine_key(options: BuildDevices) -> str:
    """The devices a calibration was measured on (``learn.key.device_fingerprint`` and the CPU model)."""
    return f"{fingerprint.devices(options.accel)} cpu={fingerprint.cpu_model()}"


def path_for(options: BuildDevices) -> Path | None:
    """Where the calibration of ``options``' devices goes (whether or not one is there)."""
    folder = store()
    return folder / (re.sub(r"[^A-Za-z0-9.-]+", "_", machine_key(options)) + ".json") if folder else None


def for_build(options: BuildDevices) -> Path | None:
    """The calibration a build with these options uses when it names no ``--cost-params``: this
    machine's, for its accelerator, when the build is for this machine's host; else None."""
    if options.cost_params is not None or options.host.arch != "host":
        return None
    path = path_for(options)
    return path if path is not None and path.is_file() else None
