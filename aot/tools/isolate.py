"""Run one piece of work in a forked child: a crash in the compiler bindings, a device driver or a
compiled module (a signal, a hang) costs that piece, not the process that asked for it.

Used by the tools that throw many untrusted or unsupported things at the pipeline (conformance,
fuzzing). Callers run in spawned pool workers: a process that has run IREE has runtime threads
and locks that do not survive a fork, and a forked child's first invoke would wait forever."""

from __future__ import annotations

import json
import os
import select
import signal
import time
import traceback
from typing import Any, Callable


def in_child(work: Callable[[], Any], timeout_s: float) -> tuple[Any, str | None]:
    """``(result, None)`` when ``work()`` returned a JSON-able result in a child process, else
    ``(None, how)``: "timed out", "crashed (SIGSEGV)", "raised ValueError: ... <traceback tail>"
    or "exited with status N". The child gets its own process group, so a timeout also kills
    what it started (iree-compile)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_end)
        os.setsid()
        try:
            payload = json.dumps({"result": work()})
        except BaseException as e:  # noqa: BLE001 - everything is reported to the parent
            tail = "".join(traceback.format_exception(e)[-3:]).strip()
            payload = json.dumps({"raised": f"{type(e).__name__}: {str(e)[:300]}\n{tail[-800:]}"})
        os.write(write_end, payload.encode())
        os._exit(0)
    os.close(write_end)
    data, deadline, timed_out = b"", time.monotonic() + timeout_s, False
    while True:
        ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:  # the child has not made its group yet
                os.kill(pid, signal.SIGKILL)
            break
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if data:
        message = json.loads(data)
        return (message["result"], None) if "result" in message else (None, f"raised {message['raised']}")
    if timed_out:
        return None, "timed out"
    if os.WIFSIGNALED(status):
        return None, f"crashed ({signal.Signals(os.WTERMSIG(status)).name})"
    return None, f"exited with status {os.WEXITSTATUS(status)} and no result"
