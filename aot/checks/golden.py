"""Golden check: run a bundle through its generated stub and compare with its reference:
onnxruntime on the ONNX model, or the PyTorch module run eagerly (rebuilt from its factory)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aot.checks import reference
from aot.runtime import manifest as mf
from aot.errors import BundleError


@dataclass(frozen=True, slots=True)
class OutputDiff:
    name: str
    max_abs: float
    max_rel: float


@dataclass(frozen=True, slots=True)
class CheckResult:
    bundle: Path
    regions: tuple[str, ...]          # "r0:vulkan-spirv", ...
    diffs: tuple[OutputDiff, ...]
    reference: str = "onnxruntime"

    @property
    def max_abs_error(self) -> float:
        return max((d.max_abs for d in self.diffs), default=0.0)

    def summary(self) -> str:
        lines = [f"bundle {self.bundle} ({', '.join(self.regions)})"]
        lines += [f"  output {d.name!r}: max abs diff {d.max_abs:.3g}, max rel diff {d.max_rel:.3g}" for d in self.diffs]
        lines.append(f"max abs error vs {self.reference}: {self.max_abs_error:.3g}")
        return "\n".join(lines)



def load_stub_class(bundle: Path) -> type:
    """Import the bundle's generated Python stub and return its model class."""
    stubs = sorted((bundle / "stubs" / "python").glob("*.py"))
    stubs = [s for s in stubs if s.name != "__init__.py"]
    if len(stubs) != 1:
        raise BundleError(f"bundle {str(bundle)!r} should hold exactly one Python stub, found {len(stubs)}")
    name = f"_aot_stub_{abs(hash(str(stubs[0])))}"
    spec = importlib.util.spec_from_file_location(name, stubs[0])
    if spec is None or spec.loader is None:
        raise BundleError(f"cannot import the Python stub {str(stubs[0])!r}", hint="rebuild the bundle")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    classes = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name]
    return classes[0]


def compare(actual: tuple[np.ndarray, ...], expected: list[np.ndarray], names: list[str]) -> tuple[OutputDiff, ...]:
    diffs = []
    for name, a, e in zip(names, actual, expected):
        if a.shape != e.shape:
            raise BundleError(f"output {name!r}: shape {list(a.shape)} but the reference gives {list(e.shape)}")
        d = np.abs(a.astype(np.float64) - e.astype(np.float64))
        rel = d / np.maximum(np.abs(e.astype(np.float64)), 1e-12)
        diffs.append(OutputDiff(name, float(d.max(initial=0.0)), float(rel.max(initial=0.0))))
    return tuple(diffs)




def check_bundle(bundle: Path, model: Path | str | None = None, seed: int = 0,
                 inputs: dict[str, np.ndarray] | None = None) -> CheckResult:
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
    return CheckResult(bundle, regions, compare(actual, expected, names), manifest.model.reference)


def _eager(factory: str, inputs: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
    from aot.checks import eager
    from aot.frontend.torch import factory as factories

    if factory.startswith("<"):
        raise BundleError(f"the bundle was built from a module object ({factory}), which `aot check` cannot rebuild",
                          hint="pass the factory that builds it: aot check BUNDLE --model pkg.module:factory")
    return eager.outputs(factories.load(factory), inputs, names)
