"""HTCondor's retirement and vacate arithmetic, case by case (DESIGN §3.1)."""

from __future__ import annotations

import pytest

from slots import (
    JobTiming,
    Phase,
    Schedule,
    SuspendPolicy,
    clamp,
    effective_retirement,
    graceful_time,
    plan_eviction,
    retirement_remaining,
    sticky_completion,
    vacate_time,
)


@pytest.mark.parametrize(
    ("machine", "job", "expected"),
    [
        (3600, None, 3600),  # no job value: the machine's
        (3600, 600, 600),  # the job's own lower value wins
        (3600, 7200, 3600),  # a job cannot raise the machine's promise
        (0, 600, 0),
    ],
)
def test_effective_retirement(machine: float, job: float | None, expected: float) -> None:
    assert effective_retirement(machine, job) == expected


@pytest.mark.parametrize(
    ("mjrt", "run", "expected"),
    [
        (3600, 0, 3600),
        (3600, 1000, 2600),
        (3600, 3600, 0),  # exhausted
        (3600, 5000, 0),  # never negative
        (0, 10, 0),
    ],
)
def test_retirement_remaining(mjrt: float, run: float, expected: float) -> None:
    assert retirement_remaining(mjrt, run) == expected


@pytest.mark.parametrize(
    ("vm", "vj", "remaining", "expected"),
    [
        (600, None, 1000, 600),  # no job value: machine's vacate
        (600, 300, 1000, 300),  # lower job value: taken as is
        (600, 600, 1000, 600),
        (600, 900, 1000, 900),  # more than the machine: borrowed from retirement
        (600, 900, 800, 800),  # only as much retirement as remains
        (600, 900, 100, 600),  # never less than the machine's
        (600, 900, 0, 600),
    ],
)
def test_vacate_time(vm: float, vj: float | None, remaining: float, expected: float) -> None:
    assert vacate_time(vm, vj, remaining) == expected


@pytest.mark.parametrize(
    ("remaining", "vacate", "expected"),
    [(3000, 600, 3000), (100, 600, 600), (0, 600, 600), (0, 0, 0)],
)
def test_graceful_time(remaining: float, vacate: float, expected: float) -> None:
    assert graceful_time(remaining, vacate) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (12.9, 12), (2147483647, 2147483647), (2147483648, 2147483647), (1e30, 2147483647)],
)
def test_clamp(value: float, expected: int) -> None:
    assert clamp(value) == expected


@pytest.mark.parametrize(
    ("previous", "now", "expected"),
    [
        (None, 500.0, 500.0),  # first idle computation: now
        (400.0, 500.0, 400.0),  # while idle it does not move
        (900.0, 500.0, 500.0),  # a value in the future becomes now
    ],
)
def test_sticky_completion(previous: float | None, now: float, expected: float) -> None:
    assert sticky_completion(previous, now) == expected


NOW = 10_000.0


def _job(
    *,
    run: float,
    mjrt: float = 3600,
    vj: float | None = None,
    phase: Phase = Phase.RUNNING,
    cpus: int = 1,
    left: float = 0.0,
) -> JobTiming:
    return JobTiming(
        cpus=cpus,
        run=run,
        max_job_retirement_time=mjrt,
        job_max_vacate_time=vj,
        phase=phase,
        vacate_remaining=left,
    )


@pytest.mark.parametrize(
    ("case", "job", "schedule", "policy", "deadline", "soft", "hard", "badput"),
    [
        # graceful: soft kill when R falls to V, hard kill V later (= end of retirement)
        ("retirement longer than vacate", _job(run=1000), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, None, NOW + 2000, NOW + 2600, 1000 + 2600),
        ("retirement shorter than vacate", _job(run=3300), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, None, NOW, NOW + 600, 3300 + 600),
        ("retirement exhausted", _job(run=5000), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, None, NOW, NOW + 600, 5000 + 600),
        ("job's own lower retirement", _job(run=100, mjrt=1000), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, None, NOW + 300, NOW + 900, 100 + 900),
        ("vacate borrowed from retirement", _job(run=1000, vj=900), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, None, NOW + 1700, NOW + 2600, 1000 + 2600),
        ("borrowing capped by what remains", _job(run=2900, vj=900), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, None, NOW, NOW + 700, 2900 + 700),
        ("cpu-weighted badput", _job(run=1000, cpus=4), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, None, NOW + 2000, NOW + 2600, 4 * (1000 + 2600)),
        ("deadline cuts retirement", _job(run=1000), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, NOW + 500, NOW + 500, NOW + 1100, 1000 + 1100),
        ("deadline later than promise", _job(run=1000), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, NOW + 9000, NOW + 2000, NOW + 2600, 1000 + 2600),
        ("deadline passed", _job(run=1000), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, NOW - 5, NOW, NOW + 600, 1000 + 600),
        ("deadline with borrowed vacate", _job(run=1000, vj=900), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, NOW + 500, NOW + 500, NOW + 1400, 1000 + 1400),
        # quick: soft kill now, hard kill after V
        ("quick", _job(run=1000), Schedule.QUICK,
         SuspendPolicy.KEEP, None, NOW, NOW + 600, 1000 + 600),
        ("quick borrows too", _job(run=1000, vj=900), Schedule.QUICK,
         SuspendPolicy.KEEP, None, NOW, NOW + 900, 1000 + 900),
        ("quick with lower job vacate", _job(run=1000, vj=30), Schedule.QUICK,
         SuspendPolicy.KEEP, None, NOW, NOW + 30, 1000 + 30),
        # fast: hard kill now
        ("fast", _job(run=1000, cpus=2), Schedule.FAST,
         SuspendPolicy.KEEP, None, NOW, NOW, 2 * 1000),
        # suspended jobs
        ("suspended, keep: slides", _job(run=1000, phase=Phase.SUSPENDED), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, None, NOW + 2000, NOW + 2600, 1000 + 2600),
        ("suspended, evict: R = 0", _job(run=1000, phase=Phase.SUSPENDED), Schedule.GRACEFUL,
         SuspendPolicy.EVICT, None, NOW, NOW + 600, 1000 + 600),
        ("suspended, resume: as running", _job(run=1000, phase=Phase.SUSPENDED),
         Schedule.GRACEFUL, SuspendPolicy.RESUME, None, NOW + 2000, NOW + 2600, 1000 + 2600),
        # already evicting
        ("vacating", _job(run=1000, phase=Phase.VACATING, left=42), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, None, None, NOW + 42, 1000 + 42),
        ("killing", _job(run=1000, phase=Phase.KILLING), Schedule.GRACEFUL,
         SuspendPolicy.KEEP, None, None, NOW, 1000),
    ],
)  # fmt: skip
def test_plan_eviction(
    case: str,
    job: JobTiming,
    schedule: Schedule,
    policy: SuspendPolicy,
    deadline: float | None,
    soft: float | None,
    hard: float,
    badput: float,
) -> None:
    plan = plan_eviction(
        job,
        schedule=schedule,
        now=NOW,
        machine_max_vacate_time=600,
        suspend_policy=policy,
        deadline_at=deadline,
    )
    assert (plan.soft_kill_at, plan.hard_kill_at, plan.badput) == (soft, hard, badput), case


def test_suspended_keep_is_an_estimate_not_a_timer() -> None:
    suspended = _job(run=1000, phase=Phase.SUSPENDED)
    plan = plan_eviction(
        suspended, schedule=Schedule.GRACEFUL, now=NOW, machine_max_vacate_time=600
    )
    assert plan.firm is False
    running = _job(run=1000)
    assert plan_eviction(
        running, schedule=Schedule.GRACEFUL, now=NOW, machine_max_vacate_time=600
    ).firm


def test_suspension_slides_the_estimate() -> None:
    """A suspended job's promise moves with time; a running one's does not."""
    suspended = _job(run=1000, phase=Phase.SUSPENDED)
    running = _job(run=1000)
    later = _job(run=1100)

    def gone(job: JobTiming, now: float) -> float:
        return plan_eviction(
            job, schedule=Schedule.GRACEFUL, now=now, machine_max_vacate_time=600
        ).hard_kill_at

    assert gone(suspended, NOW + 100) - gone(suspended, NOW) == 100
    assert gone(later, NOW + 100) == gone(running, NOW)
