"""Golden check: run a bundle through its generated stub and compare with its reference:
onnxruntime on the ONNX model, or the PyTorch module run eagerly (rebuilt from its factory)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aot.checks import reference
from aot.checks.compare import Comparison, compare as compare_arrays
from aot.runtime import manifest as mf
from aot.errors import BundleError


ATOL = 1e-4   # `aot check`'s default: an absolute bound on every element ...
# ... plus this share of the reference's magnitude (numpy.allclose's default): outputs in large
# units (a detector's boxes in pixels, ~300) differ by float32 rounding beyond any useful atol.
RTOL = 1e-5


@dataclass(frozen=True, slots=True)
class OutputDiff:
    name: str
    comparison: Comparison

    @property
    def max_abs(self) -> float:
        return self.comparison.max_abs_diff


@dataclass(frozen=True, slots=True)
class CheckResult:
    bundle: Path
    regions: tuple[str, ...]          # "r0:vulkan-spirv", ...
    diffs: tuple[OutputDiff, ...]
    reference: str = "onnxruntime"
    atol: float = ATOL
    rtol: float = RTOL

    @property
    def ok(self) -> bool:
        """Every output within ``atol + rtol * |reference|``, NaN and Inf where the reference has them."""
        return all(d.comparison.ok for d in self.diffs)

    @property
    def max_abs_error(self) -> float:
        """Over every output; inf when an output has NaN/Inf where the reference does not."""
        return max((d.max_abs for d in self.diffs), default=0.0)

    def summary(self) -> str:
        lines = [f"bundle {self.bundle} ({', '.join(self.regions)})"]
        lines += [f"  output {d.name!r}: {d.comparison.describe()}" for d in self.diffs]
        lines.append(f"max abs error vs {self.reference}: {self.max_abs_error:.3g}")
        return "\n".join(lines)

    def failures(self) -> list[str]:
        return [f"output {d.name!r}: {d.comparison.reason}" for d in self.diffs if not d.comparison.ok]


def load_stub_class(bundle: Path) -> type:
    """Import the bundle's generated Python stub and return its model class."""
    stubs = sorted((bundle / "stubs" / "python").glob("*.py"))
    stubs = [s for s in stubs if s.name != "__init__.py"]
    if len(stubs) != 1:
        raise BundleError(f"bundle {str(bundle)!r} should hold exactly one Python stub in stubs/python/, found "
                          f"{len(stubs)}", hint="copy the whole bundle folder, or rebuild it with `aot build`")
    name = f"_aot_stub_{abs(hash(str(stubs[0])))}"
    spec = importlib.util.spec_from_file_location(name, stubs[0])
    if spec is None or spec.loader is None:
        raise BundleError(f"cannot import the Python stub {str(stubs[0])!r}", hint="rebuild the bundle")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    classes = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name]
    return classes[0]


def compare(actual: tuple[np.ndarray, ...], expected: list[np.ndarray], names: list[str],
            atol: float = ATOL, rtol: float = RTOL) -> tuple[OutputDiff, ...]:
    if len(actual) != len(expected):
        raise BundleError(f"the bundle returned {len(actual)} outputs where the reference gives {len(expected)}",
                          hint="rebuild the bundle")
    return tuple(OutputDiff(name, compare_arrays(a, e, atol=atol, rtol=rtol)) for name, a, e in zip(names, actual, expected))


def check_bundle(bundle: Path, model: Path | str | None = None, seed: int = 0,
                 inputs: dict[str, np.ndarray] | None = None, atol: float = ATOL, rtol: float = RTOL) -> CheckResult:
    """Run the bundle (its directory or the build directory) through its generated stub and
    compare every output with the reference on the same inputs. ``model``: the ONNX file, or the
    torch factory (``pkg.module:factory``), when not the one the manifest names."""
    bundle = mf.bundle_dir(bundle)
    manifest = mf.read(bundle)
    source = str(model or manifest.model.source)
    inputs = inputs if inputs is not None else reference.random_inputs(manifest.inputs, seed)
    names = [o.name for o in manifest.outputs]
    stub = load_stub_class(bundle)(bundle)
    try:
        actual = stub(*[inputs[s.name] for s in manifest.inputs])
    finally:
        stub.close()
    if manifest.model.frontend == "torch":
        expected = _eager(source, inputs, names)
    else:
        expected = reference.outputs(Path(source), inputs, names, manifest)
    regions = tuple(f"{r.name}:{r.target.backend}" for r in manifest.regions)
    return CheckResult(bundle, regions, compare(actual, expected, names, atol, rtol), manifest.model.reference,
                       atol, rtol)


def _eager(factory: str, inputs: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
    from aot.checks import eager
    from aot.frontend.torch import factory as factories

    if factory.startswith("<"):
        raise BundleError(f"the bundle was built from a module object ({factory}), which `aot check` cannot rebuild",
                          hint="pass the factory that builds it: aot check BUNDLE --model pkg.module:factory")
    return eager.outputs(factories.load(factory), inputs, names)
