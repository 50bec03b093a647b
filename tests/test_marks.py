"""The marks say what a test needs, and conftest.py holds unmarked tests to them: these tests are
unmarked, so what they call must be refused."""

from __future__ import annotations

import pytest

from aot.lower import compile as compile_, executor
from aot.models import zoo


def test_an_unmarked_test_cannot_fetch_a_zoo_model():
    with pytest.raises(AssertionError, match="fetches a zoo model .* not marked `network`"):
        zoo.fetch(zoo.by_name("mtcnn-onet"))


@pytest.mark.parametrize("module", [executor, compile_])
def test_an_unmarked_test_cannot_compile_with_iree(module):
    with pytest.raises(AssertionError, match="compiles with IREE but is not marked `device`"):
        module.iree_compile_path()


def test_an_unmarked_build_is_refused_before_it_compiles(example_model, tmp_path):
    from aot import api
    from aot.options import BuildOptions

    with pytest.raises(AssertionError, match="not marked `device`"):
        api.build(example_model, tmp_path / "out", BuildOptions(accel=None))


@pytest.mark.network
def test_a_network_test_may_fetch():
    assert zoo.fetch(zoo.by_name("mtcnn-onet")).is_file()
