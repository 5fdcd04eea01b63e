"""A master whose ad pushes are taken by ingest worker processes (``ingest_workers``):
real agents' ads come through them, refusals are the master's own, every other request is
relayed to the master as the TCP client's (over TLS too), a killed worker is started again
while the master takes the pushes itself, and the workers end with the master, even a
killed one.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import stat
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.certificates import self_signed_or_skip
from tests.etcd import free_port
from tests.harness import AgentProcess, MasterProcess, wait_for

pytestmark = pytest.mark.integration

NAMES = ("a.test", "b.test")
_json = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def pool(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MasterProcess, dict[str, AgentProcess]]]:
    """A master with one ingest worker (niceness 7 over the master's), and two agents
    pushing every second."""
    root = tmp_path_factory.mktemp("ingest")
    settings = {"ingest_workers": 1, "ingest_worker_nice": 7}
    with ExitStack() as stack:
        master = stack.enter_context(MasterProcess(root / "master", settings=settings))
        agents = {
            name: stack.enter_context(
                AgentProcess(
                    root / name,
                    hostname=name,
                    master=master.agent_settings(root / name, node=name),
                )
            )
            for name in NAMES
        }
        wait_for(lambda: held(master) == set(NAMES))
        yield master, agents


def held(master: MasterProcess) -> set[str]:
    return {ad["Name"] for ad in master.call("GET", "/v1/ads").json()["ads"]}


def metric(master: MasterProcess, name: str) -> float:
    for line in master.call("GET", "/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not exported")


def workers_of(master: MasterProcess) -> list[int]:
    assert master.proc is not None
    pids = []
    for child in psutil.Process(master.proc.pid).children():
        try:
            if "nodeagent.master._ingest_worker" in child.cmdline():
                pids.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return pids


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def heard(master: MasterProcess, name: str) -> float:
    machine: dict[str, Any] = master.call("GET", f"/v1/ads/{name}").json()["machine"]
    return float(machine["LastHeardFrom"])


def test_the_agents_ads_come_through_the_ingest_worker(
    pool: tuple[MasterProcess, dict[str, AgentProcess]],
) -> None:
    master, agents = pool
    wait_for(lambda: metric(master, "nodeagent_master_ads_taken_by_workers_total") >= 4)
    assert metric(master, "nodeagent_master_ingest_workers") == 1
    assert metric(master, "nodeagent_master_ads_prepared_by_workers_total") >= 4
    for name, agent in agents.items():
        served = master.call("GET", f"/v1/ads/{name}").json()
        assert served["machine"]["MyAddress"] == agent.url
        assert served["slots"], name


def test_a_push_through_a_worker_is_refused_as_the_master_refuses_it(
    pool: tuple[MasterProcess, dict[str, AgentProcess]],
) -> None:
    master, agents = pool
    wait_for(lambda: metric(master, "nodeagent_master_ingest_workers") == 1)
    token = master.token("DAEMON", subject="agent@a.test", node="a.test")
    b_ad = agents["b.test"].call("GET", "/v1/ad").json()
    b_before = master.call("GET", "/v1/ads/b.test").json()["machine"]
    b_before.pop("LastHeardFrom")
    taken = metric(master, "nodeagent_master_ads_taken_by_workers_total")
    prepared = metric(master, "nodeagent_master_ads_prepared_by_workers_total")
    with master.client(token) as a_node:
        foreign = a_node.post("/v1/ads", json=b_ad)
        assert (foreign.status_code, foreign.json()["error"]["code"]) == (403, "auth.wrong_node")
        broken = a_node.post("/v1/ads", content=b'{"machine": ', headers=_json)
        assert (broken.status_code, broken.json()["error"]["code"]) == (422, "request.invalid")
        own = agents["a.test"].call("GET", "/v1/ad").json()
        own["machine"]["OpSys"] = "LINUX\x1b[2J"
        control = a_node.post("/v1/ads", json=own)
        assert (control.status_code, control.json()["error"]["code"]) == (422, "request.invalid")
        huge = a_node.post("/v1/ads", content=b" " * (4 << 20 | 1), headers=_json)
        assert (huge.status_code, huge.json()["error"]["code"]) == (413, "request.too_large")
    anonymous = httpx.post(f"{master.url}/v1/ads", content=b"{}", headers=_json)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Bearer"
    b_after = master.call("GET", "/v1/ads/b.test").json()["machine"]
    b_after.pop("LastHeardFrom")
    assert b_after["MyAddress"] == b_before["MyAddress"] == agents["b.test"].url
    assert b_after["Name"] == "b.test"
    # the three with a body made ready were answered by the master; the 413 and the
    # anonymous push were refused by the worker from their heads
    assert metric(master, "nodeagent_master_ads_taken_by_workers_total") >= taken + 3
    assert metric(master, "nodeagent_master_ads_prepared_by_workers_total") >= prepared + 3
    pushes = master.call("GET", "/metrics").text
    assert 'nodeagent_master_http_request_seconds_count{method="POST",route="/v1/ads"}' in pushes


def test_other_requests_are_relayed_to_the_master_as_the_tcp_clients(
    pool: tuple[MasterProcess, dict[str, AgentProcess]],
) -> None:
    master, agents = pool
    wait_for(lambda: metric(master, "nodeagent_master_ingest_workers") == 1)
    relay = master.root / "run" / "master-relay.sock"
    assert stat.S_IMODE(relay.stat().st_mode) == 0o600
    daemon = master.token("DAEMON", subject="agent@a.test", node="a.test")
    with master.client(daemon) as a_node:
        # one kept connection: a push the worker takes, then requests it relays
        own = agents["a.test"].call("GET", "/v1/ad").json()
        assert a_node.post("/v1/ads", json=own).status_code == 200
        refused = a_node.post("/maintenance/schedule", json={})  # the master's refusal
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "auth.forbidden")
        assert a_node.get("/v1/ads/b.test").json()["machine"]["Name"] == "b.test"
        assert a_node.get("/healthz").status_code == 200
    # a write over TCP is audited with the TCP client's address, not the Unix socket's
    admin = master.token("ADMINISTRATOR", subject="relayed-admin")
    with master.client(admin) as client:
        listed = client.get("/v1/ads")
        assert listed.status_code == 200
        assert {ad["Name"] for ad in listed.json()["ads"]} == set(NAMES)
        streamed = client.get("/v1/maintenance/plan", params={"format": "jsonl"})
        assert streamed.status_code == 200
        written = client.post("/machine/up", json=[{"hostname": "nowhere.test"}])
        assert written.status_code == 400  # Mesos: not DOWN; refused by the master
    audit = master.root / "state" / "audit.log"
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    mine = [entry for entry in entries if entry.get("subject") == "relayed-admin"]
    assert mine, entries[-3:]
    assert all(entry["peer"].startswith("127.0.0.1:") for entry in mine)


def niceness(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def test_the_workers_yield_the_cores_to_the_master(
    pool: tuple[MasterProcess, dict[str, AgentProcess]],
) -> None:
    """``ingest_worker_nice`` is added to the master's niceness, whatever it is."""
    master, _ = pool
    assert master.proc is not None
    workers = wait_for(lambda: workers_of(master) or None)
    assert [niceness(pid) for pid in workers] == [min(niceness(master.proc.pid) + 7, 19)]


def test_a_killed_ingest_worker_is_started_again_and_no_push_is_lost(
    pool: tuple[MasterProcess, dict[str, AgentProcess]],
) -> None:
    master, agents = pool
    (worker,) = wait_for(lambda: workers_of(master) or None)
    os.kill(worker, signal.SIGKILL)
    since = heard(master, "a.test")
    # the agents' pushes keep being taken: by the master while no worker runs
    wait_for(lambda: heard(master, "a.test") > since + 1)
    wait_for(lambda: metric(master, "nodeagent_master_ingest_worker_exits_total") >= 1)
    (again,) = wait_for(lambda: [p for p in workers_of(master) if p != worker] or None)
    assert not alive(worker)
    wait_for(lambda: metric(master, "nodeagent_master_ingest_workers") == 1)
    # a new connection goes to the worker again (those the master took while no worker
    # ran stay with it while they are kept alive)
    taken = metric(master, "nodeagent_master_ads_taken_by_workers_total")
    token = master.token("DAEMON", subject="agent@a.test", node="a.test")
    own = agents["a.test"].call("GET", "/v1/ad").json()
    with master.client(token) as a_node:
        assert a_node.post("/v1/ads", json=own).status_code == 200
    assert metric(master, "nodeagent_master_ads_taken_by_workers_total") == taken + 1
    assert again in workers_of(master)
    assert master.proc is not None
    assert niceness(again) == min(niceness(master.proc.pid) + 7, 19)  # as the first


def slot_clocks(ad: dict[str, Any]) -> list[int]:
    return [slot["MyCurrentTime"] for slot in ad["slots"]]


def test_the_agents_push_their_moving_values_alone_once_the_master_holds_their_slot_ads(
    pool: tuple[MasterProcess, dict[str, AgentProcess]],
) -> None:
    """After a whole ad, an agent pushes its slot ads' moving values alone (through the
    worker): the master serves the agent's slot ads, moved on."""
    master, agents = pool
    wait_for(lambda: metric(master, "nodeagent_master_ads_moving_values_total") >= 4)
    for name, agent in agents.items():
        own = agent.call("GET", "/v1/ad").json()
        served = master.call("GET", f"/v1/ads/{name}").json()
        assert [s["Name"] for s in served["slots"]] == [s["Name"] for s in own["slots"]]
        before = slot_clocks(served)
        wait_for(
            lambda n=name, b=before: all(
                now > then
                for now, then in zip(
                    slot_clocks(master.call("GET", f"/v1/ads/{n}").json()), b, strict=True
                )
            )
        )


def test_a_master_started_anew_is_sent_the_whole_ad_and_then_the_moving_values(
    tmp_path: Path,
) -> None:
    """An agent held still while its master restarts pushes its moving values to a master
    that holds none of its slot ads: 409 ``ad.slots_unknown``, and the whole ad at once,
    then the moving values again."""
    master = MasterProcess(tmp_path / "master", settings={"ingest_workers": 1})
    config = master.config_path.read_text()  # the same port after the restart
    master.config_path.write_text(config.replace("127.0.0.1:0", f"127.0.0.1:{free_port()}"))
    with ExitStack() as stack:
        stack.enter_context(master)
        agent = stack.enter_context(
            AgentProcess(
                tmp_path / "agent",
                hostname="r.test",
                master=master.agent_settings(tmp_path / "agent", node="r.test"),
            )
        )
        wait_for(lambda: metric(master, "nodeagent_master_ads_moving_values_total") >= 1)
        assert agent.proc is not None
        agent.proc.send_signal(signal.SIGSTOP)
        try:
            assert master.stop() == 0
            master.start()
            assert held(master) == set()
        finally:
            agent.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: metric(master, "nodeagent_master_ads_moving_values_total") >= 1)
        assert metric(master, "nodeagent_master_ads_slots_unknown_total") >= 1
        assert held(master) == {"r.test"}
        own = agent.call("GET", "/v1/ad").json()
        served = master.call("GET", "/v1/ads/r.test").json()
        assert [s["Name"] for s in served["slots"]] == [s["Name"] for s in own["slots"]]


@pytest.mark.parametrize("end", ["stopped", "killed"])
def test_the_ingest_workers_end_with_the_master(tmp_path: Path, end: str) -> None:
    master = MasterProcess(tmp_path / "master", settings={"ingest_workers": 2})
    with master:
        workers = wait_for(lambda: (found := workers_of(master)) and len(found) == 2 and found)
        if end == "killed":  # the workers see the end of their input and exit by themselves
            assert master.proc is not None
            master.proc.kill()
            master.proc.wait(timeout=20)
        else:
            assert master.stop() == 0
        wait_for(lambda: not any(alive(pid) for pid in workers))


def test_over_tls_the_workers_take_the_pushes_and_relay_the_rest(tmp_path: Path) -> None:
    cert, key = self_signed_or_skip(tmp_path)
    settings = {"ingest_workers": 1, "tls_cert": str(cert), "tls_key": str(key)}
    with MasterProcess(tmp_path / "master", settings=settings) as master:
        assert master.url.startswith("https://")
        wait_for(lambda: metric(master, "nodeagent_master_ingest_workers") == 1)
        agent = AgentProcess(
            tmp_path / "n.test",
            hostname="n.test",
            master=master.agent_settings(tmp_path / "n.test", node="n.test"),
        )
        agent.env["SSL_CERT_FILE"] = str(cert)
        with agent:
            wait_for(lambda: "n.test" in held(master))
        wait_for(lambda: metric(master, "nodeagent_master_ads_taken_by_workers_total") >= 1)
        admin = master.token("READ")
        reply = httpx.get(
            f"{master.url}/v1/ads/n.test",
            headers={"Authorization": f"Bearer {admin}"},
            verify=ssl.create_default_context(cafile=str(cert)),
        )
        assert reply.status_code == 200
        assert reply.json()["machine"]["Name"] == "n.test"
