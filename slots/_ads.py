"""Drain estimates computed from slot ads alone.

The master holds ads that are seconds or minutes old; :func:`drain_estimates`
brings them up to ``now``. The agent publishes exactly what this function computes
from its own slot ads, so the two agree at the same instant (to the second: ads
carry whole seconds).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from slots._errors import InvalidRequest
from slots._estimates import (
    Escalation,
    Eviction,
    JobTiming,
    Phase,
    Schedule,
    SuspendPolicy,
    clamp,
    estimate,
    plan_drain,
    promise_cut,
)
from slots._states import ACTIVE, Activity

__all__ = [
    "EXPECTED_ATTRIBUTES",
    "ad_blockers",
    "check_estimate_inputs",
    "drain_estimates",
    "finite_number",
]

_NAMES = {
    Schedule.GRACEFUL: "Graceful",
    Schedule.QUICK: "Quick",
    Schedule.FAST: "Fast",
}

#: The six attributes :func:`drain_estimates` returns.
EXPECTED_ATTRIBUTES = tuple(
    f"ExpectedMachine{_NAMES[s]}Draining{kind}"
    for s in Schedule
    for kind in ("Completion", "Badput")
)

#: :data:`~slots.ACTIVE` as the strings an ad writes (a set lookup, no enum made).
ACTIVE_NAMES = frozenset((str(state), str(activity)) for state, activity in ACTIVE)
#: What :func:`machine_inputs` reads: the vacate time, the policy, the deadline in force.
MachineInputs = tuple[int, SuspendPolicy, float | None]
_ACTIVITIES = {str(activity): activity for activity in Activity}

_PHASES = {
    Activity.BUSY: Phase.RUNNING,
    Activity.RETIRING: Phase.RUNNING,
    Activity.SUSPENDED: Phase.SUSPENDED,
    Activity.VACATING: Phase.VACATING,
    Activity.KILLING: Phase.KILLING,
}


def drain_estimates(
    slot_ads: Iterable[Mapping[str, Any]],
    now: float,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """The six ``ExpectedMachine*`` values of a machine, from its slot ads, at ``now``.

    Each ad's ``TotalJobRunTime`` is as of its ``MyCurrentTime``; running jobs
    (Busy, Retiring) are brought forward to ``now``, suspended ones stay frozen,
    vacating ones count down ``VacateTimeRemaining``. Uses ``Cpus``, ``State``,
    ``Activity``, ``MaxJobRetirementTime`` (the job's effective value),
    ``JobMaxVacateTime`` (when the job set one), ``MachineMaxVacateTime``,
    ``AcceptedWhileDraining``, ``DrainSuspendedJobs`` and, while a drain runs,
    ``DrainingDeadline``. ``previous`` holds the last published completion values
    (the sticky idle rule). Values are whole seconds (cpu-seconds for badput),
    clamped to 2147483647.
    """
    whole = math.floor(now)
    ads = list(slot_ads)
    machine_vacate, policy, deadline_at = machine_inputs(ads)
    jobs = [_timing(ad, whole) for ad in ads if active(ad)]
    result: dict[str, int] = {}
    for schedule in Schedule:
        name = _NAMES[schedule]
        completion_attr = f"ExpectedMachine{name}DrainingCompletion"
        before = None if previous is None else previous.get(completion_attr)
        value = estimate(
            jobs,
            schedule=schedule,
            now=whole,
            machine_max_vacate_time=machine_vacate,
            suspend_policy=policy,
            deadline_at=deadline_at,
            previous=before,
        )
        result[completion_attr] = clamp(value.completion)
        result[f"ExpectedMachine{name}DrainingBadput"] = clamp(value.badput)
    return result


#: What the arithmetic reads as numbers, in a slot ad or the machine ad (absent: a default).
_NUMBERS = (
    "Cpus",
    "TotalJobRunTime",
    "MyCurrentTime",
    "MaxJobRetirementTime",
    "JobMaxVacateTime",
    "VacateTimeRemaining",
    "MachineMaxVacateTime",
    "DrainingDeadline",
    *(f"ExpectedMachine{name}DrainingCompletion" for name in _NAMES.values()),
)
_POLICIES = frozenset(str(policy) for policy in SuspendPolicy)


def finite_number(value: object) -> bool:
    """Whether ``value`` is an int or a float whose value as a float is finite (an int
    too large for a float is not: the arithmetic, in floats, cannot read it)."""
    if type(value) is not int and type(value) is not float:
        return False  # bool too
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond a float's range
        return False


def check_estimate_inputs(ads: Iterable[Mapping[str, Any]]) -> None:
    """Raise :class:`~slots.InvalidRequest` unless :func:`drain_estimates` can read ``ads``.

    Every attribute the arithmetic reads as a number must be a finite number (or absent,
    or ``None`` = undefined), and ``DrainSuspendedJobs`` one of the policies. A master
    checks every ad it takes, so that one node's ad cannot break a plan.
    """
    for ad in ads:
        for name in _NUMBERS:
            value = ad.get(name)
            if value is None:
                continue
            try:  # as finite_number, inline: a call per value costs 5 µs an agent's ad
                finite = type(value) in (int, float) and math.isfinite(value)
            except OverflowError:  # an int beyond a float's range
                finite = False
            if not finite:
                raise InvalidRequest(
                    f"{ad.get('Name', 'an ad')}: {name} must be a finite number, not {value!r}"
                )
        policy = ad.get("DrainSuspendedJobs")
        if policy is not None and policy not in _POLICIES:
            raise InvalidRequest(
                f"{ad.get('Name', 'an ad')}: DrainSuspendedJobs must be one of "
                f"{', '.join(sorted(_POLICIES))}, not {policy!r}"
            )


def machine_inputs(ads: Sequence[Mapping[str, Any]]) -> MachineInputs:
    """MachineMaxVacateTime, the suspended-jobs policy and the drain deadline in force."""
    for ad in ads:
        if "MachineMaxVacateTime" in ad:
            deadline_at = None
            if ad.get("DrainState") in ("draining", "drained"):
                deadline_at = ad.get("DrainingDeadline")
            policy = SuspendPolicy(ad.get("DrainSuspendedJobs", SuspendPolicy.KEEP))
            return int(ad["MachineMaxVacateTime"]), policy, deadline_at
    return 600, SuspendPolicy.KEEP, None


def window_second(window_start: float | None) -> int | None:
    """The whole second at which an escalation at ``window_start`` acts, as ads carry it.

    The master's drain is given its deadline at the window start, and the agent
    publishes ``DrainingDeadline`` in whole seconds (truncated), so the figures read the
    escalation at that second. Raises :class:`~slots.InvalidRequest` for a window start
    that is not a finite number.
    """
    if window_start is None:
        return None
    if isinstance(window_start, bool) or not isinstance(window_start, int | float):
        raise InvalidRequest(f"a window start must be a number, not {window_start!r}")
    if not math.isfinite(window_start):
        raise InvalidRequest(f"a window start must be finite, not {window_start!r}")
    return math.floor(window_start)


def ad_blockers(
    slot_ads: Iterable[Mapping[str, Any]],
    now: float,
    schedule: Schedule = Schedule.GRACEFUL,
    *,
    window_start: float | None = None,
    escalation: Escalation = Escalation.NONE,
) -> list[dict[str, Any]]:
    """The jobs a drain of ``schedule`` would wait for, from slot ads, at ``now``.

    The drain is the one in force (its ``DrainingDeadline`` applies) or one started at
    ``now``; with ``window_start``, the escalation at the window start acts on it too,
    exactly as :func:`~slots.drain_verdicts` plans it (:func:`~slots.plan_drain`). Latest
    ``gone_by`` first, as the agent's own blockers; each entry names the slot, job, owner
    and cpus, and gives in whole seconds: run, retirement remaining, vacate, ``evict_at``
    (soft kill) and ``gone_by`` (hard kill) as planned; ``promise_end``, when the job would
    be gone had it kept its retirement promise (a graceful drain with no deadline and no
    escalation); and which promise the drain breaks: ``cut_by`` (seconds of the promise
    lost, ``promise_end − evict_at``: for a running job, its ``RetirementTimeRemaining``
    at the cut) and ``cut_badput`` (cpu-seconds: ``Cpus · run`` at the cut), both 0 when
    the promise is kept (see :class:`~slots.Cut`).
    """
    whole = math.floor(now)
    everything = list(slot_ads)
    ads = [ad for ad in everything if active(ad)]
    machine_vacate, policy, deadline_at = machine_inputs(everything)
    jobs = [_timing(ad, whole) for ad in ads]
    planned, promised = plan_drain(
        jobs,
        now=whole,
        machine_max_vacate_time=machine_vacate,
        suspend_policy=policy,
        deadline_at=deadline_at,
        schedule=schedule,
        window_at=window_second(window_start),
        escalation=escalation,
    )
    rows = [
        _blocker_row(ad, job=job, plan=plan, promise=promise, now=whole, policy=policy)
        for ad, job, plan, promise in sorted(
            zip(ads, jobs, planned, promised, strict=True),
            key=lambda four: -four[2].hard_kill_at,
        )
    ]
    return rows


def _blocker_row(
    ad: Mapping[str, Any],
    *,
    job: JobTiming,
    plan: Eviction,
    promise: Eviction,
    now: int,
    policy: SuspendPolicy,
) -> dict[str, Any]:
    cut = promise_cut(job, plan, promise, now=now, suspend_policy=policy)
    return {
        "slot": ad.get("Name"),
        "claim_id": ad.get("ClaimId"),
        "job_id": ad.get("JobId"),
        "owner": ad.get("RemoteOwner"),
        "cpus": job.cpus,
        "activity": ad.get("Activity"),
        "run": int(job.run),
        "retirement_remaining": int(plan.retirement_remaining),
        "vacate": int(plan.vacate),
        "evict_at": None if plan.soft_kill_at is None else clamp(plan.soft_kill_at),
        "gone_by": clamp(plan.hard_kill_at),
        "promise_end": clamp(promise.hard_kill_at),
        "cut_by": clamp(cut.by),
        "cut_badput": clamp(cut.badput),
        "accepted_while_draining": job.accepted_while_draining,
    }


def active(ad: Mapping[str, Any]) -> bool:
    if ad.get("PartitionableSlot") is True or ad.get("SlotType") == "Partitionable":
        return False
    return (str(ad.get("State")), str(ad.get("Activity"))) in ACTIVE_NAMES


class JobInputs(NamedTuple):
    """What the arithmetic reads from one active slot ad, before it is brought to ``now``.

    ``run`` and ``vacate_left`` are as of ``as_of`` (the ad's ``MyCurrentTime``; ``None``
    when the ad has none, and then the ad is taken as current at any ``now``). A named
    tuple: a forecast's piece reads one per job, and a frozen dataclass took three times
    as long to make (≈ 3 µs against 1).
    """

    phase: Phase
    activity: str
    cpus: int
    run: int
    as_of: int | None
    max_job_retirement_time: int
    job_max_vacate_time: int | None
    vacate_left: int
    accepted_while_draining: bool

    def at(self, whole: int) -> JobTiming:
        """The job's timing at the whole second ``whole``."""
        elapsed = 0 if self.as_of is None else max(0, whole - self.as_of)
        run = self.run + elapsed if self.phase is Phase.RUNNING else self.run
        left = 0
        if self.phase is Phase.VACATING:
            left = max(0, self.vacate_left - elapsed)
        return JobTiming(
            cpus=self.cpus,
            run=run,
            max_job_retirement_time=self.max_job_retirement_time,
            job_max_vacate_time=self.job_max_vacate_time,
            phase=self.phase,
            vacate_remaining=left,
            accepted_while_draining=self.accepted_while_draining,
        )


#: The activities of an active job, numbered by their place here in packed jobs.
_JOB_ACTIVITIES = tuple(_PHASES)
_JOB_CODES = {str(activity): code for code, activity in enumerate(_JOB_ACTIVITIES)}
#: The integers a packed job takes (:func:`jobs_flat`): its activity's number, its
#: flags, then ``cpus``, ``run``, ``as_of``, ``max_job_retirement_time``,
#: ``job_max_vacate_time`` and ``vacate_left`` (0 for a ``None`` its flags name).
JOB_FIELDS = 8
_NO_AS_OF, _NO_JOB_VACATE, _ACCEPTED = 1, 2, 4
_INTEGERS = frozenset({int})


def jobs_of(ads: Iterable[Mapping[str, Any]]) -> list[JobInputs]:
    """The inputs of the active jobs of a node's slot ads, in the ads' order."""
    return [job_inputs(ad) for ad in ads if active(ad)]


def jobs_flat(jobs: Iterable[JobInputs]) -> list[int]:
    """Jobs' inputs as :data:`JOB_FIELDS` integers each, one job after the other:
    what :func:`jobs_from_flat` reads back."""
    flat: list[int] = []
    for job in jobs:
        as_of, vacate = job.as_of, job.job_max_vacate_time
        flags = (
            (_NO_AS_OF if as_of is None else 0)
            | (_NO_JOB_VACATE if vacate is None else 0)
            | (_ACCEPTED if job.accepted_while_draining else 0)
        )
        flat += (
            _JOB_CODES[job.activity],
            flags,
            job.cpus,
            job.run,
            0 if as_of is None else as_of,
            job.max_job_retirement_time,
            0 if vacate is None else vacate,
            job.vacate_left,
        )
    return flat


def jobs_from_flat(flat: Iterable[int]) -> list[JobInputs]:
    """The jobs' inputs :func:`jobs_flat` wrote."""
    values = iter(flat)
    jobs = []
    for code, flags, cpus, run, as_of, retirement, vacate, left in zip(
        *[values] * JOB_FIELDS, strict=True
    ):
        activity = _JOB_ACTIVITIES[code]
        jobs.append(
            JobInputs(
                _PHASES[activity],
                str(activity),
                cpus,
                run,
                None if flags & _NO_AS_OF else as_of,
                retirement,
                None if flags & _NO_JOB_VACATE else vacate,
                left,
                bool(flags & _ACCEPTED),
            )
        )
    return jobs


def jobs_flat_packed(flat: Sequence[Any]) -> array[int] | None:
    """``flat`` as an array of 64-bit integers if it is as :func:`jobs_flat` writes it
    with integers that fit (what :func:`jobs_from_flat` reads and an ingest worker's frame
    carries), else ``None``."""
    if len(flat) % JOB_FIELDS or not set(map(type, flat)) <= _INTEGERS:  # no bool either
        return None
    try:
        packed = array("q", flat)
    except OverflowError:
        return None
    if packed:
        codes, flags = packed[0::JOB_FIELDS], packed[1::JOB_FIELDS]
        if min(codes) < 0 or max(codes) >= len(_JOB_ACTIVITIES):
            return None
        if min(flags) < 0 or max(flags) > _NO_AS_OF | _NO_JOB_VACATE | _ACCEPTED:
            return None
    return packed


def job_inputs(ad: Mapping[str, Any]) -> JobInputs:
    """Read an active slot ad (see :func:`active`)."""
    value = ad["Activity"]
    activity = _ACTIVITIES.get(value) if type(value) is str else None
    if activity is None:
        activity = Activity(value)
    phase = _PHASES[activity]
    as_of = ad.get("MyCurrentTime")
    job_vacate = ad.get("JobMaxVacateTime")
    return JobInputs(
        phase=phase,
        activity=str(activity),
        cpus=int(ad.get("Cpus", 1)),
        run=int(ad.get("TotalJobRunTime", 0)),
        as_of=None if as_of is None else int(as_of),
        max_job_retirement_time=int(ad.get("MaxJobRetirementTime", 0)),
        job_max_vacate_time=None if job_vacate is None else int(job_vacate),
        vacate_left=int(ad.get("VacateTimeRemaining", 0)) if phase is Phase.VACATING else 0,
        accepted_while_draining=ad.get("AcceptedWhileDraining") is True,
    )


def _timing(ad: Mapping[str, Any], whole: int) -> JobTiming:
    return job_inputs(ad).at(whole)
