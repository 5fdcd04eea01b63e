"""The master's notices through its reconcile pass: issued, saved, answered, restored."""

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
from nodeagent.master._notices import Verdict
from nodeagent.master._plan import PlanPolicy
from slots import Escalation, JobSpec, Machine, MachinePolicy, Resources, ad_blockers

EPOCH = 1_800_000_000.0


class NoLink:
    async def call(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("no call expected")


def node_ad(now: float, groups: list[str]) -> dict[str, Any]:
    machine = Machine(
        host="n1.test",
        ip="10.0.0.1",
        address="http://10.0.0.1:9621",
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=60),
        now=now,
    )
    for group in groups:
        machine.claim(now, resources=Resources(cpus=1), spec=JobSpec(group=group))
    return machine.ad(now)


def make_master(path: Path, collections: tuple[str, ...] = ("notices",)) -> Master:
    return Master(
        store=DocumentStore(path, collections=collections),
        link=NoLink(),
        clock=TrioClock(EPOCH),
        ads=AdStore(lifetime=10_000),
        # a drain far from due: the passes make no call
        policy=PlanPolicy(drain_policy="just_in_time"),
        reconcile_interval=1.0,
    )


def schedule(start: float) -> MaintenanceSchedule:
    return MaintenanceSchedule(
        windows=(
            Window(
                machine_ids=(MachineId(hostname="n1.test", ip="10.0.0.1"),),
                unavailability=Unavailability(start_ns=int(start * 1e9), duration_ns=3600 * 10**9),
            ),
        )
    )


async def pass_(master: Master) -> None:
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        nursery.cancel_scope.cancel()


def types(master: Master) -> list[str]:
    return [json.loads(e.data)["type"] for e in master.events.log.after(0)[1]]


@pytest.mark.parametrize("collections", [("operations", "notices", "events"), ()])
async def test_notices_issued_answered_and_kept_across_a_restart(
    tmp_path: Path, collections: tuple[str, ...], autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "master.db"
    master = make_master(path, collections)
    master.receive_ad(node_ad(EPOCH, ["a/p/x", "a/p/x", "b/q/y"]))
    master.set_schedule(schedule(EPOCH + 86_400), actor="ops")
    await pass_(master)
    by_group = {n.group: n for n in master.notices.values()}
    assert sorted(by_group) == ["a/p/x", "b/q/y"]
    assert len(by_group["a/p/x"].claims) == 2
    assert by_group["a/p/x"].window.start == EPOCH + 86_400
    assert by_group["a/p/x"].window.duration == 3600
    assert types(master).count("notice.issued") == 2

    await pass_(master)  # nothing changed: nothing written again
    assert types(master).count("notice.issued") == 2

    notice = by_group["b/q/y"]
    master.answer_notice(
        notice.id, Verdict.DECLINE, reason="month-end batch", expected_completion=None, who="bob"
    )
    assert "notice.answered" in types(master)

    again = make_master(path, collections)
    again.load()
    assert again.notices == master.notices
    answer = again.notices[notice.id].answer
    assert answer is not None
    assert answer.verdict is Verdict.DECLINE
    assert answer.reason == "month-end batch"

    # the group's last instance leaves: its notice is rescinded, its answer with it
    again.receive_ad(node_ad(EPOCH + 1, ["a/p/x"]))
    await pass_(again)
    assert {n.group for n in again.notices.values()} == {"a/p/x"}
    assert "notice.rescinded" in types(again)
    third = make_master(path, collections)
    third.load()
    assert third.notices == again.notices


async def test_notices_that_change_without_changing_the_machines_accepted_keep_the_pass_index(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A pass looks at every machine only when what it depends on changed: notices issued,
    answered or rescinded that leave the machines accepted by all their owners as they
    were keep its index (the next pass looks at what changed); an accept that makes a
    machine accepted by all is such a change."""
    master = make_master(tmp_path / "master.db")
    master.receive_ad(node_ad(EPOCH, ["a/p/x", "b/q/y"]))
    master.set_schedule(schedule(EPOCH + 86_400), actor="ops")
    await pass_(master)
    index = master._pass_index
    assert index is not None
    master.receive_ad(node_ad(EPOCH + 1, ["a/p/x", "c/r/z"]))  # b rescinded, c issued
    notices = master.notices
    await pass_(master)
    assert master.notices is not notices  # the notices changed
    assert {n.group for n in master.notices.values()} == {"a/p/x", "c/r/z"}
    assert master._pass_index is index  # and the pass kept its index
    first, second = sorted(master.notices.values(), key=lambda n: n.group)
    master.answer_notice(first.id, Verdict.ACCEPT, reason="", expected_completion=None, who="a")
    await pass_(master)
    assert master._pass_index is index  # one of two accepted: none accepted by all
    accepted = master._accepted_machines()
    assert accepted == frozenset()
    master.answer_notice(second.id, Verdict.ACCEPT, reason="", expected_completion=None, who="c")
    # accepted by all: a change of what the index was made for (the next pass looks at
    # every machine, and starts its drain: on_all_accepted)
    assert master._accepted_machines() == {first.machine}
    assert master._accepted_machines() is not accepted


async def test_an_answer_to_an_unknown_notice_changes_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    master = make_master(tmp_path / "master.db")
    with pytest.raises(KeyError):
        master.answer_notice(
            "n-nope", Verdict.ACCEPT, reason="ok", expected_completion=None, who="x"
        )
    assert master.notices == {}


async def test_a_follower_takes_the_notices_the_leader_wrote(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "master.db"
    leader = make_master(path)
    follower = make_master(path)
    leader.receive_ad(node_ad(EPOCH, ["a/p/x"]))
    leader.set_schedule(schedule(EPOCH + 86_400), actor="ops")
    await pass_(leader)
    (notice,) = leader.notices.values()
    leader.answer_notice(
        notice.id, Verdict.ACCEPT, reason="fine", expected_completion=EPOCH + 60, who="alice"
    )
    follower.follow({"notices"})
    assert follower.notices == leader.notices


class DownLink:
    """Every call fails as an unreachable agent would (a drain due at once is tried)."""

    async def call(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        raise AgentCallFailed("agent.unreachable", "connection refused")


def long_job_ad(now: float, retirement: int) -> dict[str, Any]:
    """One job of ``a/p/x`` started at EPOCH, on a node whose promise is ``retirement``."""
    machine = Machine(
        host="n1.test",
        ip="10.0.0.1",
        address="http://10.0.0.1:9621",
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=retirement),
        now=EPOCH,
    )
    machine.claim(EPOCH, resources=Resources(cpus=1), spec=JobSpec(group="a/p/x"))
    return machine.ad(now)


async def test_claims_carry_the_plans_verdicts_saved_when_they_change(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "master.db"
    master = make_master(path)
    master.link = DownLink()
    ad = long_job_ad(EPOCH, retirement=7200)
    master.receive_ad(ad)
    window_start = EPOCH + 3600
    master.set_schedule(schedule(window_start), actor="ops")
    await pass_(master)
    (notice,) = master.notices.values()
    # as the plan reads the node it holds: the master's escalation (quick) at the window
    held = master.ads.get("n1.test")
    assert held is not None
    (blocker,) = ad_blockers(
        held.slots, EPOCH, window_start=window_start, escalation=Escalation.QUICK
    )
    (claim,) = notice.claims
    assert (claim.promise_end, claim.evict_at, claim.cut_by) == (
        blocker["promise_end"],
        window_start,
        blocker["promise_end"] - window_start,
    )
    assert claim.kept is False
    issued = [e for e in master.events.log.after(0)[1] if b"notice.issued" in e.data]
    assert "1 cut at the window by up to 1 h" in json.loads(issued[0].data)["text"]

    # the node's promise shortened (its policy changed): the same job is kept now, and the
    # notice is saved again, with no event
    master.receive_ad(long_job_ad(EPOCH + 1, retirement=60))
    await pass_(master)
    (claim,) = master.notices[notice.id].claims
    assert claim.kept is True
    assert types(master).count("notice.issued") == 1
    again = make_master(path)
    again.load()
    assert again.notices == master.notices


def host_ad(host: str, ip: str, now: float) -> dict[str, Any]:
    machine = Machine(
        host=host,
        ip=ip,
        address=f"http://{ip}:9621",
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=60),
        now=now,
    )
    machine.claim(now, resources=Resources(cpus=1), spec=JobSpec(group="a/p/x"))
    return machine.ad(now)


async def test_a_pass_reads_a_bounded_number_of_verdicts_and_the_rest_later(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Reading a claim's verdicts makes its node's forecast for the window: a pass makes
    at most forecasts_per_pass of them; the other notices are issued with their verdicts
    unknown and given them (saved again, no second notice.issued) by later passes."""
    master = make_master(tmp_path / "master.db", ("operations", "notices", "events"))
    master.forecasts_per_pass = 1
    hosts = [(f"n{i}.test", f"10.0.0.{i}") for i in range(1, 5)]
    for host, ip in hosts:
        master.receive_ad(host_ad(host, ip, EPOCH))
    ids = tuple(MachineId(hostname=h, ip=ip) for h, ip in hosts)
    master.set_schedule(
        MaintenanceSchedule(
            windows=(
                Window(
                    machine_ids=ids,
                    unavailability=Unavailability(start_ns=int(EPOCH + 86_400) * 10**9),
                ),
            )
        ),
        actor="ops",
    )

    def unknown() -> int:
        return sum(c.cut_by is None for n in master.notices.values() for c in n.claims)

    await pass_(master)
    assert len(master.notices) == 4
    assert 0 < unknown() < 4  # some read, not all
    for _ in range(4):
        await pass_(master)
    assert unknown() == 0
    assert types(master).count("notice.issued") == 4
    stored = make_master(tmp_path / "master.db", ("operations", "notices", "events"))
    stored.load()
    assert stored.notices == master.notices
