"""The Python API: what the CLI does, callable from a program.

``aot.build("zoo:minilm", "artifacts/minilm")`` works as ``aot build zoo:minilm`` does: a zoo
model is fetched (pinned, sha256-checked) and its recipe (static shapes, baked inputs) applied,
with what the caller set winning over the recipe. The pipeline itself only ever sees a file.
"""

from __future__ import annotations

from pathlib import Path


from aot import pipeline
from aot.errors import AotError
from aot.options import BuildOptions
from aot.pipeline import BuildResult, Planned, Progress

ZOO_PREFIX = "zoo:"


def resolve(model: str | Path, options: BuildOptions = BuildOptions()) -> tuple[Path, BuildOptions]:
    """The model file for ``model`` (a path or ``zoo:NAME``) and the options to build it with."""
    spec = str(model)
    if not spec.startswith(ZOO_PREFIX):
        return Path(model), options
    from aot.tools import zoo

    entry = zoo.by_name(spec[len(ZOO_PREFIX):])
    return zoo.fetch(entry), options.with_recipe(entry.input_shapes, entry.constants, entry.name)


def plan(model: str | Path, options: BuildOptions = BuildOptions(), *, suggest: bool = True) -> Planned:
    """Load and partition without compiling (`aot plan`)."""
    path, options = resolve(model, options)
    return pipeline.plan_model(path, options, suggest=suggest)


def build(model: str | Path, out_dir: str | Path, options: BuildOptions = BuildOptions(),
          progress: Progress = lambda s: None) -> BuildResult:
    """Build ``model`` into ``out_dir/bundle`` (`aot build`)."""
    path, options = resolve(model, options)
    return pipeline.build(path, Path(out_dir), options, progress)


def tune(build_dir: str | Path, *, repeats: int = BuildOptions.tune_repeats, cluster: str | None = None,
         progress: Progress = lambda s: None) -> BuildResult:
    """Tune the bundle in ``build_dir`` (`aot tune`): the same model, plan, shapes and targets,
    built again with ``tune=True``. Unchanged default modules come from the compile cache."""
    from aot.partition import Plan, Region
    from aot.partition.support import ACCEL, HOST
    from aot.runtime import manifest as mf
    from aot.runtime.target import Target

    build_dir = Path(build_dir)
    bundle = mf.bundle_dir(build_dir)
    if bundle == build_dir:
        raise AotError(f"{str(build_dir)!r} is a bundle; `aot tune` needs the build directory that holds it",
                       hint="pass the directory given to `aot build -o` (it keeps the compile cache)")
    m = mf.read(bundle)
    source = Path(m.model.source)
    if not source.is_file():
        raise AotError(f"the bundle's source model {str(source)!r} is gone", hint="rebuild with `aot build --tune`")
    plan = Plan(tuple(Region(r.name, HOST if r.target.is_host else ACCEL, r.nodes) for r in m.regions),
                m.schedule, m.host_reasons)
    plan_file = build_dir / "build" / "tune-plan.json"
    plan_file.parent.mkdir(parents=True, exist_ok=True)
    plan.save(plan_file)
    options = BuildOptions(
        accel=next((r.target for r in m.regions if not r.target.is_host), None),
        host=next((r.target for r in m.regions if r.target.is_host), Target.host()),
        name=m.model.name, input_shapes=tuple((t.name, t.shape) for t in m.inputs),
        constant_inputs=tuple((c.name, mf.thaw(c.value)) for c in m.constant_inputs),
        plan_file=plan_file, tune=True, tune_repeats=repeats, cluster=cluster)
    return pipeline.build(source, build_dir, options, progress)
