"""The master's drains as a pure model (nodeagent.master._drains): what a pass decides for
one machine, with ``now`` given; the record's table of moves; its stored form; settling
a record left pending and letting one go."""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent._agent_calls import DrainBody
from nodeagent.master._adstore import AdEntry, AdStore
from nodeagent.master._drains import (
    ABSENT,
    DRAIN_MOVES,
    STARTING,
    BringUp,
    Down,
    DrainEvent,
    DrainPhase,
    DrainRecord,
    Escalate,
    IllegalDrainMove,
    MarkDown,
    Postpone,
    Refresh,
    Release,
    RememberLate,
    Start,
    Step,
    Withdraw,
    assigned,
    decide,
    release,
    settle,
)
from nodeagent.master._maintenance import MachineId
from nodeagent.master._plan import MachinePlan, PlanPolicy, ScheduledMachine, machine_plan
from slots import JobSpec, Machine, MachinePolicy, Resources

EPOCH = 1_800_000_000.0
KEY = "n.test|10.0.0.1"
ADDRESS = "http://10.0.0.1:9621"
#: The window of most rows: an hour after EPOCH. The node's one job ends (gracefully) at
#: EPOCH + 600 (its retirement), so its just-in-time drain is due at W - 60 - 600.
W = EPOCH + 3600
DUE = W - 660
QUICK = PlanPolicy()
FAST = PlanPolicy(escalation="fast")
NONE = PlanPolicy(escalation="none")
IMMEDIATE = PlanPolicy(drain_policy="immediate")
UP_AFTER = PlanPolicy(up_after_window=True)


def node_ad(*, jobs: int = 1, made: float = EPOCH, **drain: Any) -> dict[str, Any]:
    """A node's ad made at ``made``: ``jobs`` jobs of one core that retire in 600 s, and
    the drain attributes ``drain`` shows (``DrainState``, ``DrainingRequestId`` …)."""
    machine = Machine(
        host="n.test",
        ip="10.0.0.1",
        address=ADDRESS,
        total=Resources(cpus=4),
        policy=MachinePolicy(max_job_retirement_time=600),
        now=EPOCH - 100,
    )
    for _ in range(jobs):
        machine.claim(EPOCH - 100, resources=Resources(cpus=1), spec=JobSpec())
    ad = machine.ad(EPOCH)
    ad["machine"].update(drain)
    ad["machine"]["MyCurrentTime"] = int(made)
    return ad


def entry_of(ad: dict[str, Any], received: float) -> AdEntry:
    return AdStore(lifetime=100_000).update(ad, received)


def plan_of(
    entry: AdEntry,
    *,
    now: float,
    mode: str = "DRAINING",
    window: float = W,
    duration: float | None = None,
    policy: PlanPolicy = QUICK,
) -> MachinePlan:
    scheduled = ScheduledMachine(
        key=KEY,
        id=MachineId(hostname="n.test", ip="10.0.0.1"),
        mode=mode,
        window_start=window,
        window_seconds=duration,
    )
    return machine_plan(
        scheduled, [entry], is_lost=lambda _: False, now=now, policy=policy, drain_record=None
    )


def ours(**changes: Any) -> DrainRecord:
    """The master's committed drain ``1`` on the node, started before window ``W`` with
    its start as the deadline (what a ``quick`` master starts)."""
    record = DrainRecord(
        node="n.test",
        address=ADDRESS,
        schedule="graceful",
        deadline=600.0,
        started_at=EPOCH,
        window_start=W,
        actor="ops",
        request_id="1",
        phase=DrainPhase.COMMITTED,
        recorded_at=EPOCH,
        committed_at=EPOCH,
    )
    return dataclasses.replace(record, **changes)


#: The node shows drain ``1``, the master's, graceful with the window as its deadline.
SHOWS_OURS = {
    "DrainState": "draining",
    "DrainingRequestId": "1",
    "DrainSchedule": "graceful",
    "DrainingDeadline": int(W),
}


#: The node's machine shuts down: the agent's own drain, reason shutdown (no record).
SHUTTING_DOWN = {
    "ShuttingDown": True,
    "DrainState": "draining",
    "DrainingRequestId": "9",
    "DrainReason": "shutdown",
    "DrainSchedule": "quick",
}


@dataclass(frozen=True, kw_only=True)
class Row:
    """A machine as a pass sees it at ``now``, and the step it decides."""

    now: float
    step: Step | None
    record: DrainRecord | None = None
    shows: dict[str, Any] = field(default_factory=dict)
    jobs: int = 1
    made: float | None = None  # the ad's MyCurrentTime (default: now)
    mode: str = "DRAINING"
    window: float = W
    duration: float | None = None  # the window's (None: it never ends)
    policy: PlanPolicy = QUICK
    all_accepted: bool = False  # every job group on the node accepted its notice


DECISIONS: dict[str, Row] = {
    # Starting: just in time, immediate, or once the window has opened.
    "just in time: not due yet": Row(now=DUE - 1, step=None),
    "just in time: due, graceful with the window as deadline": Row(
        now=DUE, step=Start(schedule="graceful", deadline_at=W, window_start=W, opened=False)
    ),
    # Every job group on the node accepted its notice: freed early, unless told to wait.
    "all accepted: started at once, before its just-in-time start": Row(
        now=DUE - 1000,
        all_accepted=True,
        step=Start(schedule="graceful", deadline_at=W, window_start=W, opened=False, accepted=True),
    ),
    "all accepted, on_all_accepted = wait: not due yet": Row(
        now=DUE - 1000, all_accepted=True, policy=PlanPolicy(on_all_accepted="wait"), step=None
    ),
    "all accepted, due anyway: an ordinary start": Row(
        now=DUE,
        all_accepted=True,
        step=Start(schedule="graceful", deadline_at=W, window_start=W, opened=False),
    ),
    "all accepted, someone else's drain: left alone": Row(
        now=DUE - 1000,
        all_accepted=True,
        shows={"DrainState": "draining", "DrainingRequestId": "9", "DrainSchedule": "graceful"},
        step=None,
    ),
    "all accepted, the master's drain in force: nothing more": Row(
        now=DUE - 1000, all_accepted=True, record=ours(), shows=SHOWS_OURS, step=None
    ),
    "all accepted, an UP machine: nothing": Row(
        now=DUE - 1000, all_accepted=True, mode="UP", step=None
    ),
    "immediate: at once": Row(
        now=EPOCH,
        policy=IMMEDIATE,
        step=Start(schedule="graceful", deadline_at=W, window_start=W, opened=False),
    ),
    "escalation none: graceful without a deadline": Row(
        now=DUE,
        policy=NONE,
        step=Start(schedule="graceful", deadline_at=None, window_start=W, opened=False),
    ),
    "the window opened (the master was down): quick at once": Row(
        now=W + 5, step=Start(schedule="quick", deadline_at=None, window_start=W, opened=True)
    ),
    "the window opened: fast at once": Row(
        now=W + 5,
        policy=FAST,
        step=Start(schedule="fast", deadline_at=None, window_start=W, opened=True),
    ),
    "the window opened, escalation none: graceful": Row(
        now=W + 5,
        policy=NONE,
        step=Start(schedule="graceful", deadline_at=None, window_start=W, opened=True),
    ),
    # Someone else's drain.
    "an administrator's drain in force: left alone": Row(
        now=DUE, shows={"DrainState": "draining", "DrainingRequestId": "7"}, step=None
    ),
    "someone else's drain at the window: left alone": Row(
        now=W + 5, shows={"DrainState": "draining", "DrainingRequestId": "7"}, step=None
    ),
    "a record of ours, another's drain on the node: left alone": Row(
        now=W + 5,
        record=ours(),
        shows={"DrainState": "draining", "DrainingRequestId": "7"},
        step=None,
    ),
    # Ours, before the window: whether its jobs outlast it.
    "ours before the window, on time, as recorded": Row(
        now=DUE + 10, record=ours(), shows=SHOWS_OURS, step=None
    ),
    "ours before a near window: late, remembered": Row(
        now=EPOCH + 10,
        window=EPOCH + 300,
        record=ours(window_start=EPOCH + 300),
        shows=SHOWS_OURS,
        step=RememberLate(late=True),
    ),
    "ours before a near window: late, known already": Row(
        now=EPOCH + 10,
        window=EPOCH + 300,
        record=ours(window_start=EPOCH + 300, late=True),
        shows=SHOWS_OURS,
        step=None,
    ),
    "ours, late no more (the node emptied)": Row(
        now=EPOCH + 10,
        window=EPOCH + 300,
        jobs=0,
        record=ours(window_start=EPOCH + 300, late=True),
        shows=SHOWS_OURS,
        step=RememberLate(late=False),
    ),
    # Ours, at the window: escalation.
    "quick: the deadline evicts at the window, no call": Row(
        now=W + 1, record=ours(), shows=SHOWS_OURS, step=Escalate(replace_with=None)
    ),
    "quick: a quick drain evicts already": Row(
        now=W + 1,
        record=ours(schedule="quick", deadline=None),
        shows={**SHOWS_OURS, "DrainSchedule": "quick", "DrainingDeadline": None},
        step=Escalate(replace_with=None),
    ),
    "quick: no deadline (another policy started it): replaced": Row(
        now=W + 1,
        record=ours(deadline=None),
        shows={**SHOWS_OURS, "DrainingDeadline": None},
        step=Escalate(replace_with="quick"),
    ),
    "quick: a deadline after the window (it moved earlier): replaced": Row(
        now=EPOCH + 1801,
        window=EPOCH + 1800,
        record=ours(),
        shows=SHOWS_OURS,
        step=Escalate(replace_with="quick"),
    ),
    "quick: the ad a second past the window, the record's own deadline: no call": Row(
        now=W + 1,
        record=ours(),
        shows={**SHOWS_OURS, "DrainingDeadline": int(W) + 1},
        step=Escalate(replace_with=None),
    ),
    "fast: a graceful drain is replaced": Row(
        now=W + 1, policy=FAST, record=ours(), shows=SHOWS_OURS, step=Escalate(replace_with="fast")
    ),
    "fast: a fast drain evicts already": Row(
        now=W + 1,
        policy=FAST,
        record=ours(schedule="fast", deadline=None),
        shows={**SHOWS_OURS, "DrainSchedule": "fast", "DrainingDeadline": None},
        step=Escalate(replace_with=None),
    ),
    "none: nothing at the window": Row(
        now=W + 1, policy=NONE, record=ours(), shows=SHOWS_OURS, step=None
    ),
    "escalated already: nothing": Row(
        now=W + 1, record=ours(escalated=True), shows=SHOWS_OURS, step=None
    ),
    "empty at the window, late: its deadline evicted, escalated": Row(
        now=W + 1,
        jobs=0,
        record=ours(late=True),
        shows={**SHOWS_OURS, "DrainState": "drained"},
        step=Escalate(replace_with=None),
    ),
    "empty at the window, not late: nothing to escalate": Row(
        now=W + 1,
        jobs=0,
        record=ours(),
        shows={**SHOWS_OURS, "DrainState": "drained"},
        step=None,
    ),
    # The window moved later than the drain's deadline.
    "moved later, not due under it: withdrawn": Row(
        now=EPOCH + 10,
        window=EPOCH + 7200,
        record=ours(),
        shows=SHOWS_OURS,
        step=Withdraw(request_id="1", due_at=EPOCH + 7200 - 660),
    ),
    "moved later, due under it: postponed": Row(
        now=EPOCH + 7200 - 600,
        window=EPOCH + 7200,
        record=ours(),
        shows=SHOWS_OURS,
        step=Postpone(window_start=EPOCH + 7200),
    ),
    "moved later, escalated already: left as it is": Row(
        now=EPOCH + 10,
        window=EPOCH + 7200,
        record=ours(escalated=True),
        shows=SHOWS_OURS,
        step=None,
    ),
    "moved later, no deadline: nothing to relax": Row(
        now=EPOCH + 10,
        window=EPOCH + 7200,
        record=ours(deadline=None),
        shows={**SHOWS_OURS, "DrainingDeadline": None},
        step=None,
    ),
    # DOWN.
    "down: the master's fast drain": Row(now=EPOCH, mode="DOWN", step=Down()),
    "down over someone else's drain": Row(
        now=EPOCH,
        mode="DOWN",
        shows={"DrainState": "draining", "DrainingRequestId": "7"},
        step=Down(),
    ),
    "down over our graceful drain": Row(
        now=EPOCH, mode="DOWN", record=ours(), shows=SHOWS_OURS, step=Down()
    ),
    "down, our fast drain in force (its save was lost): marked down": Row(
        now=EPOCH,
        mode="DOWN",
        record=ours(schedule="fast", deadline=None),
        shows={**SHOWS_OURS, "DrainSchedule": "fast"},
        step=MarkDown(),
    ),
    "down, recorded: nothing": Row(
        now=EPOCH,
        mode="DOWN",
        record=ours(schedule="fast", down=True),
        shows={**SHOWS_OURS, "DrainSchedule": "fast"},
        step=None,
    ),
    # After the window: UP by itself only with up_after_window, once the node is healthy.
    "down after its window, Mesos's way: stays down": Row(
        now=W + 601,
        mode="DOWN",
        duration=600,
        record=ours(schedule="fast", down=True),
        shows={**SHOWS_OURS, "DrainSchedule": "fast", "DrainState": "drained"},
        step=None,
    ),
    "up_after_window, the window not ended: stays down": Row(
        now=W + 599,
        mode="DOWN",
        duration=600,
        policy=UP_AFTER,
        record=ours(schedule="fast", down=True),
        shows={**SHOWS_OURS, "DrainSchedule": "fast", "HealthState": "passing"},
        step=None,
    ),
    "up_after_window, ended, health passing: up": Row(
        now=W + 600,
        mode="DOWN",
        duration=600,
        policy=UP_AFTER,
        record=ours(schedule="fast", down=True),
        shows={**SHOWS_OURS, "DrainSchedule": "fast", "HealthState": "passing"},
        step=BringUp(window_end=W + 600),
    ),
    "up_after_window, ended, no health check: up": Row(
        now=W + 900,
        mode="DOWN",
        duration=600,
        policy=UP_AFTER,
        record=ours(schedule="fast", down=True),
        shows={**SHOWS_OURS, "DrainSchedule": "fast"},
        step=BringUp(window_end=W + 600),
    ),
    "up_after_window, ended, health failing: stays down": Row(
        now=W + 900,
        mode="DOWN",
        duration=600,
        policy=UP_AFTER,
        record=ours(schedule="fast", down=True),
        shows={**SHOWS_OURS, "DrainSchedule": "fast", "HealthState": "failing"},
        step=None,
    ),
    "up_after_window, ended, health pending: stays down": Row(
        now=W + 900,
        mode="DOWN",
        duration=600,
        policy=UP_AFTER,
        record=ours(schedule="fast", down=True),
        shows={**SHOWS_OURS, "DrainSchedule": "fast", "HealthState": "pending"},
        step=None,
    ),
    "up_after_window, a window without an end: stays down": Row(
        now=W + 10**6,
        mode="DOWN",
        policy=UP_AFTER,
        record=ours(schedule="fast", down=True),
        shows={**SHOWS_OURS, "DrainSchedule": "fast", "HealthState": "passing"},
        step=None,
    ),
    "up_after_window, DRAINING after its window: never brought up": Row(
        now=W + 900,
        duration=600,
        policy=dataclasses.replace(UP_AFTER, escalation="none"),
        record=ours(),
        shows={**SHOWS_OURS, "HealthState": "passing"},
        step=None,
    ),
    "up_after_window, a rolling operation's DOWN machine: its engine's": Row(
        now=W + 900,
        mode="DOWN",
        duration=600,
        policy=UP_AFTER,
        record=ours(operation="op-1"),
        shows={**SHOWS_OURS, "HealthState": "passing"},
        step=None,
    ),
    # Records a pass leaves alone.
    "a record left pending: settled first": Row(
        now=W + 1, record=ours(phase=DrainPhase.PENDING, committed_at=None), step=None
    ),
    "a rolling operation's record: its engine's": Row(
        now=W + 1,
        record=ours(operation="op-1"),
        shows={**SHOWS_OURS, "DrainingDeadline": None},
        step=None,
    ),
    "a rolling operation's record to be started: its engine's": Row(
        now=W + 1,
        record=assigned(KEY, node="n.test", address=ADDRESS, actor="ops", operation="op-1"),
        step=None,
    ),
    # An ad older than the record: never a second drain from it.
    "a stale ad before the window: nothing (no second start)": Row(
        now=DUE + 10, made=EPOCH - 10, record=ours(), step=None
    ),
    "a stale ad at the window: the node is asked": Row(
        now=W + 1, made=EPOCH - 10, record=ours(), step=Refresh()
    ),
    "a stale ad at the window, escalated already: nothing": Row(
        now=W + 1, made=EPOCH - 10, record=ours(escalated=True), step=None
    ),
    "a stale ad of a near window: late remembered": Row(
        now=EPOCH + 10,
        made=EPOCH - 10,
        window=EPOCH + 300,
        record=ours(window_start=EPOCH + 300),
        step=RememberLate(late=True),
    ),
    "an ad made after the commit that shows no drain: it is gone, started again": Row(
        now=DUE + 10,
        made=EPOCH + 5,
        record=ours(),
        step=Start(schedule="graceful", deadline_at=W, window_start=W, opened=False),
    ),
    # A node whose machine shuts down: its agent's drain (reason shutdown) is in force;
    # the master starts, escalates and replaces nothing on it, window or not.
    "shutting down before its drain is due: nothing": Row(
        now=DUE - 1, shows=SHUTTING_DOWN, step=None
    ),
    "shutting down when its drain is due: no start": Row(now=DUE, shows=SHUTTING_DOWN, step=None),
    "shutting down, all accepted: no start": Row(
        now=DUE - 1000, all_accepted=True, shows=SHUTTING_DOWN, step=None
    ),
    "shutting down as the window opens: no start": Row(
        now=W + 5, shows=SHUTTING_DOWN, policy=FAST, step=None
    ),
    "shutting down, the master's record of an earlier drain: no escalation": Row(
        now=W + 1, record=ours(), shows=SHUTTING_DOWN, step=None
    ),
    "shutting down under the master's own drain id: no escalation": Row(
        now=W + 1, record=ours(), shows={**SHUTTING_DOWN, "DrainingRequestId": "1"}, step=None
    ),
    "shutting down, the window moved later: no withdrawal": Row(
        now=DUE - 100,
        record=ours(window_start=W - 600),
        shows={**SHUTTING_DOWN, "DrainingRequestId": "1"},
        step=None,
    ),
    "shutting down, a stale ad at the window: not asked": Row(
        now=W + 1, made=EPOCH - 10, record=ours(), shows=SHUTTING_DOWN, step=None
    ),
    "shutting down, DOWN: its drain is not replaced by a fast one": Row(
        now=W + 1, mode="DOWN", shows=SHUTTING_DOWN, step=None
    ),
    "back after the reboot, no drain: started at once in its window": Row(
        now=W + 5,
        shows={"DrainState": "none"},
        step=Start(schedule="quick", deadline_at=None, window_start=W, opened=True),
    ),
    "an older master's record (no phase) is ours": Row(
        now=W + 1,
        record=DrainRecord(node="n.test", request_id="1", window_start=W),
        shows={**SHOWS_OURS, "DrainingDeadline": None},
        step=Escalate(replace_with="quick"),
    ),
}


@pytest.mark.parametrize("row", DECISIONS.values(), ids=list(DECISIONS))
def test_a_pass_decides(row: Row) -> None:
    made = row.now if row.made is None else row.made
    entry = entry_of(node_ad(jobs=row.jobs, made=made, **row.shows), made)
    plan = plan_of(
        entry,
        now=row.now,
        mode=row.mode,
        window=row.window,
        duration=row.duration,
        policy=row.policy,
    )
    assert decide(plan, row.record, row.policy, row.now, all_accepted=row.all_accepted) == row.step


def test_a_start_sends_its_deadline_counted_from_the_send_and_records_the_window() -> None:
    start = Start(schedule="graceful", deadline_at=W, window_start=W, opened=False)
    body = start.body(W - 100)
    assert body.to_json() == {
        "schedule": "graceful",
        "reason": "maintenance",
        "ttl": 30,
        "deadline": 100.0,
    }
    record = start.record(node="n.test", address=ADDRESS, actor="ops", now=W - 100)
    assert (record.phase, record.window_start, record.started_at) == ("absent", W, W - 100)
    pending = record.started(KEY, request_id="4", body=body, now=W - 99)
    assert (pending.phase, pending.request_id, pending.deadline) == ("pending", "4", 100.0)
    assert start.escalated("draining") is False  # graceful: not escalated
    opened = Start(schedule="quick", deadline_at=None, window_start=W, opened=True)
    assert opened.escalated("draining") is True
    assert opened.escalated("drained") is False  # nothing was left to evict


# ---------------------------------------------------------------------- the table of moves

PHASES = [p for p in DrainPhase if p is not DrainPhase.STARTING]


def record_in(phase: DrainPhase) -> DrainRecord:
    return ours(phase=phase)


@pytest.mark.parametrize(
    ("phase", "event", "new"),
    sorted(DRAIN_MOVES),
    ids=[f"{p}-{e}-{n}" for p, e, n in sorted(DRAIN_MOVES)],
)
def test_each_legal_move(phase: DrainPhase, event: DrainEvent, new: DrainPhase) -> None:
    record = record_in(phase)
    if new is DrainPhase.ABSENT:
        record.forgotten(KEY)  # checked; the caller drops it
        return
    moved = record.moved(event, new, key=KEY, address="http://elsewhere")
    assert (moved.phase, moved.address) == (new, "http://elsewhere")
    assert record.phase is phase  # a move makes a new record


ILLEGAL = [
    (p, e, n)
    for p, e, n in itertools.product(PHASES, DrainEvent, PHASES)
    if (p, e, n) not in DRAIN_MOVES
]


@pytest.mark.parametrize(
    ("phase", "event", "new"), ILLEGAL, ids=[f"{p}-{e}-{n}" for p, e, n in ILLEGAL]
)
def test_an_illegal_move_raises_and_changes_nothing(
    phase: DrainPhase, event: DrainEvent, new: DrainPhase
) -> None:
    record = record_in(phase)
    stored = json.dumps(record.to_json())
    with pytest.raises(IllegalDrainMove, match=f"{event} cannot move it from {phase} to {new}"):
        record.moved(event, new, key=KEY, escalated=True)
    assert record == record_in(phase)
    assert json.dumps(record.to_json()) == stored


def test_the_named_moves_go_through_the_table() -> None:
    with pytest.raises(IllegalDrainMove):
        ours().committed(KEY, committed_at=1.0)  # a commit of a commit
    with pytest.raises(IllegalDrainMove):
        ours(phase=DrainPhase.PENDING).noted(KEY, late=True)  # settled first
    start = Start(schedule="fast", deadline_at=None, window_start=W, opened=True)
    with pytest.raises(IllegalDrainMove):
        ours(phase=DrainPhase.PENDING).started(KEY, request_id="2", body=start.body(W), now=W)


def test_the_plan_stand_in_and_an_absent_record_move_nowhere_but_by_the_table() -> None:
    with pytest.raises(IllegalDrainMove):
        STARTING.committed(KEY, committed_at=1.0)
    with pytest.raises(IllegalDrainMove):
        ABSENT.forgotten(KEY)
    made = assigned(KEY, node="n.test", address=ADDRESS, actor="ops", operation="op-1")
    assert (made.phase, made.operation) == (DrainPhase.OPERATION, "op-1")


# ---------------------------------------------------------------------- the stored form

#: Records as masters before DrainRecord wrote them (each written back key for key).
STORED = {
    "started by a quick master": {
        "node": "n1.test",
        "address": ADDRESS,
        "schedule": "graceful",
        "deadline": 599.0,
        "started_at": 1800000001.0,
        "window_start": 1800000600.0,
        "actor": "ops",
        "escalated": False,
        "down": False,
        "request_id": "1",
        "phase": "committed",
        "recorded_at": 1800000001.0,
        "committed_at": 1800000001.0,
        "late": True,
    },
    "a rolling operation's, to be started": {
        "node": "n1.test",
        "address": ADDRESS,
        "actor": "ops",
        "operation": "op-1",
        "phase": "operation",
        "escalated": False,
        "down": False,
        "started_at": None,
    },
    "an older master's (no phase, no times)": {"request_id": "4"},
    "a down drain left pending": {
        "node": "n1.test",
        "actor": "ops",
        "escalated": False,
        "started_at": None,
        "address": ADDRESS,
        "request_id": "2",
        "schedule": "fast",
        "deadline": None,
        "phase": "pending",
        "recorded_at": 1800000001.0,
    },
}


@pytest.mark.parametrize("stored", STORED.values(), ids=list(STORED))
def test_a_stored_record_is_read_and_written_back_as_it_was(stored: dict[str, Any]) -> None:
    record = DrainRecord.from_json(json.loads(json.dumps(stored)))
    assert json.dumps(record.to_json()) == json.dumps(stored)  # key for key, in order
    for name, value in stored.items():
        assert getattr(record, name) == value


@pytest.mark.parametrize("stored", STORED.values(), ids=list(STORED))
def test_a_changed_record_reads_as_it_did_to_an_older_master(stored: dict[str, Any]) -> None:
    """Once changed, a record is written anew: every key an older master reads (with its
    ``.get`` and default) says what it said, and the new value."""
    record = DrainRecord.from_json(stored)
    changed = dataclasses.replace(record, escalated=True)
    written = json.loads(json.dumps(changed.to_json()))
    for name in (
        "node",
        "address",
        "schedule",
        "deadline",
        "started_at",
        "window_start",
        "actor",
        "operation",
        "request_id",
        "phase",
        "recorded_at",
        "committed_at",
    ):
        assert written.get(name) == stored.get(name), name
    assert bool(written.get("down")) == bool(stored.get("down"))
    assert written.get("late", False) == stored.get("late", False)
    assert written["escalated"] is True
    assert DrainRecord.from_json(written) == changed


def test_a_new_record_is_written_as_the_master_always_wrote_it() -> None:
    start = Start(schedule="graceful", deadline_at=W, window_start=W, opened=False)
    record = start.record(node="n.test", address=ADDRESS, actor="ops", now=EPOCH)
    pending = record.started(KEY, request_id="1", body=start.body(EPOCH), now=EPOCH)
    committed = pending.committed(KEY, committed_at=EPOCH)
    assert committed.to_json() == {
        "node": "n.test",
        "address": ADDRESS,
        "schedule": "graceful",
        "deadline": 3600.0,
        "started_at": EPOCH,
        "window_start": W,
        "actor": "ops",
        "escalated": False,
        "down": False,
        "request_id": "1",
        "phase": "committed",
        "recorded_at": EPOCH,
        "committed_at": EPOCH,
    }


# ---------------------------------------------------------------------- settle, release

SETTLED: dict[str, tuple[DrainRecord, dict[str, Any], Any]] = {
    "committed on the node: adopted": (
        ours(phase=DrainPhase.PENDING, committed_at=None),
        {"DrainState": "draining", "DrainingRequestId": "1", "MyCurrentTime": 1234},
        ("adopted", DrainPhase.COMMITTED, False),
    ),
    "drained already: adopted": (
        ours(phase=DrainPhase.PENDING, committed_at=None),
        {"DrainState": "drained", "DrainingRequestId": "1", "MyCurrentTime": 1234},
        ("adopted", DrainPhase.COMMITTED, False),
    ),
    "ended with its hook: adopted": (
        ours(phase=DrainPhase.PENDING, committed_at=None),
        {"DrainState": "none", "DrainHookRequestId": "1", "MyCurrentTime": 1234},
        ("adopted", DrainPhase.COMMITTED, False),
    ),
    "still pending: cancelled, forgotten": (
        ours(phase=DrainPhase.PENDING, committed_at=None),
        {"DrainState": "pending", "DrainingRequestId": "1"},
        ("forgotten", None, True),
    ),
    "gone: forgotten": (
        ours(phase=DrainPhase.PENDING, committed_at=None),
        {"DrainState": "none"},
        ("forgotten", None, False),
    ),
    "another's drain in force: ours is gone, forgotten": (
        ours(phase=DrainPhase.PENDING, committed_at=None),
        {"DrainState": "draining", "DrainingRequestId": "7"},
        ("forgotten", None, False),
    ),
    "a rolling operation's, gone: back to its drain to be started": (
        ours(phase=DrainPhase.PENDING, operation="op-1", committed_at=None),
        {"DrainState": "none"},
        ("kept", DrainPhase.OPERATION, False),
    ),
    "a rolling operation's, still pending: cancelled, back to be started": (
        ours(phase=DrainPhase.PENDING, operation="op-1", committed_at=None),
        {"DrainState": "pending", "DrainingRequestId": "1"},
        ("kept", DrainPhase.OPERATION, True),
    ),
}


@pytest.mark.parametrize(("record", "machine", "expected"), SETTLED.values(), ids=list(SETTLED))
def test_a_pending_record_is_settled_from_the_node(
    record: DrainRecord, machine: dict[str, Any], expected: tuple[str, Any, bool]
) -> None:
    how, phase, cancel = expected
    settled = settle(record, machine, key=KEY)
    assert settled.cancel is cancel
    assert settled.adopted is (how == "adopted")
    if how == "forgotten":
        assert settled.record is None
        return
    assert settled.record is not None
    assert settled.record.phase is phase
    if how == "adopted":
        assert settled.record.committed_at == 1234
    else:
        assert (settled.record.request_id, settled.record.operation) == (None, "op-1")


def test_a_record_that_is_not_pending_cannot_be_settled() -> None:
    with pytest.raises(IllegalDrainMove):
        settle(ours(), {"DrainState": "draining", "DrainingRequestId": "1"}, key=KEY)


RELEASED: dict[str, tuple[DrainRecord, dict[str, Any] | None, Release | None]] = {
    "pending: settled first": (ours(phase=DrainPhase.PENDING), None, None),
    "no ad held: cancelled by its id": (ours(), None, Release(cancel=True)),
    "the ad shows it: cancelled": (
        ours(),
        {"made": EPOCH + 10, **SHOWS_OURS},
        Release(cancel=True),
    ),
    "a fresh ad shows it gone: forgotten": (
        ours(),
        {"made": EPOCH + 10, "DrainState": "none"},
        Release(cancel=False),
    ),
    "a stale ad shows it gone: cancelled all the same": (
        ours(),
        {"made": EPOCH - 10, "DrainState": "none"},
        Release(cancel=True),
    ),
    "a rolling operation's not started: forgotten": (
        assigned(KEY, node="n.test", address=ADDRESS, actor="ops", operation="op-1"),
        None,
        Release(cancel=False),
    ),
}


@pytest.mark.parametrize(("record", "ad", "expected"), RELEASED.values(), ids=list(RELEASED))
def test_a_record_out_of_the_schedule_is_let_go(
    record: DrainRecord, ad: dict[str, Any] | None, expected: Release | None
) -> None:
    entry = None
    if ad is not None:
        made = ad.pop("made")
        entry = entry_of(node_ad(made=made, **ad), made)
    assert release(record, entry, key=KEY) == expected


# ---------------------------------------------------------------------- the property


class World:
    """One machine, its node and the master's model, as the shell carries the steps out:
    phase 1 and the commit (which may be lost: the record stays pending, then settled),
    ads that lag, the window that moves. Every drain started is counted by window."""

    def __init__(self, policy: PlanPolicy) -> None:
        self.policy = policy
        self.now = EPOCH
        self.window = W
        self.ids = itertools.count(1)
        self.node: dict[str, Any] = {"DrainState": "none"}
        self.held = entry_of(node_ad(made=self.now, **self.node), self.now)
        self.record: DrainRecord | None = None
        #: Drains started, by window (a move makes another window).
        self.starts: dict[int, int] = {}
        self.epoch = 0

    def push(self) -> None:
        self.held = entry_of(node_ad(made=self.now, **self.node), self.now)

    def phase1(self, schedule: str, deadline_at: float | None) -> str:
        request_id = str(next(self.ids))
        self.node = {
            "DrainState": "pending",
            "DrainingRequestId": request_id,
            "DrainSchedule": schedule,
            "DrainingDeadline": None if deadline_at is None else int(deadline_at),
        }
        return request_id

    def transaction(self, record: DrainRecord, schedule: str, deadline_at: float | None,
                    commit_lost: bool) -> None:  # fmt: skip
        deadline = None if deadline_at is None else deadline_at - self.now
        body = DrainBody(schedule=schedule, reason="maintenance", deadline=deadline)
        request_id = self.phase1(schedule, deadline_at)
        self.record = record.started(KEY, request_id=request_id, body=body, now=self.now)
        self.node["DrainState"] = "draining"  # the commit reaches the node
        if not commit_lost:
            self.record = self.record.committed(KEY, committed_at=self.now)

    def cancel(self, request_id: str | None) -> None:
        if request_id is not None and self.node.get("DrainingRequestId") == request_id:
            self.node = {"DrainState": "none"}

    def step(self, commit_lost: bool) -> None:
        """A pass: a pending record settled from the node, else ``decide`` carried out."""
        record = self.record
        if record is not None and record.phase is DrainPhase.PENDING:
            self.push()  # the shell fetches the ad
            settled = settle(record, self.held.machine, key=KEY)
            if settled.cancel:
                self.cancel(record.request_id)
            self.record = settled.record
            return
        plan = plan_of(self.held, now=self.now, window=self.window, policy=self.policy)
        step = decide(plan, record, self.policy, self.now)
        if isinstance(step, Start):
            self.starts[self.epoch] = self.starts.get(self.epoch, 0) + 1
            base = step.record(node="n.test", address=ADDRESS, actor="ops", now=self.now)
            self.transaction(base, step.schedule, step.deadline_at, commit_lost)
            if self.record is not None and self.record.phase is DrainPhase.COMMITTED:
                self.record = self.record.noted(KEY, escalated=step.escalated("draining"))
        elif isinstance(step, Escalate):
            assert record is not None
            if step.replace_with is not None:
                self.cancel(record.request_id)
                self.transaction(record, step.replace_with, None, commit_lost)
            if self.record is not None and self.record.phase is DrainPhase.COMMITTED:
                self.record = self.record.noted(KEY, escalated=True)
        elif isinstance(step, Withdraw):
            assert record is not None
            self.cancel(step.request_id)
            record.forgotten(KEY)
            self.record = None
        elif isinstance(step, Postpone):
            assert record is not None
            self.cancel(record.request_id)
            self.transaction(record, "graceful", step.window_start, commit_lost)
            if self.record is not None and self.record.phase is DrainPhase.COMMITTED:
                self.record = self.record.noted(KEY, window_start=step.window_start)
        elif isinstance(step, RememberLate):
            assert record is not None
            self.record = record.noted(KEY, late=step.late)
        elif isinstance(step, Refresh):
            self.push()
        else:
            assert step is None, step  # DRAINING only: no down steps


EVENTS = st.one_of(
    st.tuples(st.just("time"), st.floats(min_value=1, max_value=900)),
    st.tuples(st.just("push"), st.none()),
    st.tuples(st.just("pass"), st.booleans()),
    st.tuples(st.just("move"), st.floats(min_value=-1800, max_value=3600)),
)


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(EVENTS, max_size=40),
    policy=st.sampled_from([QUICK, FAST, NONE, IMMEDIATE]),
)
def test_no_sequence_of_steps_starts_two_drains_for_one_window(
    events: list[tuple[str, Any]], policy: PlanPolicy
) -> None:
    """Whatever the order of ads (late or not), passes, lost commits and window moves, a
    window gets at most one drain started: the master never judges the node by an ad older
    than its record, and a record left pending is settled before anything else."""
    world = World(policy)
    for kind, arg in events:
        if kind == "time":
            world.now += arg
        elif kind == "push":
            world.push()
        elif kind == "pass":
            world.step(commit_lost=arg)
        else:
            world.window = max(world.now + 1, world.window + arg)
            world.epoch += 1
        assert all(count <= 1 for count in world.starts.values()), world.starts
