"""Retirement and vacate arithmetic, eviction plans and the drain estimates.

HTCondor's arithmetic, per active job *i* (DESIGN §3.1–3.2):

* ``MJRT_i`` is the machine's MaxJobRetirementTime, or the job's own when lower;
* ``R_i = max(0, MJRT_i − run_i)``;
* ``V_i = Vj`` if ``Vj ≤ Vm`` else ``max(Vm, min(Vj, R_i))`` — a job may borrow
  retirement time as vacate time;
* ``G_i = max(R_i, V_i)``.

Everything here is a pure function of its arguments; ``now`` is always one of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "MAX_PUBLISHED",
    "Estimate",
    "Eviction",
    "JobTiming",
    "Phase",
    "Schedule",
    "SuspendPolicy",
    "clamp",
    "effective_retirement",
    "estimate",
    "graceful_time",
    "plan_eviction",
    "plan_evictions",
    "retirement_remaining",
    "sticky_completion",
    "vacate_time",
]

#: Every published value is clamped to the largest ClassAd-safe 32-bit integer.
MAX_PUBLISHED = 2147483647


class Schedule(StrEnum):
    """How a drain empties the machine."""

    GRACEFUL = "graceful"
    QUICK = "quick"
    FAST = "fast"


class SuspendPolicy(StrEnum):
    """What a drain does with suspended jobs, and how the estimates count them.

    ``keep``: HTCondor's behaviour; a suspended job's run time is frozen, so its
    retirement does not advance and the graceful estimate slides. ``evict``: a
    suspended job counts ``R = 0`` and is evicted as soon as a drain starts.
    ``resume``: a drain continues suspended jobs; they are counted as running.
    """

    KEEP = "keep"
    EVICT = "evict"
    RESUME = "resume"


class Phase(StrEnum):
    """Where an active job stands, for the arithmetic."""

    RUNNING = "running"  # Claimed/Busy or Claimed/Retiring: run time accrues
    SUSPENDED = "suspended"  # Claimed/Suspended: run time frozen
    VACATING = "vacating"  # soft-killed, waiting for it to exit or the hard kill
    KILLING = "killing"  # hard-killed, waiting for it to exit


def clamp(value: float) -> int:
    """Published integer form of a value: truncated, and at most :data:`MAX_PUBLISHED`."""
    return min(int(value), MAX_PUBLISHED)


def effective_retirement(machine: float, job: float | None) -> float:
    """``MJRT_i``: the machine's MaxJobRetirementTime, or the job's own when lower."""
    return machine if job is None else min(machine, job)


def retirement_remaining(mjrt: float, run: float) -> float:
    """``R_i = max(0, MJRT_i − run_i)``."""
    return max(0.0, mjrt - run)


def vacate_time(machine: float, job: float | None, remaining: float) -> float:
    """``V_i``: the job's vacate time, borrowing from retirement when it asks for more."""
    if job is None or job <= machine:
        return machine if job is None else job
    return max(machine, min(job, remaining))


def graceful_time(remaining: float, vacate: float) -> float:
    """``G_i = max(R_i, V_i)``."""
    return max(remaining, vacate)


@dataclass(frozen=True, kw_only=True, slots=True)
class JobTiming:
    """The inputs of the arithmetic for one active job, as of some ``now``."""

    cpus: int
    run: float
    max_job_retirement_time: float  # the effective MJRT_i
    job_max_vacate_time: float | None
    phase: Phase
    vacate_remaining: float = 0.0  # VACATING only: seconds until the hard kill
    accepted_while_draining: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Eviction:
    """When a job would be evicted by a drain under some schedule.

    ``soft_kill_at`` is ``None`` when the job is already being evicted; it equals
    ``hard_kill_at`` when the schedule sends no soft kill (fast). ``firm`` is false
    when the instant slides with time (a suspended job under ``keep``): it is an
    estimate, not a timer.
    """

    retirement_remaining: float
    vacate: float
    soft_kill_at: float | None
    hard_kill_at: float
    firm: bool
    badput: float


def plan_eviction(
    job: JobTiming,
    *,
    schedule: Schedule,
    now: float,
    machine_max_vacate_time: float,
    suspend_policy: SuspendPolicy = SuspendPolicy.KEEP,
    deadline_at: float | None = None,
    not_before: float | None = None,
) -> Eviction:
    """Plan one job's eviction by a drain of ``schedule`` as seen at ``now``.

    ``deadline_at`` bounds a graceful drain: a job still running then is soft-killed
    as by a quick drain. ``not_before`` delays the soft kill (jobs accepted while a
    graceful drain runs go only once the original jobs are gone).
    """
    vm = machine_max_vacate_time
    vj = job.job_max_vacate_time
    if job.phase is Phase.KILLING:
        return Eviction(
            retirement_remaining=0.0,
            vacate=0.0,
            soft_kill_at=None,
            hard_kill_at=now,
            firm=True,
            badput=job.cpus * job.run,
        )
    if job.phase is Phase.VACATING:
        left = max(0.0, job.vacate_remaining)
        return Eviction(
            retirement_remaining=0.0,
            vacate=left,
            soft_kill_at=None,
            hard_kill_at=now + left,
            firm=True,
            badput=job.cpus * (job.run + left),
        )
    if schedule is Schedule.FAST:
        return Eviction(
            retirement_remaining=0.0,
            vacate=0.0,
            soft_kill_at=now,
            hard_kill_at=now,
            firm=True,
            badput=job.cpus * job.run,
        )

    suspended = job.phase is Phase.SUSPENDED
    counts_as_retired = suspended and suspend_policy is SuspendPolicy.EVICT
    mjrt = job.max_job_retirement_time
    remaining = 0.0 if counts_as_retired else retirement_remaining(mjrt, job.run)
    accrues = not suspended or suspend_policy is SuspendPolicy.RESUME

    def remaining_at(t: float) -> float:
        if counts_as_retired:
            return 0.0
        if accrues:
            return retirement_remaining(mjrt, job.run + (t - now))
        return remaining

    if schedule is Schedule.QUICK or counts_as_retired:
        soft = now
        firm = True
    else:
        soft = now + max(0.0, remaining - vacate_time(vm, vj, remaining))
        # A suspended job under `keep` does not approach its promise: the instant slides.
        firm = accrues or soft <= now
        if not_before is not None and soft < not_before:
            soft = not_before
            firm = True
        if deadline_at is not None and soft > max(now, deadline_at):
            soft = max(now, deadline_at)
            firm = True
    vacate = vacate_time(vm, vj, remaining_at(soft))
    hard = soft + vacate
    return Eviction(
        retirement_remaining=remaining,
        vacate=vacate,
        soft_kill_at=soft,
        hard_kill_at=hard,
        firm=firm,
        badput=job.cpus * (job.run + (hard - now)),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Estimate:
    """A drain schedule's expected completion (epoch seconds) and badput (cpu-seconds)."""

    schedule: Schedule
    completion: float
    badput: float
    active: bool  # False: no active job; the completion is the sticky idle value


def sticky_completion(previous: float | None, now: float) -> float:
    """The idle rule: the moment the machine last became drainable.

    The first idle computation gives ``now``; while idle it does not move; a
    previous value in the future becomes ``now``.
    """
    if previous is None or previous > now:
        return now
    return previous


def estimate(
    jobs: Iterable[JobTiming],
    *,
    schedule: Schedule,
    now: float,
    machine_max_vacate_time: float,
    suspend_policy: SuspendPolicy = SuspendPolicy.KEEP,
    deadline_at: float | None = None,
    previous: float | None = None,
) -> Estimate:
    """The expected completion and badput of draining ``jobs`` now with ``schedule``.

    Completion is ``now + max_i`` of each job's time to be gone, badput the
    cpu-weighted sum of ``run_i`` plus that time. Jobs accepted while a graceful drain
    runs are evicted once the original jobs are gone, so they count after them.
    ``previous`` is the last published completion, for the idle rule.
    """
    plans = plan_evictions(
        list(jobs),
        schedule=schedule,
        now=now,
        machine_max_vacate_time=machine_max_vacate_time,
        suspend_policy=suspend_policy,
        deadline_at=deadline_at,
    )
    if not plans:
        return Estimate(
            schedule=schedule,
            completion=sticky_completion(previous, now),
            badput=0.0,
            active=False,
        )
    return Estimate(
        schedule=schedule,
        completion=max(plan.hard_kill_at for plan in plans),
        badput=sum(plan.badput for plan in plans),
        active=True,
    )


def plan_evictions(
    jobs: list[JobTiming],
    *,
    schedule: Schedule,
    now: float,
    machine_max_vacate_time: float,
    suspend_policy: SuspendPolicy,
    deadline_at: float | None,
) -> list[Eviction]:
    """Every job's eviction, in the order given.

    Jobs accepted while a graceful drain runs go when the original jobs are gone.
    """
    late = schedule is Schedule.GRACEFUL
    plans: list[Eviction | None] = [
        None
        if late and j.accepted_while_draining
        else plan_eviction(
            j,
            schedule=schedule,
            now=now,
            machine_max_vacate_time=machine_max_vacate_time,
            suspend_policy=suspend_policy,
            deadline_at=deadline_at,
        )
        for j in jobs
    ]
    originals_gone = max((p.hard_kill_at for p in plans if p is not None), default=now)
    return [
        plan
        if plan is not None
        else plan_eviction(
            job,
            schedule=schedule,
            now=now,
            machine_max_vacate_time=machine_max_vacate_time,
            suspend_policy=suspend_policy,
            deadline_at=originals_gone,
            not_before=originals_gone,
        )
        for job, plan in zip(jobs, plans, strict=True)
    ]
