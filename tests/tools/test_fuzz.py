"""Structured fuzzing of the build: mutants are reproducible, each mutation kind does damage, and
a seeded run of 100 ends every mutant as a matching bundle or a typed error."""

from __future__ import annotations

import random

import onnx
import pytest

from aot.tools import fuzz, mutate


def test_a_mutant_is_a_function_of_seed_and_index():
    a = mutate.mutant(mutate.seeds()["mlp"], random.Random("7:3"))
    b = mutate.mutant(mutate.seeds()["mlp"], random.Random("7:3"))
    as_bytes = [m if isinstance(m, bytes) else m.SerializeToString() for m in (a[0], b[0])]
    assert as_bytes[0] == as_bytes[1] and a[1:] == b[1:]


@pytest.mark.parametrize("name", sorted(set(mutate.MUTATIONS) - {"external_data", "bytes"}))
def test_every_mutation_changes_the_model(name):
    seed = mutate.seeds()["tiny_cnn"]
    changed = 0
    for i in range(10):
        model = onnx.ModelProto()
        model.CopyFrom(seed)
        note = mutate.MUTATIONS[name](model, random.Random(i))
        changed += model.SerializeToString() != seed.SerializeToString()
        assert note
    assert changed >= 5


@pytest.mark.device  # builds with IREE in child processes, a fifth of them on lavapipe
@pytest.mark.slow    # 12 mutants in make test, 100 in make test-all; `make fuzz` runs 1,000
# make test's seed is one whose 12 mutants try 10 kinds of damage and build 3 of them
@pytest.mark.parametrize("count, seed", [(12, 2031), pytest.param(100, 2026, marks=pytest.mark.full)])
def test_a_seeded_run_of_mutants_has_no_crash_and_no_untyped_error(tmp_path, count, seed):
    summary = fuzz.run(count, seed=seed, out=tmp_path)
    print("\n" + fuzz.text(summary))
    assert summary["failures"] == [], fuzz.text(summary)
    outcomes = summary["outcomes"]
    assert sum(outcomes.values()) == count
    assert outcomes["typed error"] >= 0.3 * count and outcomes["built, matches onnxruntime"] >= 0.1 * count
    assert len(summary["mutations"]) >= 9            # every kind of damage was tried
    assert (tmp_path / "summary.json").is_file()
