"""What a step of the wall clock does to a graceful drain (docs/failure-modes.md).

The agent keeps its promises in wall-clock time (a job's run time is wall time elapsed),
and sleeps until the next one on trio's monotonic clock, computing the sleep from the
wall clock when it plans. On virtual time, with a wall clock the test steps:

* a step alone does not move a timer already set: it fires after the real seconds it was
  set for (and the hard kill follows its vacate time in real seconds);
* a forward step followed by any re-plan (a job's exit here; a request, a restart) makes
  the eviction early by the step, in real seconds;
* a backward step makes it late by the step: the timer fires, finds the wall clock
  before the promise and waits for it.

Job ``a`` has retirement 100 and vacate 30 (the machine's): SIGTERM due at +70, SIGKILL
at +100 if it ignores SIGTERM (it does here).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
import trio.testing

from nodeagent._clock import TrioClock
from nodeagent.agent._agent import Agent, ClaimRequest
from nodeagent.agent._processes import LaunchSpec
from nodeagent.agent._store import Store
from nodeagent.testing import FakeBehaviour, FakeRunner
from slots import JobSpec, Machine, MachinePolicy, OnCompletion, Resources, Schedule

EPOCH = 1_800_000_000.0


class SteppedClock:
    """The wall clock of the test: trio's clock from ``EPOCH``, plus the steps made."""

    def __init__(self) -> None:
        self._trio = TrioClock(EPOCH)
        self.offset = 0.0

    def now(self) -> float:
        return self._trio.now() + self.offset


@dataclass
class Rig:
    agent: Agent
    runner: FakeRunner
    clock: SteppedClock
    t0: float


def _behaviour(spec: LaunchSpec) -> FakeBehaviour:
    # argv = ["job", "<length or ->"]; every job ignores SIGTERM
    length = None if spec.argv[1] == "-" else float(spec.argv[1])
    return FakeBehaviour(length=length, term_delay=None)


@asynccontextmanager
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    clock = SteppedClock()
    runner = FakeRunner(_behaviour, clock=clock)
    machine = Machine(
        host="vnode",
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=100, machine_max_vacate_time=30),
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
            yield Rig(agent=agent, runner=runner, clock=clock, t0=trio.current_time())
            nursery.cancel_scope.cancel()


async def drain(r: Rig, *, other_job_length: float | None) -> None:
    """Job ``a`` (never ends by itself) and, if given, job ``b`` ending after its length
    (its exit makes the agent plan again); then a graceful one-shot drain."""
    lengths = [None] if other_job_length is None else [None, other_job_length]
    for length in lengths:
        await r.agent.create_claim(
            ClaimRequest(
                resources=Resources(cpus=1),
                spec=JobSpec(),
                argv=("job", "-" if length is None else str(length)),
            )
        )
    r.agent.start_draining(
        schedule=Schedule.GRACEFUL, reason="t", on_completion=OnCompletion.NONE,
        deadline=None, start=None, check=None, commit=True, ttl=None, requested_by="test",
    )  # fmt: skip


def signals_of_a(r: Rig) -> list[tuple[float, str]]:
    first = min(r.runner.processes)
    return [(round(t - r.t0, 6), s.name) for t, s in r.runner.processes[first].signals]


@pytest.mark.parametrize(
    ("step", "other_job_length", "expected"),
    [
        (0.0, None, [(70.0, "SIGTERM"), (100.0, "SIGKILL")]),
        # A forward step alone: the timer set for +70 fires at +70 real seconds.
        (40.0, None, [(70.0, "SIGTERM"), (100.0, "SIGKILL")]),
        # A forward step, then a re-plan at +20: 40 s early.
        (40.0, 20.0, [(30.0, "SIGTERM"), (60.0, "SIGKILL")]),
        # A backward step: 40 s late, with or without a re-plan.
        (-40.0, None, [(110.0, "SIGTERM"), (140.0, "SIGKILL")]),
        (-40.0, 20.0, [(110.0, "SIGTERM"), (140.0, "SIGKILL")]),
    ],
    ids=["no step", "forward", "forward, re-planned", "backward", "backward, re-planned"],
)
async def test_a_wall_clock_step_moves_evictions_by_the_step_once_the_agent_plans_again(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    step: float,
    other_job_length: float | None,
    expected: list[tuple[float, str]],
) -> None:
    async with rig(tmp_path) as r:
        await drain(r, other_job_length=other_job_length)
        await trio.sleep(10)
        r.clock.offset += step
        await trio.sleep(300)
        assert signals_of_a(r) == expected
