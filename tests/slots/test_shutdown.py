"""The machine's own shutdown in the model: ShuttingDown, the shutdown drain, what it
keeps or replaces, its cancel, the hard kill, and what reopens after a new boot."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slots import (
    SHUTDOWN_REASON,
    DrainInProgress,
    DrainState,
    HealthPolicy,
    JobSpec,
    Machine,
    MachinePolicy,
    NoSuchRequest,
    NotAccepting,
    OnCompletion,
    Publish,
    Resources,
    RunHealthCheck,
    Schedule,
    SignalJob,
)

T0 = 1_000_000.0
TOTAL = Resources(cpus=4, memory=8192)


def machine(*, health: bool = False, mjrt: int = 3600) -> Machine:
    policy = MachinePolicy(
        max_job_retirement_time=mjrt,
        machine_max_vacate_time=60,
        health=HealthPolicy(passes=1, interval=30.0) if health else None,
    )
    return Machine(host="node1", total=TOTAL, policy=policy, now=T0)


def with_job(m: Machine, now: float = T0) -> str:
    info, _ = m.claim(now, resources=Resources(cpus=1), spec=JobSpec(job_id="j1"))
    return info.claim_id


def restart(m: Machine, now: float) -> Machine:
    document = json.loads(json.dumps(m.snapshot()))
    return Machine.restore(document, host=m.host, total=m.total, policy=m.policy, now=now)


def ad(m: Machine, now: float) -> dict[str, Any]:
    machine_ad: dict[str, Any] = m.ad(now)["machine"]
    return machine_ad


def test_shutdown_closes_drains_and_publishes_shutting_down() -> None:
    m = machine()
    claim = with_job(m)
    assert "ShuttingDown" not in ad(m, T0 + 1)
    started, replaced, actions = m.shutdown(T0 + 1, schedule=Schedule.QUICK, boot_id="b1")
    assert started is not None
    assert replaced is None
    assert (started.reason, started.schedule, started.on_completion) == (
        SHUTDOWN_REASON,
        Schedule.QUICK,
        OnCompletion.NONE,
    )
    assert (started.requested_by, started.boot_id, started.state) == (
        "logind",
        "b1",
        DrainState.DRAINING,
    )
    assert SignalJob(claim_id=claim, signal="SIGTERM") in actions
    assert Publish() in actions
    machine_ad = ad(m, T0 + 1)
    assert machine_ad["ShuttingDown"] is True
    assert machine_ad["DrainReason"] == "shutdown"
    assert machine_ad["Start"] is False
    assert all(slot["ShuttingDown"] is True for slot in m.ad(T0 + 1)["slots"])
    with pytest.raises(NotAccepting):
        m.claim(T0 + 2, resources=Resources(cpus=1), spec=JobSpec())
    # A second signal changes nothing.
    assert m.shutdown(T0 + 2, schedule=Schedule.QUICK, boot_id="b1") == (None, None, [])


def test_no_drain_request_while_shutting_down() -> None:
    m = machine()
    m.shutdown(T0, schedule=Schedule.QUICK, boot_id="b1")
    m.cancel_draining(T0 + 1)  # an administrator cancels the shutdown drain
    assert m.request is None
    assert ad(m, T0 + 1)["Start"] is False
    with pytest.raises(DrainInProgress, match="shutting down"):
        m.start_draining(T0 + 2, schedule=Schedule.GRACEFUL)


@pytest.mark.parametrize(
    ("existing", "committed", "kept"),
    [
        (Schedule.FAST, True, True),
        (Schedule.QUICK, True, True),
        (Schedule.GRACEFUL, True, False),
        (Schedule.FAST, False, False),  # a pending transaction is never admitted
    ],
)
def test_a_drain_in_force_is_kept_when_at_least_as_fast(
    existing: Schedule, committed: bool, kept: bool
) -> None:
    m = machine()
    with_job(m)
    before, _, _ = m.start_draining(
        T0 + 1, schedule=existing, commit=committed, reason="admin", requested_by="alice"
    )
    started, replaced, _ = m.shutdown(T0 + 2, schedule=Schedule.QUICK, boot_id="b1")
    assert m.shutting_down
    if kept:
        assert started is None
        assert replaced is None
        assert m.request is not None
        assert m.request.id == before.id
    else:
        assert started is not None
        assert m.request is not None
        assert m.request.id == started.id
        assert replaced is not None
        assert (replaced.id, replaced.state) == (before.id, DrainState.CANCELLED)


def test_a_pending_transaction_is_cancelled_and_its_commit_refused() -> None:
    m = machine()
    pending, _, _ = m.start_draining(T0, schedule=Schedule.FAST, requested_by="master")
    assert pending.state is DrainState.PENDING
    m.shutdown(T0 + 1, schedule=Schedule.QUICK, boot_id="b1")
    assert m.drain_state is DrainState.DRAINED
    with pytest.raises(NoSuchRequest):
        m.commit_draining(T0 + 2, pending.id)
    assert m.request is not None
    assert m.request.reason == SHUTDOWN_REASON


def test_a_drained_node_keeps_its_drain() -> None:
    m = machine()
    m.start_draining(T0, schedule=Schedule.GRACEFUL, commit=True, requested_by="alice")
    assert m.drain_state is DrainState.DRAINED
    started, replaced, _ = m.shutdown(T0 + 1, schedule=Schedule.FAST, boot_id="b1")
    assert (started, replaced) == (None, None)
    assert m.request is not None
    assert m.request.requested_by == "alice"


def test_kill_all_hard_kills_what_is_left() -> None:
    m = machine()
    claim = with_job(m)
    m.shutdown(T0 + 1, schedule=Schedule.QUICK, boot_id="b1")
    actions = m.kill_all(T0 + 2)
    assert SignalJob(claim_id=claim, signal="SIGKILL") in actions
    assert m.kill_all(T0 + 3) == []  # already killing
    m.job_exited(T0 + 4, claim)
    assert m.drain_state is DrainState.DRAINED


@pytest.mark.parametrize(
    ("whose", "cancelled"),
    [("shutdown", True), ("admin", False)],
)
def test_a_cancelled_shutdown_cancels_only_its_own_drain(whose: str, cancelled: bool) -> None:
    m = machine()
    with_job(m)
    if whose == "admin":
        m.start_draining(T0, schedule=Schedule.FAST, commit=True, requested_by="alice")
    m.shutdown(T0 + 1, schedule=Schedule.QUICK, boot_id="b1")
    ended, actions = m.shutdown_cancelled(T0 + 2)
    assert not m.shutting_down
    assert "ShuttingDown" not in ad(m, T0 + 2)
    assert Publish() in actions
    if cancelled:
        assert ended is not None
        assert ended.reason == SHUTDOWN_REASON
        assert m.request is None
        assert ad(m, T0 + 2)["Start"] is True
    else:
        assert ended is None
        assert m.request is not None
        assert m.request.requested_by == "alice"
    assert m.shutdown_cancelled(T0 + 3) == (None, [])


def test_shutting_down_is_not_saved() -> None:
    m = machine()
    m.shutdown(T0, schedule=Schedule.QUICK, boot_id="b1")
    again = restart(m, T0 + 1)
    assert not again.shutting_down
    assert again.request is not None
    assert again.request.boot_id == "b1"


@pytest.mark.parametrize(
    ("requested", "jobs_left", "boot_now", "reopens"),
    [
        ("shutdown", False, "b2", True),  # rebooted after a completed shutdown drain
        ("shutdown", False, "b1", False),  # the agent restarted alone
        ("shutdown", False, None, False),  # the boot id is unknown
        ("shutdown", True, "b2", False),  # not drained
        ("admin", False, "b2", False),  # an administrator's drain stays until cancelled
        # a shutdown drain that replaced a slower drain: an administrator's intent stays
        ("over alice", False, "b2", False),
        ("over master:ops", False, "b2", True),  # the master drains it again as it needs
        ("over defrag:defrag-1", False, "b2", True),
    ],
)
def test_what_reopens_after_a_new_boot(
    requested: str, jobs_left: bool, boot_now: str | None, reopens: bool
) -> None:
    m = machine()
    if jobs_left:
        with_job(m)
    if requested == "shutdown":
        m.shutdown(T0, schedule=Schedule.QUICK, boot_id="b1")
    elif requested.startswith("over "):
        claim = with_job(m)  # the graceful drain is slower, and still draining: replaced
        m.start_draining(T0, schedule=Schedule.GRACEFUL, commit=True, requested_by=requested[5:])
        m.shutdown(T0 + 1, schedule=Schedule.QUICK, boot_id="b1")
        m.job_exited(T0 + 2, claim)
    else:
        m.start_draining(T0, schedule=Schedule.QUICK, commit=True, reason="shutdown")
    again = restart(m, T0 + 100)
    ended, actions = again.reopen_after_boot(T0 + 100, boot_id=boot_now)
    if reopens:
        assert ended is not None
        assert ended.state is DrainState.CANCELLED
        assert again.request is None
        assert ad(again, T0 + 100)["Start"] is True
        assert again.last_request is not None
        assert again.last_request.reason == "shutdown"
    else:
        assert (ended, actions) == (None, [])
        assert again.request is not None


def test_reopening_after_a_new_boot_goes_through_the_health_gate() -> None:
    m = machine(health=True)
    m.shutdown(T0, schedule=Schedule.QUICK, boot_id="b1")
    again = restart(m, T0 + 100)
    ended, actions = again.reopen_after_boot(T0 + 100, boot_id="b2")
    assert ended is not None
    assert RunHealthCheck() in actions
    assert ad(again, T0 + 100)["Start"] is False
    again.health_result(T0 + 101, passed=True, message="ok")
    assert ad(again, T0 + 101)["Start"] is True
