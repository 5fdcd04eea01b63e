"""Retirement and vacate arithmetic, eviction plans and the drain estimates.

HTCondor's arithmetic, per active job *i* (DESIGN §3.1–3.2):

* ``MJRT_i`` is the machine's MaxJobRetirementTime, or the job's own when lower;
* ``R_i = max(0, MJRT_i − run_i)``;
* ``V_i = Vj`` if ``Vj ≤ Vm`` else ``max(Vm, min(Vj, R_i))`` — a job may borrow
  retirement time as vacate time;
* ``G_i = max(R_i, V_i)``.

A drain's plan is set against the jobs' promises (:func:`plan_drain`): each job's eviction
as promised (a graceful drain with no deadline and no escalation) and as planned (the
drain's deadline and the escalation at a window start applied), and what the planned one
cuts from the promised one (:func:`promise_cut`).

Everything here is a pure function of its arguments; ``now`` is always one of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "MAX_PUBLISHED",
    "Cut",
    "Escalation",
    "Estimate",
    "Eviction",
    "JobTiming",
    "Phase",
    "Schedule",
    "SuspendPolicy",
    "clamp",
    "effective_retirement",
    "escalate_eviction",
    "estimate",
    "graceful_time",
    "plan_drain",
    "plan_eviction",
    "plan_evictions",
    "promise_cut",
    "remaining_at",
    "retirement_remaining",
    "run_at",
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


class Escalation(StrEnum):
    """What happens at a machine's window start to what its drain has not yet evicted.

    The master's ``escalation`` policy (DESIGN §7): ``quick`` soft-kills every job still
    running at the window start (each is gone within its vacate time), ``fast`` hard-kills
    them, ``none`` leaves the drain alone (it keeps every promise, bar its own deadline).
    """

    QUICK = "quick"
    FAST = "fast"
    NONE = "none"


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
    remaining = remaining_at(job, now, now=now, suspend_policy=suspend_policy)
    accrues = _accrues(job, suspend_policy)

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
    vacate = vacate_time(vm, vj, remaining_at(job, soft, now=now, suspend_policy=suspend_policy))
    hard = soft + vacate
    return Eviction(
        retirement_remaining=remaining,
        vacate=vacate,
        soft_kill_at=soft,
        hard_kill_at=hard,
        firm=firm,
        badput=job.cpus * (job.run + (hard - now)),
    )


def _accrues(job: JobTiming, suspend_policy: SuspendPolicy) -> bool:
    """Whether the job's run time advances with ``now`` (running, or suspended under
    ``resume``: a drain continues it)."""
    return job.phase is Phase.RUNNING or (
        job.phase is Phase.SUSPENDED and suspend_policy is SuspendPolicy.RESUME
    )


def remaining_at(job: JobTiming, t: float, *, now: float, suspend_policy: SuspendPolicy) -> float:
    """``R_i`` at ``t`` of a job in retirement (running or suspended) as seen at ``now``.

    A running job's retirement runs down second by second; a suspended one's stays frozen
    under ``keep`` (and is 0 under ``evict``); under ``resume`` it runs down as a running
    job's does.
    """
    if job.phase is Phase.SUSPENDED and suspend_policy is SuspendPolicy.EVICT:
        return 0.0
    if _accrues(job, suspend_policy):
        return retirement_remaining(job.max_job_retirement_time, job.run + (t - now))
    return retirement_remaining(job.max_job_retirement_time, job.run)


def run_at(job: JobTiming, t: float, *, now: float, suspend_policy: SuspendPolicy) -> float:
    """The job's unsuspended run time at ``t`` as seen at ``now`` (frozen while it does
    not accrue: see :func:`remaining_at`)."""
    return job.run + (t - now) if _accrues(job, suspend_policy) else job.run


def escalate_eviction(
    job: JobTiming,
    plan: Eviction,
    *,
    escalation: Escalation,
    at: float,
    now: float,
    machine_max_vacate_time: float,
    suspend_policy: SuspendPolicy = SuspendPolicy.KEEP,
) -> Eviction:
    """``plan`` once the escalation at ``at`` (≥ ``now``) reaches the job.

    A job whose plan still has it running at ``at`` (its soft kill comes later) is
    soft-killed at ``at`` and given the vacate time it has then (``quick``), or
    hard-killed at ``at`` (``fast``); any other plan, and any plan under ``none``, is
    returned as it is: a job already being evicted then keeps dying as it was (a
    cancelled drain and a new one do not touch a Vacating job). Badput counts as the
    estimates do: ``Cpus · (run + time until gone)``.
    """
    soft = plan.soft_kill_at
    if escalation is Escalation.NONE or soft is None or not soft > at:
        return plan
    if escalation is Escalation.FAST:
        vacate = 0.0
    else:
        left = remaining_at(job, at, now=now, suspend_policy=suspend_policy)
        vacate = vacate_time(machine_max_vacate_time, job.job_max_vacate_time, left)
    hard = at + vacate
    return Eviction(
        retirement_remaining=plan.retirement_remaining,
        vacate=vacate,
        soft_kill_at=at,
        hard_kill_at=hard,
        firm=True,
        badput=job.cpus * (job.run + (hard - now)),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Cut:
    """What a drain takes from one job's promise (zeros: the promise is kept).

    ``by``: seconds, from the instant the drain starts evicting the job (its soft kill,
    or its hard kill under ``fast``) to its promise end (when it would be gone had it
    kept its retirement promise). For a running job that is its retirement end minus the
    cut, which is exactly the ``RetirementTimeRemaining`` its slot ad shows at the cut:
    HTCondor's own measure of the retirement a preempted job did not get. It includes
    the vacate time a graceful drain carves out of the retirement (the soft kill comes
    ``V_i`` before the retirement end, so that the job is gone by it); the vacate the
    escalation grants after the cut is the vacate every eviction gets, not retirement
    kept. Like the promise itself, it slides for a suspended job under ``keep`` (its
    promise end is counted from ``now``, as the graceful estimate counts it).
    ``badput``: cpu-seconds, ``Cpus · run`` at the cut (the unsuspended run time an
    eviction then throws away: what it adds to ``TotalMachineDrainingBadput``).
    """

    by: float
    badput: float


def promise_cut(
    job: JobTiming,
    planned: Eviction,
    promised: Eviction,
    *,
    now: float,
    suspend_policy: SuspendPolicy = SuspendPolicy.KEEP,
) -> Cut:
    """What the ``planned`` eviction of ``job`` takes from its ``promised`` one.

    ``promised`` is the job's eviction by a graceful drain with no deadline and no
    escalation (its promise kept); ``planned`` the eviction it will actually get. The
    promise is cut when the planned eviction starts earlier, or ends earlier (a hard
    kill instead of the promised vacate). A job already being evicted (Vacating,
    Killing) has no promise left to cut: its cost was counted when its eviction began.
    """
    soft = planned.soft_kill_at
    promised_soft = promised.soft_kill_at
    if soft is None or promised_soft is None:
        return Cut(by=0.0, badput=0.0)
    if not (soft < promised_soft or planned.hard_kill_at < promised.hard_kill_at):
        return Cut(by=0.0, badput=0.0)
    return Cut(
        by=promised.hard_kill_at - soft,
        badput=job.cpus * run_at(job, soft, now=now, suspend_policy=suspend_policy),
    )


def plan_drain(
    jobs: list[JobTiming],
    *,
    now: float,
    machine_max_vacate_time: float,
    suspend_policy: SuspendPolicy,
    deadline_at: float | None,
    schedule: Schedule = Schedule.GRACEFUL,
    window_at: float | None = None,
    escalation: Escalation = Escalation.NONE,
) -> tuple[list[Eviction], list[Eviction]]:
    """Every job's eviction as planned, and as promised; both in the order given.

    *Promised*: by a graceful drain with no deadline and no escalation
    (:func:`plan_evictions` without ``deadline_at``). *Planned*: by a drain of
    ``schedule`` under the deadline in force (``deadline_at``), then, at ``window_at``
    (or ``now`` when the window has opened), by ``escalation``
    (:func:`escalate_eviction`) — unless the deadline already carries it: with
    ``quick``, a deadline at or before ``window_at`` evicts at that deadline what the
    escalation would evict (the agent does it by itself, and jobs admitted by a ``start``
    expression still go once the original jobs are gone, as the agent sends them).
    With no deadline, a ``quick`` escalation plans each original job exactly as a
    deadline at ``window_at`` would (:func:`plan_eviction` cuts at a deadline the same
    way): the figure for the master's graceful drain about to start with that deadline.
    """
    promised = plan_evictions(
        jobs,
        schedule=Schedule.GRACEFUL,
        now=now,
        machine_max_vacate_time=machine_max_vacate_time,
        suspend_policy=suspend_policy,
        deadline_at=None,
    )
    if schedule is Schedule.GRACEFUL and deadline_at is None:
        planned = promised
    else:
        planned = plan_evictions(
            jobs,
            schedule=schedule,
            now=now,
            machine_max_vacate_time=machine_max_vacate_time,
            suspend_policy=suspend_policy,
            deadline_at=deadline_at,
        )
    if window_at is None or escalation is Escalation.NONE:
        return planned, promised
    if escalation is Escalation.QUICK and deadline_at is not None and deadline_at <= window_at:
        return planned, promised
    at = max(now, window_at)
    escalated = [
        escalate_eviction(
            job,
            plan,
            escalation=escalation,
            at=at,
            now=now,
            machine_max_vacate_time=machine_max_vacate_time,
            suspend_policy=suspend_policy,
        )
        for job, plan in zip(jobs, planned, strict=True)
    ]
    return escalated, promised


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
