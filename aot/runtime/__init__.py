"""What a deployed bundle needs: the typed manifest and a session that runs the schedule.

Imports only numpy, ``iree.runtime`` and its own modules (relative imports, nothing else of aot):
every bundle ships a byte-for-byte copy of this package as ``stubs/python/aot_runtime``, so its
generated stub runs where just iree-base-runtime and numpy are installed.
"""

from . import errors
from .batching import Batcher
from .bucketed import BucketedSession
from .registry import Registry
from .loading import load
from .devices import Devices
from .session import LOAD_ATTEMPTS, Session, check_inputs

__all__ = ["LOAD_ATTEMPTS", "Batcher", "BucketedSession", "Devices", "Registry", "Session", "check_inputs", "errors", "load"]
