"""Whole drains driven through the model, with the exact instant of every signal."""

from __future__ import annotations

import pytest

from slots import (
    Activity,
    CompletionAction,
    DrainState,
    JobSpec,
    MachinePolicy,
    NotAccepting,
    OnCompletion,
    Resources,
    Schedule,
    State,
    SuspendPolicy,
)

from .world import World

T0 = 1_000_000.0


def drain(world: World, schedule: Schedule, **kwargs: object) -> str:
    request, _, actions = world.machine.start_draining(
        world.now,
        schedule=schedule,
        commit=True,
        **kwargs,  # type: ignore[arg-type]
    )
    world.apply(actions)
    return request.id


def test_graceful_evicts_each_job_at_its_own_promise() -> None:
    world = World.make(
        policy=MachinePolicy(max_job_retirement_time=3600, machine_max_vacate_time=60)
    )
    long_ = world.claim(cpus=2, started_ago=600)  # R = 3000: soft at +2940, hard at +3000
    short = world.claim(cpus=1, retirement=300, started_ago=100)  # R = 200: soft +140
    done = world.claim(cpus=1, started_ago=10, length=1000)  # ends on its own at +990
    stubborn = world.claim(cpus=1, started_ago=0, term_delay=None)  # ignores SIGTERM
    drain(world, Schedule.GRACEFUL)
    world.run_until(T0 + 10_000)
    assert world.signals_for(short) == [(T0 + 140, "SIGTERM")]
    assert world.signals_for(done) == []
    assert world.signals_for(long_) == [(T0 + 2940, "SIGTERM")]
    assert world.signals_for(stubborn) == [(T0 + 3540, "SIGTERM"), (T0 + 3600, "SIGKILL")]
    assert [c for _, c in world.exits] == [short, done, long_, stubborn]
    ad = world.machine.ad(world.now)["machine"]
    assert ad["DrainState"] == "drained"
    # Badput: Cpus · run at eviction start; the job that ended on its own adds none.
    assert ad["TotalMachineDrainingBadput"] == 2 * 3540 + 1 * 240 + 1 * 3540
    assert world.machine.request is not None
    assert world.machine.request.drained_at == T0 + 3600


def test_quick_soft_kills_now_and_hard_kills_after_vacate() -> None:
    world = World.make(policy=MachinePolicy(machine_max_vacate_time=60))
    polite = world.claim(started_ago=100, term_delay=5)
    rude = world.claim(started_ago=100, term_delay=None, vacate=30)
    greedy = world.claim(started_ago=100, term_delay=None, vacate=120)  # capped by R = 0
    drain(world, Schedule.QUICK)
    world.run_until(T0 + 1000)
    assert world.signals_for(polite) == [(T0, "SIGTERM")]
    assert world.signals_for(rude) == [(T0, "SIGTERM"), (T0 + 30, "SIGKILL")]
    assert world.signals_for(greedy) == [(T0, "SIGTERM"), (T0 + 60, "SIGKILL")]
    assert world.machine.drain_state is DrainState.DRAINED


def test_fast_kills_now() -> None:
    world = World.make()
    jobs = [world.claim(cpus=2, started_ago=50 * i) for i in range(1, 4)]
    drain(world, Schedule.FAST)
    assert [world.signals_for(j) for j in jobs] == [[(T0, "SIGKILL")]] * 3
    world.run_until(T0)
    ad = world.machine.ad(T0)["machine"]
    assert ad["TotalMachineDrainingBadput"] == 2 * (50 + 100 + 150)
    assert ad["DrainState"] == "drained"


def test_deadline_escalates_a_graceful_drain() -> None:
    world = World.make(
        policy=MachinePolicy(max_job_retirement_time=3600, machine_max_vacate_time=60)
    )
    job = world.claim(started_ago=0, term_delay=None)
    drain(world, Schedule.GRACEFUL, deadline=600)
    assert world.machine.ad(T0)["machine"]["DrainingDeadline"] == T0 + 600
    world.run_until(T0 + 10_000)
    assert world.signals_for(job) == [(T0 + 600, "SIGTERM"), (T0 + 660, "SIGKILL")]


def test_cancel_mid_drain_unretires_and_lets_evictions_finish() -> None:
    world = World.make(
        policy=MachinePolicy(max_job_retirement_time=3600, machine_max_vacate_time=60)
    )
    keeps = world.claim(started_ago=0)
    dying = world.claim(started_ago=3590, term_delay=None)  # soft-killed at once
    request_id = drain(world, Schedule.GRACEFUL)
    assert world.machine.claim_info(keeps, T0).activity is Activity.RETIRING
    world.run_until(T0 + 10)
    world.apply(world.machine.cancel_draining(world.now, request_id))
    info = world.machine.claim_info(keeps, world.now)
    assert (info.state, info.activity) == (State.CLAIMED, Activity.BUSY)
    assert world.machine.claim_info(dying, world.now).activity is Activity.VACATING
    pslot = world.machine.ad(world.now)["slots"][0]
    assert (pslot["State"], pslot["Start"]) == ("Unclaimed", True)
    world.run_until(T0 + 10_000)
    assert world.signals_for(dying) == [(T0, "SIGTERM"), (T0 + 60, "SIGKILL")]
    assert world.signals_for(keeps) == []  # un-retired: never evicted
    assert world.machine.ad(world.now)["machine"]["TotalMachineDrainingBadput"] == 3590
    last = world.machine.last_request
    assert last is not None
    assert last.state is DrainState.CANCELLED


def test_partitionable_slot_goes_drained_retiring_then_idle() -> None:
    world = World.make()
    world.claim(started_ago=3500)
    drain(world, Schedule.GRACEFUL)
    pslot = world.machine.ad(world.now)["slots"][0]
    assert (pslot["State"], pslot["Activity"]) == ("Drained", "Retiring")
    world.run_until(T0 + 1000)
    pslot = world.machine.ad(world.now)["slots"][0]
    assert (pslot["State"], pslot["Activity"]) == ("Drained", "Idle")


@pytest.mark.parametrize(
    ("on_completion", "state_after", "completion"),
    [
        (OnCompletion.NONE, DrainState.DRAINED, None),
        (OnCompletion.RESUME, DrainState.NONE, None),
        (OnCompletion.EXIT, DrainState.NONE, OnCompletion.EXIT),
        (OnCompletion.RESTART, DrainState.NONE, OnCompletion.RESTART),
    ],
)
def test_completion_actions(
    on_completion: OnCompletion, state_after: DrainState, completion: OnCompletion | None
) -> None:
    world = World.make(policy=MachinePolicy(machine_max_vacate_time=60))
    world.claim(started_ago=10)
    request_id = drain(world, Schedule.QUICK, on_completion=on_completion)
    world.run_until(T0 + 100)
    assert world.machine.drain_state is state_after
    actions = [a.action for _, a in world.completions]
    assert actions == ([] if completion is None else [completion])
    if completion is not None:
        assert world.completions[0] == (
            T0,
            CompletionAction(action=completion, request_id=request_id),
        )
    if on_completion is OnCompletion.RESUME:
        pslot = world.machine.ad(world.now)["slots"][0]
        assert (pslot["State"], pslot["Cpus"], pslot["Start"]) == ("Unclaimed", 8, True)
        last = world.machine.last_request
        assert last is not None
        assert last.state is DrainState.COMPLETED


def test_start_expression_admits_latecomers_evicted_when_originals_are_gone() -> None:
    world = World.make(
        policy=MachinePolicy(max_job_retirement_time=1000, machine_max_vacate_time=60)
    )
    original = world.claim(started_ago=0)  # retires until +1000
    drain(world, Schedule.GRACEFUL, start='TARGET.Owner == "backfill"')
    with pytest.raises(NotAccepting):
        world.machine.claim(world.now, resources=Resources(cpus=1), spec=JobSpec(owner="alice"))
    world.run_until(T0 + 100)
    late = world.claim(owner="backfill", term_delay=2)
    assert world.machine.claim_info(late, world.now).accepted_while_draining
    slot = world.machine.ad(world.now)["slots"][-1]
    assert slot["AcceptedWhileDraining"] is True
    assert slot["Activity"] == "Busy"
    # The latecomer counts after the original: completion = original's end + its vacate.
    assert world.machine.ad(world.now)["machine"]["ExpectedMachineGracefulDrainingCompletion"] == (
        T0 + 1000 + 60
    )
    world.run_until(T0 + 5000)
    assert world.signals_for(original) == [(T0 + 940, "SIGTERM")]
    assert world.signals_for(late) == [(T0 + 940, "SIGTERM")]
    assert world.machine.drain_state is DrainState.DRAINED
    with pytest.raises(NotAccepting):  # no more latecomers once the originals are gone
        world.machine.claim(world.now, resources=Resources(cpus=1), spec=JobSpec(owner="backfill"))


def test_unclaimed_time_accumulates_only_while_draining() -> None:
    world = World.make(
        cpus=8, policy=MachinePolicy(max_job_retirement_time=1000, machine_max_vacate_time=0)
    )
    world.claim(cpus=2, started_ago=0)
    world.now = T0 + 500
    drain(world, Schedule.GRACEFUL)  # 6 idle cores from +500; the job goes at +1000
    world.run_until(T0 + 2000)  # then 8 idle cores for 1000 s
    ad = world.machine.ad(world.now)["machine"]
    assert ad["TotalMachineDrainingUnclaimedTime"] == 6 * 500 + 8 * 1000
    assert ad["TotalDrainingUnclaimedTime"] == ad["TotalMachineDrainingUnclaimedTime"]


@pytest.mark.parametrize(
    ("policy", "signals"),
    [
        (SuspendPolicy.KEEP, []),  # stays suspended: retirement does not advance
        (SuspendPolicy.EVICT, [(T0, "SIGTERM"), (T0, "SIGCONT")]),
        (SuspendPolicy.RESUME, [(T0, "SIGCONT")]),
    ],
)
def test_suspended_jobs_on_drain(policy: SuspendPolicy, signals: list[tuple[float, str]]) -> None:
    world = World.make(
        policy=MachinePolicy(
            max_job_retirement_time=1000, machine_max_vacate_time=60, suspend_policy=policy
        )
    )
    job = world.claim(started_ago=0)
    world.apply(world.machine.suspend(world.now, job))
    world.signals.clear()
    drain(world, Schedule.GRACEFUL)
    world.run_until(T0 + 5000)
    assert world.signals_for(job)[: len(signals) or None] == signals
    if policy is SuspendPolicy.KEEP:
        assert world.machine.claim_info(job, world.now).activity is Activity.SUSPENDED
        completion = world.machine.ad(world.now)["machine"][
            "ExpectedMachineGracefulDrainingCompletion"
        ]
        assert completion == world.now + 1000  # slides with time
    if policy is SuspendPolicy.RESUME:
        assert world.signals_for(job)[1] == (T0 + 940, "SIGTERM")


def test_continue_during_graceful_drain_retires_again() -> None:
    world = World.make(
        policy=MachinePolicy(max_job_retirement_time=1000, machine_max_vacate_time=60)
    )
    job = world.claim(started_ago=0)
    world.apply(world.machine.suspend(world.now, job))
    drain(world, Schedule.GRACEFUL)
    world.run_until(T0 + 300)  # suspended for 300 s: the promise moved by 300 s
    world.apply(world.machine.continue_(world.now, job))
    assert world.machine.claim_info(job, world.now).activity is Activity.RETIRING
    world.run_until(T0 + 5000)
    assert (T0 + 1240, "SIGTERM") in world.signals_for(job)
