"""Start-up safety of the three daemons, as real processes.

* A start that cannot go on ends with one line on stderr, ``nodeagent: <what, where, what
  to do>``, no traceback, and the documented exit status: 2 configuration (the pool key),
  7 state (a corrupt or unreadable store, a read-only state directory), 8 the agent's
  state lost after a previous life, 9 what cannot be had now (the state directory, the
  socket or a TCP port another process holds; room on a full file system). Jobs are left
  alone.
* An ``agent.db`` deleted or emptied while its jobs still run is refused until the
  operator says ``--recover`` (the running jobs are claimed again under their old claim
  ids; ids continue) or ``--fresh`` (no claims; ids continue).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess, MasterProcess, job_script, wait_for

pytestmark = pytest.mark.integration

POLICY = {"max_job_retirement_time": 600, "machine_max_vacate_time": 5}


def start_fails(command: list[str], config: Path, *, status: int) -> str:
    """Run a daemon that must not start; returns its one ``nodeagent:`` line."""
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent", *command, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NOTIFY_SOCKET": "", "COLUMNS": "200"},
        check=False,
    )
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "╭" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("nodeagent: ")]
    assert len(lines) == 1, done.stderr
    return lines[0]


def started(record: Path) -> bool:
    return Path(f"{record}.started").exists()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@contextlib.contextmanager
def listening_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


@contextlib.contextmanager
def mounted(where: Path, *options: str) -> Iterator[Path]:
    """A small tmpfs at ``where`` (root only; skipped elsewhere)."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "--lazy", str(where)], check=False)


# --------------------------------------------------------------------------------------------
# One line and a status, for each daemon


def test_a_corrupt_agent_db_is_one_line_and_status_7_and_jobs_stay(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "a", policy=POLICY) as agent:
        argv, record = job_script(tmp_path, "job")
        claim = agent.claim(argv)
        wait_for(lambda: started(record))
        agent.kill9()
        db = tmp_path / "a" / "state" / "agent.db"
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        db.write_bytes(b"this is not what the agent wrote\n" * 300)
        line = start_fails(["run"], agent.config_path, status=7)
        assert str(db) in line
        assert "not a SQLite database" in line
        assert "move it aside" in line
        assert alive(claim["job"]["pid"])
        assert not (tmp_path / "a" / "run" / "nodeagent.sock").exists()


def test_an_agent_db_whose_state_cannot_be_read_is_status_7(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "a", policy=POLICY) as agent:
        agent.stop()
        db = tmp_path / "a" / "state" / "agent.db"
        with contextlib.closing(sqlite3.connect(db)) as conn, conn:
            conn.execute("UPDATE agent_state SET machine = ?", (json.dumps({"version": 1}),))
        line = start_fails(["run"], agent.config_path, status=7)
        assert str(db) in line
        assert "cannot read" in line
        assert "--recover" in line


def test_a_damaged_page_is_found_at_start(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "a", policy=POLICY) as agent:
        agent.stop()  # a clean stop leaves the whole database in agent.db (no -wal)
        db = tmp_path / "a" / "state" / "agent.db"
        data = bytearray(db.read_bytes())
        page = 4096
        assert len(data) >= 2 * page
        data[page : 2 * page] = b"\xff" * page  # page 2: the state table's b-tree
        db.write_bytes(bytes(data))
        line = start_fails(["run"], agent.config_path, status=7)
        assert str(db) in line
        assert "move it aside" in line


def test_a_read_only_state_directory_is_status_7(tmp_path: Path) -> None:
    root = tmp_path / "a"
    agent = AgentProcess(root, policy=POLICY)
    with mounted(root / "state"):
        with agent:
            agent.stop()
        subprocess.run(["mount", "-o", "remount,ro", str(root / "state")], check=True)
        line = start_fails(["run"], agent.config_path, status=7)
    assert str(root / "state") in line
    assert "read-only file system" in line


def test_a_full_state_directory_at_start_is_status_9(tmp_path: Path) -> None:
    root = tmp_path / "a"
    agent = AgentProcess(root, policy=POLICY)
    with mounted(root / "state"):
        with agent:
            agent.stop()  # a clean stop: agent.db alone, no -wal or -shm to reuse
        filler = os.open(root / "state" / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            with contextlib.suppress(OSError):  # ENOSPC: full
                while True:
                    os.write(filler, b"\0" * 65536)
        finally:
            os.close(filler)
        line = start_fails(["run"], agent.config_path, status=9)
    assert str(root / "state" / "agent.db") in line
    assert "its file system is full: free some space" in line


def test_an_unreadable_pool_key_is_status_2(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "a") as agent:
        agent.stop()
        agent.key_file.chmod(0o644)
        line = start_fails(["run"], agent.config_path, status=2)
    assert str(agent.key_file) in line
    assert "chmod 600" in line


def test_a_second_agent_on_the_same_state_is_status_9_and_the_first_serves_on(
    tmp_path: Path,
) -> None:
    with AgentProcess(tmp_path / "a") as agent:
        assert agent.proc is not None
        line = start_fails(["run"], agent.config_path, status=9)
        assert f"another daemon (pid {agent.proc.pid}) runs on the state directory" in line
        assert agent.call("GET", "/healthz").status_code == 200


def test_another_daemon_on_the_socket_is_status_9(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "a") as agent:
        other = AgentProcess(tmp_path / "b")
        other.config_path.write_text(
            other.config_path.read_text().replace(
                f'runtime_dir = "{tmp_path / "b" / "run"}"',
                f'runtime_dir = "{tmp_path / "a" / "run"}"',
            )
        )
        line = start_fails(["run"], other.config_path, status=9)
        assert f"another daemon is listening on {agent.socket}" in line
        assert agent.call("GET", "/healthz").status_code == 200
        assert (tmp_path / "a" / "run" / "nodeagent.json").exists()


def test_a_port_in_use_is_status_9_for_each_daemon(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "a")
    master = MasterProcess(tmp_path / "m")
    with listening_port() as port:
        for daemon in (agent, master):
            daemon.config_path.write_text(
                daemon.config_path.read_text().replace("127.0.0.1:0", f"127.0.0.1:{port}")
            )
            line = start_fails(list(daemon.command), daemon.config_path, status=9)
            assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in line
            assert not daemon.socket.exists()


def test_a_corrupt_master_db_is_status_7(tmp_path: Path) -> None:
    master = MasterProcess(tmp_path / "m")
    db = tmp_path / "m" / "state" / "master.db"
    db.write_bytes(b"\x00not sqlite" * 100)
    line = start_fails(["master", "run"], master.config_path, status=7)
    assert str(db) in line
    assert "not a SQLite database" in line


def test_the_defrag_daemon_without_its_pool_key_is_status_2(tmp_path: Path) -> None:
    config = tmp_path / "defrag.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\nruntime_dir = "{tmp_path / "run"}"\n'
        'listen = []\nmaster_url = "http://127.0.0.1:9"\n'
    )
    line = start_fails(["defrag", "run"], config, status=2)
    assert str(tmp_path / "state" / "pool.key") in line


def test_a_corrupt_defrag_db_is_status_7(tmp_path: Path) -> None:
    master = MasterProcess(tmp_path / "m")
    state = tmp_path / "d" / "state"
    state.mkdir(parents=True)
    (state / "pool.key").write_bytes(master.key_file.read_bytes())
    (state / "pool.key").chmod(0o600)
    (state / "defrag.db").write_text("not a database, " * 100)
    config = tmp_path / "defrag.toml"
    config.write_text(
        f'state_dir = "{state}"\nruntime_dir = "{tmp_path / "d" / "run"}"\n'
        'listen = []\nmaster_url = "http://127.0.0.1:9"\n'
    )
    line = start_fails(["defrag", "run"], config, status=7)
    assert str(state / "defrag.db") in line


# --------------------------------------------------------------------------------------------
# A previous life without its state


def previous_life(tmp_path: Path, agent: AgentProcess) -> tuple[list[dict[str, Any]], Path]:
    """Two jobs, two drain requests (1 and 2, cancelled), a released third job; then the
    agent is killed and its ``agent.db`` deleted."""
    claims = []
    for name in ("first", "second"):
        argv, record = job_script(tmp_path, name)
        claims.append(agent.claim(argv))
        wait_for(lambda record=record: started(record))
    gone = agent.claim(["sleep", "60"])
    with agent.client() as c:
        for _ in range(2):
            assert c.post("/v1/drain", json={"schedule": "graceful"}).status_code == 201
            assert c.delete("/v1/drain").status_code == 200
        assert c.delete(f"/v1/claims/{gone['id']}").status_code == 200
    wait_for(lambda: not alive(gone["job"]["pid"]))
    agent.kill9()
    db = agent.root / "state" / "agent.db"
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        path.unlink(missing_ok=True)
    return claims, db


@pytest.mark.parametrize("lost", ["deleted", "empty"])
def test_a_lost_agent_db_after_a_previous_life_is_refused(tmp_path: Path, lost: str) -> None:
    with AgentProcess(tmp_path / "a", policy=POLICY) as agent:
        claims, db = previous_life(tmp_path, agent)
        if lost == "empty":
            db.write_bytes(b"")
        line = start_fails(["run"], agent.config_path, status=8)
        assert f"{db} holds no state, yet this node had a previous life" in line
        assert "3 job directories" in line
        assert "2 of their jobs still running" in line
        for claim in claims:
            assert str(claim["job"]["pid"]) in line
        assert "last drain request 2" in line
        assert "--recover" in line
        assert "--fresh" in line
        assert all(alive(c["job"]["pid"]) for c in claims)
        # Refused again, the same way, until the operator decides.
        start_fails(["run"], agent.config_path, status=8)


def test_recover_claims_the_running_jobs_again_and_ids_continue(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "a", policy=POLICY, cpus=8) as agent:
        claims, _ = previous_life(tmp_path, agent)
        agent.command = ("run", "--recover")
        agent.start()
        with agent.client() as c:
            now = c.get("/v1/claims").json()["claims"]
            assert [(x["id"], x["job"]["pid"]) for x in now] == [
                (c0["id"], c0["job"]["pid"]) for c0 in claims
            ]
            assert [x["resources"]["cpus"] for x in now] == [4, 4]
            assert [x["activity"] for x in now] == ["Busy", "Busy"]
            # The audit log holds each one's whole life: run time from the process start.
            for found, before in zip(now, claims, strict=True):
                assert abs(found["job"]["started_at"] - before["job"]["started_at"]) < 1.5
            drain = c.post("/v1/drain", json={"schedule": "quick", "commit": True})
            assert drain.status_code == 201, drain.text
            assert drain.json()["id"] == "3"
            wait_for(lambda: c.get("/v1/drain").json()["state"] == "drained")
            assert c.delete("/v1/drain").status_code == 200
            new = c.post("/v1/claims", json={"command": ["sleep", "60"]})
            assert new.status_code == 201, new.text
            agent.job_pids.add(new.json()["job"]["pid"])
            assert new.json()["id"] == "4"
        assert all(not alive(c["job"]["pid"]) for c in claims)
        # The recovered state is an ordinary one: the next start needs no flag.
        agent.stop()
        agent.command = ("run",)
        agent.start()
        with agent.client() as c:
            assert [x["id"] for x in c.get("/v1/claims").json()["claims"]] == ["4"]


def test_fresh_starts_with_no_claims_and_ids_continue(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "a", policy=POLICY) as agent:
        claims, _ = previous_life(tmp_path, agent)
        agent.command = ("run", "--fresh")
        agent.start()
        with agent.client() as c:
            assert c.get("/v1/claims").json()["claims"] == []
            drain = c.post("/v1/drain", json={"schedule": "graceful"})
            assert drain.json()["id"] == "3"
            assert c.delete("/v1/drain").status_code == 200
            new = c.post("/v1/claims", json={"command": ["sleep", "60"]})
            agent.job_pids.add(new.json()["job"]["pid"])
            assert new.json()["id"] == "4"
        assert all(alive(c["job"]["pid"]) for c in claims)


def test_recover_and_fresh_together_are_a_usage_error(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "a")
    both = ["run", "--recover", "--fresh", "--config", str(agent.config_path)]
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent", *both],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "exclude each other" in done.stderr
    assert not (tmp_path / "a" / "state").exists()


def test_a_new_node_starts_without_a_flag(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "a") as agent, agent.client() as c:
        assert c.get("/v1/claims").json()["claims"] == []


@pytest.mark.parametrize("files", [("",), ("", "-wal", "-shm")], ids=["db", "db-wal-shm"])
def test_an_agent_db_deleted_under_the_running_agent_is_written_anew(
    tmp_path: Path, files: tuple[str, ...]
) -> None:
    with AgentProcess(tmp_path / "a", policy=POLICY) as agent:
        first = agent.claim(["sleep", "60"])
        db = tmp_path / "a" / "state" / "agent.db"
        for suffix in files:
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        second = agent.claim(["sleep", "60"])  # the next write re-creates the file
        assert db.exists()
        assert "was deleted or replaced while the agent ran" in agent.log_path.read_text()
        agent.kill9()
        agent.start()  # an ordinary start: the state is there
        with agent.client() as c:
            claims = c.get("/v1/claims").json()["claims"]
        assert [(x["id"], x["job"]["pid"]) for x in claims] == [
            (first["id"], first["job"]["pid"]),
            (second["id"], second["job"]["pid"]),
        ]
