"""One error hierarchy for every stage.

Each error carries the fields that explain it and a hint saying what to do next; the message is
built from those fields so that the CLI can print ``ERROR: <message>`` and exit non-zero.
"""

from __future__ import annotations

# The runtime's errors live in its package (a bundle ships a copy of it); the build raises the same classes.
from aot.runtime.errors import AotError, BundleError, DeviceError, DeviceLostError, RuntimeInputError

__all__ = ["AotError", "BundleError", "DeviceError", "DeviceLostError", "RuntimeInputError", "UsageError", "ModelError", "ImporterError",
           "PartitionError", "OutlineError", "CompileError"]


class UsageError(AotError):
    """The command line is malformed: a flag's value cannot be read (``--input-shape x=abc``)."""


class ModelError(AotError):
    """The ONNX model cannot be used as given (malformed, unsupported opset/domain, bad shapes)."""


class ImporterError(AotError):
    """IREE's ONNX importer rejected a model that passed validation."""


class PartitionError(AotError):
    """A plan is invalid (cycle, node missing or duplicated, unknown device)."""


class OutlineError(AotError):
    """A region could not be cut out of the imported MLIR."""


class CompileError(AotError):
    """``iree-compile`` failed; carries argv, the stderr tail and a one-line repro."""

    def __init__(self, region: str, argv: list[str], returncode: int, stderr: str) -> None:
        self.region = region
        self.argv = tuple(argv)
        self.returncode = returncode
        lines = stderr.strip().splitlines()
        # A crashing compiler ends with a stack dump; its diagnostics ("error: ...") say more.
        errors = [line for line in lines if "error:" in line][:5]
        self.stderr_tail = "\n".join(errors or lines[-15:])
        repro = " ".join(_shell_quote(a) for a in argv)
        super().__init__(
            f"iree-compile failed for region {region!r} (exit {returncode}):\n{self.stderr_tail}",
            hint=f"reproduce with: {repro}",
        )


def _shell_quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
