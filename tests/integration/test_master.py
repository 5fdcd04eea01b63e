"""A real master with real agents running real jobs, and the Mesos rules over HTTP."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness import AgentProcess, MasterProcess, job_script, start_together, wait_for

NS = 1_000_000_000


def window(hosts: list[str], start: float, duration: float = 3600, ip: str = "127.0.0.1") -> Any:
    return {
        "windows": [
            {
                "machine_ids": [{"hostname": h, "ip": ip} for h in hosts],
                "unavailability": {
                    "start": {"nanoseconds": int(start * NS)},
                    "duration": {"nanoseconds": int(duration * NS)},
                },
            }
        ]
    }


@pytest.fixture
def master(tmp_path: Path) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path / "master", settings={"reconcile_interval": 0.2}) as m:
        yield m


@pytest.fixture
def empty_master(shared_master: MasterProcess) -> MasterProcess:
    """The module's master with nothing scheduled and no machine down, for the tests of
    the Mesos rules that neither restart it nor talk to agents."""
    shared_master.make_empty()
    return shared_master


# ----------------------------------------------------------------------- Mesos rules over HTTP

MACHINE = {"hostname": "node1.test", "ip": "127.0.0.1"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[]", "Unexpected JSON type parsed"),
        ('{"windows": [{"machine_ids": [], "unavailability": {"start": {"nanoseconds": 1}}}]}',
         "List of machines in the maintenance window is empty"),
        ('{"windows": [{"machine_ids": [{}], "unavailability": {"start": {"nanoseconds": 1}}}]}',
         "Both 'hostname' and 'ip' for a machine are empty"),
        ('{"windows": [{"machine_ids": [{"hostname": "a", "ip": "1.2.3"}],'
         ' "unavailability": {"start": {"nanoseconds": 1}}}]}', "Failed to parse IPv4: 1.2.3"),
        ('{"windows": [{"machine_ids": [{"hostname": "a"}, {"hostname": "A"}],'
         ' "unavailability": {"start": {"nanoseconds": 1}}}]}',
         """Machine '{"hostname":"A"}' appears more than once in the schedule"""),
        ('{"windows": [{"machine_ids": [{"hostname": "a"}],'
         ' "unavailability": {"start": {"nanoseconds": 1}, "duration": {"nanoseconds": -1}}}]}',
         "Unavailability 'duration' is negative"),
    ],
)  # fmt: skip
def test_invalid_schedules_are_400_plain_text_and_change_nothing(
    empty_master: MasterProcess, body: str, message: str
) -> None:
    empty_master.call("POST", "/maintenance/schedule", content=json.dumps(window(["keep"], 2e9)))
    before = empty_master.call("GET", "/maintenance/schedule").json()
    response = empty_master.call("POST", "/maintenance/schedule", content=body)
    assert (response.status_code, response.text) == (400, message)
    assert response.headers["content-type"].startswith("text/plain")
    assert empty_master.call("GET", "/maintenance/schedule").json() == before


def test_replace_down_up_and_their_rules(empty_master: MasterProcess) -> None:
    a, b = {"hostname": "a.test", "ip": "10.0.0.1"}, {"hostname": "b.test", "ip": "10.0.0.2"}
    schedule = {
        "windows": [
            {"machine_ids": [a, b], "unavailability": {"start": {"nanoseconds": 2 * 10**18}}}
        ]
    }
    assert empty_master.call("POST", "/maintenance/schedule", json=schedule).status_code == 200
    status = empty_master.call("GET", "/maintenance/status").json()
    assert status == {"draining_machines": [{"id": a}, {"id": b}]}
    # up only from DOWN, all or nothing
    refused = empty_master.call("POST", "/machine/up", json=[a])
    assert refused.status_code == 400
    assert "is not in DOWN mode and cannot be brought up" in refused.text
    # down only from DRAINING; a list with one bad machine changes nothing
    unknown = {"hostname": "z.test", "ip": "10.0.0.9"}
    assert empty_master.call("POST", "/machine/down", json=[a, unknown]).status_code == 400
    assert empty_master.call("GET", "/maintenance/status").json() == status
    assert (
        empty_master.call(
            "POST", "/machine/down", json=[{"hostname": "A.TEST", "ip": "10.0.0.1"}]
        ).status_code
        == 200
    )
    status = empty_master.call("GET", "/maintenance/status").json()
    assert status == {"draining_machines": [{"id": b}], "down_machines": [a]}
    again = empty_master.call("POST", "/machine/down", json=[a])
    assert "is not in DRAINING mode and cannot be brought down" in again.text
    # a DOWN machine cannot be dropped from the schedule
    only_b = {"windows": [{"machine_ids": [b], "unavailability": {"start": {"nanoseconds": 1}}}]}
    dropped = empty_master.call("POST", "/maintenance/schedule", json=only_b)
    assert dropped.status_code == 400
    assert "is deactivated and cannot be removed from the schedule" in dropped.text
    # up: back UP and out of the schedule
    assert empty_master.call("POST", "/machine/up", json=[a]).status_code == 200
    assert empty_master.call("GET", "/maintenance/status").json() == {
        "draining_machines": [{"id": b}]
    }
    windows = empty_master.call("GET", "/maintenance/schedule").json()["windows"]
    assert windows[0]["machine_ids"] == [b]
    # replace: dropped machines go back UP (forgotten)
    assert empty_master.call("POST", "/maintenance/schedule", json={}).status_code == 200
    assert empty_master.call("GET", "/maintenance/status").json() == {}
    # wrong method
    wrong = empty_master.call("PUT", "/maintenance/schedule")
    assert (wrong.status_code, wrong.text) == (
        405,
        "Expecting one of { 'GET', 'POST' }, but received 'PUT'",
    )
    assert empty_master.call("GET", "/machine/down").status_code == 405


def test_schedule_and_modes_survive_a_restart(master: MasterProcess) -> None:
    master.call("POST", "/maintenance/schedule", json=window(["a.test", "b.test"], 2e9))
    master.call("POST", "/machine/down", json=[{"hostname": "a.test", "ip": "127.0.0.1"}])
    status = master.call("GET", "/maintenance/status").json()
    master.stop()
    master.start()
    assert master.call("GET", "/maintenance/status").json() == status
    assert master.call("GET", "/maintenance/schedule").json() == window(["a.test", "b.test"], 2e9)


def master_audit(master: MasterProcess) -> list[dict[str, Any]]:
    path = master.root / "state" / "audit.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_auth_scopes(empty_master: MasterProcess) -> None:
    before = len(master_audit(empty_master))  # what the tests before this one had written
    read, admin, daemon = (empty_master.token(s) for s in ("READ", "ADMINISTRATOR", "DAEMON"))
    with httpx.Client(base_url=empty_master.url) as anon:
        assert anon.get("/maintenance/status").status_code == 401
    with empty_master.client(read) as c:
        assert c.get("/maintenance/status").status_code == 200
        assert c.get("/v1/maintenance/plan").status_code == 200
        assert c.post("/maintenance/schedule", json={}).status_code == 403
        assert c.post("/v1/ads", json={"machine": {}, "slots": []}).status_code == 403
    with empty_master.client(daemon) as c:
        assert c.post("/maintenance/schedule", json={}).status_code == 403
    with empty_master.client(admin) as c:
        assert c.post("/maintenance/schedule", json={}).status_code == 200
    audit = master_audit(empty_master)[before:]
    assert [(r["subject"], r["action"], r["result"]) for r in audit] == [
        ("tester", "maintenance.schedule", "auth.forbidden"),  # READ
        ("tester", "maintenance.schedule", "auth.forbidden"),  # DAEMON
        ("tester", "maintenance.schedule", "ok"),
    ]


# ----------------------------------------------------------------------- with real agents


@contextlib.contextmanager
def agents_for(
    master: MasterProcess, root: Path, names: list[str], policy: dict[str, Any]
) -> Iterator[list[AgentProcess]]:
    """Agents reporting to ``master`` every 0.5 s, with its pool key."""
    with ExitStack() as stack:
        yield start_together(
            stack,
            [
                AgentProcess(
                    root / name,
                    hostname=name,
                    policy=policy,
                    master=master.agent_settings(root / name, node=name, update_interval=0.5),
                )
                for name in names
            ],
        )


def plan_for(master: MasterProcess, host: str) -> dict[str, Any]:
    plan = master.call("GET", "/v1/maintenance/plan").json()
    return next(m for m in plan["machines"] if m["machine_id"]["hostname"] == host)


def drain_of(agent: AgentProcess) -> dict[str, Any]:
    body: dict[str, Any] = agent.call("GET", "/v1/drain").json()
    return body


@pytest.fixture
def jit_master(tmp_path: Path) -> Iterator[MasterProcess]:
    settings = {"reconcile_interval": 0.2, "drain_margin": 1, "escalation": "quick"}
    with MasterProcess(tmp_path / "master", settings=settings) as m:
        yield m


def test_just_in_time_drains_empty_the_nodes_before_the_window(
    jit_master: MasterProcess, tmp_path: Path
) -> None:
    master = jit_master
    policy = {"max_job_retirement_time": 3, "machine_max_vacate_time": 1}
    names = ["node1.test", "node2.test"]
    with agents_for(master, tmp_path, names, policy) as agents:
        for i, agent in enumerate(agents):
            argv, _ = job_script(tmp_path, f"job{i}")
            agent.claim(argv, max_job_retirement_time=3)
        start = time.time() + 8
        master.call("POST", "/maintenance/schedule", json=window(names, start))
        wait_for(lambda: all(plan_for(master, n)["node"] == n for n in names))
        row = plan_for(master, "node1.test")
        # window − margin − vacate: the nodes refuse promises that would outlive the window
        planned = start - 1 - 1
        assert row["planned_drain_start"] == pytest.approx(planned, abs=0.01)
        assert row["on_time"] is True
        assert row["mode"] == "DRAINING"
        for agent in agents:
            wait_for(lambda a=agent: drain_of(a)["state"] == "drained", timeout=30)
            drain = drain_of(agent)
            assert drain["reason"] == "maintenance"
            assert drain["requested_by"] == "master:local"
            assert drain["committed_at"] >= planned - 0.05  # just in time, not earlier
            assert drain["drained_at"] < start
            assert agent.jobs_alive() == []
        wait_for(lambda: master.call("GET", "/v1/maintenance/plan").json()["totals"]["empty"] == 2)
        totals = master.call("GET", "/v1/maintenance/plan").json()["totals"]
        assert totals["drains_started"] == 2
        assert totals["modes"]["DRAINING"] == 2
        ad = agents[0].call("GET", "/v1/ad").json()["machine"]
        assert ad["MaintenanceMode"] == "DRAINING"
        assert ad["Unavailability"]["Start"] == int(start)


def test_a_late_node_shows_late_and_is_escalated_at_its_window(
    jit_master: MasterProcess, tmp_path: Path
) -> None:
    master = jit_master
    policy = {"max_job_retirement_time": 60, "machine_max_vacate_time": 1}
    with agents_for(master, tmp_path, ["slow.test"], policy) as (agent,):
        argv, record = job_script(tmp_path, "long", term_delay=0)
        agent.claim(argv)
        start = time.time() + 4
        master.call("POST", "/maintenance/schedule", json=window(["slow.test"], start))
        row = wait_for(
            lambda: (
                (r := plan_for(master, "slow.test"))["node"] == "slow.test"
                and r["empty"] is False
                and r
            )
        )
        # Late whether the plan is read before the drain starts (by ~56 s) or after, when
        # the drain's deadline at the window bounds it (by the vacate time).
        assert row["on_time"] is False
        assert row["late_by"] >= 1
        assert row["blockers"][0]["retirement_remaining"] > 50
        wait_for(lambda: drain_of(agent)["state"] == "drained", timeout=30)
        (received,) = [float(x) for x in record.read_text().split()]
        assert received >= start - 0.01  # evicted at the window, as by quick
        assert received < start + 2
        wait_for(
            lambda: (
                master.call("GET", "/v1/maintenance/plan").json()["totals"]["drains_escalated"] == 1
            )
        )


def test_down_fast_drains_and_up_resumes(master: MasterProcess, tmp_path: Path) -> None:
    policy = {"max_job_retirement_time": 600, "machine_max_vacate_time": 1}
    with agents_for(master, tmp_path, ["n1.test"], policy) as (agent,):
        argv, _ = job_script(tmp_path, "job", term_delay=-1)
        agent.claim(argv)
        machine = {"hostname": "n1.test", "ip": "127.0.0.1"}
        far = time.time() + 10_000
        master.call("POST", "/maintenance/schedule", json=window(["n1.test"], far))
        assert master.call("POST", "/machine/down", json=[machine]).status_code == 200
        wait_for(lambda: drain_of(agent)["state"] == "drained", timeout=30)
        assert drain_of(agent)["schedule"] == "fast"
        assert agent.jobs_alive() == []
        ad = agent.call("GET", "/v1/ad").json()["machine"]
        assert ad["Start"] is False  # stays closed
        assert master.call("POST", "/machine/up", json=[machine]).status_code == 200
        wait_for(lambda: agent.call("GET", "/v1/ad").json()["machine"]["Start"] is True)
        assert drain_of(agent)["state"] == "none"
        wait_for(
            lambda: agent.call("GET", "/v1/ad").json()["machine"].get("MaintenanceMode") == "UP"
        )


def test_ads_query_expiry_and_on_demand_fetch(tmp_path: Path) -> None:
    settings = {"reconcile_interval": 0.2, "ad_lifetime": 2}
    with MasterProcess(tmp_path / "m", settings=settings) as master:
        with agents_for(master, tmp_path, ["q1.test", "q2.test"], {}) as agents:
            wait_for(lambda: len(master.call("GET", "/v1/ads").json()["ads"]) == 2)
            agents[0].claim(["sleep", "30"], cpus=3)
            query = {
                "constraint": 'SlotType == "Dynamic" && Cpus >= 3',
                "slots": "true",
                "projection": "Name,Cpus",
            }
            busy = wait_for(lambda: master.call("GET", "/v1/ads", params=query).json()["ads"])
            machines = master.call(
                "GET", "/v1/ads", params={"constraint": 'Machine == "q1.test" && TotalCpus == 8'}
            ).json()["ads"]
            assert [m["Name"] for m in machines] == ["q1.test"]
            assert {"Name": "slot1_1@q1.test", "Cpus": 3} in busy
            text = master.call("GET", "/v1/ads", params={"format": "classad"}).text
            assert 'Machine = "q1.test"' in text
            fresh = master.call("GET", "/v1/ads/q2.test", params={"fresh": "true"}).json()
            assert fresh["age"] < 1
            bad = master.call("GET", "/v1/ads", params={"constraint": "Cpus >"})
            assert bad.status_code == 422
            agents[1].stop()
        wait_for(
            lambda: (
                {a["Name"]: a["Lost"] for a in master.call("GET", "/v1/ads").json()["ads"]}.get(
                    "q2.test"
                )
                is True
            ),
            timeout=10,
        )
        names = [a["Name"] for a in master.call("GET", "/v1/ads").json()["ads"]]
        assert "q2.test" in names  # lost, not deleted


def test_a_master_down_across_the_window_escalates_the_node_at_its_first_pass(
    tmp_path: Path,
) -> None:
    """The schedule is in the master's store, the master is down when the window opens and
    the job is promised a minute past it: the master's first pass starts the drain quick
    (the job is soft-killed then, not at its promise), and the plan says escalated only
    once the node has committed that drain."""
    settings = {"reconcile_interval": 0.2, "drain_margin": 1, "escalation": "quick"}
    policy = {"max_job_retirement_time": 60, "machine_max_vacate_time": 1}
    with MasterProcess(tmp_path / "master", settings=settings) as master:
        port = httpx.URL(master.url).port
        start = time.time() + 3
        master.call("POST", "/maintenance/schedule", json=window(["late.test"], start))
        link = master.agent_settings(tmp_path / "late.test", node="late.test", update_interval=0.5)
        master.stop()
        # back on the same port: the agent's [master] url stays right
        config = master.config_path.read_text()
        master.config_path.write_text(config.replace("127.0.0.1:0", f"127.0.0.1:{port}"))
        with AgentProcess(
            tmp_path / "late.test", hostname="late.test", policy=policy, master=link
        ) as agent:
            argv, record = job_script(tmp_path, "long", term_delay=0)
            promise_end = agent.claim(argv)["job"]["started_at"] + 60
            time.sleep(max(0.0, start + 1 - time.time()))
            assert drain_of(agent)["state"] == "none"  # nobody told it: the job runs on
            assert not record.exists()
            restarted = time.time()
            master.start()
            plans: list[tuple[float, bool]] = []

            def escalated() -> bool:
                row = plan_for(master, "late.test")
                plans.append((time.time(), row["escalated"]))
                return bool(row["escalated"])

            wait_for(escalated, interval=0.01)
            drain = drain_of(agent)
            assert (drain["schedule"], drain["reason"]) == ("quick", "maintenance")
            assert drain["requested_by"] == "master:local"
            first = next(t for t, said in plans if said)
            assert restarted < drain["committed_at"] <= first  # told, then said so
            assert not any(said for t, said in plans if t < drain["committed_at"])
            (received,) = [float(x) for x in wait_for(record.read_text).split()]
            # soft-killed by the quick drain of the first pass, within its vacate time
            assert drain["committed_at"] - 0.01 <= received < drain["committed_at"] + 1
            # far from the promise, however slow the restart and its first pass were
            assert received < restarted + 10 < promise_end - 40
            wait_for(lambda: agent.jobs_alive() == [])
            totals = master.call("GET", "/v1/maintenance/plan").json()["totals"]
            assert (totals["drains_started"], totals["drains_escalated"]) == (1, 1)


# ----------------------------------------------------------------------- its own record first


def audited(agent: AgentProcess, action: str) -> list[dict[str, Any]]:
    """The agent's audit records of ``action`` (``drain.start``, ``drain.commit`` …)."""
    path = agent.root / "state" / "audit.log"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r["action"] == action]


def lagging(master: MasterProcess, root: Path) -> dict[str, Any]:
    """An agent's link to ``master`` whose pushes lag: one at start, then one a minute,
    and a change pushed ten seconds after it happened."""
    return {**master.agent_settings(root, node=root.name, update_interval=60), "ad_debounce": 10}


def test_a_pass_before_the_agents_next_push_never_starts_a_second_drain(
    tmp_path: Path,
) -> None:
    """The agents' ads lag the drains the master starts by ten seconds; passes run five
    times a second: one drain request per node, escalated at the window by its deadline."""
    settings = {"reconcile_interval": 0.2, "drain_margin": 1, "escalation": "quick"}
    policy = {"max_job_retirement_time": 60, "machine_max_vacate_time": 1}
    names = ["lag1.test", "lag2.test"]
    with MasterProcess(tmp_path / "master", settings=settings) as master, ExitStack() as stack:
        agents = start_together(
            stack,
            [
                AgentProcess(
                    tmp_path / name,
                    hostname=name,
                    policy=policy,
                    master=lagging(master, tmp_path / name),
                )
                for name in names
            ],
        )
        wait_for(lambda: len(master.call("GET", "/v1/ads").json()["ads"]) == 2)
        records = []
        for agent in agents:
            argv, record = job_script(tmp_path, f"job-{agent.hostname}", term_delay=0)
            agent.claim(argv)
            records.append(record)
        start = time.time() + 5
        master.call("POST", "/maintenance/schedule", json=window(names, start))
        for agent in agents:
            wait_for(lambda a=agent: drain_of(a)["state"] == "draining")
        time.sleep(max(0.0, start - time.time()))  # passes on stale ads, up to the window
        for agent in agents:
            wait_for(lambda a=agent: drain_of(a)["state"] == "drained", timeout=30)
        wait_for(lambda: all(plan_for(master, n)["escalated"] for n in names))
        for agent, record in zip(agents, records, strict=True):
            starts = audited(agent, "drain.start")
            assert [(r["subject"], r["result"]) for r in starts] == [("master:local", "ok")]
            assert len(audited(agent, "drain.commit")) == 1
            (received,) = [float(x) for x in record.read_text().split()]
            assert start - 0.01 <= received < start + 2  # the deadline at the window
        log = master.log_path.read_text()
        assert "drain.in_progress" not in log
        totals = master.call("GET", "/v1/maintenance/plan").json()["totals"]
        assert (totals["drains_started"], totals["drains_escalated"]) == (2, 2)


def test_a_master_killed_after_the_commit_knows_the_drain_as_its_own_and_escalates_it(
    tmp_path: Path,
) -> None:
    """SIGKILL right after the agent audited the commit (passes 30 s apart, the agent's
    pushes a minute apart): the restarted master finds its record, asks the node for its
    ad, and escalates the drain at the window; no second drain."""
    settings = {"reconcile_interval": 30, "drain_margin": 1, "escalation": "quick"}
    # admitting any promise, it is drained at once (its retirement time is a minute)
    policy = {"max_job_retirement_time": 60, "machine_max_vacate_time": 1, "before_window": "admit"}
    with MasterProcess(tmp_path / "master", settings=settings) as master:
        port = httpx.URL(master.url).port
        link = lagging(master, tmp_path / "kill.test")
        with AgentProcess(
            tmp_path / "kill.test", hostname="kill.test", policy=policy, master=link
        ) as agent:
            wait_for(lambda: len(master.call("GET", "/v1/ads").json()["ads"]) == 1)
            argv, record = job_script(tmp_path, "long", term_delay=0)
            agent.claim(argv)
            start = time.time() + 10  # room for a restart on a loaded machine
            master.call("POST", "/maintenance/schedule", json=window(["kill.test"], start))
            wait_for(lambda: audited(agent, "drain.commit"), interval=0.005)
            assert master.stop(signal.SIGKILL) == -signal.SIGKILL
            config = master.config_path.read_text()
            master.config_path.write_text(config.replace("127.0.0.1:0", f"127.0.0.1:{port}"))
            master.start()
            row = wait_for(lambda: (r := plan_for(master, "kill.test"))["node"] and r)
            assert row["started_by_master"] is True
            assert time.time() < start  # known as its own before the window
            wait_for(lambda: plan_for(master, "kill.test")["escalated"], timeout=30)
            assert drain_of(agent)["state"] == "drained"
            (received,) = [float(x) for x in record.read_text().split()]
            assert start - 0.01 <= received < start + 2
            assert len(audited(agent, "drain.start")) == 1
            assert len(audited(agent, "drain.commit")) == 1


def test_the_first_plan_after_a_schedule_shows_a_job_the_stored_ad_predates(
    tmp_path: Path,
) -> None:
    """The node's ad reached the master before its job started, and its pushes lag: the
    first plan after the schedule fetched its ad (the job, not an empty node)."""
    settings = {"reconcile_interval": 0.2, "drain_margin": 1}
    with MasterProcess(tmp_path / "master", settings=settings) as master:
        link = lagging(master, tmp_path / "busy.test")
        with AgentProcess(tmp_path / "busy.test", hostname="busy.test", master=link) as agent:
            wait_for(lambda: len(master.call("GET", "/v1/ads").json()["ads"]) == 1)
            argv, _ = job_script(tmp_path, "busy")
            agent.claim(argv, job_id="42.0", max_job_retirement_time=600)
            stored = master.call("GET", "/v1/ads", params={"slots": "true"}).json()["ads"]
            assert not any(ad.get("JobId") == "42.0" for ad in stored)  # the ad predates it
            far = time.time() + 86400
            master.call("POST", "/maintenance/schedule", json=window(["busy.test"], far))
            row = plan_for(master, "busy.test")
            assert row["empty"] is False
            assert row["figures_stale"] is False
            assert row["figures_age"] < 2
            assert [b["job_id"] for b in row["blockers"]] == ["42.0"]
