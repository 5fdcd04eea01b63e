"""The two verdicts (promises; as planned) and the escalation's cost, from slot ads."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from slots import (
    EXPECTED_ATTRIBUTES,
    DrainForecast,
    Escalation,
    InvalidRequest,
    MachinePolicy,
    Schedule,
    SuspendPolicy,
    Verdicts,
    ad_blockers,
    drain_estimates,
    drain_verdicts,
    promise_completion,
)

from .test_forecast import instants, previous_values, slot_ads
from .test_properties import TOTAL, _step, ops, policies
from .world import World

T0 = 1_000_000
GRACEFUL_END = "ExpectedMachineGracefulDrainingCompletion"
GRACEFUL_BADPUT = "ExpectedMachineGracefulDrainingBadput"


def world(policy: SuspendPolicy = SuspendPolicy.KEEP) -> World:
    return World.make(
        now=float(T0),
        cpus=32,
        policy=MachinePolicy(
            max_job_retirement_time=3600, machine_max_vacate_time=120, suspend_policy=policy
        ),
    )


# ---------------------------------------------------------------- scenarios


def one_job(w: World) -> None:
    """2 cpus, running 600 s: R = 3000, promise end T0 + 3000 (soft kill at T0 + 2880)."""
    w.claim(cpus=2, started_ago=600)


def master_drain(deadline: int | None, start: str | None = None) -> Callable[[World], None]:
    def drain(w: World) -> None:
        w.apply(
            w.machine.start_draining(
                w.now, schedule=Schedule.GRACEFUL, deadline=deadline, start=start, commit=True
            )[2]
        )

    return drain


def suspended(w: World) -> None:
    claim = w.claim(cpus=2, started_ago=600)
    w.apply(w.machine.suspend(w.now, claim))


def with_latecomer(deadline: int | None) -> Callable[[World], None]:
    """The job above, a drain admitting latecomers, and a 1-cpu latecomer started at T0."""

    def build(w: World) -> None:
        one_job(w)
        master_drain(deadline, start="true")(w)
        w.claim(cpus=1)

    return build


def vacating(w: World) -> None:
    """The job above, and a 3-cpu job released at T0 (gone by T0 + 120)."""
    one_job(w)
    released = w.claim(cpus=3, started_ago=50)
    w.apply(w.machine.release(w.now, released))


def idle(w: World) -> None:
    job = w.claim(cpus=1)
    w.now = T0 + 5.0
    w.apply(w.machine.job_exited(w.now, job))


@dataclass(frozen=True)
class Case:
    name: str
    build: list[Callable[[World], None]]
    window: int  # seconds after T0
    escalation: Escalation
    promise: int  # seconds after T0
    planned: int  # seconds after T0
    cuts: list[tuple[int, int]]  # per cut job, latest gone_by first: cut_by, cut_badput
    policy: SuspendPolicy = SuspendPolicy.KEEP
    at: int = 0  # when read, seconds after T0


CASES = [
    # No deadline: the promise ends T0 + 3000.
    Case("no deadline, window after the promise", [one_job], 4000, Escalation.QUICK,
         3000, 3000, []),
    Case("no deadline, no escalation", [one_job], 1000, Escalation.NONE, 3000, 3000, []),
    # Quick at the window: soft-killed at T0 + 1000, gone 120 s later; 2000 s of promise cut,
    # badput 2 cpus × 1600 s run.
    Case("no deadline, quick at the window", [one_job], 1000, Escalation.QUICK,
         3000, 1120, [(2000, 3200)]),
    Case("no deadline, fast at the window", [one_job], 1000, Escalation.FAST,
         3000, 1000, [(2000, 3200)]),
    Case("the window has opened", [one_job], -100, Escalation.QUICK, 3000, 120, [(3000, 1200)]),
    # The master's drain in force, its deadline at the window: the promise verdict is the same.
    Case("deadline before the promise", [one_job, master_drain(1000)], 1000, Escalation.QUICK,
         3000, 1120, [(2000, 3200)]),
    Case("deadline before the window carries the escalation", [one_job, master_drain(1000)],
         2000, Escalation.QUICK, 3000, 1120, [(2000, 3200)]),
    Case("deadline before the promise, no escalation", [one_job, master_drain(1000)], 1000,
         Escalation.NONE, 3000, 1120, [(2000, 3200)]),
    Case("a deadline after the window: fast there", [one_job, master_drain(2000)], 1000,
         Escalation.FAST, 3000, 1000, [(2000, 3200)]),
    Case("deadline after the promise", [one_job, master_drain(5000)], 5000, Escalation.QUICK,
         3000, 3000, []),
    # The window moved earlier than the drain's deadline: the master replaces the drain.
    Case("deadline after the window: quick there", [one_job, master_drain(5000)], 1000,
         Escalation.QUICK, 3000, 1120, [(2000, 3200)]),
    Case("read later, the deadline ahead", [one_job, master_drain(1000)], 1000,
         Escalation.QUICK, 3000, 1120, [(2000, 3200)], at=400),
    # Suspended under keep: run frozen (600 s); the promise slides with `now`.
    Case("suspended job kept", [suspended], 1000, Escalation.QUICK, 3000, 1120, [(2000, 1200)]),
    Case("suspended job kept, read later", [suspended], 1000, Escalation.QUICK,
         3500, 1120, [(2500, 1200)], at=500),
    Case("suspended job evicted by the policy", [suspended], 1000, Escalation.QUICK,
         120, 120, [], policy=SuspendPolicy.EVICT),
    Case("suspended job resumed by the drain", [suspended], 1000, Escalation.QUICK,
         3000, 1120, [(2000, 3200)], policy=SuspendPolicy.RESUME),
    # A latecomer goes once the original job is gone: T0 + 3000, gone T0 + 3120.
    Case("latecomer, no escalation", [with_latecomer(None)], 1000, Escalation.NONE,
         3120, 3120, []),
    Case("latecomer, quick at the window", [with_latecomer(None)], 1000, Escalation.QUICK,
         3120, 1120, [(2000, 3200), (2120, 1000)]),
    # With the deadline at the window, the agent sends the latecomer once the original job
    # is gone (T0 + 1120): both promises are cut.
    Case("latecomer, deadline at the window", [with_latecomer(1000)], 1000, Escalation.QUICK,
         3120, 1240, [(2000, 1120), (2000, 3200)]),
    # A job already vacating has no promise left to cut.
    Case("a job already vacating", [vacating], 1000, Escalation.QUICK, 3000, 1120,
         [(2000, 3200)]),
    Case("a job already vacating, the other kept", [vacating], 4000, Escalation.QUICK,
         3000, 3000, []),
    Case("idle", [idle], 1000, Escalation.QUICK, 5, 5, [], at=10),
]  # fmt: skip


def built(case: Case) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The slot ads at ``T0 + case.at``, and the completions published with them."""
    w = world(case.policy)
    for step in case.build:
        step(w)
    ad = w.machine.ad(T0 + case.at)
    return ad["slots"], {k: ad["machine"][k] for k in EXPECTED_ATTRIBUTES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_both_verdicts_and_the_cost(case: Case) -> None:
    ads, previous = built(case)
    now = T0 + case.at
    window = T0 + case.window
    verdicts = drain_verdicts(
        ads, now, window_start=window, escalation=case.escalation, previous=previous
    )
    assert verdicts.promise_completion == T0 + case.promise
    assert verdicts.planned_completion == T0 + case.planned
    assert verdicts.late_by == max(0, case.promise - case.window) * (case.name != "idle")
    assert verdicts.on_time is (verdicts.late_by == 0)
    assert verdicts.escalated is bool(case.cuts)
    rows = ad_blockers(ads, now, window_start=window, escalation=case.escalation)
    cut = [(r["cut_by"], r["cut_badput"]) for r in rows if r["cut_by"]]
    assert cut == case.cuts
    assert verdicts.cut_jobs == len(case.cuts)
    assert verdicts.cut_core_seconds == sum(r["cpus"] * r["cut_by"] for r in rows)
    assert verdicts.cut_badput == sum(badput for _, badput in case.cuts)
    if rows:
        assert max(r["gone_by"] for r in rows) == verdicts.planned_completion
    # Each cut names the promise it breaks: promise_end − evict_at.
    for row in rows:
        if row["cut_by"]:
            assert row["cut_by"] == row["promise_end"] - row["evict_at"]
    assert promise_completion(ads, now, previous) == verdicts.promise_completion


def test_a_running_jobs_cut_is_its_retirement_remaining_at_the_cut() -> None:
    """What the ad shows at the window: ``RetirementTimeRemaining`` is the cut."""
    w = world()
    one_job(w)
    ads = w.machine.ad(T0)["slots"]
    (row,) = ad_blockers(ads, T0, window_start=T0 + 1000, escalation=Escalation.QUICK)
    at_window = w.machine.ad(T0 + 1000)["slots"][1]
    assert row["cut_by"] == at_window["RetirementTimeRemaining"] == 2000
    assert row["cut_badput"] == at_window["Cpus"] * at_window["TotalJobRunTime"]


def test_the_blockers_without_a_window_say_what_the_deadline_in_force_cuts() -> None:
    w = world()
    one_job(w)
    master_drain(1000)(w)
    (row,) = ad_blockers(w.machine.ad(T0)["slots"], T0)
    assert (row["evict_at"], row["gone_by"], row["promise_end"]) == (
        T0 + 1000,
        T0 + 1120,
        T0 + 3000,
    )
    assert (row["cut_by"], row["cut_badput"]) == (2000, 3200)


def test_a_window_start_must_be_a_finite_number() -> None:
    ads = world().machine.ad(T0)["slots"]
    for bad in (math.nan, math.inf):
        with pytest.raises(InvalidRequest, match="window start"):
            drain_verdicts(ads, T0, window_start=bad, escalation=Escalation.QUICK)
        with pytest.raises(InvalidRequest, match="window start"):
            ad_blockers(ads, T0, window_start=bad, escalation=Escalation.QUICK)


def test_a_fractional_window_start_acts_at_its_whole_second() -> None:
    w = world()
    one_job(w)
    ads = w.machine.ad(T0)["slots"]
    verdicts = drain_verdicts(ads, T0, window_start=T0 + 1000.75, escalation=Escalation.QUICK)
    assert verdicts.planned_completion == T0 + 1120
    assert verdicts.late_by == 3000 - 1000.75


# ---------------------------------------------------------------- what the agent then does


@settings(max_examples=60, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(
            st.integers(1, 4),  # cpus
            st.integers(0, 3000),  # started ago
            st.none() | st.integers(0, 4000),  # the job's own MaxJobRetirementTime
            st.none() | st.integers(0, 400),  # JobMaxVacateTime
        ),
        min_size=1,
        max_size=6,
    ),
    window=st.integers(0, 4000),
    escalation=st.sampled_from(list(Escalation)),
)
def test_as_planned_is_what_the_agent_does(
    jobs: list[tuple[int, int, int | None, int | None]], window: int, escalation: Escalation
) -> None:
    """The master's drain as it drives it: graceful with its deadline at the window under
    ``quick``; without one, then replaced by a fast drain at the window under ``fast``.
    Jobs that ignore their soft kill leave at their hard kill: exactly the planned
    ``gone_by``; the drain's badput is ``Cpus · run`` at each ``evict_at``."""
    w = world()
    for cpus, ago, mjrt, vacate in jobs:
        w.claim(cpus=cpus, started_ago=ago, retirement=mjrt, vacate=vacate, term_delay=None)
    ads = w.machine.ad(T0)["slots"]
    window_start = T0 + window
    rows = ad_blockers(ads, T0, window_start=window_start, escalation=escalation)
    verdicts = drain_verdicts(ads, T0, window_start=window_start, escalation=escalation)
    deadline = window if escalation is Escalation.QUICK else None
    master_drain(deadline)(w)
    w.run_until(window_start)
    if escalation is Escalation.FAST and w.machine.request is not None:
        w.apply(w.machine.cancel_draining(w.now))
        w.apply(w.machine.start_draining(w.now, schedule=Schedule.FAST, commit=True)[2])
    w.run_until(T0 + 10_000)
    gone = {claim: at for at, claim in w.exits}
    assert gone == {r["claim_id"]: r["gone_by"] for r in rows}
    assert max(gone.values()) == verdicts.planned_completion
    badput = {r["claim_id"]: r["cpus"] * (r["run"] + r["evict_at"] - T0) for r in rows}
    assert w.machine.total_badput == sum(badput.values())
    for row in rows:
        if row["cut_by"]:
            assert row["cut_badput"] == badput[row["claim_id"]]
    assert verdicts.cut_badput == sum(r["cut_badput"] for r in rows)


@dataclass(frozen=True)
class Published:
    """Jobs claimed at fractional instants, the master's drain committed at ``now``."""

    name: str
    claims: list[tuple[float, int | None]]  # claimed at (seconds after T0), JobMaxVacateTime
    now: float  # the drain committed, seconds after T0
    window: int  # seconds after T0: the drain's deadline
    completion: int  # as planned, and as published until the last job is gone
    badput: int  # as planned, and as published at the commit
    reads: list[float]  # instants (seconds after T0) at which the completion is read again
    policy: tuple[int, int] = (1, 0)  # MaxJobRetirementTime, MachineMaxVacateTime


PUBLISHED = [
    # Ads carry whole seconds, times left truncated: at T0 + 2 a job claimed at T0 + 1.5
    # shows 1 s run and none of its retirement (ending T0 + 2.5) left to borrow as vacate,
    # which is what it shows once soft-killed there (gone T0 + 2.5, shown T0 + 2).
    Published("the borrowed vacate ends mid-second", [(0, None), (1.5, 1)], 2, 3, 2, 3, [2]),
    Published("the borrowed vacate beside retiring jobs",
              [(0, None), (1.5, None), (1.5, None), (1.5, 1)], 2, 3, 2, 5, [2]),
    # Soft-killed at the deadline (T0 + 80) with 20.5 s of retirement left to borrow.
    Published("the vacate borrowed at the deadline", [(0.5, 30)], 10, 80, 100, 100,
              [10, 79.5, 80, 80.7, 90, 100.2], policy=(100, 0)),
    # No deadline before the promise: soft-killed when 30 s are left (T0 + 70.5).
    Published("the vacate borrowed at the promise", [(0.5, 30)], 10, 200, 100, 100,
              [10.2, 10.7, 70.2, 70.7, 71, 90, 100.2], policy=(100, 0)),
    # Soft-killed at a commit between two seconds: no retirement, or 14.8 s left to borrow.
    Published("no retirement, committed mid-second", [(0.5, None)], 10.7, 1000, 130, 130,
              [11, 11.5, 130.2], policy=(0, 120)),
    Published("the vacate borrowed at a commit mid-second", [(0.5, 30)], 85.7, 200, 100, 100,
              [86, 99.5, 100.2], policy=(100, 0)),
]  # fmt: skip


@pytest.mark.parametrize("case", PUBLISHED, ids=[c.name for c in PUBLISHED])
def test_the_agent_publishes_the_plan_while_its_jobs_vacate(case: Published) -> None:
    """The as-planned figures of the ad before the master's drain are what the agent
    publishes once it is committed, and keeps publishing while its jobs are soft-killed:
    a Vacating job's end is shown at the whole second its Retiring end was."""
    mjrt, vm = case.policy
    w = World.make(
        now=float(T0),
        cpus=16,
        policy=MachinePolicy(max_job_retirement_time=mjrt, machine_max_vacate_time=vm),
    )
    for at, vacate in case.claims:
        w.run_until(T0 + at)
        w.claim(vacate=vacate, term_delay=None)
    w.run_until(T0 + case.now)
    before = w.machine.ad(w.now)
    previous = {k: before["machine"][k] for k in EXPECTED_ATTRIBUTES}
    planned = drain_verdicts(
        before["slots"],
        w.now,
        window_start=T0 + case.window,
        escalation=Escalation.QUICK,
        previous=previous,
    )
    assert (planned.planned_completion, planned.planned_badput) == (
        T0 + case.completion,
        case.badput,
    )
    master_drain(case.window - math.floor(case.now))(w)
    after = w.machine.ad(w.now)["machine"]
    assert (after[GRACEFUL_END], after[GRACEFUL_BADPUT]) == (T0 + case.completion, case.badput)
    for read in case.reads:
        w.run_until(T0 + read)
        assert w.machine.ad(w.now)["machine"][GRACEFUL_END] == T0 + case.completion, read
    assert w.jobs  # every read came before the last job was gone


# ---------------------------------------------------------------- properties


def _without_deadline(ads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in ad.items() if k != "DrainingDeadline"} for ad in ads]


windows = st.integers(-2000, 7000)


@settings(max_examples=300)
@given(
    ads=slot_ads(),
    previous=previous_values(),
    window=windows,
    escalation=st.sampled_from(list(Escalation)),
)
def test_with_no_deadline_the_two_verdicts_agree_while_the_promises_are_kept(
    ads: list[dict[str, Any]], previous: Any, window: int, escalation: Escalation
) -> None:
    ads = _without_deadline(ads)
    graceful = drain_estimates(ads, T0, previous)
    promise = promise_completion(ads, T0, previous)
    assert promise == graceful[GRACEFUL_END]
    verdicts = drain_verdicts(
        ads, T0, window_start=T0 + window, escalation=escalation, previous=previous
    )
    assert verdicts.promise_completion == promise
    assert verdicts.planned_completion <= promise
    if escalation is Escalation.NONE or T0 + window >= promise:
        assert verdicts.planned_completion == promise
        assert verdicts.planned_badput == graceful[GRACEFUL_BADPUT]
        assert not verdicts.escalated
        assert (verdicts.cut_jobs, verdicts.cut_core_seconds, verdicts.cut_badput) == (0, 0, 0)
    else:
        assert verdicts.escalated == any(
            r["cut_by"] > 0
            for r in ad_blockers(ads, T0, window_start=T0 + window, escalation=escalation)
        )


@settings(max_examples=300)
@given(
    ads=slot_ads(),
    previous=previous_values(),
    window=windows,
    escalation=st.sampled_from(list(Escalation)),
)
def test_as_planned_is_the_graceful_estimate_wherever_that_covers_it(
    ads: list[dict[str, Any]], previous: Any, window: int, escalation: Escalation
) -> None:
    """No escalation, or ``quick`` with a drain whose deadline is at or before the window:
    the graceful estimate (its deadline applied). ``quick`` with no drain in force and no
    latecomer: the graceful estimate once the master's drain has its deadline at the
    window. The promise figure is below none of them."""
    window_start = T0 + window
    machine = ads[0]
    in_force = machine["DrainState"] != "none" and "DrainingDeadline" in machine
    verdicts = drain_verdicts(
        ads, T0, window_start=window_start, escalation=escalation, previous=previous
    )
    assert verdicts.planned_completion <= verdicts.promise_completion
    graceful = drain_estimates(ads, T0, previous)
    carried = in_force and machine["DrainingDeadline"] <= window_start
    if escalation is Escalation.NONE or (escalation is Escalation.QUICK and carried):
        assert verdicts.planned_completion == graceful[GRACEFUL_END]
        assert verdicts.planned_badput == graceful[GRACEFUL_BADPUT]
    if escalation is Escalation.NONE or escalation is Escalation.QUICK:
        assert verdicts.planned_completion >= min(graceful[GRACEFUL_END], window_start)
    latecomers = any(ad.get("AcceptedWhileDraining") for ad in ads[1:])
    if escalation is Escalation.QUICK and machine["DrainState"] == "none" and not latecomers:
        started = [
            {**machine, "DrainState": "draining", "DrainingDeadline": window_start},
            *ads[1:],
        ]
        after = drain_estimates(started, T0, previous)
        assert verdicts.planned_completion == after[GRACEFUL_END]
        assert verdicts.planned_badput == after[GRACEFUL_BADPUT]
        assert promise_completion(started, T0, previous) == verdicts.promise_completion


def _machine_after(policy: MachinePolicy, sequence: list[tuple[object, ...]]) -> tuple[World, int]:
    """A model machine after ``sequence``, at the next whole second."""
    w = World.make(cpus=TOTAL.cpus, policy=policy)
    now = w.now
    for op in sequence:
        now = _step(w.machine, now, op)
    whole = math.ceil(now)
    w.apply(w.machine.tick(whole))
    return w, whole


@settings(max_examples=150, deadline=None)
@given(policy=policies, sequence=ops, ahead=st.integers(1, 5000), later=st.integers(0, 4999))
def test_the_masters_drain_changes_no_promise(
    policy: MachinePolicy, sequence: list[tuple[object, ...]], ahead: int, later: int
) -> None:
    """The master commits its drain (graceful, its deadline at the window) on a machine:
    the graceful estimate the agent publishes then is the as-planned figure of the ad
    before; and until the deadline the promise verdict is the one the same machine gives
    under a graceful drain with no deadline (a drain, any drain, sends at once what has
    no retirement left: that, not the deadline, is what a drain changes)."""
    w, now = _machine_after(policy, sequence)
    assume(w.machine.request is None)
    window_start = now + ahead
    before = w.machine.ad(now)
    previous = {k: before["machine"][k] for k in EXPECTED_ATTRIBUTES}
    planned = drain_verdicts(
        before["slots"],
        now,
        window_start=window_start,
        escalation=Escalation.QUICK,
        previous=previous,
    )
    plain, _ = _machine_after(policy, sequence)
    for machine, deadline in ((w.machine, ahead), (plain.machine, None)):
        machine.start_draining(
            now, schedule=Schedule.GRACEFUL, deadline=deadline, reason="maintenance", commit=True
        )
    after = w.machine.ad(now)
    assert after["machine"]["DrainingDeadline"] == window_start
    assert after["machine"][GRACEFUL_END] == planned.planned_completion
    assert after["machine"][GRACEFUL_BADPUT] == planned.planned_badput
    assert promise_completion(after["slots"], now, previous) == planned.promise_completion
    verdicts = drain_verdicts(
        after["slots"],
        now,
        window_start=window_start,
        escalation=Escalation.QUICK,
        previous=previous,
    )
    assert (verdicts.planned_completion, verdicts.cut_jobs, verdicts.cut_badput) == (
        planned.planned_completion,
        planned.cut_jobs,
        planned.cut_badput,
    )
    read = min(now + later, window_start - 1)
    _step(w.machine, now, ("wait", read - now))
    _step(plain.machine, now, ("wait", read - now))
    with_deadline, without = w.machine.ad(read), plain.machine.ad(read)
    expected = without["machine"][GRACEFUL_END]
    for ad in (with_deadline, without):
        published = {k: ad["machine"][k] for k in EXPECTED_ATTRIBUTES}
        assert promise_completion(ad["slots"], read, published) == expected


# ---------------------------------------------------------------- the forecast


def _assert_agrees(
    forecast: DrainForecast,
    ads: list[dict[str, Any]],
    previous: Any,
    now: float,
    window_start: float,
    escalation: Escalation,
) -> None:
    assert forecast.promise(now) == promise_completion(ads, now, previous)
    direct = drain_verdicts(
        ads, now, window_start=window_start, escalation=escalation, previous=previous
    )
    assert forecast.verdicts(now, window_start=window_start, escalation=escalation) == direct
    assert forecast.blockers(now, window_start=window_start, escalation=escalation) == (
        ad_blockers(ads, now, window_start=window_start, escalation=escalation)
    )
    assert forecast.estimates(now) == drain_estimates(ads, now, previous)
    assert forecast.blockers(now) == ad_blockers(ads, now)


escalations = st.sampled_from(list(Escalation))


@settings(max_examples=60)  # each example checks some 300 instants
@given(
    ads=slot_ads(span=120),
    previous=previous_values(150),
    start=st.integers(-130, 0),
    window=st.integers(-40, 200),
    fraction=st.sampled_from([0.0, 0.5]),
    escalation=escalations,
)
def test_the_forecasts_verdicts_equal_the_direct_functions_second_by_second(
    ads: list[dict[str, Any]],
    previous: Any,
    start: int,
    window: int,
    fraction: float,
    escalation: Escalation,
) -> None:
    forecast = DrainForecast(ads, previous)
    for now in range(T0 + start, T0 + 260):
        _assert_agrees(forecast, ads, previous, now, T0 + window + fraction, escalation)


@settings(max_examples=300)
@given(
    ads=slot_ads(),
    previous=previous_values(),
    steps=instants,
    fraction=st.floats(0, 0.999),
    reads=st.lists(st.tuples(windows, escalations), min_size=1, max_size=3),
)
def test_the_forecasts_verdicts_equal_the_direct_functions_at_any_instant(
    ads: list[dict[str, Any]],
    previous: Any,
    steps: list[int],
    fraction: float,
    reads: list[tuple[int, Escalation]],
) -> None:
    """Several windows read in turn (a new schedule): each makes its own piece."""
    forecast = DrainForecast(ads, previous)
    now = T0
    for i, step in enumerate(steps):
        now += step
        window, escalation = reads[i % len(reads)]
        _assert_agrees(forecast, ads, previous, now + fraction, T0 + window, escalation)


@given(policy=policies, sequence=ops, steps=instants, window=windows, escalation=escalations)
def test_the_forecasts_verdicts_of_a_model_machines_ad(
    policy: MachinePolicy,
    sequence: list[tuple[object, ...]],
    steps: list[int],
    window: int,
    escalation: Escalation,
) -> None:
    w = World.make(cpus=TOTAL.cpus, policy=policy)
    now = w.now
    for op in sequence:
        now = _step(w.machine, now, op)
    ad = w.machine.ad(now)
    previous = {k: ad["machine"][k] for k in EXPECTED_ATTRIBUTES}
    forecast = DrainForecast(ad["slots"], previous)
    for step in steps:
        now += step
        _assert_agrees(forecast, ad["slots"], previous, now, T0 + window, escalation)


def test_a_forecast_is_ready_for_the_window_it_was_prepared_for() -> None:
    w = world()
    one_job(w)
    ads = w.machine.ad(T0)["slots"]
    forecast = DrainForecast(ads)
    window, quick = T0 + 1000.0, Escalation.QUICK
    forecast.prepare(T0, window_start=window, escalation=quick)
    assert forecast.ready(T0, window_start=window, escalation=quick)
    assert forecast.ready(T0)  # the window-free reads take any piece
    assert not forecast.ready(T0, window_start=window, escalation=Escalation.FAST)
    assert not forecast.ready(T0, window_start=T0 + 2000.0, escalation=quick)
    assert forecast.verdicts(T0 + 10, window_start=window, escalation=quick) == drain_verdicts(
        ads, T0 + 10, window_start=window, escalation=quick
    )
    # Once the window has opened the escalation acts at `now`: a new piece.
    assert forecast.ready(T0 + 1000, window_start=window, escalation=quick)
    assert not forecast.ready(T0 + 1001, window_start=window, escalation=quick)


def test_a_deadline_that_is_not_a_whole_second_is_served_directly() -> None:
    w = world()
    one_job(w)
    ads = w.machine.ad(T0)["slots"]
    ads[0] = {**ads[0], "DrainState": "draining", "DrainingDeadline": T0 + 700.5}
    forecast = DrainForecast(ads)
    for now in (T0, T0 + 350.25, T0 + 701):
        _assert_agrees(forecast, ads, None, now, T0 + 1000, Escalation.QUICK)
    verdicts = forecast.verdicts(T0, window_start=T0 + 1000, escalation=Escalation.QUICK)
    assert isinstance(verdicts, Verdicts)
    assert (verdicts.promise_completion, verdicts.planned_completion) == (T0 + 3000, T0 + 820)
