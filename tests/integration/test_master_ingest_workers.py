"""A master whose ad pushes are prepared by ingest worker processes (``ingest_workers``):
real agents' ads come through them, refusals are the master's own, a killed worker is
started again without a push lost, and the workers end with the master, even a killed one.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.harness import AgentProcess, MasterProcess, wait_for

pytestmark = pytest.mark.integration

NAMES = ("a.test", "b.test")


@pytest.fixture(scope="module")
def pool(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MasterProcess, dict[str, AgentProcess]]]:
    """A master with one ingest worker, and two agents pushing every second."""
    root = tmp_path_factory.mktemp("ingest")
    with ExitStack() as stack:
        master = stack.enter_context(MasterProcess(root / "master", settings={"ingest_workers": 1}))
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
    wait_for(lambda: metric(master, "nodeagent_master_ads_prepared_by_workers_total") >= 4)
    assert metric(master, "nodeagent_master_ingest_workers") == 1
    for name, agent in agents.items():
        served = master.call("GET", f"/v1/ads/{name}").json()
        assert served["machine"]["MyAddress"] == agent.url
        assert served["slots"], name


def test_a_push_through_a_worker_is_refused_as_the_master_refuses_it(
    pool: tuple[MasterProcess, dict[str, AgentProcess]],
) -> None:
    master, agents = pool
    token = master.token("DAEMON", subject="agent@a.test", node="a.test")
    b_ad = agents["b.test"].call("GET", "/v1/ad").json()
    b_before = master.call("GET", "/v1/ads/b.test").json()["machine"]
    b_before.pop("LastHeardFrom")
    fallbacks = metric(master, "nodeagent_master_ingest_fallbacks_total")
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
    anonymous = httpx.post(f"{master.url}/v1/ads", content=b"{}", headers=_json)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Bearer"
    b_after = master.call("GET", "/v1/ads/b.test").json()["machine"]
    b_after.pop("LastHeardFrom")
    assert b_after["MyAddress"] == b_before["MyAddress"] == agents["b.test"].url
    assert b_after["Name"] == "b.test"
    # each refused by the worker (the anonymous one before its body was read)
    assert metric(master, "nodeagent_master_ingest_fallbacks_total") == fallbacks
    assert metric(master, "nodeagent_master_ads_prepared_by_workers_total") >= prepared + 3


_json = {"content-type": "application/json"}


def test_a_killed_ingest_worker_is_started_again_and_no_push_is_lost(
    pool: tuple[MasterProcess, dict[str, AgentProcess]],
) -> None:
    master, _ = pool
    (worker,) = wait_for(lambda: workers_of(master) or None)
    os.kill(worker, signal.SIGKILL)
    since = heard(master, "a.test")
    # the agents' pushes keep being taken: by the master while no worker runs
    wait_for(lambda: heard(master, "a.test") > since + 1)
    wait_for(lambda: metric(master, "nodeagent_master_ingest_worker_exits_total") >= 1)
    (again,) = wait_for(lambda: [p for p in workers_of(master) if p != worker] or None)
    assert not alive(worker)
    wait_for(lambda: metric(master, "nodeagent_master_ingest_workers") == 1)
    taken = metric(master, "nodeagent_master_ads_prepared_by_workers_total")
    wait_for(lambda: metric(master, "nodeagent_master_ads_prepared_by_workers_total") > taken)
    assert again in workers_of(master)


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
