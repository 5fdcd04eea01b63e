"""The master's reconcile logic on virtual time, with an agent link that fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nodeagent._clock import TrioClock
from nodeagent._peer import AgentCallFailed
from nodeagent._store import DocumentStore
from nodeagent.master._adstore import AdStore
from nodeagent.master._maintenance import MachineId, MaintenanceSchedule, Unavailability, Window
from nodeagent.master._master import Master
from nodeagent.master._plan import PlanPolicy
from slots import JobSpec, Machine, MachinePolicy, Resources

EPOCH = 1_800_000_000.0


class DownLink:
    """Every call fails as an unreachable agent would; calls are counted with their time."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def call(
        self, address: str, method: str, path: str, *, actor: str, body: Any = None
    ) -> dict[str, Any]:
        self.calls.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        raise AgentCallFailed("agent.unreachable", f"{address}: connection refused")


def node_ad(now: float) -> dict[str, Any]:
    machine = Machine(
        host="n1.test",
        ip="10.0.0.1",
        address="http://10.0.0.1:9621",
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=60),
        now=now,
    )
    machine.claim(now, resources=Resources(cpus=1), spec=JobSpec())
    return machine.ad(now)


def make_master(tmp_path: Path, link: DownLink) -> Master:
    clock = TrioClock(EPOCH)
    return Master(
        store=DocumentStore(tmp_path / "master.db"),
        link=link,
        clock=clock,
        ads=AdStore(lifetime=10_000),
        policy=PlanPolicy(drain_policy="immediate"),
        reconcile_interval=1.0,
    )


def schedule(start: float) -> MaintenanceSchedule:
    return MaintenanceSchedule(
        windows=(
            Window(
                machine_ids=(MachineId(hostname="n1.test", ip="10.0.0.1"),),
                unavailability=Unavailability(start_ns=int(start * 1e9), duration_ns=None),
            ),
        )
    )


async def test_a_failing_node_is_retried_with_backoff(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    link = DownLink()
    master = make_master(tmp_path, link)
    master.receive_ad(node_ad(EPOCH))
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")
    t0 = trio.current_time()
    with trio.move_on_after(40):
        await master.run()
    offsets = [round(t - t0) for t in link.calls]
    assert offsets == [0, 2, 6, 14, 30]  # not once a second
    assert master.counters.drain_failures == 5


async def test_other_daemons_ads_are_kept_out_of_the_nodes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    master = make_master(tmp_path, DownLink())
    reply = master.receive_ad(
        {"machine": {"MyType": "Defrag", "Name": "defrag-main", "DrainSuccesses": 3}, "slots": []}
    )
    assert reply == {"machine_id": None, "mode": None, "unavailability": None}
    master.receive_ad(node_ad(EPOCH))
    now = master.clock.now()
    assert [a["Name"] for a in master.ads.query(now)] == ["n1.test"]
    assert master.ads.query(now, my_type="Defrag")[0]["DrainSuccesses"] == 3
    assert master.plan()["totals"]["nodes"] == 1


async def test_an_ad_with_a_non_finite_number_is_refused(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from nodeagent._auth import Scope, create_token
    from nodeagent.master._api import Principals, push_ad

    master = make_master(tmp_path, DownLink())
    key = b"k" * 32
    token = create_token(
        key, subject="agent", scope=Scope.DAEMON, lifetime_s=60, now=master.clock.now()
    )
    body = b'{"machine": {"Name": "n1.test", "CpuUsage": NaN}, "slots": []}'
    reply = push_ad(master, Principals(master, key), f"Bearer {token}", body, unix=False)
    assert reply.status == 422
    assert master.ads.query(master.clock.now()) == []


def many_nodes_schedule(count: int, start: float) -> MaintenanceSchedule:
    return MaintenanceSchedule(
        windows=(
            Window(
                machine_ids=tuple(
                    MachineId(hostname=f"n{i}.test", ip=f"10.0.0.{i}") for i in range(count)
                ),
                unavailability=Unavailability(start_ns=int(start * 1e9), duration_ns=None),
            ),
        )
    )


async def test_reconcile_passes_make_forecasts_a_bounded_number_at_a_time(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    master = make_master(tmp_path, DownLink())
    master.forecasts_per_pass = 2
    master.policy = PlanPolicy()  # just in time: no drain is due an hour ahead
    template = node_ad(EPOCH)
    for i in range(5):
        machine = {**template["machine"], "Name": f"n{i}.test", "Machine": f"n{i}.test"}
        master.receive_ad(
            {"machine": {**machine, "MachineIp": f"10.0.0.{i}"}, "slots": template["slots"]}
        )
    master.set_schedule(many_nodes_schedule(5, EPOCH + 7 * 86400), actor="ops")
    entries = master.ads.entries()

    def made() -> int:
        return sum(e.forecast.ready(master.clock.now()) for e in entries)

    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        assert made() == 2
        master.reconcile(nursery)
        master.reconcile(nursery)
        assert made() == 5
    row = master.plan()["machines"][0]
    assert row["expected"]["graceful"]["completion"] == EPOCH + 600  # the vacate time


@pytest.mark.parametrize(
    ("where", "attribute", "value"),
    [
        ("slot", "TotalJobRunTime", "600"),
        ("slot", "MaxJobRetirementTime", True),
        ("slot", "Cpus", [1]),
        ("slot", "MyCurrentTime", float("inf")),
        ("machine", "MachineMaxVacateTime", {"s": 1}),
        ("machine", "DrainingDeadline", "tomorrow"),
        ("machine", "ExpectedMachineGracefulDrainingCompletion", "soon"),
        ("machine", "DrainSuspendedJobs", "ignore"),
    ],
)
async def test_an_ad_the_estimates_cannot_read_is_refused_and_changes_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, where: str, attribute: str, value: Any
) -> None:
    from nodeagent._auth import Scope, create_token
    from nodeagent.master._api import Principals, push_ad

    master = make_master(tmp_path, DownLink())
    master.receive_ad(node_ad(EPOCH))
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")
    before = master.ads.get("n1.test")
    bad = node_ad(EPOCH + 10)
    target = bad["machine"] if where == "machine" else bad["slots"][1]
    target[attribute] = value
    key = b"k" * 32
    token = create_token(
        key, subject="agent", scope=Scope.DAEMON, lifetime_s=60, now=master.clock.now()
    )
    # 1e400 reads as infinity: JSON's own Infinity is refused earlier, as not JSON
    body = json.dumps(bad).replace("Infinity", "1e400").encode()
    reply = push_ad(master, Principals(master, key), f"Bearer {token}", body, unix=False)
    assert reply.status == 422
    assert json.loads(reply.body)["error"]["code"] == "request.invalid"
    assert attribute in json.loads(reply.body)["error"]["message"]
    assert master.ads.get("n1.test") is before
    # the plan and a reconcile pass still work
    assert master.plan()["machines"][0]["expected"] is not None
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        nursery.cancel_scope.cancel()


async def test_the_plan_body_is_the_plan_even_with_integers_beyond_64_bits(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from nodeagent.master._api import plan_body

    master = make_master(tmp_path, DownLink())
    ad = node_ad(EPOCH)
    ad["machine"]["TotalMachineDrainingBadput"] = 2**70  # orjson refuses it; json does not
    master.receive_ad(ad)
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")
    body = json.loads(plan_body(master))
    assert body == master.plan()
    assert body["machines"][0]["statistics"]["TotalMachineDrainingBadput"] == 2**70
    master.receive_ad(node_ad(EPOCH))
    assert json.loads(plan_body(master, with_blockers=False)) == master.plan(with_blockers=False)
