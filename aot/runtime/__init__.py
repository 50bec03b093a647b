"""What a deployed bundle needs: the typed manifest and a session that runs the schedule.

Imports only numpy, ``iree.runtime`` and aot's pure-data modules (no iree.compiler, onnx, jinja2
or onnxruntime), so a bundle runs where just iree-base-runtime and numpy are installed.
"""

from aot.runtime.session import LOAD_ATTEMPTS, Session, check_inputs, load

__all__ = ["LOAD_ATTEMPTS", "Session", "check_inputs", "load"]
