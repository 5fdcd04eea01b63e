"""The audit log: one JSON line per state-changing request, durable before the reply.

Each record is a single JSON object on its own line::

    {"time": 1700000000.125, "time_iso": "2023-11-14T22:13:20.125000+00:00",
     "subject": "alice", "peer": "unix:pid=4242,uid=1000", "action": "drain.start",
     "request_id": "7", "result": "ok", "details": {"schedule": "graceful"}}

``result`` is ``"ok"`` or the stable error code of the refusal; ``request_id`` and
``details`` are ``null`` when not given.

Durability and ordering: the file is opened ``O_APPEND``; a record is encoded first, then
written with one ``os.write`` (continued only if the kernel takes part of it) and
``fsync``'d before :meth:`AuditLog.record` returns, so a request is acknowledged only after
its record is on disk. Writers in one process are serialized by a lock, so lines never
interleave; other processes appending with ``O_APPEND`` do not interleave with ours either
(whole-record writes to a local file).

From trio, call :meth:`AuditLog.record_async`, which runs the same write in a worker
thread: an ``fsync`` can take a long time on a busy disk and must not stall the event
loop. The write cannot be cancelled half-way.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import trio

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from types import TracebackType

__all__ = [
    "AuditLog",
    "AuditRecord",
]


@dataclass(frozen=True, kw_only=True)
class AuditRecord:
    """One audit entry; :meth:`to_json_line` is exactly what is appended to the file."""

    time: float
    subject: str
    peer: str | None
    action: str
    result: str
    request_id: str | None = None
    details: Mapping[str, Any] | None = None

    def to_json_line(self) -> bytes:
        """The record as compact JSON and a trailing newline.

        Raises TypeError or ValueError when ``details`` is not JSON-serializable (NaN and
        infinities included).
        """
        iso = dt.datetime.fromtimestamp(self.time, tz=dt.UTC).isoformat()
        obj = {
            "time": self.time,
            "time_iso": iso,
            "subject": self.subject,
            "peer": self.peer,
            "action": self.action,
            "request_id": self.request_id,
            "result": self.result,
            "details": None if self.details is None else dict(self.details),
        }
        text = json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
        return text.encode("ascii") + b"\n"


class AuditLog:
    """An open audit log file (created with mode 0600 if missing; its directory must exist).

    Use as a context manager or call :meth:`close`. Thread-safe.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd: int | None = os.open(
            path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
        )

    def record(
        self,
        *,
        subject: str,
        peer: str | None,
        action: str,
        result: str,
        request_id: str | None = None,
        details: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> AuditRecord:
        """Append one record, fsync it, and return it.

        ``now`` defaults to the wall clock. On an encoding error (TypeError/ValueError)
        nothing is written. On an OSError (disk full, I/O error) the record may be partly
        written; the caller must then refuse the request. Raises ValueError after
        :meth:`close`.
        """
        rec = AuditRecord(
            time=time.time() if now is None else now,
            subject=subject,
            peer=peer,
            action=action,
            result=result,
            request_id=request_id,
            details=details,
        )
        line = rec.to_json_line()
        with self._lock:
            if self._fd is None:
                raise ValueError(f"audit log {self.path} is closed")
            view = memoryview(line)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            os.fsync(self._fd)
        return rec

    async def record_async(
        self,
        *,
        subject: str,
        peer: str | None,
        action: str,
        result: str,
        request_id: str | None = None,
        details: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> AuditRecord:
        """:meth:`record` in a worker thread; waits for it even when cancelled."""
        return await trio.to_thread.run_sync(
            functools.partial(
                self.record,
                subject=subject,
                peer=peer,
                action=action,
                result=result,
                request_id=request_id,
                details=details,
                now=now,
            )
        )

    def close(self) -> None:
        """Close the file; idempotent. Later :meth:`record` calls raise ValueError."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
