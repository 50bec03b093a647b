"""Request batching for servers: many threads submit single requests, one worker runs them in
batches through ``session.run_batch`` and hands each caller its own result.

A batch closes when it holds ``max_batch`` requests or ``max_wait_ms`` after its first request
arrived, whichever comes first. A request is checked in its caller's thread before it joins a
batch, so a malformed one fails alone; a batch that fails as a whole is run again one request at
a time, so every caller gets its own answer or its own error.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Mapping

import numpy as np

from .errors import RuntimeInputError

_STOP = object()


class Batcher:
    """``with Batcher(session, max_batch=8, max_wait_ms=2) as b: outputs = b(inputs)`` from any thread."""

    def __init__(self, session: Any, max_batch: int = 8, max_wait_ms: float = 2.0) -> None:
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError("max_batch must be at least 1 and max_wait_ms not negative")
        self.session, self.max_batch, self.max_wait = session, max_batch, max_wait_ms / 1000
        self.batches: list[int] = []    # the size of every batch run, in order (for tests and stats)
        self._queue: queue.Queue[Any] = queue.Queue()
        self._closed = False
        self._close_lock = threading.Lock()
        self._worker = threading.Thread(target=self._serve, name="aot-batcher", daemon=True)
        self._worker.start()

    def submit(self, inputs: Mapping[str, Any]) -> "Future[tuple[np.ndarray, ...]]":
        """Queue one request; its future holds the outputs (or the request's own error)."""
        future: Future[tuple[np.ndarray, ...]] = Future()
        checked = self.session.check(inputs)
        with self._close_lock:
            if self._closed:
                raise RuntimeInputError("this batcher is closed")
            self._queue.put((checked, future))
        return future

    def __call__(self, inputs: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
        return self.submit(inputs).result()

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch, deadline = [first], time.monotonic() + self.max_wait
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is _STOP:
                    self._queue.put(_STOP)   # finish this batch, then stop
                    break
                batch.append(item)
            self._run(batch)

    def _run(self, batch: list[tuple[Mapping[str, np.ndarray], Future]]) -> None:
        self.batches.append(len(batch))
        try:
            results = self.session.run_batch([inputs for inputs, _ in batch])
        except Exception:
            # Which request broke the batch? Each one alone tells its own caller.
            for inputs, future in batch:
                _settle(future, lambda: self.session.run(inputs))
            return
        for (_, future), result in zip(batch, results):
            future.set_result(result)

    def close(self) -> None:
        """Answer what is queued, then stop the worker."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._worker.join()

    def __enter__(self) -> "Batcher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(future: Future, call: Any) -> None:
    try:
        future.set_result(call())
    except Exception as e:
        future.set_exception(e)
