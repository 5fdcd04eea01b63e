"""The agent's durable state in SQLite (WAL, synchronous=FULL).

One row holds the machine's snapshot (drain request, counters, statistics, claims)
and the identity of every job process (pid, start time, process group), written in
one transaction before a state-changing request is acknowledged. A crash at any
moment leaves either the previous state or the new one, never a mix.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

__all__ = ["DocumentStore", "ProcessRecord", "Store", "StoreError", "open_database"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    saved_at REAL NOT NULL,
    machine TEXT NOT NULL,
    processes TEXT NOT NULL
);
"""


class StoreError(Exception):
    """The database cannot be opened or holds something this version cannot read."""

    code = "store.error"
    http_status = 500


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessRecord:
    """Which process runs a claim's job, to re-adopt it after a restart."""

    claim_id: str
    pid: int
    start_time: float
    pgid: int
    argv: tuple[str, ...] = ()
    execute_dir: str | None = None


def open_database(path: Path, schema: str) -> sqlite3.Connection:
    """Open (creating) a SQLite file in WAL mode with ``synchronous=FULL`` and ``schema``.

    A write is durable once its statement returns (autocommit).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=5000")
        db.executescript(schema)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the state database {path}: {exc}") from exc
    return db


class Store:
    """A SQLite file holding one agent's state. Not shared between processes."""

    def __init__(self, path: Path) -> None:
        self._db = open_database(path, _SCHEMA)
        self.path = path

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def load(self) -> tuple[dict[str, Any], dict[str, ProcessRecord]] | None:
        """The last saved state, or ``None`` for a fresh database."""
        row = self._db.execute("SELECT machine, processes FROM agent_state WHERE id = 1").fetchone()
        if row is None:
            return None
        try:
            machine = json.loads(row[0])
            processes = {
                claim_id: ProcessRecord(
                    claim_id=claim_id,
                    pid=int(item["pid"]),
                    start_time=float(item["start_time"]),
                    pgid=int(item["pgid"]),
                    argv=tuple(item.get("argv", ())),
                    execute_dir=item.get("execute_dir"),
                )
                for claim_id, item in json.loads(row[1]).items()
            }
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"unreadable state in {self.path}: {exc}") from exc
        return machine, processes

    def save(self, machine: dict[str, Any], processes: dict[str, ProcessRecord]) -> None:
        """Replace the saved state; durable when this returns."""
        doc = {
            claim_id: {
                "pid": p.pid,
                "start_time": p.start_time,
                "pgid": p.pgid,
                "argv": list(p.argv),
                "execute_dir": p.execute_dir,
            }
            for claim_id, p in processes.items()
        }
        self._db.execute(
            "INSERT INTO agent_state (id, saved_at, machine, processes) VALUES (1, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET saved_at = excluded.saved_at, "
            "machine = excluded.machine, processes = excluded.processes",
            (time.time(), json.dumps(machine, separators=(",", ":")), json.dumps(doc)),
        )


class DocumentStore:
    """A SQLite file holding named JSON documents, each replaced whole and durably."""

    def __init__(self, path: Path) -> None:
        self._db = open_database(
            path,
            "CREATE TABLE IF NOT EXISTS documents ("
            "name TEXT PRIMARY KEY, saved_at REAL NOT NULL, doc TEXT NOT NULL);",
        )
        self.path = path

    def close(self) -> None:
        self._db.close()

    def load(self, name: str) -> Any:
        """The document saved under ``name``, or ``None``."""
        row = self._db.execute("SELECT doc FROM documents WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except ValueError as exc:
            raise StoreError(f"unreadable document {name!r} in {self.path}: {exc}") from exc

    def save(self, **documents: Any) -> None:
        """Replace the given documents in one transaction; durable when this returns."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            for name, doc in documents.items():
                self._db.execute(
                    "INSERT INTO documents (name, saved_at, doc) VALUES (?, ?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET saved_at = excluded.saved_at, "
                    "doc = excluded.doc",
                    (name, time.time(), json.dumps(doc, separators=(",", ":"))),
                )
