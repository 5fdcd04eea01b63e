"""When the master drains a scheduled machine, on a real master with real agents running
real jobs: a node that refuses promises that would outlive its window stays open until
its vacate time before the window, taking work that fits, and is empty at the window
with no promise cut; one that admits any promise closes its retirement time early (here
an hour: at once); a machine whose every job group accepted its notice is drained at once.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from tests.harness import AgentProcess, MasterProcess, wait_for
from tests.integration.test_master import plan_for, window

pytestmark = pytest.mark.integration

OPEN, ADMIT, OWNED = "open.test", "admit.test", "owned.test"
#: A job that ends by itself in a second, under a promise of PROMISE seconds.
BRIEF = [sys.executable, "-c", "import time; time.sleep(1)"]
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
PROMISE, VACATE, MARGIN = 5, 2, 1


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("timing")
    with ExitStack() as stack:
        master = stack.enter_context(
            MasterProcess(
                root / "master",
                settings={"reconcile_interval": 0.2, "drain_margin": MARGIN},
            )
        )
        agents = {}
        for host, before_window in ((OPEN, "refuse"), (ADMIT, "admit"), (OWNED, "refuse")):
            policy = {
                "max_job_retirement_time": "1h",
                "machine_max_vacate_time": VACATE,
                "before_window": before_window,
            }
            settings = master.agent_settings(root / host, node=host, update_interval=0.3)
            agents[host] = stack.enter_context(
                AgentProcess(root / host, hostname=host, policy=policy, master=settings)
            )
        yield {"master": master, **agents}


def schedule(master: MasterProcess, hosts: list[str], start: float) -> None:
    reply = master.call("POST", "/maintenance/schedule", json=window(hosts, start))
    assert reply.status_code == 200, reply.text


def machine_ad(agent: AgentProcess) -> dict[str, Any]:
    found: dict[str, Any] = agent.call("GET", "/v1/ad").json()["machine"]
    return found


def try_claim(agent: AgentProcess, promise: int) -> tuple[int, dict[str, Any]]:
    with agent.client() as c:
        reply = c.post("/v1/claims", json={"command": BRIEF, "max_job_retirement_time": promise})
    body: dict[str, Any] = reply.json()
    if reply.status_code == 201:
        agent.job_pids.add(body["job"]["pid"])
    return reply.status_code, body


def test_a_node_admitting_by_promise_stays_open_until_its_vacate_time_before_the_window(
    daemons: dict[str, Any],
) -> None:
    master, node, admits = daemons["master"], daemons[OPEN], daemons[ADMIT]
    start = int(time.time()) + 25
    schedule(master, [OPEN, ADMIT], start)
    wait_for(lambda: machine_ad(node).get("UnavailabilityStart") == start)

    # admit: any job it takes is promised an hour, so it is drained at once
    wait_for(lambda: machine_ad(admits)["DrainState"] != "none", timeout=30)
    closing = plan_for(master, ADMIT)["closing"]
    assert (closing["admission"], closing["by"], closing["by_promise"]) == (
        "admit",
        "retirement",
        False,
    )
    status, body = try_claim(admits, PROMISE)
    assert (status, body["error"]["code"]) == (409, "machine.not_accepting")

    # refuse: only the vacate time bounds its drain
    row = wait_for(lambda: (r := plan_for(master, OPEN))["closing"]["by_promise"] and r)
    assert row["closing"]["by"] == "vacate"
    assert row["closing"]["seconds"] == VACATE
    assert row["planned_drain_start"] == start - MARGIN - VACATE
    hours = row["closing"]["closed_core_hours"]
    assert hours["refuse"] < hours["admit"]

    # it takes jobs that fit until its drain starts: each admitted one fits before the window
    tried: list[tuple[float, int, str | None]] = []
    while True:
        at = time.time()
        status, body = try_claim(node, PROMISE)
        code = None if status == 201 else body["error"]["code"]
        tried.append((at, status, code))
        if code == "machine.not_accepting":
            break
        assert at < start + 5, tried  # the drain is due before the window
        if status == 201:
            granted = body["job"]["retirement_granted"]
            assert (granted, body["job"]["retirement_shortened_by"]) == (PROMISE, None)
            assert at + granted <= start + 1, tried  # its promise ends by the window
        else:
            assert code == "machine.window_ahead", body
            assert at + PROMISE > start - 1, tried  # refused only when it would not fit
        time.sleep(1)
    admitted = [at for at, status, _ in tried if status == 201]
    assert admitted, tried
    assert max(admitted) >= start - 15, tried  # open long after admit closed
    drained = machine_ad(node)
    assert drained["LastDrainStartTime"] >= start - MARGIN - VACATE - 1

    # empty at the window, with no promise cut
    wait_for(lambda: node.call("GET", "/v1/claims").json()["claims"] == [], timeout=30)
    wait_for(lambda: time.time() > start + 1, timeout=30)
    row = plan_for(master, OPEN)
    assert row["empty"] is True
    assert row["as_planned"]["cut_jobs"] == 0
    lines = master.call(
        "GET",
        "/v1/events",
        params={"type": "drain.escalated", "machine": OPEN, "follow": "false", "format": "jsonl"},
    ).text.splitlines()
    assert [json.loads(line) for line in lines if line] == []


def test_every_group_accepting_drains_the_machine_at_once(daemons: dict[str, Any]) -> None:
    master, node = daemons["master"], daemons[OWNED]
    node.claim(SLEEP, group="web/prod/front", max_job_retirement_time=60)
    node.claim(SLEEP, group="batch/dev/etl", max_job_retirement_time=60)
    start = int(time.time()) + 86_400
    schedule(master, [OWNED], start)

    def notices() -> dict[str, dict[str, Any]]:
        found = master.call("GET", "/v1/notices", params={"machine": OWNED}).json()["notices"]
        return {n["group"]: n for n in found}

    held = wait_for(lambda: len(n := notices()) == 2 and n)

    def answer(group: str, verdict: str, reason: str) -> None:
        reply = master.call(
            "POST", f"/v1/notices/{held[group]['id']}/{verdict}", json={"reason": reason}
        )
        assert reply.status_code == 200, reply.text

    answer("web/prod/front", "accept", "front ends move by themselves")
    answer("batch/dev/etl", "decline", "month-end run until Friday")
    row = plan_for(master, OWNED)
    shown = {n["group"]: n["answer"] for n in row["notices"]}
    assert shown["batch/dev/etl"]["verdict"] == "decline"
    assert shown["batch/dev/etl"]["reason"] == "month-end run until Friday"
    assert shown["web/prod/front"]["verdict"] == "accept"
    assert row["started_by_master"] is False
    assert machine_ad(node)["DrainState"] == "none"
    totals = master.call("GET", "/v1/maintenance/plan").json()["totals"]["notices"]
    assert (totals["accepted"], totals["declined"]) == (1, 1)

    # the latest answer counts: now every group has accepted, and the drain starts
    answer("batch/dev/etl", "accept", "moved the run to another cluster")
    wait_for(lambda: machine_ad(node)["DrainState"] == "draining", timeout=30)
    row = wait_for(lambda: (r := plan_for(master, OWNED))["started_by_master"] and r)
    assert row["planned_drain_start"] > time.time() + 3600  # long before it was due
    assert machine_ad(node)["DrainSchedule"] == "graceful"
