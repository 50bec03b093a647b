"""What a deployed bundle needs: the typed manifest and a session that runs the schedule.

Imports only numpy, ``iree.runtime`` and its own modules (relative imports, nothing else of aot):
every bundle ships a byte-for-byte copy of this package as ``stubs/python/aot_runtime``, so its
generated stub runs where just iree-base-runtime and numpy are installed.
"""

from . import errors
from .registry import Registry
from .session import LOAD_ATTEMPTS, Devices, Session, check_inputs, load

__all__ = ["LOAD_ATTEMPTS", "Devices", "Registry", "Session", "check_inputs", "errors", "load"]
