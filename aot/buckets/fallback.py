"""`--fallback dynamic`: the whole model compiled for the host with its symbolic dimensions left
dynamic, for calls past the largest bucket along a dimension that cannot run in chunks.

    raw ONNX -> IREE importer (dims stay ``?``) -> llvm-cpu module -> check vs onnxruntime -> staged

The module is imported from the model as given, not from the partitioner's folded graph (folding
and shape inference need static shapes). It reads the parameters the buckets' ``weights.irpa``
holds byte for byte from there; the few that folding changed go to an archive of its own. The
build runs it at one size past every non-batch ladder and refuses it when it differs from
onnxruntime.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import onnx

from aot.bundle.write import link_or_copy
from aot.checks import reference
from aot.checks.compare import compare_outputs
from aot.errors import ModelError
from aot.lower.compile import CompileJob, compile_all
from aot.lower.importer import PARAMS_SCOPE, import_onnx
from aot.options import BuildOptions
from aot.runtime import shapes as sh
from aot.runtime.manifest import IndexStatus, Manifest, RegionEntry, Weights, file_sha256
from aot.runtime.session import Session
from aot.runtime.shapes import Dim, Fallback
from aot.workspace import Workspace

REGION = "dynamic"
MANIFEST = "buckets/dynamic.json"
SCOPE = "dynamic"                 # the parameters the buckets' archive does not hold
WEIGHTS = "weights/dynamic.irpa"


class FallbackError(ModelError):
    """The dynamic fallback module cannot be built, or computes something else than onnxruntime."""


def build(model: Path, first: Manifest, dims: tuple[Dim, ...], options: BuildOptions, ws: Workspace,
          staging: Path, progress: Callable[[str], None]) -> Fallback:
    """Compile, stage and check the fallback module; its manifest goes to ``staging/MANIFEST``."""
    if options.constant_inputs:
        raise FallbackError("--fallback dynamic imports the model as given and cannot bake --const-input values in",
                            hint="drop --const-input, or build without --fallback dynamic")
    if any(op.status == IndexStatus.GUARDED for op in first.index_ops):
        raise FallbackError("the model computes indices inside the graph, which the bucket builds guard; the "
                            "dynamic fallback module would run them unguarded",
                            hint="build without --fallback dynamic; calls past the largest bucket get a clear error")
    folder = ws.build / REGION
    folder.mkdir(parents=True, exist_ok=True)
    # The importer types every value from the model's value_info, as iree-import-onnx does after
    # ONNX shape inference; symbolic dimensions stay symbolic.
    proto = onnx.shape_inference.infer_shapes(onnx.load(str(model)), data_prop=True)
    imported = import_onnx(proto, model.name, model.parent, folder / "weights.irpa")
    shared = None if first.weights is None else staging / first.weights.path
    text, own = _share_weights(imported.mlir, imported.params_path, shared)
    archives = _archives(first, own, staging)
    mlir = folder / f"{REGION}.mlir"
    mlir.write_text(text)
    (compiled,) = compile_all([CompileJob(REGION, mlir, options.host)], ws.cache,
                              accel_timeout=options.accel_compile_timeout, fallback=None)
    module = f"modules/{REGION}/{REGION}.vmfb"
    (staging / module).parent.mkdir(parents=True, exist_ok=True)
    link_or_copy(compiled.vmfb, staging / module, link=ws.shared_cache is None)
    region = RegionEntry(name=REGION, target=compiled.target, module=module, function=imported.func_name,
                         inputs=tuple(s.name for s in first.inputs), outputs=tuple(o.name for o in first.outputs),
                         sha256=compiled.sha256)
    manifest = dataclasses.replace(
        first, regions=(region,), schedule=(REGION,), weights=next(iter(archives), None), extra_weights=archives[1:],
        boundary_tensors=(), memory=(), overlap=(), shapes=None,
        index_ops=tuple(op for op in first.index_ops if op.status == IndexStatus.CHECKED))
    checked, diff = _check(model, staging, manifest, dims)
    progress(f"fallback dynamic host module: {', '.join(f'{s}={n}' for s, n in checked)} matches onnxruntime "
             f"(max abs diff {diff:.3g})")
    path = manifest.write(staging, MANIFEST)
    return Fallback(MANIFEST, file_sha256(path), checked, diff)


def _share_weights(mlir: str, params: Path, shared: Path | None) -> tuple[str, dict[str, bytes]]:
    """The module's parameters that the buckets' archive holds byte for byte are read from it;
    the others move to scope ``SCOPE``: the MLIR is rewritten for them and their bytes returned.
    (Folding renames or reshapes few initializers: MiniLM shares 139 of its 140.)"""
    import iree.runtime as rt

    def entries(path: Path) -> dict[str, bytes]:
        index = rt.ParameterIndex()
        index.load(str(path))
        return {k: (e.splat_pattern * (e.length // len(e.splat_pattern)) if e.is_splat else bytes(e.file_view))
                for k, e in index.items()}

    mine, theirs = entries(params), entries(shared) if shared is not None else {}
    moved = {}
    for key, data in mine.items():
        if theirs.get(key) == data:
            continue
        token = f'#stream.parameter.named<"{PARAMS_SCOPE}"::"{key}">'
        if token not in mlir:   # a name the MLIR printer escaped: keep every parameter in the own archive
            return mlir.replace(f'#stream.parameter.named<"{PARAMS_SCOPE}"::', f'#stream.parameter.named<"{SCOPE}"::'), mine
        mlir = mlir.replace(token, f'#stream.parameter.named<"{SCOPE}"::"{key}">')
        moved[key] = data
    return mlir, moved


def _archives(first: Manifest, own: dict[str, bytes], staging: Path) -> tuple[Weights, ...]:
    """The buckets' archive, then the fallback's own when it has parameters of its own."""
    archives = () if first.weights is None else (first.weights,)
    if not own:
        return archives
    import iree.runtime as rt

    index = rt.ParameterIndex()
    for key, data in own.items():
        index.add_buffer(key, data)
    (staging / WEIGHTS).parent.mkdir(parents=True, exist_ok=True)
    index.create_archive_file(str(staging / WEIGHTS))
    return (*archives, Weights(WEIGHTS, SCOPE, file_sha256(staging / WEIGHTS), (staging / WEIGHTS).stat().st_size))


def _check(model: Path, staging: Path, manifest: Manifest, dims: tuple[Dim, ...]) -> tuple[tuple[tuple[str, int], ...], float]:
    """Run the module one past every non-batch ladder (batch dimensions at their smallest rung)."""
    sizes = {d.symbol: d.sizes[0] if d.batch else d.largest + 1 for d in dims}
    inputs = reference.random_inputs(sh.resized(manifest.inputs, dims, sizes), seed=0)
    names = [o.name for o in manifest.outputs]
    with Session(staging, manifest, check_memory=False) as session:
        got = session.run_checked(inputs)
    expected = reference.outputs(model, inputs, names, manifest)
    c = compare_outputs(names, got, expected)
    if not c.ok:
        raise FallbackError(f"the dynamic fallback module differs from onnxruntime at "
                            f"{', '.join(f'{s}={n}' for s, n in sizes.items())}: {c.reason}",
                            hint="build without --fallback dynamic; calls past the largest bucket get a clear error")
    return tuple(sizes.items()), c.max_abs_diff
