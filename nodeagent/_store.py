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
from pathlib import Path
from typing import Any

__all__ = ["DocumentStore", "StoreError", "open_database"]


class StoreError(Exception):
    """The database cannot be opened or holds something this version cannot read."""

    code = "store.error"
    http_status = 500


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
