"""The agent's timing logic on virtual time: exact eviction instants, the transaction gate."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
import trio.lowlevel
import trio.testing

from nodeagent._clock import TrioClock
from nodeagent.agent._agent import Agent, ClaimRequest
from nodeagent.agent._processes import LaunchSpec
from nodeagent.agent._store import Store
from nodeagent.testing import FakeBehaviour, FakeRunner
from slots import (
    DrainInProgress,
    DrainState,
    JobSpec,
    Machine,
    MachinePolicy,
    NotAccepting,
    OnCompletion,
    Resources,
    Schedule,
    TransactionExpired,
)

EPOCH = 1_800_000_000.0


@dataclass
class Rig:
    agent: Agent
    runner: FakeRunner
    t0: float  # trio time at EPOCH

    def at(self, offset: float) -> float:
        return self.t0 + offset


def _behaviour(spec: LaunchSpec) -> FakeBehaviour:
    # argv = ["job", "<length or ->", "<term delay or ->"]
    length = None if spec.argv[1] == "-" else float(spec.argv[1])
    term = None if spec.argv[2] == "-" else float(spec.argv[2])
    return FakeBehaviour(length=length, term_delay=term)


@asynccontextmanager
async def rig(tmp_path: Path, **policy: object) -> AsyncIterator[Rig]:
    clock = TrioClock(EPOCH)
    runner = FakeRunner(_behaviour, clock=clock)
    machine = Machine(
        host="vnode",
        total=Resources(cpus=16, memory=32768),
        policy=MachinePolicy(**policy),  # type: ignore[arg-type]
        now=clock.now(),
    )
    with Store(tmp_path / "agent.db") as store:
        agent = Agent(
            machine=machine,
            store=store,
            runner=runner,
            clock=clock,
            execute_dir=tmp_path / "execute",
            usage_interval=0,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.run)
            await nursery.start(agent.run)
            yield Rig(agent=agent, runner=runner, t0=trio.current_time())
            nursery.cancel_scope.cancel()


async def claim(
    r: Rig, *, retirement: int | None = None, length: float | None = None, term: float | None = 0
) -> str:
    info = await r.agent.create_claim(
        ClaimRequest(
            resources=Resources(cpus=1),
            spec=JobSpec(max_job_retirement_time=retirement),
            argv=(
                "job",
                "-" if length is None else str(length),
                "-" if term is None else str(term),
            ),
        )
    )
    return info.claim_id


def signals(r: Rig) -> dict[int, list[tuple[float, str]]]:
    return {
        pid: [(round(t - r.t0, 6), s.name) for t, s in proc.signals]
        for pid, proc in r.runner.processes.items()
    }


async def test_graceful_drain_evicts_at_exact_virtual_instants(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path, max_job_retirement_time=600, machine_max_vacate_time=30) as r:
        await claim(r, retirement=100)  # soft kill at +70
        await claim(r, retirement=None, term=None)  # ignores TERM: +570, killed +600
        await claim(r, length=50)  # ends by itself
        r.agent.start_draining(
            schedule=Schedule.GRACEFUL, reason="t", on_completion=OnCompletion.NONE,
            deadline=None, start=None, check=None, commit=True, ttl=None, requested_by="test",
        )  # fmt: skip
        await trio.sleep(1000)
        assert list(signals(r).values()) == [
            [(70.0, "SIGTERM")],
            [(570.0, "SIGTERM"), (600.0, "SIGKILL")],
            [],
        ]
        assert r.agent.machine.drain_state is DrainState.DRAINED
        request = r.agent.machine.request
        assert request is not None
        assert request.drained_at == EPOCH + 600


async def test_pending_transaction_blocks_claims_until_commit(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        request, _ = r.agent.start_draining(
            schedule=Schedule.GRACEFUL, reason="", on_completion=OnCompletion.NONE,
            deadline=None, start=None, check=None, commit=False, ttl=None, requested_by=None,
        )  # fmt: skip
        outcome: list[object] = []

        async def try_claim() -> None:
            try:
                outcome.append(await claim(r))
            except NotAccepting as exc:
                outcome.append((trio.current_time() - r.t0, exc.code))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(try_claim)
            await trio.sleep(5)
            assert outcome == []  # waiting, not refused
            r.agent.commit_draining(request.id)
        assert outcome == [(5.0, "machine.not_accepting")]


async def test_pending_transaction_blocks_claims_until_expiry(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path, transaction_ttl=30) as r:
        request, _ = r.agent.start_draining(
            schedule=Schedule.QUICK, reason="", on_completion=OnCompletion.NONE,
            deadline=None, start=None, check=None, commit=False, ttl=None, requested_by=None,
        )  # fmt: skip
        started = trio.current_time()
        claim_id = await claim(r)
        assert trio.current_time() - started == pytest.approx(30)
        assert r.agent.claim(claim_id).activity == "Busy"
        assert r.agent.machine.request is None
        with pytest.raises(TransactionExpired):
            r.agent.commit_draining(request.id)


async def test_commit_after_expiry_is_refused(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        request, _ = r.agent.start_draining(
            schedule=Schedule.QUICK, reason="", on_completion=OnCompletion.NONE,
            deadline=None, start=None, check=None, commit=False, ttl=10, requested_by=None,
        )  # fmt: skip
        # A commit that arrives at +10, before the timer fires, is refused and cancels.
        await trio.sleep(9.999)
        with pytest.raises(TransactionExpired):
            r.agent.machine.commit_draining(r.agent.now() + 0.001, request.id)
        assert r.agent.machine.request is None


async def test_of_many_concurrent_requests_exactly_one_wins(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with rig(tmp_path) as r:
        results: list[str] = []

        async def request() -> None:
            await trio.lowlevel.checkpoint()
            try:
                drain, _ = r.agent.start_draining(
                    schedule=Schedule.FAST, reason="", on_completion=OnCompletion.NONE,
                    deadline=None, start=None, check=None, commit=False, ttl=None,
                    requested_by=None,
                )  # fmt: skip
            except DrainInProgress:
                results.append("refused")
            else:
                results.append(f"won {drain.id}")

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(request)
        assert sorted(results) == ["refused"] * 19 + ["won 1"]


async def test_a_claim_refused_after_its_launch_kills_the_process(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A fast drain committed while a job is being launched: the claim is refused."""
    async with rig(tmp_path) as r:
        r.runner.launch_delay = 1.0
        outcome: list[str] = []

        async def try_claim() -> None:
            try:
                await claim(r)
            except NotAccepting as exc:
                outcome.append(exc.code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(try_claim)
            await trio.sleep(0.5)
            assert r.runner.processes == {}
            r.agent.start_draining(
                schedule=Schedule.FAST, reason="", on_completion=OnCompletion.NONE,
                deadline=None, start=None, check=None, commit=True, ttl=None, requested_by=None,
            )  # fmt: skip
        assert outcome == ["machine.not_accepting"]
        (proc,) = r.runner.processes.values()
        assert [s for _, s in proc.signals] == [signal.SIGKILL]
        assert proc.exited()
        assert r.agent.claims() == []
