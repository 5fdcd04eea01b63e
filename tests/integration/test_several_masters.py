"""Agents, the defrag daemon and the command line with several masters, as real processes.

Two SQLite masters sharing one pool key stand for a pool's masters: every agent and the
defrag daemon push their ads to each. The masters' leader election is not exercised here
(that is the etcd store's); a follower is played by a small HTTP server of the test's own
that answers every request with ``307`` to a real master, as a master that does not lead
answers a write.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.certificates import self_signed_or_skip
from tests.harness import AgentProcess, MasterProcess, job_script, wait_for
from tests.integration.test_defrag import DefragProcess
from tests.nodeagent.cli.test_cli_redirect import Answer, Arrived, redirect_to, serving

pytestmark = pytest.mark.integration

NS = 1_000_000_000
SCHEDULE = {
    "windows": [
        {
            "machine_ids": [{"hostname": "node1.test", "ip": "127.0.0.1"}],
            "unavailability": {
                "start": {"nanoseconds": 2_000_000_000 * NS},
                "duration": {"nanoseconds": 3600 * NS},
            },
        }
    ]
}


def _env(extra: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NODEAGENT_", "_NODEAGENT"))}
    return base | extra


def cli(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``nodeagent master ARGS`` as a subprocess, with ``env``'s NODEAGENT_ variables only."""
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", "master", *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(env),
    )


def on_socket(master: MasterProcess) -> dict[str, str]:
    return {"NODEAGENT_MASTER_SOCKET": str(master.socket)}


def ad_names(master: MasterProcess) -> set[str]:
    shown = cli("ads", "--json", "--projection", "Name", env=on_socket(master))
    assert shown.returncode == 0, shown.stderr
    return {ad["Name"] for ad in json.loads(shown.stdout)["ads"]}


def free_cpus(master: MasterProcess) -> int | None:
    """The free cores of node1's partitionable slot, as ``master`` holds its ad."""
    params = {
        "slots": "true",
        "constraint": "PartitionableSlot =?= true",
        "projection": "Cpus",
    }
    ads = master.call("GET", "/v1/ads", params=params).json()["ads"]
    return int(ads[0]["Cpus"]) if ads else None


def closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def masters(tmp_path: Path) -> Iterator[tuple[MasterProcess, MasterProcess]]:
    """Two masters with one pool key (the second's copied from the first's)."""
    first = MasterProcess(tmp_path / "m1", settings={"reconcile_interval": 0.2})
    key = tmp_path / "m2" / "state" / "pool.key"
    key.parent.mkdir(parents=True)
    key.write_bytes(first.key_file.read_bytes())
    key.chmod(0o600)
    second = MasterProcess(tmp_path / "m2", settings={"reconcile_interval": 0.2})
    with first, second:
        yield first, second


@pytest.fixture
def leader(shared_master: MasterProcess) -> MasterProcess:
    """The master the command line's redirects lead to (the followers are stand-ins):
    the module's, emptied before each test."""
    shared_master.make_empty()
    return shared_master


def agent_settings(
    masters: tuple[MasterProcess, ...], root: Path, node: str = "node1.test"
) -> dict[str, Any]:
    settings = masters[0].agent_settings(root, node=node, update_interval=0.5)
    del settings["url"]
    return {**settings, "urls": [m.url for m in masters]}


# --- the agents -----------------------------------------------------------------------------


def test_an_agent_pushes_its_ad_to_every_master_and_one_down_stops_no_push(
    masters: tuple[MasterProcess, MasterProcess], tmp_path: Path
) -> None:
    one, two = masters
    with AgentProcess(tmp_path / "node", master=agent_settings(masters, tmp_path / "node")) as a:
        wait_for(lambda: ad_names(one) == ad_names(two) == {"node1.test"})
        # a change reaches each master at once (not at the next periodic push)
        argv, _ = job_script(tmp_path, "job")
        a.claim(argv, cpus=2)
        wait_for(lambda: free_cpus(one) == free_cpus(two) == 6, timeout=10)
        one.stop()
        stopped = time.time()

        def heard_since(master: MasterProcess, moment: float) -> bool:
            params = {"projection": "MyCurrentTime"}
            ads = master.call("GET", "/v1/ads", params=params).json()["ads"]
            return bool(ads) and ads[0]["MyCurrentTime"] >= moment

        # the periodic pushes to the other go on, every 0.5 s, though one master is gone
        wait_for(lambda: heard_since(two, stopped + 2), timeout=10)
        a.claim(argv, cpus=1)
        wait_for(lambda: free_cpus(two) == 5, timeout=10)
        log = a.log_path.read_text()
        assert f"cannot push the ad to {one.url}" in log
        assert f"cannot push the ad to {two.url}" not in log


def test_a_url_and_urls_together_are_refused_at_start(tmp_path: Path) -> None:
    settings = {"url": closed_url(), "urls": [closed_url(), closed_url()]}
    agent = AgentProcess(tmp_path / "node", master=settings)
    run = subprocess.run(
        [sys.executable, "-m", "nodeagent", "run", "--config", str(agent.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_env({"NOTIFY_SOCKET": ""}),
    )
    assert run.returncode == 2
    assert "give url (one master) or urls (several masters), not both" in run.stderr


# --- the defrag daemon ----------------------------------------------------------------------


def test_the_defrag_daemon_reads_from_the_first_that_answers_and_publishes_to_each(
    masters: tuple[MasterProcess, MasterProcess], tmp_path: Path
) -> None:
    one, two = masters
    root = tmp_path / "defrag"
    (root / "state").mkdir(parents=True)
    key = root / "state" / "pool.key"
    key.write_bytes(one.key_file.read_bytes())
    key.chmod(0o600)
    token = root / "daemon.token"
    token.write_text(one.token("DAEMON", subject="defrag", node="defrag-several"))
    settings = {
        "name": "several",
        "interval": 0.3,
        "update_interval": 0.5,
        "master_urls": [closed_url(), one.url, two.url],
        "token_file": str(token),
    }

    def published(master: MasterProcess) -> bool:
        reply = master.call("GET", "/v1/ads/defrag-several", params={"type": "Defrag"})
        return reply.status_code == 200

    with DefragProcess(root, settings) as defrag:
        wait_for(lambda: published(one) and published(two))
        since = time.time()
        wait_for(lambda: (defrag.stats()["LastPollTime"] or 0) >= since + 1)  # a few cycles
        stats = defrag.stats()
        assert stats["QueryFailures"] == 0  # the first master, down, was passed over
        log = defrag.log_path.read_text()
        assert f"ads read from {one.url}; passed over" in log


# --- the command line -----------------------------------------------------------------------


def _schedule(master: MasterProcess) -> Any:
    return master.call("GET", "/maintenance/schedule").json()


def test_the_command_line_pointed_at_a_follower_writes_through_the_leader(
    leader: MasterProcess, tmp_path: Path
) -> None:
    token = tmp_path / "admin.token"
    token.write_text(leader.token("ADMINISTRATOR", subject="operator"))
    file = tmp_path / "window.json"
    file.write_text(json.dumps(SCHEDULE))
    with serving(redirect_to(lambda: leader.url)) as follower:
        env = {
            "NODEAGENT_MASTER_HOST": f"{follower.url},{leader.url}",
            "NODEAGENT_MASTER_TOKEN_FILE": str(token),
        }
        result = cli("schedule", "set", str(file), "--yes", "--json", env=env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == SCHEDULE  # the leader's GET, through the follower
        down = cli("down", "--yes", "node1.test/127.0.0.1", env=env)
        assert down.returncode == 10, down.stderr  # no agent for node1.test: pending
    assert _schedule(leader) == SCHEDULE
    status = leader.call("GET", "/maintenance/status").json()
    assert status["down_machines"] == [{"hostname": "node1.test", "ip": "127.0.0.1"}]
    sent = [(seen.method, seen.path.split("?")[0]) for seen in follower.arrived]
    assert sent == [
        ("POST", "/v1/maintenance/schedule/preview"),
        ("PUT", "/v1/maintenance/schedule"),  # the preview's version as its precondition
        ("GET", "/maintenance/schedule"),
        ("POST", "/v1/maintenance/down/preview"),
        ("POST", "/machine/down"),
    ]
    assert follower.arrived[0].body == follower.arrived[1].body == file.read_bytes()
    assert follower.arrived[1].path.startswith("/v1/maintenance/schedule?if_version=")
    audit = (leader.root / "state" / "audit.log").read_text().splitlines()
    subjects = {json.loads(line).get("subject") for line in audit}
    assert "operator" in subjects  # the token arrived at the leader with the request


def test_from_the_unix_socket_the_command_line_follows_no_redirect(
    leader: MasterProcess, tmp_path: Path
) -> None:
    """The socket names no TCP master: the leader is reached with --host, listing it."""
    socket_path = tmp_path / "follower.sock"
    token = tmp_path / "admin.token"
    token.write_text(leader.token("ADMINISTRATOR"))
    with serving(redirect_to(lambda: leader.url), unix=socket_path) as follower:
        env = {"NODEAGENT_MASTER_SOCKET": str(socket_path)}
        for given in (env, {**env, "NODEAGENT_MASTER_TOKEN_FILE": str(token)}):
            refused = cli("down", "--yes", "node1.test/127.0.0.1", env=given)
            assert refused.returncode == 5
            assert refused.stderr.startswith(
                f"master.redirect_refused: the master at unix:{socket_path} redirected to "
                f"{leader.url}/v1/maintenance/down/preview, which is not one of the masters "
                "given (none)"
            )
        as_json = cli("down", "--yes", "node1.test/127.0.0.1", "--json", env=env)
        assert as_json.returncode == 5
        assert json.loads(as_json.stdout)["error"]["leader"] == leader.url
        assert leader.call("GET", "/maintenance/status").json() == {}  # nothing reached it
    assert len(follower.arrived) == 3


def test_more_than_three_redirects_in_a_row_are_not_followed(
    leader: MasterProcess, tmp_path: Path
) -> None:
    token = tmp_path / "admin.token"
    token.write_text(leader.token("ADMINISTRATOR"))
    with (
        serving(redirect_to(lambda: leader.url)) as f3,
        serving(redirect_to(lambda: f3.url)) as f2,
        serving(redirect_to(lambda: f2.url)) as f1,
        serving(redirect_to(lambda: f1.url)) as f0,
    ):
        env = {"NODEAGENT_MASTER_TOKEN_FILE": str(token)}
        pool = ",".join([leader.url, f3.url, f2.url, f1.url])
        leader.call("POST", "/maintenance/schedule", json=SCHEDULE)
        three = cli("schedule", "clear", env={**env, "NODEAGENT_MASTER_HOST": f"{f1.url},{pool}"})
        assert three.returncode == 0, three.stderr
        assert _schedule(leader) == {}
        leader.call("POST", "/maintenance/schedule", json=SCHEDULE)
        four = cli("schedule", "clear", env={**env, "NODEAGENT_MASTER_HOST": f"{f0.url},{pool}"})
        assert four.returncode == 5
        assert four.stderr.startswith("master.too_many_redirects: POST /maintenance/schedule")
    assert _schedule(leader) == SCHEDULE  # the fourth redirect was not followed


def test_a_redirect_from_tls_to_plain_http_is_not_followed_with_a_token(
    leader: MasterProcess, tmp_path: Path
) -> None:
    import ssl

    cert, key = self_signed_or_skip(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    token = tmp_path / "admin.token"
    token.write_text(leader.token("ADMINISTRATOR"))
    answered: list[Arrived] = []

    def leader_over_tls(seen: Arrived) -> Answer:
        answered.append(seen)
        return redirect_to(lambda: leader.url)(seen)

    follow: Callable[[Arrived], Answer] = leader_over_tls
    with serving(follow, tls=tls) as follower:
        env = {
            "NODEAGENT_MASTER_HOST": f"{follower.url},{leader.url}",
            "NODEAGENT_MASTER_TOKEN_FILE": str(token),
            "SSL_CERT_FILE": str(cert),
        }
        result = cli("down", "--yes", "node1.test/127.0.0.1", env=env)
    assert result.returncode == 5, result.stderr
    assert result.stderr.startswith(
        f"master.insecure_redirect: the master at {follower.url} redirected to "
        f"{leader.url}/v1/maintenance/down/preview without TLS"
    )
    assert len(answered) == 1  # reached over TLS, with the token
    assert answered[0].authorization is not None
    assert leader.call("GET", "/maintenance/status").json() == {}
