"""The audit log: durable JSON lines, whole records under concurrency."""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import stat
import threading
from typing import TYPE_CHECKING, Any

import pytest
import trio

from nodeagent._audit import AuditLog, AuditRecord

if TYPE_CHECKING:
    from pathlib import Path

NOW = 1_700_000_000.125


def lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_one_json_line_per_record(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    with AuditLog(path) as log:
        log.record(
            subject="alice",
            peer="unix:pid=42,uid=1000",
            action="drain.start",
            result="ok",
            request_id="7",
            details={"schedule": "graceful", "deadline": None},
            now=NOW,
        )
        log.record(
            subject="bob", peer="10.0.0.1:5000", action="drain.start", result="drain.in_progress"
        )
    first, second = lines(path)
    assert first == {
        "time": NOW,
        "time_iso": "2023-11-14T22:13:20.125000+00:00",
        "subject": "alice",
        "peer": "unix:pid=42,uid=1000",
        "action": "drain.start",
        "request_id": "7",
        "result": "ok",
        "details": {"schedule": "graceful", "deadline": None},
    }
    assert second["subject"] == "bob"
    assert second["result"] == "drain.in_progress"
    assert second["request_id"] is None
    assert second["details"] is None
    iso = dt.datetime.fromisoformat(second["time_iso"])
    assert math.isclose(iso.timestamp(), second["time"], abs_tol=1e-3)


def test_file_is_private_and_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    path.write_text('{"earlier":true}\n')
    path.chmod(0o600)
    with AuditLog(path) as log:
        log.record(subject="a", peer=None, action="x", result="ok", now=NOW)
    assert [line.get("earlier") for line in lines(path)] == [True, None]
    with AuditLog(tmp_path / "new.log") as log:
        pass
    assert stat.S_IMODE((tmp_path / "new.log").stat().st_mode) & 0o077 == 0


def test_record_is_what_is_written(tmp_path: Path) -> None:
    with AuditLog(tmp_path / "audit.log") as log:
        rec = log.record(subject="a", peer="p", action="x", result="ok", now=NOW)
    assert (tmp_path / "audit.log").read_bytes() == rec.to_json_line()
    assert rec == AuditRecord(time=NOW, subject="a", peer="p", action="x", result="ok")


def test_control_characters_stay_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    with AuditLog(path) as log:
        log.record(subject="a\nb", peer=None, action="x", result="ok", details={"r": "é\n"})
    [only] = lines(path)
    assert only["subject"] == "a\nb"
    assert only["details"] == {"r": "é\n"}


@pytest.mark.parametrize(
    "details",
    [
        pytest.param({"x": object()}, id="not-serializable"),
        pytest.param({"x": float("nan")}, id="nan"),
    ],
)
def test_unencodable_details_write_nothing(tmp_path: Path, details: dict[str, Any]) -> None:
    path = tmp_path / "audit.log"
    with AuditLog(path) as log, pytest.raises((TypeError, ValueError)):
        log.record(subject="a", peer=None, action="x", result="ok", details=details)
    assert path.read_bytes() == b""


def test_closed_log_refuses(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.log")
    log.close()
    log.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        log.record(subject="a", peer=None, action="x", result="ok")


@pytest.mark.parametrize("shared", [True, False], ids=["one-log", "one-log-per-thread"])
def test_concurrent_writers_do_not_interleave(tmp_path: Path, shared: bool) -> None:
    path = tmp_path / "audit.log"
    threads, per_thread = 8, 25
    padding = "x" * 20_000  # records far larger than a pipe buffer or a page
    logs = [AuditLog(path)] * threads if shared else [AuditLog(path) for _ in range(threads)]
    barrier = threading.Barrier(threads)

    def writer(n: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            logs[n].record(
                subject=f"t{n}", peer=None, action="x", result="ok", details={"i": i, "p": padding}
            )

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for log in set(logs):
        log.close()

    records = lines(path)
    assert len(records) == threads * per_thread
    for n in range(threads):
        mine = [r["details"]["i"] for r in records if r["subject"] == f"t{n}"]
        assert mine == list(range(per_thread))  # complete, and in each writer's order
    assert all(r["details"]["p"] == padding for r in records)


async def test_record_async(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    with AuditLog(path) as log:
        async with trio.open_nursery() as nursery:
            for n in range(10):
                record = functools.partial(
                    log.record_async, subject=f"s{n}", peer=None, action="a", result="ok"
                )
                nursery.start_soon(record)
    assert sorted(r["subject"] for r in lines(path)) == [f"s{n}" for n in range(10)]
