"""A cost database of synthetic timings over real candidate plans, no IREE: what the learning
tests train and evaluate on. Times follow a fixed rule of the plans' work (host slow per FLOP,
accelerator fast per FLOP but with a large per-region cost, a cost per transfer), so a model
that learns anything ranks them."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import onnx
import pytest

from aot import api
from aot.learn import collect, db as costdb
from aot.learn import generate as gen
from aot.learn.key import device_fingerprint, key_of
from aot.options import BuildOptions
from aot.partition.cost import node_flops
from aot.partition.plan import GateMode
from aot.pipeline import plan_model
from aot.runtime.target import Target

VULKAN = BuildOptions(accel=Target.parse("vulkan"))


class FakeSession:
    """Stands in for a loaded bundle of ``plan``: runs instantly, profiles every region at 10 us
    per node (collection's tests, where the build is faked too)."""

    def __init__(self, plan) -> None:
        self.plan = plan

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def run(self, inputs):
        return ()

    def profile(self, inputs, repeats):
        return 1.0, {r.name: 10.0 * len(r.nodes) for r in self.plan.regions}


def region_us(view, nodes, device: str) -> float:
    flops = sum(node_flops(view.node(n), view) for n in nodes)
    return 5.0 + flops / 200.0 if device == "host" else 300.0 + flops / 20000.0


def models(folder: Path, real: int, generated: int) -> list[Path]:
    """``generated`` generator graphs and ``real`` more whose producer is not the generator."""
    paths = gen.write(folder / "gen", real + generated, seed=5)
    for p in paths[:real]:
        m = onnx.load(str(p))
        m.producer_name = "test"
        target = folder / f"real-{p.name}"
        onnx.save(m, str(target))
        p.unlink()
    return [folder / f"real-{p.name}" for p in paths[:real]] + paths[real:]


def fill(database: Path, paths: list[Path], perturbations: int = 8) -> int:
    """One row per distinct candidate plan of each model; the rows added."""
    added = 0
    fingerprint = device_fingerprint(VULKAN)
    with costdb.CostDatabase(database) as db:
        for path in paths:
            model, options = api.resolve(path, VULKAN)
            planned = plan_model(model, dataclasses.replace(options, gate=GateMode.OFF), suggest=False)
            seen = set()
            for cand in collect.candidates(planned, options, perturbations, seed=1):
                key = key_of(planned.view, cand.plan, fingerprint)
                if key.key in seen:
                    continue
                seen.add(key.key)
                times = {r.name: region_us(planned.view, r.nodes, r.device.value) for r in cand.plan.regions}
                hops = len(cand.plan.regions) - 1
                total = sum(times.values()) + 40.0 * hops
                regions = tuple(costdb.RegionTime(name, cand.plan.region(name).device.value,
                                                  hashlib.sha256(name.encode()).hexdigest()[:8], times[name])
                                for name in cand.plan.schedule)
                db.add(costdb.Measurement(key.key, key.graph, str(path), "d", json.dumps(cand.plan.to_json()),
                                          fingerprint, "{}", total, regions))
                added += 1
    return added


def graph(edges: list[tuple[str, str]], shape: tuple[int, ...] = (1, 8)):
    """A GraphView of Conv nodes from edges ("A", "B"), as tests/conftest.py's ``graph`` (whose
    module name this folder's conftest shadows)."""
    from aot.frontend.graph import GraphView, Node, Value

    names = list(dict.fromkeys([n for e in edges for n in e]))
    nodes = [Node(n, "Conv", tuple(f"{a}.out" for a, b in edges if b == n), (f"{n}.out",)) for n in names]
    sinks = [f"{n}.out" for n in names if not any(a == n for a, _ in edges)]
    return GraphView.build(nodes, [], sinks, {f"{n}.out": Value(f"{n}.out", "float32", shape) for n in names})


# Fixtures (imported by the test modules: a conftest.py here would shadow tests/conftest.py's name).
@pytest.fixture(scope="session")
def synthetic_db(tmp_path_factory):
    """Two "real" models and one generated graph, every distinct candidate plan timed by a rule."""
    folder = tmp_path_factory.mktemp("synthetic")
    database = folder / "costs.sqlite"
    paths = models(folder, real=2, generated=1)
    fill(database, paths, perturbations=4)
    return database, paths


@pytest.fixture(scope="session")
def trained_model(synthetic_db, tmp_path_factory):
    pytest.importorskip("sklearn", reason="the [learn] extra (scikit-learn) is not installed")
    from aot.learn.dataset import load_dataset
    from aot.learn.train import fit

    data = load_dataset(synthetic_db[0], VULKAN)
    return fit(data, estimators=60).save(tmp_path_factory.mktemp("model") / "model.json")
