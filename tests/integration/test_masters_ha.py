"""Three real masters on one real etcd, real agents running real jobs.

The leader is killed (SIGKILL) before the drains are due, between a commit and its next
pass, and in the middle of a rolling maintenance batch; etcd is stopped under a running
leader. What must hold each time: another master leads within the lease's TTL and a
second, every drain starts once and just in time, a late node is escalated at its window,
and a leader without its store does nothing it could not record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.etcd import EtcdServer, etcd_server, shared_etcd
from tests.ha import Masters, masters_on
from tests.harness import AgentProcess, MasterProcess, job_script, wait_for
from tests.integration.test_master import audited, drain_of, window

__all__ = ["etcd_server", "shared_etcd"]

pytestmark = pytest.mark.integration

JIT: dict[str, Any] = {"reconcile_interval": 0.2, "drain_margin": 1, "escalation": "quick"}


def plan_row(master: MasterProcess, host: str) -> dict[str, Any] | None:
    plan = master.call("GET", "/v1/maintenance/plan").json()
    return next((m for m in plan["machines"] if m["machine_id"]["hostname"] == host), None)


def new_leader_after(masters: Masters, old: MasterProcess) -> tuple[MasterProcess, float]:
    """SIGKILL ``old``; the master that leads next and the seconds until it won the
    election (it leads once it has taken the state besides: its ``leading_for`` counts from
    the win)."""
    killed = masters.kill(old)
    leader = masters.leader(timeout=15)
    doc = masters.leader_doc(leader)
    won = time.time() - doc["leading_for"]
    return leader, won - killed


def test_the_leader_killed_before_the_drains_are_due(
    tmp_path: Path, shared_etcd: EtcdServer
) -> None:
    names = ["on1.test", "on2.test", "late.test"]
    with masters_on(tmp_path / "masters", shared_etcd, **JIT) as masters, ExitStack() as stack:
        agents: dict[str, AgentProcess] = {}
        records = {}
        for name in names:
            retirement = 60 if name == "late.test" else 3
            agent = stack.enter_context(
                masters.agent(
                    tmp_path,
                    name,
                    # admitting any promise, they are drained their retirement time early
                    policy={
                        "max_job_retirement_time": retirement,
                        "machine_max_vacate_time": 1,
                        "before_window": "admit",
                    },
                )
            )
            argv, records[name] = job_script(tmp_path, f"job-{name}", term_delay=0)
            agent.claim(argv, max_job_retirement_time=retirement)
            agents[name] = agent
        for master in masters.all:
            wait_for(lambda m=master: len(m.call("GET", "/v1/ads").json()["ads"]) == 3)
        leader = masters.leader()
        start = time.time() + 9
        reply = leader.call("POST", "/maintenance/schedule", json=window(names, start))
        assert reply.status_code == 200, reply.text
        planned = start - 1 - 3  # the on-time nodes: window − margin − retirement
        # The late node's drain is due at once: the first leader starts it.
        wait_for(lambda: drain_of(agents["late.test"])["state"] == "draining")
        assert time.time() < planned - 2
        leader, took = new_leader_after(masters, leader)
        assert took <= 2 + 1  # the lease's TTL and a second
        assert time.time() < planned  # before the drains are due
        for name in ("on1.test", "on2.test"):
            agent = agents[name]
            wait_for(lambda a=agent: drain_of(a)["state"] == "drained", timeout=30)
            drain = drain_of(agent)
            assert drain["committed_at"] >= planned - 0.05  # just in time, not earlier
            assert drain["drained_at"] < start
        late = agents["late.test"]
        wait_for(lambda: drain_of(late)["state"] == "drained", timeout=30)
        (received,) = [float(x) for x in records["late.test"].read_text().split()]
        assert start - 0.01 <= received < start + 2  # evicted at its window
        wait_for(lambda: (plan_row(leader, "late.test") or {}).get("escalated"), timeout=10)
        for name, agent in agents.items():
            starts = audited(agent, "drain.start")
            assert [(r["subject"], r["result"]) for r in starts] == [("master:local", "ok")], name
            assert len(audited(agent, "drain.commit")) == 1, name
        totals = leader.call("GET", "/v1/maintenance/plan").json()["totals"]
        assert totals["drains_started"] == 3  # the counters are the pool's, not a master's


def test_the_leader_killed_between_a_commit_and_its_next_pass(
    tmp_path: Path, shared_etcd: EtcdServer
) -> None:
    """Passes 30 s apart, pushes a minute apart: the new leader knows the drain from the
    record its predecessor wrote before the commit, adopts it and escalates it."""
    settings: dict[str, Any] = {**JIT, "reconcile_interval": 30}
    with masters_on(tmp_path / "masters", shared_etcd, **settings) as masters:
        link = {
            **masters.agent_settings(tmp_path / "kill.test", node="kill.test", update_interval=60),
            "ad_debounce": 10,
        }
        # admitting any promise, it is drained at once (its retirement time is a minute)
        policy = {
            "max_job_retirement_time": 60,
            "machine_max_vacate_time": 1,
            "before_window": "admit",
        }
        with AgentProcess(
            tmp_path / "kill.test", hostname="kill.test", policy=policy, master=link
        ) as agent:
            for master in masters.all:
                wait_for(lambda m=master: len(m.call("GET", "/v1/ads").json()["ads"]) == 1)
            argv, record = job_script(tmp_path, "long", term_delay=0)
            agent.claim(argv)
            leader = masters.leader()
            start = time.time() + 7
            leader.call("POST", "/maintenance/schedule", json=window(["kill.test"], start))
            wait_for(lambda: audited(agent, "drain.commit"), interval=0.005)
            leader, _ = new_leader_after(masters, leader)
            row = wait_for(lambda: (r := plan_row(leader, "kill.test")) and r["node"] and r)
            assert row["started_by_master"] is True
            assert time.time() < start  # known as its own before the window
            wait_for(lambda: (plan_row(leader, "kill.test") or {})["escalated"], timeout=30)
            assert drain_of(agent)["state"] == "drained"
            (received,) = [float(x) for x in record.read_text().split()]
            assert start - 0.01 <= received < start + 2
            assert len(audited(agent, "drain.start")) == 1
            assert len(audited(agent, "drain.commit")) == 1


def test_etcd_stopped_under_a_running_leader(tmp_path: Path, etcd_server: EtcdServer) -> None:
    """The leader stops acting within the TTL: no drain is started while no store can
    record it; every master still answers reads; once etcd is back, one leads again and
    the drain starts."""
    with masters_on(tmp_path / "masters", etcd_server, count=2, **JIT) as masters:
        # admitting any promise, its drain is due its retirement time (3 s) early
        policy = {
            "max_job_retirement_time": 3,
            "machine_max_vacate_time": 1,
            "before_window": "admit",
        }
        with masters.agent(tmp_path, "n1.test", policy=policy) as agent:
            for master in masters.all:
                wait_for(lambda m=master: len(m.call("GET", "/v1/ads").json()["ads"]) == 1)
            argv, _ = job_script(tmp_path, "job", term_delay=0)
            agent.claim(argv, max_job_retirement_time=3)
            leader = masters.leader()
            start = time.time() + 8  # the drain is due 4 s before
            leader.call("POST", "/maintenance/schedule", json=window(["n1.test"], start))
            etcd_server.stop()
            stopped = time.time()
            wait_for(
                lambda: not any(masters.leader_doc(m).get("leading") for m in masters.all),
                timeout=5,
            )
            assert time.time() - stopped <= 2 + 0.5
            for master in masters.all:  # reads are served from the state held
                schedule = master.call("GET", "/maintenance/schedule").json()
                assert schedule["windows"][0]["machine_ids"][0]["hostname"] == "n1.test"
                assert plan_row(master, "n1.test") is not None
                write = master.call("POST", "/machine/down", json=[{"hostname": "n1.test"}])
                assert write.status_code == 503  # nobody leads: nothing changes
            time.sleep(max(0.0, start - 4 - time.time()) + 1.0)  # past the planned start
            assert audited(agent, "drain.start") == []
            etcd_server.start()
            wait_for(lambda: drain_of(agent)["state"] in ("draining", "drained"), timeout=15)
            masters.leader()
            assert len(audited(agent, "drain.start")) == 1


def test_writes_to_a_follower_reach_the_leader(tmp_path: Path, shared_etcd: EtcdServer) -> None:
    with masters_on(tmp_path / "masters", shared_etcd, **JIT) as masters:
        leader = masters.leader()
        follower = masters.followers()[0]
        token = tmp_path / "admin.token"
        token.write_text(follower.token("ADMINISTRATOR", subject="alice"))
        with follower.client(token.read_text()) as c:
            refused = c.post("/maintenance/schedule", json=window(["a.test"], time.time() + 60))
        assert refused.status_code == 307
        assert refused.headers["location"] == leader.url + "/maintenance/schedule"
        assert refused.json()["error"]["leader"] == leader.url
        # The Location is the path and query as they were sent, still percent-encoded:
        # a valid URL naming the same group on the leader.
        with follower.client(token.read_text()) as c, leader.client(token.read_text()) as at:
            for group, raw in [("a\u2028b", "a%E2%80%A8b"), ("a b", "a%20b"), ("é", "%C3%A9")]:
                path = f"/v1/sla/policies/{raw}"
                sent = c.put(f"{path}?q=%20%C3%A9", json={"kind": "count", "count": 1})
                assert sent.status_code == 307, sent.text
                assert sent.headers["location"] == f"{leader.url}{path}?q=%20%C3%A9"
                again = at.put(sent.headers["location"], json={"kind": "count", "count": 1})
                assert again.status_code in (200, 422), again.text
                if again.status_code == 200:
                    assert again.json()["group"] == group
        # The command line follows the redirect with the same body and token.
        schedule = tmp_path / "schedule.json"
        schedule.write_text(json.dumps(window(["b.test"], time.time() + 60)))
        result = subprocess.run(
            [sys.executable, "-m", "nodeagent", "master", "schedule", "set", "--yes", str(schedule),
             "--host", f"{follower.url},{leader.url}", "--token", str(token)],
            check=False, capture_output=True, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        for master in masters.all:
            wait_for(
                lambda m=master: (
                    m.call("GET", "/maintenance/schedule").json()["windows"][0]["machine_ids"][0][
                        "hostname"
                    ]
                    == "b.test"
                )
            )
        audit = [
            json.loads(line)
            for line in (leader.root / "state" / "audit.log").read_text().splitlines()
        ]
        assert ("alice", "maintenance.schedule", "ok") in [
            (r["subject"], r["action"], r["result"]) for r in audit
        ]
        followed = [
            json.loads(line)
            for line in (follower.root / "state" / "audit.log").read_text().splitlines()
        ]
        assert ("alice", "maintenance.schedule", "master.not_leader") in [
            (r["subject"], r["action"], r["result"]) for r in followed
        ]
        status = subprocess.run(
            [sys.executable, "-m", "nodeagent", "master", "status",
             "--host", follower.url, "--token", str(token)],
            check=False, capture_output=True, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")},
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        said = " ".join(status.stdout.split())
        term = masters.leader_doc(leader)["term"]
        assert (
            f"the leader is {leader.url}, the pool's term {term}; this master ({follower.url}) "
            "follows" in said
        ), said
        # Every master says who leads, in GET /v1/leader and in its own ad.
        for master in masters.all:
            assert masters.leader_doc(master)["leader"] == leader.url
            ad = master.call("GET", "/v1/ad").json()
            assert ad["MyType"] == "Master"
            assert ad["MasterLeader"] == leader.url
            assert ad["MasterIsLeader"] is (master is leader)
            metrics = master.call("GET", "/metrics").text
            assert f"nodeagent_master_leading {1.0 if master is leader else 0.0}" in metrics


def test_a_rolling_operation_survives_a_change_of_leader(
    tmp_path: Path, shared_etcd: EtcdServer
) -> None:
    """Killed while the first batch's hooks run: the new leader goes on from the step its
    predecessor wrote; each node is drained once, each hook runs once."""
    from tests.integration.test_operations import RACKS, Site, assert_each_once

    racks = {k: RACKS[k] for k in ("n1", "n2", "n3", "n4")}
    masters = Masters(tmp_path / "masters", shared_etcd, reconcile_interval=0.2)

    class HaSite(Site):
        def _master(self) -> MasterProcess:
            first = masters.all[0]
            first.agent_settings = masters.agent_settings  # type: ignore[method-assign]
            return first

    with ExitStack() as stack:
        stack.callback(masters.close)
        masters.start()
        s = HaSite(tmp_path, racks, hook_seconds=2.0)
        s.start_agents(stack)
        for master in masters.all:
            wait_for(lambda m=master: len(m.call("GET", "/v1/ads").json()["ads"]) == len(racks))
        s.master = masters.leader()
        reply = s.master.call(
            "POST",
            "/v1/maintenance/operations",
            json={"hosts": list(racks), "grouping": "Rack", "hook": "reboot"},
        )
        assert reply.status_code == 201, reply.text
        op_id = reply.json()["id"]
        wait_for(lambda: len(s.lines("hook")) >= 1, timeout=60, interval=0.05)
        s.master, took = new_leader_after(masters, s.master)
        assert took <= 2 + 1
        wait_for(lambda: s.operation(op_id)["ended_at"] is not None, timeout=120, interval=0.3)
        assert s.operation(op_id)["state"] == "completed"
        assert_each_once(s)


def test_a_master_that_cannot_reach_etcd_at_start_exits_9(tmp_path: Path) -> None:
    """Status 9, which its unit restarts: etcd may answer at the next start."""
    from tests.etcd import free_port

    master = MasterProcess(
        tmp_path / "m",
        settings={"store": "etcd", "etcd_endpoints": [f"http://127.0.0.1:{free_port()}"]},
    )
    result = subprocess.run(
        [sys.executable, "-m", "nodeagent", "master", "run", "--config", str(master.config_path)],
        check=False, capture_output=True, text=True, timeout=60,
        env={**os.environ, "NOTIFY_SOCKET": ""},
    )  # fmt: skip
    assert result.returncode == 9, result.stderr
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("nodeagent:")]
    assert "etcd is unavailable" in line
    assert "check the endpoints" in line


def test_a_leader_stopped_gives_its_lease_back(tmp_path: Path, shared_etcd: EtcdServer) -> None:
    """SIGTERM: the leader exits 0 having given its lease back, so the other leads at
    once rather than when the lease (5 s here) would have run out."""
    with masters_on(tmp_path / "masters", shared_etcd, count=2, leader_ttl=5) as masters:
        leader = masters.leader()
        other = next(m for m in masters.all if m is not leader)
        wait_for(lambda: masters.leader_doc(other).get("leader") == leader.url)
        stopped = time.time()
        assert leader.stop() == 0
        masters.leader(timeout=10)
        assert masters.leader_doc(other)["leading"] is True
        assert time.time() - stopped < 3  # not the 5 s of the lease
        log = leader.log_path.read_text()
        assert "Traceback" not in log
        assert "watch of" not in log  # its watch ended quietly


def test_the_pool_s_term_grows_with_each_new_leader(
    tmp_path: Path, shared_etcd: EtcdServer
) -> None:
    """Three leaders in turn: each says a term greater than its predecessor's (the pool's,
    not a count of its own process), every master says the same, and the log says it."""
    with masters_on(tmp_path / "masters", shared_etcd, leader_ttl=2) as masters:
        terms = []
        leader = masters.leader()
        for turn in range(3):
            term = masters.leader_doc(leader)["term"]
            assert isinstance(term, int)
            for other in masters.running():
                wait_for(lambda m=other, t=term: masters.leader_doc(m).get("term") == t)
            assert f"leading: the pool's term {term} " in leader.log_path.read_text()
            terms.append(term)
            if turn < 2:
                leader, _ = new_leader_after(masters, leader)
        assert terms == sorted(terms), terms
        assert len(set(terms)) == 3, terms


def _made_ahead(master: MasterProcess) -> int:
    """The forecasts the master made ahead of its plans, from its own ad (a scrape of
    /metrics would make the forecasts itself)."""
    made = master.call("GET", "/v1/ad").json()["MasterForecastsMadeAhead"]
    assert isinstance(made, int)
    return made


def test_a_follower_makes_the_forecasts_its_plans_read_ahead(
    tmp_path: Path, shared_etcd: EtcdServer
) -> None:
    """A follower serves plans from its own copy of the ads: it makes their forecasts
    ahead (its passes, and the totals it keeps from its start), as the leader does, so
    that a plan asked of it finds them made (read load spreads over the masters)."""
    from slots import JobSpec, Machine, MachinePolicy, Resources

    hosts = ["ahead1.test", "ahead2.test"]
    now = time.time()
    ads = []
    for host in hosts:
        machine = Machine(
            host=host,
            ip="127.0.0.1",
            address="http://127.0.0.1:9",  # a closed port: nothing is due anyway
            total=Resources(cpus=4),
            policy=MachinePolicy(max_job_retirement_time=60),
            now=now,
        )
        machine.claim(now, resources=Resources(cpus=1), spec=JobSpec())
        ads.append(machine.ad(now))
    with masters_on(tmp_path / "masters", shared_etcd, count=2, **JIT) as masters:
        leader = masters.leader()
        follower = masters.followers()[0]
        for master in masters.all:
            for host, ad in zip(hosts, ads, strict=True):
                with master.client(master.token("DAEMON", node=host)) as c:
                    assert c.post("/v1/ads", json=ad).status_code == 200
        scheduled = leader.call("POST", "/maintenance/schedule", json=window(hosts, now + 86400))
        assert scheduled.status_code == 200, scheduled.text
        for master in (leader, follower):
            wait_for(lambda m=master: _made_ahead(m) >= len(hosts))
        rows = follower.call("GET", "/v1/maintenance/plan").json()["machines"]
        assert sorted(row["machine_id"]["hostname"] for row in rows) == hosts
        assert all(row["expected"] is not None for row in rows)
