"""Job groups, site attributes and the SLA probe with real daemons on loopback.

Three agents in two racks (``[attributes] Rack``), each running a real job that is an
instance of one job group, push their ads to a real master; the probe answers as the
arithmetic says: safe or not, the groups it would break and the wait time to SLA, which
runs out when the instances have been up long enough.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess, MasterProcess, job_script, wait_for

GROUP = "www-data/prod/web"
DURATION = 4.0
RACKS = {"node1.test": "r1", "node2.test": "r1", "node3.test": "r2"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[MasterProcess, list[AgentProcess]]]:
    with MasterProcess(tmp_path / "master", settings={"reconcile_interval": 0.2}) as master:
        agents = []
        try:
            for name, rack in RACKS.items():
                root = tmp_path / name
                settings = master.agent_settings(root, node=name, update_interval=0.3)
                agent = AgentProcess(
                    root,
                    hostname=name,
                    master=settings,
                    extra=f'[attributes]\nRack = "{rack}"\nSsd = true\n',
                )
                agents.append(agent.start())
            yield master, agents
        finally:
            for agent in agents:
                agent.__exit__(None, None, None)


def probe(master: MasterProcess, **params: str) -> dict[str, Any]:
    reply = master.call("GET", "/v1/sla/probe", params=params)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def instances_seen(master: MasterProcess) -> int:
    ads = master.call("GET", "/v1/ads", params={"slots": "true"}).json()["ads"]
    return sum(1 for ad in ads if ad.get("JobGroup") == GROUP)


def test_the_probe_says_what_the_arithmetic_says(
    cluster: tuple[MasterProcess, list[AgentProcess]], tmp_path: Path
) -> None:
    master, agents = cluster
    argv, _ = job_script(tmp_path, "job")
    started = {}
    for agent in agents:
        claim = agent.claim(argv, group=GROUP)
        assert claim["job"]["group"] == GROUP
        started[agent.hostname] = claim["job"]["started_at"]
    policy = {"kind": "count", "count": 2, "duration": DURATION}
    assert master.call("PUT", f"/v1/sla/policies/{GROUP}", json=policy).status_code == 200
    wait_for(lambda: instances_seen(master) == 3)

    # The site attributes are in the master's ads: constraints and groupings see them.
    r1 = master.call("GET", "/v1/ads", params={"constraint": 'Rack == "r1" && Ssd'}).json()
    assert sorted(ad["Name"] for ad in r1["ads"]) == ["node1.test", "node2.test"]

    # Now: no instance has been up for DURATION; taking node1 leaves two, which will be.
    asked = time.time()
    one = probe(master, hosts="node1.test")
    (group,) = one["host_groups"]
    assert one["safe"] is False
    assert group["broken"] == [GROUP]
    (verdict,) = group["groups"]
    assert (verdict["size"], verdict["down"], verdict["up"], verdict["needed"]) == (3, 1, 0, 2)
    expected = min(started["node2.test"], started["node3.test"]) + DURATION - asked
    # ads carry whole seconds (MyCurrentTime, TotalJobRunTime): within a second and a bit
    assert abs(group["wait"] - max(0.0, expected)) < 1.5, (group["wait"], expected)

    # By rack: r1 takes two of three instances, leaving one: never without new ones.
    racks = probe(master, constraint="Rack isnt undefined", grouping="Rack")
    by_rack = {g["key"]: g for g in racks["host_groups"]}
    assert sorted(by_rack) == ["r1", "r2"]
    assert by_rack["r1"]["hosts"] == ["node1.test", "node2.test"]
    assert by_rack["r1"]["safe"] is False
    assert by_rack["r1"]["wait"] is None
    assert by_rack["r2"]["safe"] is False

    # Once the wait has run out, the same probe says yes (nothing else changed).
    time.sleep(max(0.0, group["wait"]) + 1.2)
    later = probe(master, hosts="node1.test")
    assert later["safe"] is True, later
    assert later["host_groups"][0]["wait"] == 0
    racks = probe(master, constraint="Rack isnt undefined", grouping="Rack")
    by_rack = {g["key"]: g for g in racks["host_groups"]}
    assert (by_rack["r1"]["safe"], by_rack["r1"]["wait"]) == (False, None)
    assert (by_rack["r2"]["safe"], by_rack["r2"]["wait"]) == (True, 0)

    # The command line prints it as a table, and the API's document with --json.
    out = nodeagent(master, "master", "sla", "probe", "--constraint", "Ssd", "--grouping", "Rack")
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["HOSTS", "SAFE", "WAIT"]
    assert lines[1].split()[:4] == ["r1:", "node1.test,node2.test", "NO", "never"]
    assert lines[2].split()[:4] == ["r2:", "node3.test", "yes", "-"]
    assert lines[-1] == "2 host groups: 1 would break an SLA"
    doc = json.loads(nodeagent(master, "master", "sla", "probe", "node3.test", "--json"))
    assert doc["safe"] is True


def nodeagent(master: MasterProcess, *words: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent", *words, "--socket", str(master.socket)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_sighup_changes_the_site_attributes_the_master_sees(
    cluster: tuple[MasterProcess, list[AgentProcess]],
) -> None:
    master, agents = cluster
    node3 = agents[2]

    def rack_of_node3() -> Any:
        """Its ad's Rack, or None while the master holds no ad of node3 (404)."""
        reply = master.call("GET", "/v1/ads/node3.test")
        return reply.json()["machine"].get("Rack") if reply.status_code == 200 else None

    wait_for(lambda: rack_of_node3() == "r2")
    text = node3.config_path.read_text()
    node3.config_path.write_text(text.replace('Rack = "r2"', 'Rack = "r1"\nRow = 7'))
    assert node3.proc is not None
    node3.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: rack_of_node3() == "r1")
    assert master.call("GET", "/v1/ads/node3.test").json()["machine"]["Row"] == 7
    # A reload that would shadow a computed attribute is refused whole.
    node3.config_path.write_text(text.replace('Rack = "r2"', 'Rack = "r9"\nCpus = 64'))
    node3.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload refused" in node3.log_path.read_text())
    ad = node3.call("GET", "/v1/ad").json()["machine"]
    assert (ad["Rack"], ad["TotalCpus"]) == ("r1", 8)


def test_an_attribute_that_shadows_a_computed_one_stops_the_start(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "bad", extra="[attributes]\nStart = true\n")
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent", "run", "--config", str(agent.config_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "'Start' shadows an attribute the agent computes" in done.stderr


def test_the_masters_sla_file_at_start_and_on_sighup(tmp_path: Path) -> None:
    sla = tmp_path / "sla.toml"
    sla.write_text('[policies.web]\nkind = "count"\ncount = 2\nduration = "1m"\n')
    with MasterProcess(tmp_path / "master", settings={"sla_file": str(sla)}) as master:

        def policies() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = master.call("GET", "/v1/sla/policies").json()["policies"]
            return found

        assert policies() == [
            {"group": "web", "kind": "count", "count": 2, "duration": 60.0, "source": "file"}
        ]
        api = {"kind": "percentage", "percentage": 90, "duration": 5}
        assert master.call("PUT", "/v1/sla/policies/web", json=api).status_code == 200
        assert policies()[0]["source"] == "api"  # the API's wins
        sla.write_text(
            '[policies.web]\nkind = "count"\ncount = 3\n\n'
            '[policies.db]\nkind = "count"\ncount = 1\n'
        )
        assert master.proc is not None
        master.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: [p["group"] for p in policies()] == ["db", "web"])
        assert master.call("DELETE", "/v1/sla/policies/web").json()["in_force"]["count"] == 3
        sla.write_text('[policies.web]\nkind = "count"\ncount = 0\n')
        master.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload refused" in master.log_path.read_text())
        assert [(p["group"], p["count"]) for p in policies()] == [("db", 1), ("web", 3)]
    # A bad file stops the start: exit 2, the file and the defect named.
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent", "master", "run", "--config", str(master.config_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "web: a count policy needs 1 <= count" in done.stderr
