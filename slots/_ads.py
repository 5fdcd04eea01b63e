"""Drain estimates computed from slot ads alone.

The master holds ads that are seconds or minutes old; :func:`drain_estimates`
brings them up to ``now``. The agent publishes exactly what this function computes
from its own slot ads, so the two agree at the same instant (to the second: ads
carry whole seconds).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from slots._estimates import JobTiming, Phase, Schedule, SuspendPolicy, clamp, estimate
from slots._states import ACTIVE, Activity, State

__all__ = ["EXPECTED_ATTRIBUTES", "drain_estimates"]

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
    machine_vacate = 600
    policy = SuspendPolicy.KEEP
    deadline_at: float | None = None
    for ad in ads:
        if "MachineMaxVacateTime" in ad:
            machine_vacate = int(ad["MachineMaxVacateTime"])
            policy = SuspendPolicy(ad.get("DrainSuspendedJobs", SuspendPolicy.KEEP))
            if ad.get("DrainState") in ("draining", "drained"):
                deadline_at = ad.get("DrainingDeadline")
            break
    jobs = [_timing(ad, whole) for ad in ads if _active(ad)]
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


def _active(ad: Mapping[str, Any]) -> bool:
    if ad.get("PartitionableSlot") is True or ad.get("SlotType") == "Partitionable":
        return False
    try:
        pair = (State(str(ad.get("State"))), Activity(str(ad.get("Activity"))))
    except ValueError:
        return False
    return pair in ACTIVE


def _timing(ad: Mapping[str, Any], whole: int) -> JobTiming:
    activity = Activity(ad["Activity"])
    phase = _PHASES[activity]
    elapsed = max(0, whole - int(ad.get("MyCurrentTime", whole)))
    run = int(ad.get("TotalJobRunTime", 0))
    if phase is Phase.RUNNING:
        run += elapsed
    left = 0
    if phase is Phase.VACATING:
        left = max(0, int(ad.get("VacateTimeRemaining", 0)) - elapsed)
    job_vacate = ad.get("JobMaxVacateTime")
    return JobTiming(
        cpus=int(ad.get("Cpus", 1)),
        run=run,
        max_job_retirement_time=int(ad.get("MaxJobRetirementTime", 0)),
        job_max_vacate_time=None if job_vacate is None else int(job_vacate),
        phase=phase,
        vacate_remaining=left,
        accepted_while_draining=ad.get("AcceptedWhileDraining") is True,
    )
