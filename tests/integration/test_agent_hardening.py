"""The agent daemon against a hostile caller and a failing disk, over real sockets.

* Bodies are refused before they are read: anonymous ones with 401, oversized ones with 413,
  without the daemon's memory growing; the refusal is sent at once, the rest of the body is
  read and dropped, and the connection closed.
* Stalled connections are closed after the read timeout.
* A state directory on a full file system (a small tmpfs, where the test may mount one):
  every write is a clean 503, no job program starts, nothing is half-applied, and a restart
  finds exactly what was acknowledged.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.harness import AgentProcess, job_script, wait_for
from tests.rawhttp import (
    MIB,
    check_stalled_connections_released,
    closed_by_peer,
    post_head,
    read_reply,
    rss_mib,
    send_whole_body,
)


def push_until_refused(sock: socket.socket, limit: int) -> int:
    """Send body bytes until the peer stops taking them; returns how many it took."""
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
                status, headers, body = read_reply(sock)  # with 49.75 MiB still to come
                assert status == expected, body
                assert headers["connection"] == "close"
            # The rest is read and dropped, never held; then the agent closes.
            taken = [push_until_refused(sock, declared) for sock in socks]
            assert all(closed_by_peer(sock) for sock in socks)
        finally:
            for sock in socks:
                sock.close()
        assert min(taken) >= declared - 256 * 1024 - 1
        assert rss_mib(agent.proc.pid) - before < 20
        with agent.client() as c:
            assert c.get("/v1/drain").json()["state"] == "none"


@pytest.fixture(scope="module")
def shared_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    with AgentProcess(tmp_path_factory.mktemp("shared") / "a") as agent:
        yield agent


def test_a_refused_body_gets_its_reply_and_a_closed_connection(shared_agent: AgentProcess) -> None:
    """Sent whole, as plain clients send (the agent must read what it refuses, or the
    client's ``sendall`` never ends), then answered, then closed: 20 times in a row."""
    administrator = shared_agent.token("ADMINISTRATOR")
    for _ in range(20):
        status, headers, body = send_whole_body(shared_agent.url, "/v1/claims", 8 * MIB, None)
        assert (status, headers["connection"]) == (401, "close"), body
        assert json.loads(body)["error"]["code"] == "auth.unauthenticated"
        status, _, body = send_whole_body(shared_agent.url, "/v1/claims", 8 * MIB, administrator)
        assert status == 413, body
        assert json.loads(body)["error"]["code"] == "request.too_large"
    with shared_agent.client() as c:
        assert c.get("/v1/claims").json()["claims"] == []


def test_stalled_connections_are_released_by_the_read_timeout(tmp_path: Path) -> None:
    """300 anonymous connections that declare a body and stall: the agent answers those it
    refuses at once, and closes every one after ``read_timeout``, descriptors and all."""
    with AgentProcess(tmp_path / "a", extra='read_timeout = "1s"') as agent:
        assert agent.proc is not None
        check_stalled_connections_released(agent.url, agent.proc.pid, "/v1/claims")
        with agent.client() as c:
            assert c.get("/healthz").status_code == 200


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
