"""A damaged, truncated or swapped weights archive is refused at load, naming the file and the
digests; verified digests are remembered only in the user's cache; `aot check --integrity`
reports every file. No compile: the archives are real IRPA files, the module is any bytes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from aot import cli
from aot.errors import BundleError
from aot.runtime import integrity
from aot.runtime import manifest as mf
from aot.runtime.session import load_archive
from conftest import small_manifest

OLD = time.time() - 3600   # file times outside the racy window (integrity.RACY_NS)


def _archive(path: Path, seed: int = 0) -> bytes:
    import iree.runtime as rt

    index = rt.ParameterIndex()
    for i in range(3):
        index.add_buffer(f"w{i}", np.random.default_rng(seed + i).standard_normal(4096).astype(np.float32).tobytes())
    index.create_archive_file(str(path))
    return path.read_bytes()


@pytest.fixture
def bundle(tmp_path, monkeypatch) -> Path:
    """A bundle whose manifest names a module and a real 48 KiB weights archive, both matching."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("AOT_DIGEST_CACHE", raising=False)
    monkeypatch.setattr(integrity, "_memo", {})
    b = tmp_path / "bundle"
    (b / "modules").mkdir(parents=True)
    (b / "modules" / "r0.vmfb").write_bytes(b"module")
    data = _archive(b / "weights.irpa")
    m = small_manifest(hashlib.sha256(b"module").hexdigest())
    dataclasses.replace(m, weights=mf.Weights("weights.irpa", "model", hashlib.sha256(data).hexdigest(),
                                              len(data))).write(b)
    for f in (b / "modules" / "r0.vmfb", b / "weights.irpa"):
        os.utime(f, (OLD, OLD))
    return b


def _flip(path: Path, offset: int, n: int = 4096) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        block = f.read(n)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in block))


def test_flipped_weights_are_refused_naming_the_file_and_both_digests(bundle):
    mf.read(bundle)
    expected = mf.read(bundle).weights.sha256
    _flip(bundle / "weights.irpa", 8192)
    found = integrity.file_sha256(bundle / "weights.irpa")
    with pytest.raises(BundleError) as info:
        mf.read(bundle)
    message = info.value.message
    assert "weights archive 'weights.irpa'" in message and str(bundle / "weights.irpa") in message
    assert expected in message and found in message and "damaged or replaced" in message
    assert "aot check --integrity" in info.value.hint


def test_a_truncated_archive_is_refused_by_its_size_before_any_hashing(bundle, monkeypatch):
    data = (bundle / "weights.irpa").read_bytes()
    (bundle / "weights.irpa").write_bytes(data[:1000])
    real = integrity.file_sha256
    monkeypatch.setattr(integrity, "file_sha256",
                        lambda p: pytest.fail("hashed an archive whose size is wrong") if p.suffix == ".irpa" else real(p))
    with pytest.raises(BundleError, match=rf"is 1000 bytes, the manifest says {len(data)} \(truncated\)"):
        mf.read(bundle)


def test_an_archive_from_another_build_is_refused_and_old_bundles_without_a_size_check_the_digest(bundle):
    data = json.loads((bundle / "manifest.json").read_text())
    data["weights"].pop("size")                       # a bundle from before sizes were written
    (bundle / "manifest.json").write_text(json.dumps(data))
    mf.read(bundle)
    _archive(bundle / "weights.irpa", seed=7)         # same size, other values: a swapped archive
    assert len((bundle / "weights.irpa").read_bytes()) == len(_archive(bundle.parent / "again.irpa"))
    with pytest.raises(BundleError, match="does not match its sha256"):
        mf.read(bundle)


def test_a_verified_digest_is_remembered_in_the_users_cache_and_forgotten_when_the_file_changes(bundle, monkeypatch):
    hashed = []
    real = integrity.file_sha256
    monkeypatch.setattr(integrity, "file_sha256", lambda p: hashed.append(p.name) or real(p))
    mf.read(bundle)
    assert sorted(hashed) == ["r0.vmfb", "weights.irpa"]
    cache = bundle.parent / "cache" / "aot" / integrity.CACHE_FILE
    assert cache.is_file() and len(json.loads(cache.read_text())["entries"]) == 2
    assert not [p for p in bundle.rglob("*") if "digest" in p.name]     # never inside the bundle
    monkeypatch.setattr(integrity, "_memo", {})       # a new process: only the cache file remains
    hashed.clear()
    mf.read(bundle)
    assert hashed == []
    _flip(bundle / "weights.irpa", 100)               # any write changes the file's stamps
    with pytest.raises(BundleError, match="does not match its sha256"):
        mf.read(bundle)
    assert hashed == ["weights.irpa"]


def test_a_file_written_just_now_is_not_vouched_for_by_its_stamps(bundle, monkeypatch):
    os.utime(bundle / "weights.irpa")                 # within the file system's timestamp tick
    mf.read(bundle)
    key = integrity._key((bundle / "weights.irpa").stat())
    assert key not in integrity._memo and key not in integrity._entries(integrity.cache_path())


@pytest.mark.parametrize("where", ["a file", "damaged", "off"])
def test_a_cache_that_cannot_be_used_costs_a_hash_not_an_error(bundle, monkeypatch, tmp_path, where):
    if where == "a file":
        (tmp_path / "blocked").write_text("")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "blocked"))
    elif where == "damaged":
        (tmp_path / "cache" / "aot").mkdir(parents=True)
        (tmp_path / "cache" / "aot" / integrity.CACHE_FILE).write_text("{not json")
    else:
        monkeypatch.setenv("AOT_DIGEST_CACHE", "0")
        assert integrity.cache_path() is None
    mf.read(bundle)
    monkeypatch.setattr(integrity, "_memo", {})
    mf.read(bundle)


def test_iree_parse_errors_become_a_bundle_error_naming_the_archive(bundle):
    import iree.runtime as rt

    weights = mf.read(bundle).weights
    load_archive(rt, bundle, weights)                 # the intact archive parses
    data = (bundle / "weights.irpa").read_bytes()
    for damaged in (data[:1000], b"", b"x" * 5000):   # IREE: IndexError, ValueError, ValueError
        (bundle / "weights.irpa").write_bytes(damaged)
        with pytest.raises(BundleError, match=r"weights archive 'weights.irpa' cannot be read: the file .* is not a "
                                              r"valid parameter archive \((IndexError|ValueError)"):
            load_archive(rt, bundle, weights)


def test_aot_check_integrity_lists_every_file_and_fails_on_any(bundle, capsys):
    assert cli.main(["check", "--integrity", str(bundle)]) == 0
    out, err = capsys.readouterr()
    assert [line.split()[:2] for line in out.splitlines()[:3]] == [
        ["ok", "manifest.json"], ["ok", "modules/r0.vmfb"], ["ok", "weights.irpa"]]
    assert "3 files match" in out and err == ""
    _flip(bundle / "weights.irpa", 0, 16)
    (bundle / "modules" / "r0.vmfb").unlink()
    assert cli.main(["check", "--integrity", str(bundle)]) == 1
    out, err = capsys.readouterr()
    assert "FAIL  modules/r0.vmfb: bundle lacks module" in out and "FAIL  weights.irpa: " in out
    assert "ERROR: 2 of 3 files" in err and "Traceback" not in err
    (bundle / "manifest.json").write_text("{")   # the digests themselves are gone
    assert cli.main(["check", "--integrity", str(bundle)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("ERROR: ") and "manifest.json' is corrupt" in err
