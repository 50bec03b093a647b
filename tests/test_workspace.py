"""Where a build's files go: its own folder, or the machine's shared compile cache when
AOT_CACHE_DIR names one; modules from a shared cache are copied into bundles, never linked."""

import os

import pytest

from aot.bundle.write import link_or_copy
from aot.errors import AotError
from aot.workspace import SHARED_CACHE_ENV, Workspace


def test_the_cache_is_the_build_folders_own_unless_shared(tmp_path, monkeypatch):
    monkeypatch.delenv(SHARED_CACHE_ENV, raising=False)
    assert Workspace.at(tmp_path / "a").cache == tmp_path / "a" / "build" / "cache"
    monkeypatch.setenv(SHARED_CACHE_ENV, str(tmp_path / "shared"))
    ws = Workspace.at(tmp_path / "a")
    assert ws.cache == tmp_path / "shared" and ws.build == tmp_path / "a" / "build"
    ws.prepare()
    assert (tmp_path / "shared").is_dir()


def test_a_copied_module_does_not_share_damage_with_the_cache(tmp_path):
    cached = tmp_path / "m.vmfb"
    cached.write_bytes(b"module")
    linked, copied = tmp_path / "linked.vmfb", tmp_path / "copied.vmfb"
    link_or_copy(cached, linked)
    link_or_copy(cached, copied, link=False)
    assert os.stat(linked).st_ino == os.stat(cached).st_ino
    copied.write_bytes(b"damaged")
    assert cached.read_bytes() == b"module"


def test_an_unwritable_shared_cache_is_a_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(SHARED_CACHE_ENV, str(blocker / "cache"))
    with pytest.raises(AotError) as e:
        Workspace.at(tmp_path / "out").prepare()
    assert "cache" in e.value.message and SHARED_CACHE_ENV in e.value.hint
