"""The database of measured plans: SQLite from the standard library, append-only.

A row is one end-to-end measurement of one plan of one graph on one device set: its key
(``key.PlanKey``), the plan's digest, the device fingerprint, the tool versions, the per-region
and end-to-end medians. Rows are only ever added (a later measurement of the same key is another
row; a lookup takes the median of them), so a collector killed at any point leaves every row it
committed and nothing half-written (SQLite's own transactions), and a collection resumes by
skipping the keys it already holds.

Compiles may run in parallel, but two processes timing at once would each slow the other and
store wrong figures: ``timing_lock`` serialises the timed part across processes (an advisory
``flock`` on a file beside the database).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import sqlite3
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from aot.errors import AotError

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,            -- PlanKey.key: graph hash + context digest
    graph TEXT NOT NULL,          -- PlanKey.graph
    model TEXT NOT NULL,          -- where the graph came from (zoo name, file, generator seed)
    plan_digest TEXT NOT NULL,    -- sha256 of the plan's JSON
    plan TEXT NOT NULL,           -- the plan's JSON, to rebuild or relabel it
    fingerprint TEXT NOT NULL,    -- the devices it ran on
    versions TEXT NOT NULL,       -- JSON: compiler, aot, networkx
    total_us REAL NOT NULL,       -- end-to-end median
    regions_us TEXT NOT NULL,     -- JSON: region -> median on its device
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS measurements_key ON measurements (key);
CREATE INDEX IF NOT EXISTS measurements_graph ON measurements (graph);
"""


class CostDatabaseError(AotError):
    """The cost database cannot be opened, or holds something this aot does not read."""


@dataclass(frozen=True, slots=True)
class Measurement:
    key: str
    graph: str
    model: str
    plan_digest: str
    plan: str
    fingerprint: str
    versions: str
    total_us: float
    regions_us: tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class Hit:
    """What the database knows of a key: the median of its rows, and which rows."""

    total_us: float
    row_ids: tuple[int, ...]


class CostDatabase:
    """``with CostDatabase(path) as db: db.add(m); db.lookup(key)``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=60)
            self._db.executescript(_SCHEMA)
            found = self._db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
            if found is None:
                with self._db:
                    self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif found[0] != str(SCHEMA_VERSION):
                raise CostDatabaseError(f"cost database {str(self.path)!r} has schema {found[0]}; this aot "
                                        f"reads {SCHEMA_VERSION}", hint="collect into a new database file")
        except sqlite3.DatabaseError as e:
            raise CostDatabaseError(f"cannot open cost database {str(self.path)!r}: {e}",
                                    hint="the file may be damaged or not a database; collect into a new one") from e

    def __enter__(self) -> "CostDatabase":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def add(self, m: Measurement) -> int:
        """Append one row (committed before this returns); its id."""
        if not (m.total_us > 0 and all(us >= 0 for _, us in m.regions_us)):   # NaN fails too
            raise CostDatabaseError(f"refusing a measurement of {m.model!r} with time {m.total_us!r}")
        with self._db:
            cur = self._db.execute(
                "INSERT INTO measurements (key, graph, model, plan_digest, plan, fingerprint, versions, total_us, "
                "regions_us, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (m.key, m.graph, m.model, m.plan_digest, m.plan, m.fingerprint, m.versions, m.total_us,
                 json.dumps(dict(m.regions_us)), time.time()))
        return int(cur.lastrowid or 0)

    def lookup(self, key: str) -> Hit | None:
        rows = self._db.execute("SELECT id, total_us FROM measurements WHERE key = ? ORDER BY id", (key,)).fetchall()
        if not rows:
            return None
        return Hit(statistics.median(r[1] for r in rows), tuple(r[0] for r in rows))

    def keys(self) -> frozenset[str]:
        """Every key measured: a resumed collection skips these."""
        return frozenset(r[0] for r in self._db.execute("SELECT DISTINCT key FROM measurements"))

    def rows(self, graph: str | None = None) -> list[Measurement]:
        query = "SELECT key, graph, model, plan_digest, plan, fingerprint, versions, total_us, regions_us " \
                "FROM measurements" + (" WHERE graph = ?" if graph else "") + " ORDER BY id"
        return [Measurement(key=r[0], graph=r[1], model=r[2], plan_digest=r[3], plan=r[4], fingerprint=r[5],
                            versions=r[6], total_us=r[7], regions_us=tuple(json.loads(r[8]).items()))
                for r in self._db.execute(query, (graph,) if graph else ())]

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])


@contextlib.contextmanager
def timing_lock(database: Path, wait_s: float = 3600.0) -> Iterator[None]:
    """Only one process times at a time, whichever database it fills: the lock file sits beside
    ``database``. Waits up to ``wait_s`` for another collector's timing to end."""
    lock = Path(str(database) + ".timing.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise CostDatabaseError(f"another process has been timing for over {wait_s:.0f} s "
                                            f"({str(lock)!r} is locked)", hint="wait for it, or stop it") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
