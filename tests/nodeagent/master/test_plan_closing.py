"""When the master's just-in-time drain closes a scheduled machine (nodeagent.master._plan):
by its retirement time for a node that admits any promise, by its vacate times for one
that admits by promise and holds the window; what the window costs in closed capacity;
the notices a plan row shows."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nodeagent.master._adstore import AdEntry, AdStore
from nodeagent.master._maintenance import MachineId
from nodeagent.master._notices import Answer, Notice, NoticeClaim, NoticeWindow, Verdict
from nodeagent.master._plan import (
    MachinePlan,
    PlanPolicy,
    PlanTotals,
    ScheduledMachine,
    machine_plan,
    plan_row,
    row_dict,
    row_figures,
    row_state,
)
from slots import BeforeWindow, JobSpec, Machine, MachinePolicy, Resources

EPOCH = 1_800_000_000.0
#: The window: ten minutes after EPOCH, the node's retirement time an hour.
W = EPOCH + 600
MJRT, VACATE, MARGIN = 3600, 120, 60


@dataclass(frozen=True, kw_only=True)
class Case:
    """A node (its admission, the window it holds, its jobs' vacate times) and when the
    plan says it closes."""

    admission: BeforeWindow | None = BeforeWindow.REFUSE  # None: its ad does not say
    held: float | None = W  # the window's start the node holds (None: none)
    job_vacate: int | None = None  # one job asking for this vacate time
    now: float = EPOCH
    since: float | None = None  # when the machine entered its window (None: not known)
    by: str = "vacate"
    seconds: float = VACATE
    by_promise: bool = True


CASES = {
    "refuse, the window held: its vacate time": Case(),
    "shorten, the window held: its vacate time": Case(admission=BeforeWindow.SHORTEN),
    "admit: its retirement time": Case(
        admission=BeforeWindow.ADMIT, by="retirement", seconds=MJRT, by_promise=False
    ),
    "an older agent that does not say: its retirement time": Case(
        admission=None, by="retirement", seconds=MJRT, by_promise=False
    ),
    "refuse, no window heard of yet: its retirement time": Case(
        held=None, by="retirement", seconds=MJRT, by_promise=False
    ),
    "refuse, a later window held (moved earlier since): its retirement time": Case(
        held=W + 300, by="retirement", seconds=MJRT, by_promise=False
    ),
    "refuse, an earlier window held (moved later since): its vacate time": Case(held=W - 300),
    "refuse, not heard of yet but scheduled a minute ago: its vacate time": Case(
        held=None, since=EPOCH - 60
    ),
    "refuse, a later window held, moved a minute ago: its vacate time": Case(
        held=W + 300, since=EPOCH - 60
    ),
    "refuse, not heard of in the ad lifetime: its retirement time": Case(
        held=None, since=EPOCH - 300, by="retirement", seconds=MJRT, by_promise=False
    ),
    "admit, scheduled a minute ago: its retirement time": Case(
        admission=BeforeWindow.ADMIT,
        since=EPOCH - 60,
        by="retirement",
        seconds=MJRT,
        by_promise=False,
    ),
    "refuse, a window held that has started (the node admits by none): retirement": Case(
        held=W - 300, now=W - 200, by="retirement", seconds=MJRT, by_promise=False
    ),
    # a job that borrows vacate time borrows it from its promise, which ends by the window
    "refuse, a job that borrows a longer vacate time: still the machine's": Case(job_vacate=900),
    "refuse, a job with a shorter vacate time: the machine's": Case(job_vacate=30),
    "admit, a job that borrows a longer vacate time: still retirement": Case(
        admission=BeforeWindow.ADMIT,
        job_vacate=900,
        by="retirement",
        seconds=MJRT,
        by_promise=False,
    ),
}


def node(case: Case, *, mjrt: int = MJRT) -> AdEntry:
    machine = Machine(
        host="n.test",
        ip="10.0.0.1",
        address="http://10.0.0.1:9621",
        total=Resources(cpus=8),
        policy=MachinePolicy(
            max_job_retirement_time=mjrt,
            machine_max_vacate_time=VACATE,
            before_window=case.admission or BeforeWindow.REFUSE,
        ),
        now=EPOCH - 100,
    )
    if case.job_vacate is not None:
        machine.claim(
            EPOCH - 100,
            resources=Resources(cpus=2),
            spec=JobSpec(job_id="j1", job_max_vacate_time=case.job_vacate),
        )
    if case.held is not None:
        machine.set_maintenance("DRAINING", {"Start": int(case.held)})
    ad = machine.ad(EPOCH)
    if case.admission is None:
        for each in (ad["machine"], *ad["slots"]):
            del each["BeforeWindow"]
    return AdStore(lifetime=100_000).update(ad, EPOCH)


def scheduled(window: float = W) -> ScheduledMachine:
    return ScheduledMachine(
        key="n.test|10.0.0.1",
        id=MachineId(hostname="n.test", ip="10.0.0.1"),
        mode="DRAINING",
        window_start=window,
    )


def plan_of(entry: AdEntry, *, now: float, since: float | None = None) -> MachinePlan:
    return machine_plan(
        scheduled(),
        [entry],
        is_lost=lambda _: False,
        now=now,
        policy=PlanPolicy(drain_margin=MARGIN, hears_within=300),
        drain_record=None,
        window_since=since,
    )


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_the_drain_starts_as_late_as_the_node_s_admission_allows(case: Case) -> None:
    plan = plan_of(node(case), now=case.now, since=case.since)
    closing = plan.closing
    assert closing is not None
    assert plan.drain_start == W - MARGIN - case.seconds
    assert (closing.by, closing.seconds, closing.by_promise) == (
        case.by,
        case.seconds,
        case.by_promise,
    )
    assert closing.admission == (None if case.admission is None else str(case.admission))
    holds = (
        case.held is not None
        and case.now < case.held <= W
        and case.admission
        in (
            BeforeWindow.REFUSE,
            BeforeWindow.SHORTEN,
        )
    )
    assert closing.holds_window is holds


def test_a_retirement_time_shorter_than_the_vacate_time_is_said_to_be_the_vacate_time() -> None:
    plan = plan_of(node(Case(admission=BeforeWindow.ADMIT), mjrt=60), now=EPOCH)
    assert plan.closing is not None
    assert (plan.closing.by, plan.closing.seconds) == ("vacate", VACATE)


def test_the_row_says_when_the_machine_closes_and_what_each_admission_costs() -> None:
    plan = plan_of(node(Case()), now=EPOCH)
    row = plan_row(plan, EPOCH, is_lost=lambda _: False)
    assert row["planned_drain_start"] == W - MARGIN - VACATE
    assert row["closing"] == {
        "admission": "refuse",
        "holds_window": True,
        "by_promise": True,
        "by": "vacate",
        "seconds": VACATE,
        # 8 cores closed for the margin and the bound: an hour and a minute, or 3 minutes
        "closed_core_hours": {
            "admit": round(8 * (MARGIN + MJRT) / 3600, 3),
            "refuse": round(8 * (MARGIN + VACATE) / 3600, 3),
            "shorten": round(8 * (MARGIN + VACATE) / 3600, 3),
        },
    }


def test_the_totals_add_up_the_closed_capacity_as_planned_and_under_each_admission() -> None:
    totals = PlanTotals(EPOCH)
    for case in (Case(), Case(admission=BeforeWindow.ADMIT)):
        plan = plan_of(node(case), now=EPOCH)
        state = row_state(
            plan,
            is_lost=lambda _: False,
            with_blockers=False,
            window_since=None,
            escalation="quick",
        )
        totals.add(plan, row_figures(plan, state, EPOCH))
    by_promise, admit = 8 * (MARGIN + VACATE) / 3600, 8 * (MARGIN + MJRT) / 3600
    assert totals.to_json()["closed_core_hours"] == {
        "planned": round(by_promise + admit, 3),
        "admit": round(2 * admit, 3),
        "refuse": round(2 * by_promise, 3),
        "shorten": round(2 * by_promise, 3),
    }


def _notice(group: str, answer: Answer | None, *, ends: tuple[float, ...]) -> Notice:
    return Notice(
        id=f"n-{group}",
        machine="n.test",
        group=group,
        window=NoticeWindow(start=W),
        claims=tuple(
            NoticeClaim(slot=f"slot1_{i}@n.test", job_id=f"{group}.{i}", promise_end=end)
            for i, end in enumerate(ends, 1)
        ),
        issued=EPOCH - 50,
        answer=answer,
    )


def test_the_row_shows_each_notice_with_its_answer_beside_the_promise() -> None:
    declined = Answer(
        verdict=Verdict.DECLINE,
        reason="month-end batch",
        who="alice",
        at=EPOCH - 10,
        expected_completion=W - 200,
    )
    notices = (
        _notice("batch/prod/etl", declined, ends=(W - 300, W - 100)),
        _notice("web/prod/api", None, ends=()),
    )
    plan = plan_of(node(Case()), now=EPOCH)
    state = row_state(
        plan,
        is_lost=lambda _: False,
        with_blockers=False,
        window_since=None,
        escalation="quick",
        notices=notices,
    )
    assert row_dict(plan, state, row_figures(plan, state, EPOCH))["notices"] == [
        {
            "id": "n-batch/prod/etl",
            "group": "batch/prod/etl",
            "issued": EPOCH - 50,
            "claims": 2,
            "promise_end": W - 100,
            "answer": {
                "verdict": "decline",
                "reason": "month-end batch",
                "expected_completion": W - 200,
                "who": "alice",
                "at": EPOCH - 10,
            },
        },
        {
            "id": "n-web/prod/api",
            "group": "web/prod/api",
            "issued": EPOCH - 50,
            "claims": 0,
            "promise_end": None,
            "answer": None,
        },
    ]
