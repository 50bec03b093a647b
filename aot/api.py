"""The Python API: what the CLI does, callable from a program.

``aot.build("zoo:minilm", "artifacts/minilm")`` works as ``aot build zoo:minilm`` does: a zoo
model is fetched (pinned, sha256-checked) and its recipe (static shapes, baked inputs) applied,
with what the caller set winning over the recipe. The pipeline itself only ever sees a file.
"""

from __future__ import annotations

from pathlib import Path

from aot.options import BuildOptions
from aot import pipeline
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
