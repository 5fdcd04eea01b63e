"""The durable document: a restored machine goes on exactly where it stopped."""

from __future__ import annotations

import json

import pytest

from slots import InvalidRequest, Machine, MachinePolicy, Schedule

from .world import World

T0 = 1_000_000.0


def test_restore_mid_drain_keeps_request_deadlines_and_statistics() -> None:
    policy = MachinePolicy(max_job_retirement_time=3600, machine_max_vacate_time=60)
    world = World.make(policy=policy)
    keep = world.claim(started_ago=100, term_delay=None)
    world.claim(started_ago=3590, term_delay=None)
    world.apply(
        world.machine.start_draining(T0, schedule=Schedule.GRACEFUL, deadline=1800, commit=True)[2]
    )
    world.run_until(T0 + 100)
    before = world.machine.ad(T0 + 100)
    document = json.loads(json.dumps(world.machine.snapshot()))  # survives JSON
    restored = Machine.restore(
        document, host=world.machine.host, total=world.machine.total, policy=policy, now=T0 + 100,
        address=world.machine.address,
    )  # fmt: skip
    after = restored.ad(T0 + 100)
    skip = {"DaemonStartTime"}
    assert {k: v for k, v in after["machine"].items() if k not in skip} == {
        k: v for k, v in before["machine"].items() if k not in skip
    }
    assert restored.request == world.machine.request
    assert restored.next_wakeup() == T0 + 1800  # the deadline, unchanged
    world.machine = restored
    world.run_until(T0 + 5000)
    assert world.signals_for(keep) == [(T0 + 1800, "SIGTERM"), (T0 + 1860, "SIGKILL")]


def test_restore_refuses_unknown_versions() -> None:
    world = World.make()
    document = world.machine.snapshot() | {"version": 99}
    with pytest.raises(InvalidRequest):
        Machine.restore(
            document, host="h", total=world.machine.total, policy=MachinePolicy(), now=T0
        )
