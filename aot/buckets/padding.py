"""Does padding up to a bucket change the answer? Measured, per bucket and dimension.

For each dimension a bucket pads, the most padded input it will serve (one more than the next
smaller rung) runs padded in the bucket's bundle; the result, cropped, is compared with
onnxruntime on the unpadded input at the verification tolerance. An axis where padding leaks into
the valid part (attention without a mask, normalisation or pooling over that axis) is refused with
the measured difference, unless the user accepted that much (``--accept-padding``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from aot import runtime
from aot.bundle.write import Staged
from aot.checks import reference, verify
from aot.checks.compare import compare_outputs
from aot.errors import ModelError
from aot.runtime import shapes as sh
from aot.runtime.shapes import Dim, PaddingCheck


class PaddingError(ModelError):
    """Padding along a dimension changes the model's results on the valid part."""


def check(model: Path, bundle: Staged, dims: tuple[Dim, ...], sizes: dict[str, int],
          pad_values: tuple[tuple[str, float], ...], accepted: dict[str, float],
          progress: Callable[[str], None]) -> tuple[PaddingCheck, ...]:
    shapes = sh.Shapes(dims, (), pad_values)
    manifest = bundle.manifest
    names = tuple(o.name for o in manifest.outputs)
    padded = [(d, valid) for d in dims if (valid := _most_padded(d, sizes[d.symbol])) != sizes[d.symbol]]
    if not padded:
        return ()   # every rung here serves its own size only: nothing to run, no device needed
    why = verify.cannot_verify_here([r for r in manifest.regions if not r.target.is_host])
    if why is not None:
        # As verification does: a module built for a device that is not here cannot be run here
        # (a cross build for a GPU); the padded rungs are not measured, and the build says so.
        progress(f"padding  not checked ({', '.join(d.symbol for d, _ in padded)}): {why}; compile the sizes "
                 f"you need exactly (--input-shape) if padding may change the results")
        return ()
    checks = []
    with runtime.Session(bundle.path, manifest) as session:   # the staged candidate, before publishing
        for d, valid in padded:
            unpadded = {**sizes, d.symbol: valid}
            inputs = reference.random_inputs(sh.resized(manifest.inputs, dims, unpadded), seed=0)
            expected = reference.outputs(model, inputs, list(names), manifest)
            got = sh.crop(shapes, names, session.run(sh.pad(shapes, inputs, sizes)), unpadded)
            c = compare_outputs(names, got, expected)
            diff, ok = c.max_abs_diff, c.ok
            tolerance = accepted.get(d.symbol)
            progress(f"padding  {d.symbol}: {valid} padded to {sizes[d.symbol]}, max abs diff {diff:.3g} vs "
                     f"onnxruntime unpadded ({'exact within tolerance' if ok else 'CHANGES the result'})")
            if not ok and (tolerance is None or diff > tolerance):
                raise PaddingError(
                    f"padding {d.symbol!r} from {valid} to {sizes[d.symbol]} changes the model's results on the "
                    f"valid part, against onnxruntime on the unpadded input: {c.reason}"
                    f"{'' if tolerance is None else f', more than the accepted {tolerance}'}",
                    hint=f"this axis mixes positions (attention, normalisation or pooling over it): compile the "
                         f"sizes you need exactly (--input-shape), or accept the difference with "
                         f"--accept-padding {d.symbol}={diff:.2g}")
            checks.append(PaddingCheck(d.symbol, valid, sizes[d.symbol], diff, None if ok else tolerance))
    return tuple(checks)


def _most_padded(d: Dim, size: int) -> int:
    """The smallest size the rung ``size`` serves along ``d``: one more than the next smaller rung."""
    lower = [n for n in d.sizes if n < size]
    return (lower[-1] if lower else 0) + 1
