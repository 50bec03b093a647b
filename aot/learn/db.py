"""The database of measured plans: SQLite from the standard library, append-only.

A row is one end-to-end measurement of one plan of one graph on one device set: its key
(``key.PlanKey``), the plan's digest, the device fingerprint, the tool versions and the end-to-end
median; with it, in the same transaction, each region's median on its device, one row each in
``region_times`` under the region's digest (``key.region_digest``: its induced subgraph, device and
flags). A table rather than a JSON column: a per-region cost model asks "every time of this region
on this device" across plans and models, which an index on the digest answers without parsing
every row. Rows are only ever added (a later measurement of the same key is another
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
import math
import sqlite3
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from aot.errors import AotError

SCHEMA_VERSION = 2    # 2: per-region times in their own table (1 kept them as unused JSON)
FORMAT = "aot-cost-database"
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
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS measurements_key ON measurements (key);
CREATE INDEX IF NOT EXISTS measurements_graph ON measurements (graph);
CREATE TABLE IF NOT EXISTS region_times (
    row_id INTEGER NOT NULL REFERENCES measurements (id),
    region TEXT NOT NULL,         -- the region's name in that row's plan
    device TEXT NOT NULL,         -- the plan's device for it (accel, host)
    nodes_digest TEXT NOT NULL,   -- key.region_digest: the same region in any plan or model
    median_us REAL NOT NULL,      -- its median on its device, on the real intermediates of a run
    PRIMARY KEY (row_id, region)
);
CREATE INDEX IF NOT EXISTS region_times_digest ON region_times (nodes_digest, device);
"""


class CostDatabaseError(AotError):
    """The cost database cannot be opened, or holds something this aot does not read."""


@dataclass(frozen=True, slots=True)
class RegionTime:
    region: str
    device: str
    nodes_digest: str
    median_us: float


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
    regions: tuple[RegionTime, ...] = ()


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
            self._check_or_create()
        except sqlite3.DatabaseError as e:
            raise CostDatabaseError(f"cannot open cost database {str(self.path)!r}: {e}",
                                    hint="the file may be damaged or not a database; collect into a new one") from e

    def _check_or_create(self) -> None:
        """An empty file becomes a cost database; one of another schema, or another program's
        database, is refused before anything is written to it."""
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            # One transaction: another process never sees the tables without their meta rows.
            self._db.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} INSERT OR IGNORE INTO meta VALUES ('format', "
                                   f"'{FORMAT}'), ('schema', '{SCHEMA_VERSION}'); COMMIT;")
            return
        meta = dict(self._db.execute("SELECT name, value FROM meta").fetchall()) if "meta" in tables else {}
        if meta.get("format") != FORMAT and "schema" not in meta:
            self._db.close()
            raise CostDatabaseError(f"{str(self.path)!r} is an SQLite database but not an aot cost database "
                                    f"(it holds {', '.join(sorted(tables))})",
                                    hint="give --db a new file name; collection never writes into it")
        if meta.get("schema") != str(SCHEMA_VERSION):
            self._db.close()
            raise CostDatabaseError(f"cost database {str(self.path)!r} has schema {meta.get('schema')}; this aot "
                                    f"reads {SCHEMA_VERSION}", hint="collect into a new database file")

    def __enter__(self) -> "CostDatabase":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def add(self, m: Measurement) -> int:
        """Append one row and its region times (one transaction, committed before this returns); its id."""
        if not (math.isfinite(m.total_us) and m.total_us > 0
                and all(math.isfinite(r.median_us) and r.median_us >= 0 for r in m.regions)):
            raise CostDatabaseError(f"refusing a measurement of {m.model!r} with time {m.total_us!r} "
                                    f"(regions {[r.median_us for r in m.regions]})")
        if len({r.region for r in m.regions}) != len(m.regions):
            raise CostDatabaseError(f"refusing a measurement of {m.model!r}: a region is listed twice")
        with self._db:
            cur = self._db.execute(
                "INSERT INTO measurements (key, graph, model, plan_digest, plan, fingerprint, versions, total_us, "
                "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (m.key, m.graph, m.model, m.plan_digest, m.plan, m.fingerprint, m.versions, m.total_us, time.time()))
            row = int(cur.lastrowid or 0)
            self._db.executemany("INSERT INTO region_times VALUES (?, ?, ?, ?, ?)",
                                 [(row, r.region, r.device, r.nodes_digest, r.median_us) for r in m.regions])
        return row

    def lookup(self, key: str) -> Hit | None:
        rows = self._db.execute("SELECT id, total_us FROM measurements WHERE key = ? ORDER BY id", (key,)).fetchall()
        if not rows:
            return None
        return Hit(statistics.median(r[1] for r in rows), tuple(r[0] for r in rows))

    def keys(self) -> frozenset[str]:
        """Every key measured: a resumed collection skips these."""
        return frozenset(r[0] for r in self._db.execute("SELECT DISTINCT key FROM measurements"))

    def key_counts(self) -> dict[str, int]:
        """Rows per key: a collection asked for ``repeats`` measurements tops each key up to that."""
        return dict(self._db.execute("SELECT key, COUNT(*) FROM measurements GROUP BY key").fetchall())

    def region_lookup(self, nodes_digest: str, device: str, fingerprint: str, compiler: str | None = None) -> Hit | None:
        """The median time of a region (by digest) on ``device`` over every row of ``fingerprint``
        (and, given ``compiler``, of rows whose code that iree-base-compiler version made)."""
        rows = [(row_id, us) for row_id, us, versions in self._db.execute(
            "SELECT t.row_id, t.median_us, m.versions FROM region_times t JOIN measurements m ON m.id = t.row_id "
            "WHERE t.nodes_digest = ? AND t.device = ? AND m.fingerprint = ? ORDER BY t.row_id",
            (nodes_digest, device, fingerprint))
            if compiler is None or _compiler(versions) == compiler]
        if not rows:
            return None
        return Hit(statistics.median(r[1] for r in rows), tuple(dict.fromkeys(r[0] for r in rows)))

    def rows(self, graph: str | None = None) -> list[Measurement]:
        query = "SELECT id, key, graph, model, plan_digest, plan, fingerprint, versions, total_us " \
                "FROM measurements" + (" WHERE graph = ?" if graph else "") + " ORDER BY id"
        found = self._db.execute(query, (graph,) if graph else ()).fetchall()
        regions: dict[int, list[RegionTime]] = {}
        for row_id, *rest in self._db.execute("SELECT row_id, region, device, nodes_digest, median_us "
                                              "FROM region_times ORDER BY row_id, rowid"):
            regions.setdefault(row_id, []).append(RegionTime(*rest))
        return [Measurement(key=r[1], graph=r[2], model=r[3], plan_digest=r[4], plan=r[5], fingerprint=r[6],
                            versions=r[7], total_us=r[8], regions=tuple(regions.get(r[0], ())))
                for r in found]

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])

    def region_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM region_times").fetchone()[0])


def _compiler(versions: str) -> str | None:
    try:
        found = json.loads(versions).get("iree-base-compiler")
    except (ValueError, AttributeError):
        return None
    return str(found) if found is not None else None


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
