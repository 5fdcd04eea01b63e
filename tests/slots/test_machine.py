"""Claims, resources, suspension and the drain transaction, with explicit ``now``."""

from __future__ import annotations

import pytest

from slots import (
    Activity,
    CheckFailed,
    ClaimNotActive,
    DrainInProgress,
    DrainState,
    IllegalTransition,
    InvalidRequest,
    JobSpec,
    Machine,
    MachinePolicy,
    NoSuchClaim,
    NoSuchRequest,
    NotAccepting,
    NotPending,
    Publish,
    Resources,
    ResourcesInsufficient,
    Schedule,
    SignalJob,
    SlotsError,
    State,
    TransactionExpired,
    TransactionPending,
)

T0 = 1_000_000.0


def machine(**policy: object) -> Machine:
    return Machine(
        host="node1",
        total=Resources(cpus=8, memory=16384, disk=1_000_000, gpus=1),
        policy=MachinePolicy(**{"max_job_retirement_time": 3600, **policy}),  # type: ignore[arg-type]
        now=T0,
    )


def claim(m: Machine, now: float, cpus: int = 1, **spec: object) -> str:
    info, actions = m.claim(
        now,
        resources=Resources(cpus=cpus, memory=512),
        spec=JobSpec(**spec),  # type: ignore[arg-type]
    )
    assert actions == [Publish()]
    return info.claim_id


def test_claims_carve_dynamic_slots_and_numbers_never_repeat() -> None:
    m = machine()
    first = claim(m, T0, cpus=2)
    second = claim(m, T0, cpus=3)
    assert m.free() == Resources(cpus=3, memory=16384 - 1024, disk=1_000_000, gpus=1)
    m.job_exited(T0 + 1, first)
    third = claim(m, T0 + 2)
    assert (first, second, third) == ("1", "2", "3")
    names = [s["Name"] for s in m.ad(T0 + 2)["slots"]]
    assert names == ["slot1@node1", "slot1_2@node1", "slot1_3@node1"]


@pytest.mark.parametrize(
    ("resources", "error"),
    [
        (Resources(cpus=9), ResourcesInsufficient),
        (Resources(cpus=1, memory=20000), ResourcesInsufficient),
        (Resources(cpus=1, gpus=2), ResourcesInsufficient),
        (Resources(cpus=0), InvalidRequest),
    ],
)
def test_claim_refused_changes_nothing(resources: Resources, error: type[SlotsError]) -> None:
    m = machine()
    before = m.snapshot()
    with pytest.raises(error):
        m.claim(T0, resources=resources, spec=JobSpec())
    assert m.snapshot() == before


@pytest.mark.parametrize(
    "bad",
    [
        {"cpus": -1},
        {"cpus": True},
        {"memory": 1.5},
    ],
)
def test_resources_validate(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest):
        Resources(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "spec",
    [
        {"max_job_retirement_time": -1},
        {"job_max_vacate_time": 1.5},
        {"kill_signal": "SIGBOGUS"},
        {"owner": "evil\nowner"},
    ],
)
def test_job_spec_validates(spec: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest):
        JobSpec(**spec)  # type: ignore[arg-type]


def test_start_expression_decides_admission() -> None:
    m = machine(start='TARGET.Owner == "alice" && TARGET.RequestCpus <= 2')
    claim(m, T0, owner="alice", cpus=2)
    with pytest.raises(NotAccepting):
        m.claim(T0, resources=Resources(cpus=1), spec=JobSpec(owner="bob"))
    with pytest.raises(NotAccepting):
        m.claim(T0, resources=Resources(cpus=4), spec=JobSpec(owner="alice"))


def test_start_false_puts_the_partitionable_slot_in_owner() -> None:
    m = machine(start="false")
    pslot = m.ad(T0)["slots"][0]
    assert (pslot["State"], pslot["Activity"], pslot["Start"]) == ("Owner", "Idle", False)
    m.set_policy(T0 + 1, MachinePolicy(start="true"))
    pslot = m.ad(T0 + 1)["slots"][0]
    assert (pslot["State"], pslot["Start"]) == ("Unclaimed", True)


def test_suspend_freezes_run_time_and_continue_resumes() -> None:
    m = machine()
    c = claim(m, T0)
    assert m.suspend(T0 + 100, c)[0] == SignalJob(claim_id=c, signal="SIGSTOP")
    info = m.claim_info(c, T0 + 500)
    assert (info.activity, info.run, info.suspended) == (Activity.SUSPENDED, 100, 400)
    assert m.continue_(T0 + 500, c)[0] == SignalJob(claim_id=c, signal="SIGCONT")
    info = m.claim_info(c, T0 + 600)
    assert (info.activity, info.run, info.suspended) == (Activity.BUSY, 200, 400)
    with pytest.raises(ClaimNotActive):
        m.continue_(T0 + 600, c)


def test_unknown_claim() -> None:
    m = machine()
    for call in (m.release, m.suspend, m.continue_, m.job_exited):
        with pytest.raises(NoSuchClaim):
            call(T0, "42")
    with pytest.raises(NoSuchClaim):
        m.claim_info("x", T0)


def test_release_vacates_then_kills_after_vacate_time() -> None:
    m = machine(machine_max_vacate_time=60)
    c = claim(m, T0)
    actions = m.release(T0 + 10, c)
    assert actions[0] == SignalJob(claim_id=c, signal="SIGTERM")
    assert m.claim_info(c, T0 + 10).state is State.PREEMPTING
    assert m.next_wakeup() == T0 + 70
    assert m.tick(T0 + 69) == []
    assert SignalJob(claim_id=c, signal="SIGKILL") in m.tick(T0 + 70)
    with pytest.raises(ClaimNotActive):
        m.release(T0 + 71, c)
    # An operator's release is not drain badput.
    assert m.total_badput == 0


def test_illegal_move_leaves_state_unchanged() -> None:
    m = machine(machine_max_vacate_time=60)
    c = claim(m, T0)
    m.release(T0, c)
    before = m.snapshot()
    with pytest.raises(ClaimNotActive):
        m.suspend(T0 + 1, c)
    assert m.snapshot() == before


def test_illegal_transition_is_typed() -> None:
    err = IllegalTransition("x")
    assert (err.code, err.http_status) == ("slot.illegal_transition", 409)


# --------------------------------------------------------------------- the transaction


def test_phase_one_returns_a_pending_request_with_fresh_estimate() -> None:
    m = machine()
    c = claim(m, T0, cpus=2)
    request, estimate, actions = m.start_draining(
        T0 + 100, schedule=Schedule.GRACEFUL, reason="kernel update"
    )
    assert (request.id, request.state, request.expires_at) == ("1", DrainState.PENDING, T0 + 130)
    assert estimate.completion == T0 + 3600
    assert estimate.badput == 2 * 3600
    assert [b.claim_id for b in estimate.blockers] == [c]
    assert estimate.blockers[0].evict_at == T0 + 3000
    assert actions == [Publish()]
    ad = m.ad(T0 + 100)["machine"]
    assert (ad["DrainState"], ad["DrainingRequestId"], ad["Start"]) == ("pending", "1", True)
    assert "Draining" not in ad


def test_second_request_is_refused_at_once() -> None:
    m = machine()
    m.start_draining(T0, schedule=Schedule.GRACEFUL)
    before = m.snapshot()
    with pytest.raises(DrainInProgress) as caught:
        m.start_draining(T0, schedule=Schedule.FAST)
    assert (caught.value.condor_code, caught.value.http_status) == (10001, 409)
    assert m.snapshot() == before


def test_state_changes_wait_while_pending_but_exits_do_not() -> None:
    m = machine()
    c = claim(m, T0)
    m.start_draining(T0 + 1, schedule=Schedule.GRACEFUL)
    for call in (
        lambda: m.claim(T0 + 2, resources=Resources(cpus=1), spec=JobSpec()),
        lambda: m.release(T0 + 2, c),
        lambda: m.suspend(T0 + 2, c),
    ):
        with pytest.raises(TransactionPending):
            call()
    m.job_exited(T0 + 2, c)
    assert m.claims(T0 + 2) == []


def test_pending_transaction_expires() -> None:
    m = machine()
    request, _, _ = m.start_draining(T0, schedule=Schedule.GRACEFUL, ttl=5)
    assert m.next_wakeup() == T0 + 5
    assert m.tick(T0 + 4.999) == []
    assert m.tick(T0 + 5) == [Publish()]
    assert m.request is None
    assert m.last_request is not None
    assert (m.last_request.id, m.last_request.state) == ("1", DrainState.CANCELLED)
    with pytest.raises(TransactionExpired):  # a late commit learns why
        m.commit_draining(T0 + 6, request.id)


def test_commit_of_a_request_cancelled_in_time_is_no_such_request() -> None:
    m = machine()
    request, _, _ = m.start_draining(T0, schedule=Schedule.GRACEFUL, ttl=5)
    m.cancel_draining(T0 + 1, request.id)
    with pytest.raises(NoSuchRequest):
        m.commit_draining(T0 + 2, request.id)


def test_commit_after_expiry_is_410_and_cancels() -> None:
    m = machine()
    request, _, _ = m.start_draining(T0, schedule=Schedule.GRACEFUL, ttl=5)
    with pytest.raises(TransactionExpired) as caught:
        m.commit_draining(T0 + 5, request.id)
    assert caught.value.http_status == 410
    assert m.request is None
    assert m.ad(T0 + 5)["machine"]["Start"] is True


def test_wrong_id_and_not_pending() -> None:
    m = machine()
    request, _, _ = m.start_draining(T0, schedule=Schedule.GRACEFUL)
    with pytest.raises(NoSuchRequest) as caught:
        m.commit_draining(T0, "99")
    assert caught.value.condor_code == 10002
    with pytest.raises(NoSuchRequest):
        m.cancel_draining(T0, "99")
    m.commit_draining(T0, request.id)
    with pytest.raises(NotPending):
        m.commit_draining(T0, request.id)


def test_ids_increase_and_are_never_reused() -> None:
    m = machine()
    ids = []
    for i in range(3):
        request, _, _ = m.start_draining(T0 + i, schedule=Schedule.FAST)
        ids.append(request.id)
        m.cancel_draining(T0 + i)
    assert ids == ["1", "2", "3"]
    restored = Machine.restore(
        m.snapshot(), host="node1", total=m.total, policy=m.policy, now=T0 + 10
    )
    request, _, _ = restored.start_draining(T0 + 10, schedule=Schedule.FAST)
    assert request.id == "4"


def test_cancel_without_request_is_a_noop() -> None:
    m = machine()
    assert m.cancel_draining(T0) == []


def test_one_shot_with_passing_check() -> None:
    m = machine()
    request, _, _ = m.start_draining(
        T0, schedule=Schedule.GRACEFUL, commit=True, check="TotalCpus == 8 && Start"
    )
    assert request.state is DrainState.DRAINED  # nothing ran: drained at once
    assert m.ad(T0)["machine"]["Draining"] is True


@pytest.mark.parametrize("check", ["TotalCpus > 100", "NoSuchAttribute", 'Cpus == "x"'])
def test_one_shot_check_that_fails_changes_nothing(check: str) -> None:
    m = machine()
    before = m.snapshot()
    with pytest.raises(CheckFailed) as caught:
        m.start_draining(T0, schedule=Schedule.GRACEFUL, commit=True, check=check)
    assert (caught.value.condor_code, caught.value.http_status) == (10003, 412)
    assert m.snapshot() == before


@pytest.mark.parametrize(
    "kwargs",
    [
        {"check": "Start &&", "commit": True},
        {"check": "true"},  # a check goes with a one-shot request
        {"start": "Owner =="},
        {"deadline": -1},
        {"deadline": float("nan")},
        {"reason": "line\nbreak"},
        {"ttl": 0},
        {"start": "true", "schedule": Schedule.QUICK},
    ],
)
def test_invalid_drain_requests_change_nothing(kwargs: dict[str, object]) -> None:
    m = machine()
    before = m.snapshot()
    args: dict[str, object] = {"schedule": Schedule.GRACEFUL, **kwargs}
    with pytest.raises(InvalidRequest):
        m.start_draining(T0, **args)  # type: ignore[arg-type]
    assert m.snapshot() == before


def test_claims_refused_while_draining() -> None:
    m = machine()
    claim(m, T0)
    request, _, _ = m.start_draining(T0, schedule=Schedule.GRACEFUL)
    m.commit_draining(T0, request.id)
    with pytest.raises(NotAccepting) as caught:
        m.claim(T0 + 1, resources=Resources(cpus=1), spec=JobSpec())
    assert caught.value.code == "machine.not_accepting"
