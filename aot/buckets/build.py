"""Build a model with symbolic dimensions as one bundle of shape buckets:

    symbols -> ladders and output axes -> one static build per bucket -> padding check -> merge

Each bucket is an ordinary static build (the whole pipeline: plan, compile, verify, tune) in its
own build folder, stopped short of publishing: its candidate stays staged. The merge keeps the
first bucket's candidate as the bundle's own manifest, record and modules, adds every other
bucket's modules under ``modules/b<i>/`` with its manifest under ``buckets/b<i>.json`` (its record
beside it), and keeps one ``weights.irpa`` for all of them when their weights are the same bytes
(a bucket whose folded constants differ keeps its own archive). The merged bundle is the one
thing published, in one rename, as every build is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from aot import pipeline
from aot.buckets import fallback, padding
from aot.buckets.dims import plan_dims, with_sizes
from aot.bundle.write import Bundle, Staged, link_or_copy, publish_bundle
from aot.frontend.symbols import symbolic_inputs
from aot.options import BuildOptions, FallbackMode
from aot.pipeline import BuildResult, Progress, StagedBuild
from aot.runtime.manifest import Manifest, file_sha256
from aot.runtime.shapes import Bucket, Dim, PaddingCheck, Shapes, all_sizes
from aot.workspace import Workspace


@dataclass(frozen=True, slots=True)
class BuiltBucket:
    sizes: tuple[tuple[str, int], ...]
    result: StagedBuild
    checks: tuple[PaddingCheck, ...]

    @property
    def staged(self) -> Staged:
        return self.result.staged


def build(model: Path, out_dir: Path, options: BuildOptions = BuildOptions(),
          progress: Progress = lambda s: None) -> BuildResult:
    """``pipeline.build`` for a model whose inputs have symbolic dimensions; a static model (or
    one pinned by ``--input-shape``) is built as it always was."""
    inputs = symbolic_inputs(model, set(dict(options.input_shapes)), set(dict(options.constant_inputs)))
    if not inputs.symbols:
        return pipeline.build(model, out_dir, options, progress)
    dims = plan_dims(model, inputs, options)
    combos = all_sizes(dims)
    progress(f"buckets  {len(combos)}: " + "; ".join(", ".join(f"{s}={n}" for s, n in c) for c in combos))
    ws = Workspace.at(Path(out_dir))
    ws.prepare()
    built: list[BuiltBucket] = []
    spaces = [Workspace(ws.build / "buckets" / f"b{i}", ws.shared_cache) for i in range(len(combos))]
    try:
        for i, (sizes, bucket_ws) in enumerate(zip(combos, spaces)):
            label = ", ".join(f"{s}={n}" for s, n in sizes)
            progress(f"bucket   {i + 1}/{len(combos)}: {label}")
            result = pipeline.stage_model(model, bucket_ws, with_sizes(options, inputs, dict(sizes)),
                                          lambda s: progress(f"  [{label}] {s}"))
            checks = padding.check(model, result.staged, dims, dict(sizes), options.pad_values,
                                   dict(options.padding_tolerances), progress)
            built.append(BuiltBucket(sizes, result, checks))
        bundle = _merge(model, built, dims, options, ws, progress)
    finally:
        for space in (ws, *spaces):
            space.discard_staging()
    progress(f"publish  {bundle.path} ({len(built)} bucket(s))")
    return BuildResult(bundle, built[0].staged.plan, tuple(t for b in built for t in b.result.timings))


def _merge(model: Path, built: list[BuiltBucket], dims: tuple[Dim, ...], options: BuildOptions, ws: Workspace,
           progress: Progress) -> Bundle:
    staging = ws.staging("buckets")
    first = built[0].staged
    shared = first.manifest.weights
    buckets = [Bucket(built[0].sizes, "manifest.json", None, built[0].checks)]
    _copy_bucket(first.path, first.manifest, staging, "modules")
    if shared is not None:
        link_or_copy(first.path / shared.path, staging / shared.path)
    (staging / "buckets").mkdir()
    for i, b in enumerate(built[1:], 1):
        m = _copy_bucket(b.staged.path, b.staged.manifest, staging, f"modules/b{i}")
        if m.weights is not None and (shared is None or m.weights.sha256 != shared.sha256):
            own = f"weights/b{i}.irpa"
            (staging / "weights").mkdir(exist_ok=True)
            link_or_copy(b.staged.path / m.weights.path, staging / own)
            m = dataclasses.replace(m, weights=dataclasses.replace(m.weights, path=own))
        path = m.write(staging, f"buckets/b{i}.json")
        b.staged.record.write(staging, f"buckets/b{i}.record.json")   # how that bucket was built
        buckets.append(Bucket(b.sizes, f"buckets/b{i}.json", file_sha256(path), b.checks))
    dynamic = None
    if options.fallback is FallbackMode.DYNAMIC and any(not d.batch for d in dims):
        dynamic = fallback.build(model, first.manifest, dims, options, ws, staging, progress)
    elif options.fallback is FallbackMode.DYNAMIC:
        progress("fallback none needed: every symbolic dimension is a batch, which runs in chunks past its ladder")
    top = dataclasses.replace(first.manifest, shapes=Shapes(dims, tuple(buckets), options.pad_values, dynamic))
    return publish_bundle(Staged(staging, top, first.record, first.plan), ws.bundle)


def _copy_bucket(bundle: Path, manifest: Manifest, staging: Path, folder: str) -> Manifest:
    """One bucket's region modules into ``staging/folder``; its manifest, pointing at them."""
    (staging / folder).mkdir(parents=True)
    regions = []
    for r in manifest.regions:
        module = f"{folder}/{Path(r.module).name}"
        link_or_copy(bundle / r.module, staging / module)
        regions.append(dataclasses.replace(r, module=module))
    return dataclasses.replace(manifest, regions=tuple(regions))
