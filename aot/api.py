"""The Python API: what the CLI does, callable from a program.

``aot.build("zoo:minilm", "artifacts/minilm")`` works as ``aot build zoo:minilm`` does: a zoo
model (or a ``corpus:NAME`` one, aot/models/corpus.py) is fetched (pinned, sha256-checked) and
its recipe (static shapes, baked inputs) applied, with what the caller set winning over the
recipe. ``pkg.module:factory`` names a PyTorch module (built with ``options.example_inputs``);
``aot.build_torch`` takes the module itself. Either way it is exported with iree-turbine here, and
the pipeline sees the exported source.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from aot import memory_limits, pipeline
from aot.errors import AotError
from aot.options import BuildOptions
from aot.pipeline import BuildResult, Planned, Progress
from aot.runtime.target import Target

if TYPE_CHECKING:
    from aot.frontend.torch.export import TorchSource

ZOO_PREFIX = "zoo:"
CORPUS_PREFIX = "corpus:"   # the wider corpus (aot/models/corpus.py), its validation set included


def resolve(model: str | Path, options: BuildOptions = BuildOptions()) -> tuple[Path, BuildOptions]:
    """The model file for ``model`` (a path, ``zoo:NAME`` or ``corpus:NAME``) and the options to
    build it with."""
    spec = str(model)
    if spec.startswith(ZOO_PREFIX):
        from aot.models import corpus, zoo

        name = spec[len(ZOO_PREFIX):]
        if name not in {m.name for m in zoo.MODELS} and name in {m.name for m in corpus.CORPUS}:
            raise zoo.ZooError(f"unknown zoo model {name!r} (it is a corpus model)", hint=f"use {CORPUS_PREFIX}{name}")
        entry = zoo.by_name(name)
        path = zoo.fetch(entry)
    elif spec.startswith(CORPUS_PREFIX):
        from aot.models import corpus

        entry = corpus.by_name(spec[len(CORPUS_PREFIX):])
        path = corpus.fetch(entry)
    else:
        return Path(model), options
    return path, options.with_recipe(entry.input_shapes, entry.constants, entry.name)


def plan(model: str | Path, options: BuildOptions = BuildOptions(), *, suggest: bool = True) -> Planned:
    """Load and partition without compiling (`aot plan`)."""
    if is_torch(model):
        memory_limits.refuse_torch(options)   # before the export, which takes a while
        return pipeline.plan_torch(export_factory(str(model), options), options, suggest=suggest)
    from aot.buckets.dims import smallest_bucket

    path, options = resolve(model, options)
    return pipeline.plan_model(path, smallest_bucket(path, options), suggest=suggest)


def build(model: str | Path, out_dir: str | Path, options: BuildOptions = BuildOptions(),
          progress: Progress = lambda s: None) -> BuildResult:
    """Build ``model`` into ``out_dir/bundle`` (`aot build`)."""
    if is_torch(model):
        memory_limits.refuse_torch(options)
        return pipeline.build_torch(export_factory(str(model), options, progress), Path(out_dir), options, progress)
    from aot import buckets

    path, options = resolve(model, options)
    return buckets.build(path, Path(out_dir), options, progress)


def build_torch(module: Any, example_args: Mapping[str, Any] | tuple, out_dir: str | Path,
                options: BuildOptions = BuildOptions(), progress: Progress = lambda s: None,
                **settings: Any) -> BuildResult:
    """Build a PyTorch ``nn.Module`` into ``out_dir/bundle``: ``example_args`` are its forward's
    tensors (a tuple, or a dict by argument name); ``settings`` override ``options`` fields
    (``accel="vulkan"`` or ``"none"`` as on the command line)."""
    from aot.frontend.torch.export import export

    if isinstance(settings.get("accel"), str):
        settings["accel"] = Target.accelerator(settings["accel"])
    options = dataclasses.replace(options, **settings)
    memory_limits.refuse_torch(options)
    if not isinstance(example_args, Mapping):
        example_args = dict(zip(_forward_arguments(module), example_args))
    source = _timed(lambda: export(module, example_args, path=_python_path(module),
                                   attention_as_matmuls=_vulkan(options)), progress)
    return pipeline.build_torch(source, Path(out_dir), options, progress)


def export_factory(spec: str, options: BuildOptions, progress: Progress = lambda s: None) -> "TorchSource":
    """Call the factory ``spec`` names and export its module for ``options.example_inputs``."""
    from aot.frontend.torch import factory
    from aot.frontend.torch.export import export

    if not options.example_inputs:
        raise AotError(f"{spec!r} is a PyTorch model: its input shapes are needed to export it",
                       hint="pass --example-input NAME=1x3x224x224[:DTYPE] per forward argument")
    module = factory.load(spec)
    return _timed(lambda: export(module, factory.example_tensors(options.example_inputs), path=spec,
                                 attention_as_matmuls=_vulkan(options)), progress)


def _vulkan(options: BuildOptions) -> bool:
    return options.accel is not None and options.accel.backend == "vulkan-spirv"


def is_torch(model: str | Path) -> bool:
    """Does ``model`` name a PyTorch factory (``pkg.module:factory``) rather than a file or zoo entry?"""
    from aot.frontend.torch import factory

    return isinstance(model, str) and factory.is_factory(model)


def _timed(run: Callable[[], TorchSource], progress: Progress) -> TorchSource:
    start = time.perf_counter()
    source = run()
    progress(f"export   {source.name}: {len(source.nodes)} ATen ops via iree-turbine "
             f"({time.perf_counter() - start:.1f}s)")
    return source


def _forward_arguments(module: Any) -> list[str]:
    import inspect

    return [p.name for p in inspect.signature(module.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _python_path(module: Any) -> str:
    """Where the module's class is defined, for the manifest (a factory is not known here)."""
    cls = type(module)
    return f"<{cls.__module__}.{cls.__qualname__} object>"


# The default read from an instance: on a slots dataclass `BuildOptions.tune_repeats` is the slot
# descriptor, not 20.
_TUNE_REPEATS: int = BuildOptions().tune_repeats


def tune(build_dir: str | Path, *, repeats: int = _TUNE_REPEATS, cluster: str | None = None,
         progress: Progress = lambda s: None) -> BuildResult:
    """Tune the bundle in ``build_dir`` (`aot tune`): built again from what the build stored, its
    resolved options and its plan (``record.json``, ``plan.json``), with ``tune=True``. Unchanged
    default modules come from the compile cache."""
    from aot import record as records
    from aot.record import PLAN
    from aot.runtime import codec
    from aot.runtime import manifest as mf

    build_dir = Path(build_dir)
    bundle = mf.bundle_dir(build_dir)
    if bundle == build_dir:
        raise AotError(f"{str(build_dir)!r} is a bundle; `aot tune` needs the build directory that holds it",
                       hint="pass the directory given to `aot build -o` (it keeps the compile cache)")
    m, rec = mf.read(bundle), records.read(bundle)
    if rec is None:
        raise AotError(f"{str(bundle)!r} has no build record (built by an older aot), so its options are unknown",
                       hint="build it again with `aot build --tune`")
    if m.shapes is not None:
        raise AotError(f"{str(bundle)!r} holds {len(m.shapes.buckets)} shape buckets; `aot tune` retunes a "
                       "static bundle", hint="build it again with `aot build --tune` (each bucket is tuned)")
    source: str | Path
    if m.model.frontend == "torch":
        source = m.model.source
        if source.startswith("<"):
            raise AotError(f"the bundle was built from a module object ({source}); `aot tune` needs its factory",
                           hint="build it with aot.build_torch(..., tune=True), or from pkg.module:factory")
    else:
        source = Path(m.model.source)
        if not source.is_file():
            raise AotError(f"the bundle's source model {str(source)!r} is gone",
                           hint="rebuild with `aot build --tune`")
    # The plan the bundle shipped, replayed as is: the bundle is replaced when the build publishes.
    plan_file = build_dir / "build" / "tune-plan.json"
    plan_file.parent.mkdir(parents=True, exist_ok=True)
    plan_file.write_bytes((bundle / PLAN).read_bytes())
    options = dataclasses.replace(BuildOptions.from_record(rec.options), plan_file=plan_file, tune=True,
                                  tune_repeats=repeats, cluster=cluster)
    return build(source, build_dir, options, progress)
