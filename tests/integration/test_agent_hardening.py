"""The agent daemon against a hostile caller and a failing disk, over real sockets.

* Bodies are refused before they are read: anonymous ones with 401, oversized ones with 413,
  without the daemon's memory growing.
* A state directory on a full file system (a small tmpfs, where the test may mount one):
  every write is a clean 503, no job program starts, nothing is half-applied, and a restart
  finds exactly what was acknowledged.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from tests.harness import AgentProcess, job_script, wait_for

MIB = 1 << 20


def rss_mib(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / MIB


def post_head(url: str, path: str, length: int, token: str | None) -> socket.socket:
    """Open a connection and send the head of a POST declaring a ``length``-byte body."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n"
        f"{auth}Content-Length: {length}\r\n\r\n".encode()
    )
    return sock


def read_reply(sock: socket.socket) -> tuple[int, bytes]:
    """The status and body of one HTTP/1.1 reply with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a reply: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(
        int(v) for k, _, v in (h.partition(": ") for h in lines) if k.lower() == "content-length"
    )
    while len(body) < length:
        body += sock.recv(65536)
    return int(lines[0].split()[1]), body


def push_until_refused(sock: socket.socket, limit: int) -> int:
    """Send body bytes until the peer stops taking them; returns how many it took."""
    sock.settimeout(1.0)
    chunk = b"x" * 65536
    sent = 0
    with contextlib.suppress(OSError):  # reset, broken pipe, or a full window (timeout)
        while sent < limit:
            sent += sock.send(chunk)
    return sent


@pytest.mark.parametrize("who", ["anonymous", "administrator"])
def test_huge_bodies_are_refused_unread_and_cost_no_memory(tmp_path: Path, who: str) -> None:
    declared = 50 * MIB
    with AgentProcess(tmp_path / "a") as agent:
        assert agent.proc is not None
        token = agent.token("ADMINISTRATOR") if who == "administrator" else None
        expected = 413 if token else 401
        before = rss_mib(agent.proc.pid)
        socks = [post_head(agent.url, "/v1/drain", declared, token) for _ in range(8)]
        try:
            for sock in socks:
                sock.sendall(b"{" + b" " * (256 * 1024))
            for sock in socks:
                status, body = read_reply(sock)  # answered with 49.75 MiB still to come
                assert status == expected, body
            taken = [push_until_refused(sock, declared) for sock in socks]
        finally:
            for sock in socks:
                sock.close()
        # What the kernel's buffers hold, never the body: the daemon stopped reading.
        assert max(taken) < 16 * MIB
        assert rss_mib(agent.proc.pid) - before < 20
        with agent.client() as c:
            assert c.get("/v1/drain").json()["state"] == "none"


# --------------------------------------------------------------------------------------------
# A full disk


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        # Killed jobs may hold their directories a moment longer: retry, then detach.
        for _ in range(50):
            done = subprocess.run(["umount", str(where)], capture_output=True, check=False)
            if done.returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "--lazy", str(where)], check=False)


def fill(directory: Path) -> Path:
    """Take every free byte of ``directory``'s file system; returns the file to delete."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        with contextlib.suppress(OSError):  # ENOSPC: full
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    return filler


def agent_children(agent: AgentProcess) -> list[int]:
    assert agent.proc is not None
    return [p.pid for p in psutil.Process(agent.proc.pid).children(recursive=True)]


def test_a_full_disk_refuses_writes_cleanly_and_a_restart_finds_what_was_acknowledged(
    tmp_path: Path,
) -> None:
    root = tmp_path / "a"
    with small_tmpfs(root / "state", "4m"), AgentProcess(root) as agent:
        argv, record = job_script(tmp_path, "refused")
        filler = fill(root / "state")
        with agent.client() as c:
            claim = c.post("/v1/claims", json={"command": argv, "max_job_retirement_time": 60})
            assert claim.status_code == 503, claim.text
            assert claim.json()["error"]["code"] == "store.error"
            drain = c.post("/v1/drain", json={"schedule": "graceful"})
            assert drain.status_code == 503, drain.text
            # Nothing half-applied: no claim, no request, no job program, no process left.
            assert c.get("/v1/claims").json()["claims"] == []
            assert c.get("/v1/drain").json() == {"state": "none", "last": None}
            assert c.get("/v1/ad").json()["machine"]["Start"] is True
            wait_for(lambda: agent_children(agent) == [], timeout=10)
            assert not Path(f"{record}.started").exists()
            # Room again: the same requests go through, with the ids nothing used up.
            filler.unlink()
            argv, record = job_script(tmp_path, "kept")
            kept = c.post("/v1/claims", json={"command": argv, "max_job_retirement_time": 60})
            assert kept.status_code == 201, kept.text
            agent.job_pids.add(kept.json()["job"]["pid"])
            assert kept.json()["id"] == "1"
            wait_for(lambda: Path(f"{record}.started").exists())
            pending = c.post("/v1/drain", json={"schedule": "graceful", "ttl": 3600})
            assert pending.status_code == 201, pending.text
            assert pending.json()["id"] == "1"
            # Full again: a commit is refused and leaves the request pending, the job running.
            filler = fill(root / "state")
            commit = c.post("/v1/drain/1/commit")
            assert commit.status_code == 503, commit.text
            assert c.get("/v1/drain").json()["state"] == "pending"
            filler.unlink()
        agent.kill9()
        agent.start()
        with agent.client() as c:
            claims = c.get("/v1/claims").json()["claims"]
            assert [(x["id"], x["job"]["pid"], x["activity"]) for x in claims] == [
                ("1", kept.json()["job"]["pid"], "Busy")
            ]
            now = c.get("/v1/drain").json()
            assert (now["id"], now["state"]) == ("1", "pending")
        assert agent.jobs_alive() == [kept.json()["job"]["pid"]]
        assert not Path(f"{tmp_path / 'refused.term'}.started").exists()
