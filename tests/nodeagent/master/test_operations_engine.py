"""The engine of rolling maintenance operations on virtual time, against model nodes: a
whole operation, the Mesos modes on the way, a failing health check, a refused hook, pause
and cancel, and the master killed (rebuilt from its store) at every step: no node drained
twice, no hook run twice, none skipped."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nodeagent._clock import TrioClock
from nodeagent._peer import AgentCallFailed
from nodeagent._store import DocumentStore, Members
from nodeagent.master._adstore import AdStore
from nodeagent.master._maintenance import Mode
from nodeagent.master._master import Master
from nodeagent.master._notices import Answer, Notice, NoticeWindow, Verdict
from nodeagent.master._operations import (
    Operation,
    OperationError,
    OperationSpec,
    SlaVerdict,
    new_operation,
)
from nodeagent.master._plan import PlanPolicy
from nodeagent.master._rolling import HELD_RECHECK, Operations, sla_verdict
from nodeagent.master._sla import GroupVerdict, NodeAds, Probe, SlaKind
from slots import Machine, MachinePolicy, Resources
from tests.nodeagent.master.test_master_api import HOOKS

EPOCH = 1_800_000_000.0
DRAIN_TIME = 3.0
HOOK_TIME = 2.0
HEALTH_TIME = 1.5


class ModelNode:
    """An agent reduced to what an operation sees: a drain that empties the node
    ``DRAIN_TIME`` after its commit, its completion hook (``HOOK_TIME``), then the health
    gate (``HEALTH_TIME``, or failing while ``healthy`` is false)."""

    def __init__(self, clock: TrioClock, name: str, rack: str, index: int) -> None:
        self.clock = clock
        self.name = name
        self.rack = rack
        self.address = f"http://10.0.0.{index}:9621"
        self.ip = f"10.0.0.{index}"
        self.hooks = ("reboot",)
        self.healthy = True
        self.next_id = 1
        self.drain: dict[str, Any] | None = None
        self.hook: dict[str, Any] | None = None
        self.health_from: float | None = None
        self.commits: list[float] = []
        self.hook_runs: list[float] = []
        self.in_service_at: list[float] = []
        #: "commit": the commit is carried out, its reply never comes (lost)
        self.hang: str | None = None
        #: Accepts every call and never answers it (its ads still come, pushed).
        self.silent = False

    def _update(self) -> None:
        """The node as it is now, each step taken at its own time (not when it is seen:
        a master away for a while finds the drain and its hook over)."""
        now = self.clock.now()
        drain = self.drain
        if drain is not None and drain["state"] == "draining" and now >= drain["empty_at"]:
            drain["state"] = "drained"
            hook = drain["hook"]
            if hook is not None:
                start = drain["empty_at"]
                self.hook = {"id": drain["id"], "name": hook, "state": "running", "start": start}
                self.hook_runs.append(start)
        hook = self.hook
        if hook is not None and hook["state"] == "running" and now >= hook["start"] + HOOK_TIME:
            hook["state"] = "succeeded"
            self.drain = None
            self.health_from = hook["start"] + HOOK_TIME
        if self.health_from is not None and self.healthy and now >= self.health_from + HEALTH_TIME:
            self.in_service_at.append(self.health_from + HEALTH_TIME)
            self.health_from = None

    def ad(self) -> dict[str, Any]:
        self._update()
        now = self.clock.now()
        machine = Machine(
            host=self.name,
            ip=self.ip,
            address=self.address,
            total=Resources(cpus=4),
            policy=MachinePolicy(max_job_retirement_time=60, hooks=HOOKS),
            now=now,
        )
        ad = machine.ad(now)
        m = ad["machine"]
        m["Rack"] = self.rack
        m["HealthState"] = "passing" if self.health_from is None else (
            "pending" if self.healthy else "failing"
        )  # fmt: skip
        m["HealthMessage"] = None if self.healthy else "exit status 1"
        if m["HealthMessage"] is None:
            del m["HealthMessage"]
        drain = self.drain
        m["DrainState"] = "none" if drain is None else drain["state"]
        closed = drain is not None and drain["state"] != "pending"
        m["Start"] = not closed and self.health_from is None
        if drain is not None:
            m["DrainingRequestId"] = drain["id"]
            m["DrainSchedule"] = drain["schedule"]
        if self.hook is not None:
            m["DrainHookRequestId"] = self.hook["id"]
            m["DrainHookName"] = self.hook["name"]
            m["DrainHookState"] = self.hook["state"]
        return ad

    async def call(self, method: str, path: str, body: Any) -> dict[str, Any]:
        self._update()
        now = self.clock.now()
        words = path.split("/")
        if (method, path) == ("GET", "/v1/ad"):
            return self.ad()
        if (method, path) == ("POST", "/v1/drain"):
            if self.drain is not None:
                raise AgentCallFailed("drain.exists", "a drain is in force")
            hook = body["on_completion"].removeprefix("hook:")
            if hook not in self.hooks:
                raise AgentCallFailed("drain.no_such_hook", f"no hook {hook!r}")
            rid = str(self.next_id)
            self.next_id += 1
            self.drain = {"id": rid, "state": "pending", "schedule": body["schedule"],
                          "hook": hook, "empty_at": None}  # fmt: skip
            return {"id": rid, "estimate": {"completion": now + DRAIN_TIME}}
        if method == "POST" and words[-1] == "commit":
            drain = self.drain
            if drain is None or drain["id"] != words[-2] or drain["state"] != "pending":
                raise AgentCallFailed("drain.no_such_request", "no such request")
            drain["state"] = "draining"
            drain["empty_at"] = now + DRAIN_TIME
            self.commits.append(now)
            if self.hang == "commit":
                self.hang = None
                await trio.sleep_forever()
            return {"id": drain["id"], "state": "draining", "committed_at": int(now)}
        if method == "POST" and words[-1] == "cancel":
            drain = self.drain
            if drain is None or drain["id"] != words[-2]:
                raise AgentCallFailed("drain.no_such_request", "no such request")
            if self.hook is not None and self.hook["id"] == drain["id"]:
                raise AgentCallFailed("drain.hook_running", "the hook runs")
            if drain["state"] == "drained":
                self.health_from = now
            self.drain = None
            return {"id": drain["id"], "state": "cancelled"}
        raise AssertionError(f"unexpected call {method} {path}")


class Fleet:
    """The nodes behind the master's link, by address."""

    def __init__(self, clock: TrioClock, racks: dict[str, str]) -> None:
        self.nodes = {
            name: ModelNode(clock, name, rack, i + 1)
            for i, (name, rack) in enumerate(racks.items())
        }
        self.by_address = {node.address: node for node in self.nodes.values()}
        #: Every call made, and the calls to silent nodes still waiting for their answer.
        self.calls: list[tuple[str, str, str]] = []
        self.outstanding = 0

    async def call(
        self, address: str, method: str, path: str, *, node: str, actor: str, body: Any = None
    ) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        target = self.by_address[address]
        assert target is self.nodes[node]  # the token is bound to it
        self.calls.append((target.name, method, path))
        if target.silent:
            self.outstanding += 1
            try:
                await trio.sleep_forever()
            finally:
                self.outstanding -= 1
        return await target.call(method, path, body)

    async def push(self, master: Master) -> None:
        """Every node pushes its ad every 0.5 s, as agents do."""
        while True:
            for node in self.nodes.values():
                master.receive_ad(node.ad())
            await trio.sleep(0.5)


RACKS = {"a": "r1", "b": "r1", "c": "r2", "d": "r3"}


async def until(ok: Callable[[], bool], within: float = 60, every: float = 0.1) -> None:
    """Wait (virtual time) until ``ok()``: the model nodes and the engine share no event."""
    with trio.fail_after(within):
        while not ok():  # noqa: ASYNC110 (state changed by other tasks, polled as they poll)
            await trio.sleep(every)


def build(
    tmp_path: Path, fleet: Fleet, clock: TrioClock, store: DocumentStore | None = None
) -> tuple[Master, Operations]:
    master = Master(
        store=DocumentStore(tmp_path / "master.db") if store is None else store,
        link=fleet,
        clock=clock,
        ads=AdStore(lifetime=10_000),
        policy=PlanPolicy(drain_policy="immediate"),
        reconcile_interval=0.5,
    )
    master.load()
    operations = Operations(master)
    operations.load()
    return master, operations


def spec(**changes: Any) -> OperationSpec:
    fields: dict[str, Any] = {
        "hosts": tuple(RACKS),
        "grouping": "Rack",
        "batches": 1,
        "hook": "reboot",
    }
    fields.update(changes)
    return OperationSpec(**fields)


async def running(
    tmp_path: Path,
    fleet: Fleet,
    clock: TrioClock,
    nursery: trio.Nursery,
    *,
    engine_after: float = 0.0,
    store: DocumentStore | None = None,
) -> tuple[Master, Operations, trio.CancelScope]:
    """A master and its engine (``engine_after`` seconds after the master's reconcile
    passes begin) running in their own scope (cancel it: a kill -9)."""
    master, operations = build(tmp_path, fleet, clock, store)
    scope = trio.CancelScope()

    async def serve() -> None:
        with scope:
            async with trio.open_nursery() as inner:
                inner.start_soon(fleet.push, master)
                await inner.start(master.run)
                await trio.sleep(engine_after)
                await inner.start(operations.run)

    nursery.start_soon(serve)
    await trio.sleep(0.6)  # the ads are in
    return master, operations, scope


async def wait_for(operations: Operations, op_id: str, states: tuple[str, ...]) -> None:
    await until(
        lambda: (
            operations.get(op_id).state in states and operations.get(op_id).ended_at is not None
        ),
        within=300,
        every=0.25,
    )


def assert_once_each(fleet: Fleet, names: tuple[str, ...] = tuple(RACKS)) -> None:
    for name in names:
        node = fleet.nodes[name]
        assert len(node.commits) == 1, (name, node.commits)
        assert len(node.hook_runs) == 1, (name, node.hook_runs)
        assert len(node.in_service_at) == 1, (name, node.in_service_at)
        assert node.in_service_at[0] >= node.hook_runs[0] + HOOK_TIME + HEALTH_TIME


async def test_an_operation_by_rack_runs_to_completion(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    modes: list[tuple[str, str]] = []
    async with trio.open_nursery() as nursery:
        master, operations, scope = await running(tmp_path, fleet, clock, nursery)
        op = operations.create(spec(), actor="admin")
        assert [b.name for b in op.batches] == ["r1", "r2", "r3"]

        async def watch() -> None:
            while True:
                for status in master.state.machines():
                    seen = (str(status.id.hostname), str(status.mode))
                    if not modes or modes[-1] != seen:
                        modes.append(seen)
                await trio.sleep(0.1)

        nursery.start_soon(watch)
        await wait_for(operations, op.id, ("completed",))
        scope.cancel()
        nursery.cancel_scope.cancel()
    assert_once_each(fleet)
    done = operations.get(op.id)
    assert [b.state for b in done.batches] == ["done", "done", "done"]
    # one batch at a time: each batch started after the previous one ended
    ends = [
        (b.started_at, b.ended_at) for b in sorted(done.batches, key=lambda b: b.started_at or 0)
    ]
    for (_, end), (start, _) in itertools.pairwise(ends):
        assert end is not None
        assert start is not None
        assert start >= end
    # DRAINING while draining, DOWN during the hook and the health check, then out (UP)
    assert ("a", "DRAINING") in modes
    assert ("a", "DOWN") in modes
    assert master.state.machines() == ()
    assert master.drains == {}


async def test_k_batches_at_once(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    async with trio.open_nursery() as nursery:
        _, operations, scope = await running(tmp_path, fleet, clock, nursery)
        op = operations.create(spec(grouping="host", batches=2), actor="admin")
        await wait_for(operations, op.id, ("completed",))
        scope.cancel()
    assert_once_each(fleet)
    starts = sorted(node.commits[0] for node in fleet.nodes.values())
    assert starts[0] == starts[1] < starts[2] == starts[3]


async def test_a_failing_health_check_holds_its_node_and_is_reported(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    fleet.nodes["c"].healthy = False
    async with trio.open_nursery() as nursery:
        master, operations, scope = await running(tmp_path, fleet, clock, nursery)
        op = operations.create(spec(hosts=("c", "d"), grouping="host"), actor="admin")
        await until(
            lambda: (
                operations.get(op.id).batches[0].nodes[0].reason
                == "health check failing: exit status 1"
            ),
            within=100,
            every=0.25,
        )
        await trio.sleep(20)
        held = operations.get(op.id)
        assert [b.state for b in held.batches] == ["health", "waiting"]
        assert fleet.nodes["c"].in_service_at == []
        status = master.state.match("c", fleet.nodes["c"].ip)
        assert status is not None
        assert status.mode is Mode.DOWN
        fleet.nodes["c"].healthy = True
        await wait_for(operations, op.id, ("completed",))
        scope.cancel()
    assert_once_each(fleet, ("c", "d"))


async def test_a_hook_the_node_lacks_refuses_and_pauses(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    async with trio.open_nursery() as nursery:
        master, operations, scope = await running(tmp_path, fleet, clock, nursery)
        op = operations.create(spec(hosts=("a", "d"), grouping="host", hook="fw"), actor="x")
        await until(lambda: operations.get(op.id).state == "paused", within=30, every=0.25)
        await trio.sleep(2)
        paused = operations.get(op.id)
        assert paused.batches[0].nodes[0].phase == "refused"
        assert paused.reason is not None
        assert "drain.no_such_hook" in paused.reason
        assert master.state.machines() == ()
        assert master.drains == {}
        operations.cancel(op.id, actor="x")
        scope.cancel()
    assert all(node.commits == [] for node in fleet.nodes.values())


async def test_pause_holds_the_next_batch_and_cancel_leaves_untouched_hosts(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    async with trio.open_nursery() as nursery:
        master, operations, scope = await running(tmp_path, fleet, clock, nursery)
        op = operations.create(spec(grouping="host"), actor="admin")
        await until(lambda: any(n.commits for n in fleet.nodes.values()), within=30, every=0.1)
        operations.pause(op.id, actor="admin")
        first = next(n for n in fleet.nodes.values() if n.commits)
        await until(lambda: bool(first.in_service_at), within=60, every=0.25)
        await trio.sleep(10)
        assert sum(1 for n in fleet.nodes.values() if n.commits) == 1  # paused: no next batch
        operations.resume(op.id, actor="admin")
        await until(
            lambda: sum(1 for n in fleet.nodes.values() if n.commits) >= 2, within=30, every=0.1
        )
        second = next(n for n in fleet.nodes.values() if n.commits and n is not first)
        cancelled = operations.cancel(op.id, actor="admin")
        assert cancelled.state == "cancelled"
        await wait_for(operations, op.id, ("cancelled",))
        # the second node's drain was cancelled before its hook: back in service, no hook
        assert second.hook_runs == []
        assert second.drain is None
        assert master.state.machines() == ()
        scope.cancel()
    untouched = [n for n in fleet.nodes.values() if not n.commits]
    assert len(untouched) == 2
    assert all(n.drain is None and n.hook is None for n in untouched)
    with pytest.raises(OperationError):
        operations.cancel(op.id, actor="admin")


async def test_an_unsafe_batch_waits_then_proceeds(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    safe_from = EPOCH + 20
    book = Book(safe_from)
    async with trio.open_nursery() as nursery:
        _, operations, scope = await running(tmp_path, fleet, clock, nursery)
        operations.sla = book
        op = operations.create(spec(hosts=("d",)), actor="admin")
        await trio.sleep(5)
        held = operations.get(op.id).batches[0]
        assert held.state == "waiting"
        assert held.reason is not None
        assert held.reason["code"] == "sla"
        assert held.reason["groups"] == ["web"]
        # checked as of a second earlier (the ads' times are whole seconds): safe 1 s later
        assert held.reason["until"] == safe_from + 1
        assert held.reason["message"] == "web: 2 of 3 up"
        assert book.asked
        assert all(hosts == ("d",) for hosts in book.asked)
        await wait_for(operations, op.id, ("completed",))
        scope.cancel()
    assert fleet.nodes["d"].commits[0] >= safe_from + 1


def declined(machine: str, clock: TrioClock) -> Notice:
    return Notice(
        id="n-1",
        machine=machine,
        group="etl",
        window=NoticeWindow(start=clock.now() + 86_400),
        claims=(),
        issued=clock.now(),
        answer=Answer(verdict=Verdict.DECLINE, reason="month-end run", who="owner", at=0.0),
    )


@pytest.mark.parametrize("accepted", [True, False])
async def test_a_declined_batch_is_held_until_accepted_or_sla_wait(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, accepted: bool
) -> None:
    """A decline on a batch's machine (named by its IP here) holds the batch with its
    reason; an accept lets it go at the next pass; never accepted, it goes ahead once held
    ``sla_wait``. (The master's passes do not run: they would rescind a notice of a
    machine out of the schedule.)"""
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    master, operations = build(tmp_path, fleet, clock)
    notice = declined(fleet.nodes["d"].ip, clock)
    master.notices = {notice.id: notice}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fleet.push, master)
        await trio.sleep(0.6)
        await nursery.start(operations.run)
        op = operations.create(
            spec(hosts=("c", "d"), grouping="host", sla_wait=600.0), actor="admin"
        )
        await until(lambda: operations.get(op.id).batches[0].state == "done", within=120)
        await trio.sleep(5)
        held = operations.get(op.id).batches[1]
        assert held.state == "waiting"
        assert held.reason is not None
        assert held.reason["code"] == "declined"
        assert held.reason["message"] == "etl declined on 10.0.0.4: month-end run (owner)"
        assert [d["host"] for d in held.reason["declines"]] == ["d"]
        assert fleet.nodes["d"].commits == []
        if accepted:
            accept = Answer(verdict=Verdict.ACCEPT, reason="ok", who="owner", at=clock.now())
            master.notices = {notice.id: notice.answered(accept)}
            at = clock.now()
        else:
            assert held.held_since is not None
            at = held.held_since + 600.0
        await until(lambda: operations.get(op.id).ended_at is not None, within=900, every=0.25)
        nursery.cancel_scope.cancel()
    assert operations.get(op.id).state == "completed"
    (commit,) = fleet.nodes["d"].commits
    # released at the next pass (an interval, and the step's own calls)
    assert at <= commit <= at + 3 * master.reconcile_interval
    started = operations.get(op.id).batches[1]
    if accepted:
        assert started.reason is None
    else:
        assert started.reason is not None
        assert started.reason["went_ahead"] is True
        assert started.reason["held_for"] >= 600.0


async def test_a_batch_held_by_its_sla_says_so_from_the_step_that_frees_its_place(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rack r1, then rack r2 whose SLA allows it only a few seconds after r1 is done: the
    step that ends r1 checks r2's SLA at once, and every state of the operation saved from
    then until r2 starts shows r2 waiting with reason ``sla`` and ``until`` (an operator
    watching sees why and until when all along); r2 starts when ``until`` comes."""
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    store = Recording(tmp_path / "master.db")
    safe_from = EPOCH + 10  # r1 is done at about EPOCH + 8
    book = Book(safe_from, only=("c",))
    async with trio.open_nursery() as nursery:
        master, operations, scope = await running(tmp_path, fleet, clock, nursery, store=store)
        operations.sla = book
        op = operations.create(spec(hosts=("a", "b", "c")), actor="admin")
        await wait_for(operations, op.id, ("completed",))
        scope.cancel()
    saved = [
        Operation.from_json(save["operations"].put[op.id])
        for save in store.saves
        if "operations" in save and op.id in save["operations"].put
    ]
    first = next(i for i, each in enumerate(saved) if each.batches[0].ended_at is not None)
    last = next(i for i, each in enumerate(saved) if each.batches[1].started_at is not None)
    assert first < last
    for each in saved[first:last]:
        r1, r2 = each.batches
        assert r1.state == "done"
        assert r2.state == "waiting"
        assert r2.reason is not None
        assert r2.reason["code"] == "sla"
        assert r2.reason["groups"] == ["web"]
        assert r2.reason["until"] == safe_from + 1
        assert r2.held_since == r1.ended_at
    assert ("a", "b") in book.asked
    assert safe_from + 1 <= fleet.nodes["c"].commits[0] <= safe_from + 1 + master.reconcile_interval
    assert_once_each(fleet, ("a", "b", "c"))


class Book:
    """An SLA book whose one group, ``web``, is safe to take down from ``safe_from`` on
    (with ``only``: on those hosts; the others are always safe)."""

    def __init__(self, safe_from: float, only: Collection[str] = ()) -> None:
        self.safe_from = safe_from
        self.only = frozenset(only)
        self.asked: list[tuple[str, ...]] = []

    async def check(
        self, entries: list[NodeAds], hosts: Collection[str], now: float, *, lost: Any = ()
    ) -> Probe:
        await trio.lowlevel.checkpoint()
        self.asked.append(tuple(hosts))
        wait = 0.0 if self.only and not self.only & set(hosts) else self.safe_from - now
        return Probe(hosts=tuple(hosts), unknown=(), groups=(verdict(wait),))


def verdict(wait: float | None) -> GroupVerdict:
    safe = wait is not None and wait <= 0
    return GroupVerdict(
        group="web", kind=SlaKind.COUNT, safe=safe, size=4, instances=4, down=1, up=2,
        needed=3, duration=2.0, wait=0 if safe else wait, reason="2 of 3 up",
    )  # fmt: skip


def test_a_probe_as_a_batch_verdict() -> None:
    ok = sla_verdict(Probe(hosts=("a",), unknown=(), groups=(verdict(0),)), EPOCH)
    assert ok == SlaVerdict(safe=True)
    waits = Probe(hosts=("a",), unknown=(), groups=(verdict(30), replace(verdict(60), group="db")))
    assert sla_verdict(waits, EPOCH) == SlaVerdict(
        safe=False, groups=("web", "db"), until=EPOCH + 60, message="web: 2 of 3 up; db: 2 of 3 up"
    )
    never = Probe(hosts=("a",), unknown=(), groups=(verdict(30), verdict(None)))
    assert sla_verdict(never, EPOCH).until is None


KILL_AT = [0.0, 0.3, 1.0, 2.0, 3.5, 5.0, 6.5, 8.0, 10.0, 13.0]


@pytest.mark.parametrize("kill_at", KILL_AT)
async def test_killed_at_any_moment_no_node_drained_twice_no_hook_twice(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, kill_at: float
) -> None:
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    async with trio.open_nursery() as nursery:
        _, operations, scope = await running(tmp_path, fleet, clock, nursery)
        op = operations.create(spec(), actor="admin")
        await trio.sleep(kill_at)
        scope.cancel()  # kill -9: what was not saved is gone
        await trio.sleep(1.0)
        _, operations, scope = await running(tmp_path, fleet, clock, nursery)
        await wait_for(operations, op.id, ("completed",))
        scope.cancel()
    assert_once_each(fleet)


@pytest.mark.parametrize(
    ("hang", "after", "down_for"),
    [("phase1-only", 0.5, 1.0), ("commit", 0.5, 1.0), ("commit", 0.0, 60.0)],
)
async def test_killed_inside_the_transaction(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    hang: str,
    after: float,
    down_for: float,
) -> None:
    """Killed between phase 1 and the commit (the record ``pending``, the node's request
    pending: cancelled, then drained once), or after the commit whose reply was lost
    (adopted: drained once), even when the master comes back after the node's drain and
    its hook are over (the node shows the request only as its hook's)."""
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    first = fleet.nodes["d"]
    async with trio.open_nursery() as nursery:
        master, operations, scope = await running(tmp_path, fleet, clock, nursery)
        if hang == "commit":
            first.hang = "commit"
        else:
            original = first.call

            async def no_commit(method: str, path: str, body: Any) -> dict[str, Any]:
                if path.endswith("/commit"):
                    await trio.sleep_forever()
                return await original(method, path, body)

            first.call = no_commit  # type: ignore[method-assign]
        op = operations.create(spec(hosts=("d",)), actor="admin")
        await until(lambda: first.drain is not None, within=10, every=0.05)
        if hang == "commit":  # the commit carried out on the node, its reply not in
            await until(lambda: bool(first.commits), within=10, every=0.01)
        await trio.sleep(after)
        assert master.drains  # the record was written before the commit
        scope.cancel()
        if hang != "commit":
            del first.call
        await trio.sleep(down_for)
        # the master's passes first (settling the record), the engine 3 s later: no pass
        # starts a drain of the master's own on the operation's DRAINING machine meanwhile
        _, operations, scope = await running(tmp_path, fleet, clock, nursery, engine_after=3.0)
        await trio.sleep(2.0)
        assert first.drain is None or first.drain["id"] == "1"  # settled, nothing new
        await wait_for(operations, op.id, ("completed",))
        scope.cancel()
    assert_once_each(fleet, ("d",))


# ------------------------------------------------------------------ operations apart


async def test_a_silent_node_delays_only_its_own_operation(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Two operations whose node takes every call and never answers (each call may take
    a day), and one on a healthy node: the healthy one completes while the silent nodes'
    calls are still waited for, their operations not ended."""
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    for name in ("a", "c"):
        fleet.nodes[name].silent = True
    async with trio.open_nursery() as nursery:
        master, operations, scope = await running(tmp_path, fleet, clock, nursery)
        master.fetch_timeout = 86_400.0  # the agents' timeout: a call may take that long
        silent = [
            operations.create(spec(hosts=(name,), grouping="host"), actor="admin")
            for name in ("a", "c")
        ]
        await until(lambda: fleet.outstanding >= 2, within=30, every=0.1)
        op = operations.create(spec(hosts=("d",), grouping="host"), actor="admin")
        await wait_for(operations, op.id, ("completed",))
        assert fleet.outstanding >= 2  # still waiting for the silent nodes
        for each in silent:
            waiting = operations.get(each.id)
            assert waiting.ended_at is None
            assert waiting.batches[0].nodes[0].phase == "draining"
            assert waiting.batches[0].nodes[0].request_id is None
        scope.cancel()
    assert_once_each(fleet, ("d",))
    assert fleet.nodes["a"].commits == fleet.nodes["c"].commits == []


async def test_idle_operations_make_no_calls_and_few_steps(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Operations paused before their first batch, and operations whose batch the SLA
    holds for a long while: over 200 intervals no node is called; a paused one is not
    stepped again, a held one is looked at again every HELD_RECHECK intervals (its SLA
    asked then), not at every interval."""
    clock = TrioClock(EPOCH)
    racks = {f"n{i}": f"r{i}" for i in range(24)}
    fleet = Fleet(clock, racks)
    book = Book(EPOCH + 1_000_000)  # safe in eleven days
    async with trio.open_nursery() as nursery:
        master, operations, scope = await running(tmp_path, fleet, clock, nursery)
        operations.sla = book
        paused = [
            operations.create(spec(hosts=(f"n{i}",), grouping="host"), actor="admin")
            for i in range(12)
        ]
        for op in paused:
            operations.pause(op.id, actor="admin")
        held = [
            operations.create(spec(hosts=(f"n{i}",), grouping="host"), actor="admin")
            for i in range(12, 24)
        ]
        await until(lambda: all(operations.get(op.id).batches[0].reason is not None for op in held))
        await trio.sleep(master.reconcile_interval)
        steps, asked, calls = operations.steps, len(book.asked), len(fleet.calls)
        intervals = 200
        await trio.sleep(intervals * master.reconcile_interval)
        scope.cancel()
    assert len(fleet.calls) == calls == 0
    rechecks = len(held) * (intervals // HELD_RECHECK + 1)
    assert len(book.asked) - asked <= rechecks
    assert operations.steps - steps <= rechecks
    for op in held:
        assert operations.get(op.id).batches[0].state == "waiting"
    for op in paused:
        assert operations.get(op.id).batches[0].state == "waiting"


class Recording(DocumentStore):
    """The master's SQLite store, noting what each save was given."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, collections=("operations",))
        self.saves: list[dict[str, Any]] = []

    def save(self, **documents: Any) -> None:
        self.saves.append(documents)
        super().save(**documents)


async def test_creating_an_operation_beside_2000_writes_only_it(tmp_path: Path) -> None:
    """2,000 operations in the store (half finished, half paused holding their host): a
    new one is one save that writes that operation alone (one row), and the busy hosts
    are still refused."""
    clock = TrioClock(EPOCH)
    fleet = Fleet(clock, RACKS)
    store = Recording(tmp_path / "master.db")
    old = {}
    for i in range(2000):
        op = new_operation(str(i + 1), spec(hosts=(f"h{i}",)), {f"h{i}": "r"}, actor="x", now=EPOCH)
        op = (
            replace(op, state="paused") if i % 2 else replace(op, state="completed", ended_at=EPOCH)
        )
        old[op.id] = op.to_json()
    store.save(operations=old)
    master = Master(
        store=store, link=fleet, clock=clock, ads=AdStore(lifetime=10_000),
        reconcile_interval=0.5,
    )  # fmt: skip
    master.load()
    operations = Operations(master)
    operations.load()
    for node in fleet.nodes.values():
        master.receive_ad(node.ad())
        master.receive_ad({**node.ad(), "machine": {**node.ad()["machine"], "Name": "h1"}})
    store.saves.clear()
    op = operations.create(spec(hosts=("d",), grouping="host"), actor="admin")
    assert op.id == "2001"
    assert len(store.saves) == 1
    written = store.saves[0]["operations"]
    assert written == Members(put={"2001": op.to_json()})
    with pytest.raises(OperationError) as refused:
        operations.create(spec(hosts=("h1",), grouping="host"), actor="admin")
    assert refused.value.code == "operation.host_busy"
    assert len(store.saves) == 1
    store.close()
    again = DocumentStore(tmp_path / "master.db", collections=("operations",))
    try:
        assert len(again.load("operations")) == 2001
    finally:
        again.close()
