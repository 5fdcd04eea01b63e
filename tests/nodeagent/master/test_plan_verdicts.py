"""The plan's two verdicts per machine (promises, as planned), their cost and the totals.

Table-driven, on virtual time: a node's ad from the model (:class:`slots.Machine`), a
window, and the master's plan row; the figures are checked against the numbers the
promises imply and against :func:`slots.drain_verdicts` and :func:`slots.ad_blockers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nodeagent._clock import TrioClock
from nodeagent._serving._http import trusted
from nodeagent._store import DocumentStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._api import build_master_app
from nodeagent.master._drains import DrainRecord
from nodeagent.master._maintenance import MachineId, MaintenanceSchedule, Unavailability, Window
from nodeagent.master._master import Master
from nodeagent.master._metrics import MasterMetrics
from nodeagent.master._plan import PlanPolicy
from slots import (
    Escalation,
    JobSpec,
    Machine,
    MachinePolicy,
    Resources,
    Schedule,
    ad_blockers,
    drain_verdicts,
)

EPOCH = 1_800_000_000.0


@dataclass(frozen=True, kw_only=True)
class Node:
    """One node: its host, a job of ``cpus`` run ``run`` seconds with ``retirement``
    promised, a drain in force (``drain``: its deadline offset from ``EPOCH``, or
    ``"none"`` for a graceful drain without one), and its window's offset."""

    host: str
    window: float
    cpus: int = 2
    run: float = 10.0
    retirement: int = 60
    drain: float | str | None = None
    jobs: int = 1


def node_ad(node: Node) -> dict[str, Any]:
    started = EPOCH - node.run
    machine = Machine(
        host=node.host,
        ip="10.0.0.1",  # the windows name hostnames only
        address=f"http://{node.host}:9621",
        total=Resources(cpus=8),
        policy=MachinePolicy(max_job_retirement_time=node.retirement, machine_max_vacate_time=5),
        now=started,
    )
    for n in range(node.jobs):
        machine.claim(
            started,
            resources=Resources(cpus=node.cpus),
            spec=JobSpec(job_id=f"{n + 7}", owner="alice"),
        )
    if node.drain is not None:
        deadline = None if node.drain == "none" else float(node.drain)  # from now
        machine.start_draining(EPOCH, schedule=Schedule.GRACEFUL, deadline=deadline, commit=True)
    return machine.ad(EPOCH)


def make_master(tmp_path: Path, escalation: str = "quick") -> Master:
    return Master(
        store=DocumentStore(tmp_path / "master.db"),
        link=None,  # type: ignore[arg-type]  # a plan calls no node
        clock=TrioClock(EPOCH),
        ads=AdStore(lifetime=10_000),
        policy=PlanPolicy(escalation=escalation),
        reconcile_interval=1.0,
    )


def windows(nodes: list[Node]) -> MaintenanceSchedule:
    return MaintenanceSchedule(
        windows=tuple(
            Window(
                machine_ids=(MachineId(hostname=node.host, ip=None),),
                unavailability=Unavailability(
                    start_ns=int((EPOCH + node.window) * 1e9), duration_ns=None
                ),
            )
            for node in nodes
        )
    )


def plan_of(tmp_path: Path, nodes: list[Node], **kwargs: Any) -> tuple[Master, dict[str, Any]]:
    master = make_master(tmp_path, kwargs.pop("escalation", "quick"))
    for node in nodes:
        master.receive_ad(node_ad(node))
    master.set_schedule(windows(nodes), actor="ops")
    return master, master.plan(**kwargs)


@dataclass(frozen=True, kw_only=True)
class Case:
    node: Node
    escalation: str
    record: bool  # the master started the drain in force
    promise: int  # promise completion, offset from EPOCH
    late_by: float
    planned: int  # as planned completion, offset from EPOCH
    applied: str
    cut_by: int  # the job's promise cut (0: kept)


CASES = {
    # A job promised 60 s, run 10 s: its promise ends at +50, the window opens at +15.
    "late, quick at the window": Case(
        node=Node(host="n.test", window=15),
        escalation="quick",
        record=False,
        promise=50,
        late_by=35,
        planned=20,  # soft-killed at +15, gone within its vacate time (5 s)
        applied="quick",
        cut_by=35,
    ),
    "late, fast at the window": Case(
        node=Node(host="n.test", window=15),
        escalation="fast",
        record=False,
        promise=50,
        late_by=35,
        planned=15,
        applied="fast",
        cut_by=35,
    ),
    "late, no escalation: the promise is kept": Case(
        node=Node(host="n.test", window=15),
        escalation="none",
        record=False,
        promise=50,
        late_by=35,
        planned=50,
        applied="none",
        cut_by=0,
    ),
    # The master's own drain with its deadline at the window: the promise verdict holds.
    "the master's drain, deadline at the window": Case(
        node=Node(host="n.test", window=15, drain=15),
        escalation="quick",
        record=True,
        promise=50,
        late_by=35,
        planned=20,
        applied="quick",
        cut_by=35,
    ),
    # Someone else's drain, no deadline: the master leaves it alone.
    "another's drain is not escalated": Case(
        node=Node(host="n.test", window=15, drain="none"),
        escalation="quick",
        record=False,
        promise=50,
        late_by=35,
        planned=50,
        applied="none",
        cut_by=0,
    ),
    # Someone else's drain whose deadline comes before the window: it cuts the promise.
    "another's deadline before the window cuts": Case(
        node=Node(host="n.test", window=30, drain=20),
        escalation="quick",
        record=False,
        promise=50,
        late_by=20,
        planned=25,
        applied="none",
        cut_by=30,
    ),
    "on time": Case(
        node=Node(host="n.test", window=100),
        escalation="quick",
        record=False,
        promise=50,
        late_by=0,
        planned=50,
        applied="quick",
        cut_by=0,
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
async def test_a_row_tells_both_verdicts_and_the_cost(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, case: Case
) -> None:
    master = make_master(tmp_path, case.escalation)
    ad = node_ad(case.node)
    master.receive_ad(ad)
    master.set_schedule(windows([case.node]), actor="ops")
    if case.record:
        master.drains["n.test|"] = DrainRecord.from_json(
            {
                "node": "n.test",
                "request_id": ad["machine"]["DrainingRequestId"],
                "escalated": False,
                "phase": "committed",
            }
        )
    row = master.plan()["machines"][0]
    window = EPOCH + case.node.window
    promises, planned = row["promises"], row["as_planned"]
    assert promises == {
        "completion": EPOCH + case.promise,
        "on_time": case.late_by == 0,
        "late_by": case.late_by,
    }
    assert (row["on_time"], row["late_by"]) == (promises["on_time"], promises["late_by"])
    assert planned["completion"] == EPOCH + case.planned
    assert planned["escalation"] == case.applied
    assert planned["will_escalate"] is (case.cut_by > 0)
    assert planned["escalated"] is False
    cpus, run_at_cut = case.node.cpus, case.node.run + (case.planned - 5)
    if case.cut_by:
        (cut,) = planned["cuts"]
        assert (cut["job_id"], cut["owner"], cut["cpus"]) == ("7", "alice", cpus)
        assert cut["cut_by"] == case.cut_by
        assert cut["promise_end"] == EPOCH + case.promise
        assert planned["cut_jobs"] == 1
        assert planned["cut_core_seconds"] == cpus * case.cut_by
        if case.applied != "fast":  # soft-killed: its vacate time is not work lost
            assert cut["cut_badput"] == cpus * run_at_cut
        assert planned["cut_badput"] == cut["cut_badput"]
    else:
        assert planned["cuts"] == []
        assert (planned["cut_jobs"], planned["cut_core_seconds"], planned["cut_badput"]) == (
            0,
            0,
            0,
        )
    # The same figures as the model's direct functions.
    slots_ads = ad["slots"]
    verdicts = drain_verdicts(
        slots_ads, EPOCH, window_start=window, escalation=Escalation(case.applied)
    )
    assert verdicts.promise_completion == promises["completion"]
    assert verdicts.planned_completion == planned["completion"]
    assert verdicts.planned_badput == planned["badput"]
    blockers = ad_blockers(
        slots_ads, EPOCH, window_start=window, escalation=Escalation(case.applied)
    )
    assert row["blockers"] == blockers
    assert [b["cut_by"] for b in row["blockers"]] == [case.cut_by]


async def test_the_totals_count_late_machines_escalations_and_their_cost(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    nodes = [
        Node(host="late-soon.test", window=15, cpus=2),  # cut 35 s · 2 cpus
        Node(host="late-later.test", window=7160, retirement=7200, cpus=3),  # cut 30 s
        Node(host="kept.test", window=15, drain="none"),  # late, another's drain: not cut
        Node(host="on-time.test", window=600),
    ]
    _, plan = plan_of(tmp_path, nodes)
    totals = plan["totals"]
    rows = {row["node"]: row for row in plan["machines"]}
    assert rows["late-later.test"]["as_planned"]["cut_core_seconds"] == 3 * 30
    assert totals["machines"] == 4
    assert (totals["on_time"], totals["late"]) == (1, 3)
    assert totals["escalations"] == 2
    assert totals["escalations_next_hour"] == 1
    assert totals["cut_jobs"] == 2
    assert totals["cut_core_seconds"] == 2 * 35 + 3 * 30
    assert totals["escalation_badput"] == sum(
        row["as_planned"]["cut_badput"] for row in plan["machines"]
    )
    assert totals["escalation_badput"] == 2 * (10 + 15) + 3 * (10 + 7160)


async def test_late_and_limit_choose_the_rows_and_keep_the_totals(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    nodes = [
        Node(host="on-time.test", window=600),
        Node(host="late-2.test", window=30),
        Node(host="late-1.test", window=15),
        Node(host="late-3.test", window=40),
    ]
    master, everything = plan_of(tmp_path, nodes)
    assert [row["node"] for row in everything["machines"]] == [n.host for n in nodes]
    assert everything["matched"] == 4
    late = master.plan(late=True, limit=2, with_blockers=False)
    assert [row["node"] for row in late["machines"]] == ["late-1.test", "late-2.test"]
    assert late["matched"] == 3
    assert all(row["blockers"] == [] for row in late["machines"])
    # The cost is there without the blockers.
    assert late["machines"][0]["as_planned"]["cuts"][0]["job_id"] == "7"
    assert late["totals"] == everything["totals"]
    assert master.plan(limit=0)["machines"] == []


async def test_the_plan_endpoint_takes_late_limit_and_blockers(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    import httpx

    nodes = [Node(host="on-time.test", window=600), Node(host="late.test", window=15)]
    master, _ = plan_of(tmp_path, nodes)
    master._to_fetch.clear()  # the ads are newer than the schedule: nothing to fetch
    app = build_master_app(master, key=None, audit=None, metrics=MasterMetrics(master))
    transport = httpx.ASGITransport(app=trusted(app))  # as on the Unix socket
    async with httpx.AsyncClient(transport=transport, base_url="http://unix") as client:
        reply = await client.get(
            "/v1/maintenance/plan", params={"late": "true", "limit": "5", "blockers": "false"}
        )
        assert reply.status_code == 200
        body = reply.json()
        assert [row["node"] for row in body["machines"]] == ["late.test"]
        assert body["machines"][0]["blockers"] == []
        bad = await client.get("/v1/maintenance/plan", params={"limit": "-1"})
        assert bad.status_code == 422
