"""Properties that hold for any sequence of events."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from slots import (
    EXPECTED_ATTRIBUTES,
    JobSpec,
    Machine,
    MachinePolicy,
    OnCompletion,
    Resources,
    Schedule,
    SlotsError,
    SuspendPolicy,
    drain_estimates,
)

from .world import World

T0 = 1_000_000.0
TOTAL = Resources(cpus=16, memory=32768, disk=1_000_000, gpus=2)

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("claim"),
            st.integers(1, 6),
            st.integers(0, 4096),
            st.integers(0, 1),
            st.none() | st.integers(0, 5000),
            st.none() | st.integers(0, 900),
        ),
        st.tuples(st.just("exit"), st.integers(1, 30)),
        st.tuples(st.just("release"), st.integers(1, 30)),
        st.tuples(st.just("suspend"), st.integers(1, 30)),
        st.tuples(st.just("continue"), st.integers(1, 30)),
        st.tuples(
            st.just("drain"),
            st.sampled_from(list(Schedule)),
            st.booleans(),
            st.none() | st.integers(0, 4000),
        ),
        st.tuples(st.just("commit")),
        st.tuples(st.just("cancel")),
        st.tuples(st.just("wait"), st.floats(0, 2000, allow_nan=False)),
    ),
    max_size=40,
)
policies = st.builds(
    MachinePolicy,
    max_job_retirement_time=st.integers(0, 7200),
    machine_max_vacate_time=st.integers(0, 900),
    suspend_policy=st.sampled_from(list(SuspendPolicy)),
)


def _step(m: Machine, now: float, op: tuple[object, ...]) -> float:
    kind = op[0]
    try:
        if kind == "claim":
            _, cpus, memory, gpus, mjrt, vacate = op
            m.claim(
                now,
                resources=Resources(cpus=cpus, memory=memory, gpus=gpus),  # type: ignore[arg-type]
                spec=JobSpec(max_job_retirement_time=mjrt, job_max_vacate_time=vacate),  # type: ignore[arg-type]
            )
        elif kind == "exit":
            m.job_exited(now, str(op[1]))
        elif kind == "release":
            m.release(now, str(op[1]))
        elif kind == "suspend":
            m.suspend(now, str(op[1]))
        elif kind == "continue":
            m.continue_(now, str(op[1]))
        elif kind == "drain":
            _, schedule, commit, deadline = op
            m.start_draining(
                now,
                schedule=schedule,  # type: ignore[arg-type]
                commit=commit,  # type: ignore[arg-type]
                deadline=deadline,  # type: ignore[arg-type]
                on_completion=OnCompletion.NONE,
            )
        elif kind == "commit" and m.request is not None:
            m.commit_draining(now, m.request.id)
        elif kind == "cancel":
            m.cancel_draining(now)
        elif kind == "wait":
            target = now + float(op[1])  # type: ignore[arg-type]
            while (wake := m.next_wakeup()) is not None and wake <= target:
                now = max(now, wake)
                m.tick(now)
            now = target
            m.tick(now)
    except SlotsError:
        pass
    return now


@given(policy=policies, sequence=ops)
def test_resources_are_conserved(policy: MachinePolicy, sequence: list[tuple[object, ...]]) -> None:
    m = Machine(host="h", total=TOTAL, policy=policy, now=T0)
    now = T0
    for op in sequence:
        now = _step(m, now, op)
        used = Resources()
        for info in m.claims(now):
            used = used + info.resources
        assert m.free() + used == TOTAL
        slots = m.ad(now)["slots"]
        assert sum(s["Cpus"] for s in slots) == TOTAL.cpus


@given(policy=policies, sequence=ops)
def test_graceful_completion_never_earlier_than_a_running_jobs_promise(
    policy: MachinePolicy, sequence: list[tuple[object, ...]]
) -> None:
    m = Machine(host="h", total=TOTAL, policy=policy, now=T0)
    now = T0
    for op in sequence:
        now = _step(m, now, op)
        ad = m.ad(now)
        if "DrainingDeadline" in ad["machine"]:
            continue  # a deadline legitimately cuts promises short
        completion = ad["machine"]["ExpectedMachineGracefulDrainingCompletion"]
        for slot in ad["slots"][1:]:
            if slot["State"] == "Claimed" and slot["Activity"] in ("Busy", "Retiring"):
                assert (
                    completion >= ad["machine"]["MyCurrentTime"] + slot["RetirementTimeRemaining"]
                )


@given(policy=policies, sequence=ops, later=st.floats(0, 0.999))
def test_drain_estimates_agrees_with_the_model(
    policy: MachinePolicy, sequence: list[tuple[object, ...]], later: float
) -> None:
    m = Machine(host="h", total=TOTAL, policy=policy, now=T0)
    now = T0
    for op in sequence:
        now = _step(m, now, op)
    ad = m.ad(now + later)
    previous = {k: ad["machine"][k] for k in EXPECTED_ATTRIBUTES}
    assert drain_estimates(ad["slots"], now + later, previous) == previous


@given(
    jobs=st.lists(
        st.tuples(st.integers(0, 5000), st.none() | st.integers(0, 900), st.integers(0, 5000)),
        min_size=1,
        max_size=8,
    ),
    mjrt=st.integers(0, 4000),
    vm=st.integers(0, 600),
)
def test_graceful_drain_evicts_exactly_at_each_promise(
    jobs: list[tuple[int, int | None, int]], mjrt: int, vm: int
) -> None:
    """Each job that ignores its soft kill is hard-killed exactly G_i after commit."""
    world = World.make(
        cpus=16, policy=MachinePolicy(max_job_retirement_time=mjrt, machine_max_vacate_time=vm)
    )
    expected = {}
    for job_mjrt, vacate, ran in jobs:
        claim_id = world.claim(retirement=job_mjrt, vacate=vacate, started_ago=ran, term_delay=None)
        effective = min(mjrt, job_mjrt)
        remaining = max(0, effective - ran)
        v = vacate if vacate is not None and vacate <= vm else vm
        if vacate is not None and vacate > vm:
            v = max(vm, min(vacate, remaining))
        expected[claim_id] = T0 + max(remaining, v)
    world.apply(world.machine.start_draining(T0, schedule=Schedule.GRACEFUL, commit=True)[2])
    estimate = world.machine.ad(T0)["machine"]["ExpectedMachineGracefulDrainingCompletion"]
    world.run_until(T0 + 20_000)
    gone = {claim_id: t for t, claim_id in world.exits}
    assert gone == expected
    assert estimate == max(expected.values())
