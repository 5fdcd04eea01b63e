"""The agent's durable state: the machine document and its job processes.

The agent writes through :class:`StateStore`, a seam that tests fill with a store that
fails on demand; :class:`Store` is the SQLite one. An ``agent.db`` deleted or replaced
while the agent runs is noticed by the next write, which puts the whole state in a new
file at the same path (the agent's memory holds all of it).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Self

from nodeagent._store import FileIdentity, StoreError, open_database

__all__ = ["ProcessRecord", "StateStore", "Store"]

log = logging.getLogger("nodeagent.store")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    saved_at REAL NOT NULL,
    machine TEXT NOT NULL,
    processes TEXT NOT NULL
);
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessRecord:
    """Which process runs a claim's job, to re-adopt it after a restart."""

    claim_id: str
    pid: int
    start_time: float
    pgid: int
    argv: tuple[str, ...] = ()
    execute_dir: str | None = None
    #: When it started in seconds since boot, and that boot: see ``same_process``.
    boot_start: float | None = None
    boot_id: str | None = None


def _optional_float(value: Any) -> float | None:
    """A saved number, or ``None`` (absent from states saved before it was kept)."""
    return None if value is None else float(value)


class StateStore(Protocol):
    """Where the agent's state goes before a change is acknowledged."""

    def save(self, machine: dict[str, Any], processes: Mapping[str, ProcessRecord]) -> None:
        """Replace the saved state; durable when this returns.

        Raises :class:`~nodeagent._store.StoreError` when the write fails (a full disk,
        an I/O error); the previously saved state is then still the saved one.
        """
        ...


class Store:
    """A SQLite file holding one agent's state. Not shared between processes."""

    def __init__(self, path: Path) -> None:
        """Open (creating) ``path``; raises :class:`StoreError` naming the file and what to
        do when it cannot be used (see :func:`~nodeagent._store.open_database`)."""
        self._db = open_database(path, _SCHEMA)
        self._identity = FileIdentity.of(path)
        self.path = path

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def load(self) -> tuple[dict[str, Any], dict[str, ProcessRecord]] | None:
        """The last saved state, or ``None`` when nothing was ever saved (a new, empty or
        re-created file); raises :class:`StoreError` for a state it cannot read."""
        try:
            row = self._db.execute(
                "SELECT machine, processes FROM agent_state WHERE id = 1"
            ).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the state in {self.path}: {exc}") from exc
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
                    boot_start=_optional_float(item.get("boot_start")),
                    boot_id=None if item.get("boot_id") is None else str(item["boot_id"]),
                )
                for claim_id, item in json.loads(row[1]).items()
            }
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"unreadable state in {self.path}: {exc}") from exc
        return machine, processes

    def save(self, machine: dict[str, Any], processes: Mapping[str, ProcessRecord]) -> None:
        """Replace the saved state; durable when this returns.

        One statement in autocommit mode: SQLite either commits all of it or none, so a
        failure (:class:`StoreError`, e.g. ``database or disk is full``) leaves the
        previous state in place. When the file was deleted or replaced since it was
        opened, the state is written to a new file at the same path (logged).
        """
        if FileIdentity.of(self.path) != self._identity:
            log.error(
                "%s was deleted or replaced while the agent ran: the whole state goes to a "
                "new file",
                self.path,
            )
            self._db.close()
            self._db = open_database(self.path, _SCHEMA)
            self._identity = FileIdentity.of(self.path)
        doc = {
            claim_id: {
                "pid": p.pid,
                "start_time": p.start_time,
                "pgid": p.pgid,
                "argv": list(p.argv),
                "execute_dir": p.execute_dir,
                "boot_start": p.boot_start,
                "boot_id": p.boot_id,
            }
            for claim_id, p in processes.items()
        }
        try:
            self._db.execute(
                "INSERT INTO agent_state (id, saved_at, machine, processes) VALUES (1, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET saved_at = excluded.saved_at, "
                "machine = excluded.machine, processes = excluded.processes",
                (time.time(), json.dumps(machine, separators=(",", ":")), json.dumps(doc)),
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write the state to {self.path}: {exc}") from exc
