"""A failed state write changes nothing: the agent on virtual time with a store that fails.

:class:`FailingStore` is the store seam's fake: a real SQLite store that refuses to write
while ``failing`` is set, as a full disk does. Each request then raises StoreError and
leaves memory equal to what is on disk; facts (exits, due moves) stay applied and are
written once the store works again.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nodeagent._clock import TrioClock
from nodeagent._store import StoreError
from nodeagent.agent._agent import Agent, ClaimRequest
from nodeagent.agent._processes import AlreadyClaimed, LaunchSpec
from nodeagent.agent._store import ProcessRecord, StateStore, Store
from nodeagent.testing import FakeBehaviour, FakeProcess, FakeRunner
from slots import (
    DrainState,
    JobSpec,
    Machine,
    MachinePolicy,
    NoSuchRequest,
    OnCompletion,
    Resources,
    Schedule,
)

EPOCH = 1_800_000_000.0


class FailingStore:
    """A :class:`Store` that raises StoreError on ``save`` while ``failing`` is set."""

    def __init__(self, path: Path) -> None:
        self.store = Store(path)
        self.failing = False
        self.saves = 0

    def save(self, machine: dict[str, Any], processes: Mapping[str, ProcessRecord]) -> None:
        if self.failing:
            raise StoreError("database or disk is full")
        self.store.save(machine, processes)
        self.saves += 1

    def saved(self) -> tuple[dict[str, Any], dict[str, ProcessRecord]]:
        loaded = self.store.load()
        assert loaded is not None
        return loaded


@dataclass
class Rig:
    agent: Agent
    runner: FakeRunner
    store: FailingStore
    published: list[float]

    def memory_is_disk(self) -> bool:
        machine, processes = self.store.saved()
        return machine == self.agent.machine.snapshot() and processes == {
            c.claim_id: self.agent.process(c.claim_id) for c in self.agent.claims()
        }


def _behaviour(spec: LaunchSpec) -> FakeBehaviour:
    length = None if spec.argv[1] == "-" else float(spec.argv[1])
    return FakeBehaviour(length=length, term_delay=0.0)


@asynccontextmanager
async def rig(tmp_path: Path, **policy: Any) -> AsyncIterator[Rig]:
    clock = TrioClock(EPOCH)
    runner = FakeRunner(_behaviour, clock=clock)
    machine = Machine(
        host="vnode",
        total=Resources(cpus=8, memory=16384),
        policy=MachinePolicy(**policy),
        now=clock.now(),
    )
    store = FailingStore(tmp_path / "agent.db")
    seam: StateStore = store
    agent = Agent(
        machine=machine,
        store=seam,
        runner=runner,
        clock=clock,
        execute_dir=tmp_path / "execute",
        usage_interval=0,
    )
    published: list[float] = []
    agent.listeners.append(lambda: published.append(trio.current_time()))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.run)
            await nursery.start(agent.run)
            yield Rig(agent=agent, runner=runner, store=store, published=published)
            nursery.cancel_scope.cancel()
    finally:
        store.store.close()


async def claim(r: Rig, *, length: float | None = None, retirement: int | None = None) -> str:
    info = await r.agent.create_claim(
        ClaimRequest(
            resources=Resources(cpus=1),
            spec=JobSpec(max_job_retirement_time=retirement),
            argv=("job", "-" if length is None else str(length)),
        )
    )
    return info.claim_id


def drain(r: Rig, schedule: Schedule = Schedule.GRACEFUL, *, commit: bool = False) -> str:
    request, _ = r.agent.start_draining(
        schedule=schedule, reason="t", on_completion=OnCompletion.NONE, deadline=None,
        start=None, check=None, commit=commit, ttl=None, requested_by="test",
    )  # fmt: skip
    return request.id


def procs(r: Rig) -> list[FakeProcess]:
    return list(r.runner.processes.values())


async def test_a_claim_whose_write_fails_is_undone_and_its_program_never_let_go(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        r.store.failing = True
        with pytest.raises(StoreError):
            await claim(r)
        (proc,) = procs(r)
        assert not proc.started  # the program was never let go
        assert [s for _, s in proc.signals] == [signal.SIGKILL]
        assert proc.exited()
        assert r.agent.claims() == []
        assert r.agent.machine.free() == Resources(cpus=8, memory=16384)
        assert r.published == []
        assert r.memory_is_disk()
        r.store.failing = False
        claim_id = await claim(r)
        assert claim_id == "1"  # the refused claim used no slot number
        assert procs(r)[1].started
        assert r.memory_is_disk()


async def test_a_drain_whose_write_fails_is_undone(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path, max_job_retirement_time=100) as r:
        await claim(r)
        published = len(r.published)
        r.store.failing = True
        for commit in (False, True):
            with pytest.raises(StoreError):
                drain(r, commit=commit)
            assert r.agent.machine.request is None
            assert r.agent.machine.transaction_pending is False
            assert r.agent.claims()[0].activity == "Busy"
            assert r.memory_is_disk()
        assert len(r.published) == published
        # Not pending: a claim does not wait for a transaction that never was.
        r.store.failing = False
        with trio.fail_after(1):
            await claim(r)
        assert drain(r) == "1"  # the refused requests took no id


async def test_commit_and_cancel_whose_writes_fail_change_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path, max_job_retirement_time=100) as r:
        await claim(r)
        request_id = drain(r, Schedule.QUICK)
        r.store.failing = True
        with pytest.raises(StoreError):
            r.agent.commit_draining(request_id)
        request = r.agent.machine.request
        assert request is not None
        assert request.state is DrainState.PENDING
        assert procs(r)[0].signals == []  # the quick drain's SIGTERM was not sent
        assert r.memory_is_disk()
        with pytest.raises(StoreError):
            r.agent.cancel_draining(request_id)
        assert r.agent.machine.transaction_pending
        assert r.memory_is_disk()
        r.store.failing = False
        r.agent.commit_draining(request_id)
        assert [s for _, s in procs(r)[0].signals] == [signal.SIGTERM]
        r.store.failing = True
        with pytest.raises(StoreError):
            r.agent.cancel_draining(None)
        current = r.agent.machine.request
        assert current is not None
        assert current.state is not DrainState.CANCELLED
        assert r.memory_is_disk()


async def test_release_suspend_and_continue_whose_writes_fail_send_no_signal(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        claim_id = await claim(r)
        r.store.failing = True
        for call in (r.agent.suspend, r.agent.release):
            with pytest.raises(StoreError):
                await call(claim_id)
            assert r.agent.claim(claim_id).activity == "Busy"
        assert procs(r)[0].signals == []
        r.store.failing = False
        await r.agent.suspend(claim_id)
        r.store.failing = True
        with pytest.raises(StoreError):
            await r.agent.continue_(claim_id)
        assert r.agent.claim(claim_id).activity == "Suspended"
        assert [s for _, s in procs(r)[0].signals] == [signal.SIGSTOP]
        assert r.memory_is_disk()


async def test_an_exit_is_kept_when_its_write_fails_and_written_once_the_store_works(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        await claim(r, length=10)
        await claim(r)
        r.store.failing = True
        await trio.sleep(11)
        assert [c.claim_id for c in r.agent.claims()] == ["2"]  # the exit is a fact
        assert not r.memory_is_disk()
        with pytest.raises(StoreError):
            await claim(r)  # a request undone keeps the exit
        assert [c.claim_id for c in r.agent.claims()] == ["2"]
        r.store.failing = False
        await trio.sleep(60)  # the persist service retries
        assert r.memory_is_disk()


async def test_a_completion_waits_for_its_state_to_be_written(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        await claim(r)
        request, _ = r.agent.start_draining(
            schedule=Schedule.FAST, reason="t", on_completion=OnCompletion.EXIT, deadline=None,
            start=None, check=None, commit=True, ttl=None, requested_by="test",
        )  # fmt: skip
        r.store.failing = True
        await trio.sleep(1)  # the job dies of its SIGKILL: the drain completes, unwritten
        last = r.agent.machine.last_request
        assert last is not None
        assert (last.id, last.state) == (request.id, DrainState.COMPLETED)
        assert not r.agent.completed.is_set()
        r.store.failing = False
        with trio.fail_after(60):
            await r.agent.completed.wait()
        assert r.agent.completion is not None
        assert r.agent.completion.request_id == request.id
        assert r.memory_is_disk()


async def test_a_refused_commit_neither_writes_nor_publishes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        drain(r)
        saves, published = r.store.saves, len(r.published)
        with pytest.raises(NoSuchRequest):
            r.agent.commit_draining("99")
        assert (r.store.saves, len(r.published)) == (saves, published)


async def test_a_pid_cannot_be_adopted_twice(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        await claim(r)
        (proc,) = procs(r)
        with pytest.raises(AlreadyClaimed) as info:
            await r.agent.create_claim(
                ClaimRequest(resources=Resources(cpus=1), spec=JobSpec(), pid=proc.identity.pid)
            )
        assert (info.value.code, info.value.http_status) == ("job.already_claimed", 409)
        assert len(r.agent.claims()) == 1
        assert proc.signals == []  # an adoption refused never touches the process


async def test_a_reloaded_policy_applies_even_while_the_store_fails(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path, max_job_retirement_time=100, machine_max_vacate_time=10) as r:
        await claim(r)
        drain(r, commit=True)
        await trio.sleep(1)
        assert procs(r)[0].signals == []  # retiring: soft kill due at +90
        r.store.failing = True
        r.agent.reload_policy(MachinePolicy(max_job_retirement_time=0, machine_max_vacate_time=10))
        await trio.sleep(1)
        assert [s for _, s in procs(r)[0].signals] == [signal.SIGTERM]  # evicted at once
        r.store.failing = False
        await trio.sleep(60)
        assert r.memory_is_disk()
