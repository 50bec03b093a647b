"""The tuner's probe times candidates as a deployed session runs them: with the heap kept."""

from __future__ import annotations

import pytest

from aot.runtime import heap
from aot.tune.search import run_probe

# Enough of a request to start the probe; the bundle is not there, so it fails after its first event.
_REQUEST = {"kind": "bundle", "bundle": "/nonexistent/bundle", "manifest": "/nonexistent/manifest.json"}


@pytest.mark.parametrize(("opt_out", "kept"), [(None, True), ("0", False)])
def test_the_probe_keeps_the_heap_as_a_session_does_before_it_times_anything(opt_out, kept, monkeypatch,
                                                                            malloc_untuned):
    # A candidate whose transients pass glibc's mmap threshold would otherwise fault them in every
    # call in the probe alone, and lose to one that ships slower (CREPE, docs/performance.md).
    if opt_out is not None:
        monkeypatch.setenv(heap.OPT_OUT_ENV, opt_out)
    events, error = run_probe(_REQUEST)
    assert events[0] == {"event": "heap", "kept": kept}
    assert error is not None and not any(e["event"] == "timed" for e in events)
