"""Measured costs, kept in SQLite under the cache directory (or at `TESSERA_COST_DB`). A
record's key is the target's tuning key, the subgraph's structural hash and the machine
fingerprint (CPU model and core count, or `TESSERA_MACHINE`, and the backend library's
version). WAL mode lets concurrent compiles write without losing records; an insert never
replaces a newer record. The schema
version is stored (`PRAGMA user_version`): a file of schema 1 is migrated in place; a corrupt
file or an unknown layout is moved aside (never deleted) and rebuilt, with a CacheWarning."""

from __future__ import annotations

import functools
import json
import os
import platform
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tessera._private.cache import atomic_write_bytes, cache_dir
from tessera._private.cores import cpu_fields
from tessera.errors import CacheWarning, TesseraError

SCHEMA_VERSION = 2
_COLUMNS = ["tuning_key", "structure", "fingerprint", "ms", "spread", "samples", "invalid",
            "measured_at", "fault"]

# Each kind of record has its own table: one candidate's cost, a searched plan (so a warm
# compile skips the search), a whole plan's end-to-end latency, and the per-partition chain
# overhead calibrated for a set of backends.
_TABLES = (
    """CREATE TABLE IF NOT EXISTS costs (
    tuning_key TEXT NOT NULL,
    structure TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    ms REAL,                -- NULL: the candidate cannot run there (see invalid)
    spread REAL NOT NULL,
    samples INTEGER NOT NULL,
    invalid TEXT,
    measured_at REAL NOT NULL,
    fault TEXT,             -- crashed / hung / out of memory in the measuring worker
    PRIMARY KEY (tuning_key, structure, fingerprint))""",
    """CREATE TABLE IF NOT EXISTS plans (
    key TEXT PRIMARY KEY,
    plan TEXT NOT NULL,
    saved_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS latencies (
    plan_key TEXT NOT NULL,
    structure TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    ms REAL NOT NULL,
    measured_at REAL NOT NULL,
    PRIMARY KEY (plan_key, structure, fingerprint))""",
    """CREATE TABLE IF NOT EXISTS overheads (
    backends TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    ms REAL NOT NULL,
    measured_at REAL NOT NULL,
    PRIMARY KEY (backends, fingerprint))""",
)

# Schema 1 kept latencies and overheads as cost rows under made-up tuning keys.
_MIGRATE_FROM_1 = (
    "ALTER TABLE costs ADD COLUMN fault TEXT",
    "INSERT OR REPLACE INTO latencies SELECT substr(tuning_key, 6), structure, fingerprint, "
    "ms, measured_at FROM costs WHERE tuning_key LIKE 'plan:%' AND ms IS NOT NULL",
    "INSERT OR REPLACE INTO overheads SELECT substr(tuning_key, 10), fingerprint, ms, "
    "measured_at FROM costs WHERE tuning_key LIKE 'overhead:%' AND ms IS NOT NULL",
    "DELETE FROM costs WHERE tuning_key LIKE 'plan:%' OR tuning_key LIKE 'overhead:%'",
)


@dataclass(frozen=True)
class Cost:
    """Median latency in ms, its spread (max - min of the samples) and the sample count; or
    an invalid cost with the reason the candidate cannot run on its target."""

    ms: float | None
    spread: float = 0.0
    samples: int = 0
    invalid: str | None = None
    fault: str | None = None  # 'crashed', 'hung' or 'out of memory': the worker was lost

    @property
    def ok(self) -> bool:
        return self.invalid is None and self.ms is not None

    @classmethod
    def failed(cls, reason: str, fault: str | None = None) -> Cost:
        return cls(None, 0.0, 0, reason, fault)


@dataclass(frozen=True)
class Record:
    tuning_key: str
    structure: str
    fingerprint: str
    cost: Cost
    measured_at: float

    def to_json(self) -> str:
        return json.dumps({"tuning_key": self.tuning_key, "structure": self.structure,
                           "fingerprint": self.fingerprint, **asdict(self.cost),
                           "measured_at": self.measured_at}, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Record:
        data = json.loads(line)
        return cls(data["tuning_key"], data["structure"], data["fingerprint"],
                   Cost(data["ms"], data["spread"], data["samples"], data["invalid"],
                        data.get("fault")),
                   float(data["measured_at"]))


@functools.cache
def machine() -> str:
    """CPU model and core count, or the name `TESSERA_MACHINE` gives this machine (a fleet
    of identical machines may share one); the backend library's version is added per
    record."""
    named = os.environ.get("TESSERA_MACHINE", "").strip()
    if named:
        return named
    model = cpu_fields().get("model name") or platform.processor() or platform.machine()
    return f"{model}; {os.cpu_count()} cores"


def fingerprint(library: str, version: str | None) -> str:
    return f"{machine()}; {library} {version or 'unknown'}"


class CostDB:
    """One SQLite file. Safe across threads and processes."""

    def __init__(self, path: Path | str | None = None) -> None:
        if path is None:
            path = os.environ.get("TESSERA_COST_DB") or cache_dir("costs") / "costs.sqlite"
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._open()
        except sqlite3.DatabaseError as err:  # not a database, or damaged: keep it, rebuild
            self._rebuild(f"it is unreadable ({err})")
        except sqlite3.Error as err:
            raise TesseraError(f"cost database {self.path} cannot be opened: {err}; set "
                               "TESSERA_COST_DB or TESSERA_CACHE elsewhere") from err

    def _open(self) -> None:
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            columns = [row[1] for row in db.execute("PRAGMA table_info(costs)")]
            if version > SCHEMA_VERSION:
                raise TesseraError(
                    f"cost database {self.path} has schema {version}, newer than this tessera "
                    f"({SCHEMA_VERSION}); upgrade tessera or set TESSERA_COST_DB elsewhere")
            migrate = version == 1 and columns == _COLUMNS[:-1]
            if columns and columns != _COLUMNS and not migrate:
                raise sqlite3.DatabaseError(f"an older layout (schema {version})")
            db.execute("BEGIN IMMEDIATE")
            for table in _TABLES:
                db.execute(table)
            for step in _MIGRATE_FROM_1 if migrate else ():
                db.execute(step)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("COMMIT")
            db.execute("PRAGMA integrity_check").fetchone()

    def _rebuild(self, why: str) -> None:
        aside = self.path.with_name(f"{self.path.name}.{int(time.time())}.bad")
        for suffix in ("", "-wal", "-shm"):
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                os.replace(source, f"{aside}{suffix}")
        warnings.warn(f"cost database {self.path}: {why}; moved it to {aside.name} and "
                      "started a new one (costs will be measured again)", CacheWarning,
                      stacklevel=3)
        self._open()

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30.0, isolation_level=None)

    def get(self, tuning_key: str, structure: str, fingerprint: str) -> Cost | None:
        with self._lock, self._connect() as db:
            row = db.execute(
                "SELECT ms, spread, samples, invalid, fault FROM costs WHERE tuning_key=? AND "
                "structure=? AND fingerprint=?", (tuning_key, structure, fingerprint)
            ).fetchone()
        return Cost(*row) if row else None

    def get_foreign(self, tuning_key: str, structure: str) -> Cost | None:
        """The newest record from any machine: used only when the caller asks for it."""
        with self._lock, self._connect() as db:
            row = db.execute(
                "SELECT ms, spread, samples, invalid, fault FROM costs WHERE tuning_key=? AND "
                "structure=? ORDER BY measured_at DESC LIMIT 1", (tuning_key, structure)
            ).fetchone()
        return Cost(*row) if row else None

    def put(self, tuning_key: str, structure: str, fingerprint: str, cost: Cost,
            measured_at: float | None = None) -> None:
        self.put_many([Record(tuning_key, structure, fingerprint, cost,
                              time.time() if measured_at is None else measured_at)])

    def put_many(self, records: Iterable[Record]) -> int:
        """Insert records, keeping the newer of two for one key. Returns how many landed."""
        rows = [(r.tuning_key, r.structure, r.fingerprint, r.cost.ms, r.cost.spread,
                 r.cost.samples, r.cost.invalid, r.measured_at, r.cost.fault) for r in records]
        with self._lock, self._connect() as db:
            before = db.total_changes
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "INSERT INTO costs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (tuning_key, structure, fingerprint) DO UPDATE SET "
                "ms=excluded.ms, spread=excluded.spread, samples=excluded.samples, "
                "invalid=excluded.invalid, measured_at=excluded.measured_at, "
                "fault=excluded.fault "
                "WHERE excluded.measured_at > costs.measured_at", rows)
            db.execute("COMMIT")
            return db.total_changes - before

    def get_plan(self, key: str) -> str | None:
        with self._lock, self._connect() as db:
            row = db.execute("SELECT plan FROM plans WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def put_plan(self, key: str, plan: str) -> None:
        with self._lock, self._connect() as db:
            db.execute("INSERT OR REPLACE INTO plans VALUES (?, ?, ?)", (key, plan, time.time()))

    def get_latency(self, plan_key: str, structure: str, fingerprint: str) -> float | None:
        """A whole plan's end-to-end latency (ms) on this model structure and machine."""
        with self._lock, self._connect() as db:
            row = db.execute("SELECT ms FROM latencies WHERE plan_key=? AND structure=? AND "
                             "fingerprint=?", (plan_key, structure, fingerprint)).fetchone()
        return float(row[0]) if row else None

    def put_latency(self, plan_key: str, structure: str, fingerprint: str, ms: float) -> None:
        with self._lock, self._connect() as db:
            db.execute("INSERT OR REPLACE INTO latencies VALUES (?, ?, ?, ?, ?)",
                       (plan_key, structure, fingerprint, ms, time.time()))

    def get_overhead(self, backends: str, fingerprint: str) -> float | None:
        """The per-partition chain overhead (ms) calibrated for a set of backends."""
        with self._lock, self._connect() as db:
            row = db.execute("SELECT ms FROM overheads WHERE backends=? AND fingerprint=?",
                             (backends, fingerprint)).fetchone()
        return float(row[0]) if row else None

    def put_overhead(self, backends: str, fingerprint: str, ms: float) -> None:
        with self._lock, self._connect() as db:
            db.execute("INSERT OR REPLACE INTO overheads VALUES (?, ?, ?, ?)",
                       (backends, fingerprint, ms, time.time()))

    def forget_plans(self) -> int:
        with self._lock, self._connect() as db:
            return int(db.execute("DELETE FROM plans").rowcount)

    def records(self) -> Iterator[Record]:
        with self._lock, self._connect() as db:
            rows = db.execute("SELECT * FROM costs ORDER BY tuning_key, structure, "
                              "fingerprint").fetchall()
        for key, structure, finger, ms, spread, samples, invalid, at, fault in rows:
            yield Record(key, structure, finger, Cost(ms, spread, samples, invalid, fault), at)

    def export(self, path: Path | str) -> int:
        lines = [r.to_json() for r in self.records()]
        atomic_write_bytes(Path(path), ("\n".join(lines) + "\n" if lines else "").encode())
        return len(lines)

    def import_(self, path: Path | str) -> int:
        records = []
        for number, line in enumerate(Path(path).read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(Record.from_json(line))
            except (ValueError, KeyError, TypeError) as err:
                raise TesseraError(f"{path}:{number}: not a tessera cost record: {err}") from err
        landed = self.put_many(records)
        if landed:
            self.forget_plans()
        return landed

    def describe(self) -> dict[str, Any]:
        with self._lock, self._connect() as db:
            count = db.execute("SELECT COUNT(*) FROM costs").fetchone()[0]
            plans = db.execute("SELECT COUNT(*) FROM plans").fetchone()[0]
            latencies = db.execute("SELECT COUNT(*) FROM latencies").fetchone()[0]
            overheads = db.execute("SELECT COUNT(*) FROM overheads").fetchone()[0]
        return {"path": str(self.path), "records": count, "plans": plans,
                "latencies": latencies, "overheads": overheads}
