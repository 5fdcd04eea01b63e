"""The events found by comparing a change's before and after, as tables
(nodeagent.master._event_drafts)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.master._event_drafts import (
    escalation,
    evicted_cuts,
    mode_changes,
    node_changes,
    node_lost,
    node_shutdown_changes,
    notice_issued,
    operation_changes,
    schedule_changed,
)
from nodeagent.master._events import EVENT_TYPES
from nodeagent.master._maintenance import (
    MachineId,
    MaintenanceSchedule,
    MaintenanceState,
    Unavailability,
    Window,
)
from nodeagent.master._notices import Notice, NoticeClaim, NoticeWindow

S = 1_000_000_000


def state(*windows: tuple[tuple[str, ...], int]) -> MaintenanceState:
    made = MaintenanceState()
    made.update_schedule(
        MaintenanceSchedule(
            windows=tuple(
                Window(
                    machine_ids=tuple(MachineId(hostname=h) for h in hosts),
                    unavailability=Unavailability(start_ns=start * S),
                )
                for hosts, start in windows
            )
        )
    )
    return made


def test_schedule_changed_lists_added_dropped_and_moved() -> None:
    before = state((("a", "b", "c"), 100))
    after = state((("a",), 100), (("b", "d"), 200))
    change = schedule_changed(before, after, actor="alice", version="v2")
    assert change.type == "schedule.changed"
    assert change.facts["added"] == ["d"]
    assert change.facts["dropped"] == ["c"]
    assert change.facts["moved"] == ["b"]
    assert change.machines == ("b", "c", "d")
    assert "3 machines in 2 windows (1 added, 1 dropped, 1 moved)" in change.text
    assert (
        "1 machine in 1 window ("
        in schedule_changed(state(), state((("a",), 1)), actor="x", version="v").text
    )


def test_mode_changes_one_event_per_move() -> None:
    before = state((("a", "b", "c"), 100))
    after = state((("a", "b", "c"), 100))
    after.down([MachineId(hostname="a"), MachineId(hostname="b")])
    (down,) = mode_changes(before, after, actor="bob")
    assert (down.facts["from"], down.facts["to"], down.machines) == ("DRAINING", "DOWN", ("a", "b"))
    dropped = state()
    moves = {
        (d.facts["from"], d.facts["to"]): d.machines
        for d in mode_changes(after, dropped, actor="x")
    }
    assert moves == {("DOWN", "UP"): ("a", "b"), ("DRAINING", "UP"): ("c",)}
    assert mode_changes(before, before, actor="x") == []


def ad(**attributes: Any) -> dict[str, Any]:
    return {"DrainState": "none", **attributes}


DRAINING = {
    "DrainState": "draining",
    "DrainingRequestId": "7",
    "DrainReason": "maintenance",
    "DrainSchedule": "graceful",
}


@pytest.mark.parametrize(
    ("before", "after", "types"),
    [
        (None, ad(**DRAINING), []),  # nothing known before
        (ad(), ad(), []),
        (ad(), ad(**DRAINING), ["drain.started"]),
        (ad(**DRAINING), ad(**DRAINING), []),
        (ad(**DRAINING), ad(**{**DRAINING, "DrainState": "drained"}), ["drain.completed"]),
        (ad(), ad(**{**DRAINING, "DrainState": "drained"}), ["drain.started", "drain.completed"]),
        (ad(**DRAINING), ad(**{**DRAINING, "DrainingRequestId": "8"}), ["drain.started"]),
        (ad(**DRAINING), ad(), ["drain.ended"]),
        (ad(DrainState="pending"), ad(), []),  # a transaction cancelled: no drain was
        (
            ad(DrainHookRequestId="7", DrainHookState="pending", DrainHookName="patch"),
            ad(DrainHookRequestId="7", DrainHookState="running", DrainHookName="patch"),
            ["hook.started"],
        ),
        (
            ad(DrainHookRequestId="7", DrainHookState="running"),
            ad(DrainHookRequestId="7", DrainHookState="succeeded"),
            ["hook.succeeded"],
        ),
        (
            ad(DrainHookRequestId="7", DrainHookState="running"),
            ad(DrainHookRequestId="7", DrainHookState="failed", DrainHookMessage="exit status 3"),
            ["hook.failed"],
        ),
        (  # pushed before it ran and after it ended: both said
            ad(DrainHookRequestId="7", DrainHookState="pending"),
            ad(DrainHookRequestId="7", DrainHookState="failed"),
            ["hook.started", "hook.failed"],
        ),
        (
            ad(DrainHookRequestId="7", DrainHookState="failed"),
            ad(DrainHookRequestId="8", DrainHookState="running"),
            ["hook.started"],
        ),
        (
            ad(HealthState="pending"),
            ad(HealthState="failing", HealthFailures=1),
            ["health.failing"],
        ),
        (
            ad(HealthState="failing", HealthFailures=1),
            ad(HealthState="failing", HealthFailures=2),
            [],
        ),
        (ad(HealthState="failing"), ad(HealthState="passing"), ["health.passing"]),
        (ad(HealthState="pending"), ad(HealthState="passing"), ["health.passing"]),
        (ad(HealthState="passing"), ad(HealthState="passing"), []),
    ],
)
def test_node_changes(
    before: dict[str, Any] | None, after: dict[str, Any], types: list[str]
) -> None:
    drafts = node_changes(before, after, node="n1", machine="n1.example.org", groups=["g/e/n"])
    assert [d.type for d in drafts] == types
    for d in drafts:
        assert d.machines == ("n1.example.org",)
        assert d.groups == ("g/e/n",)
        assert d.text.startswith("n1: ")


def op(**changes: Any) -> dict[str, Any]:
    batch = {
        "name": "rack1",
        "state": "waiting",
        "started_at": None,
        "ended_at": None,
        "skipped": False,
        "held_since": None,
        "reason": None,
        "nodes": [{"name": "n1"}, {"name": "n2"}],
    }
    batch.update(changes.pop("batch", {}))
    value = {
        "id": "3",
        "state": "running",
        "actor": "carol",
        "ended_at": None,
        "reason": None,
        "spec": {"hosts": ["n1", "n2"], "hook": "patch"},
        "batches": [batch],
    }
    value.update(changes)
    return value


SLA = {
    "code": "sla",
    "message": "web keeps 2 of 3",
    "until": 1_800_000_600.0,
    "groups": ["w/p/web"],
}


@pytest.mark.parametrize(
    ("before", "after", "types"),
    [
        (None, op(), ["operation.started"]),
        (op(), op(), []),
        (op(), op(batch={"held_since": 5.0, "reason": SLA}), ["operation.batch_held"]),
        (
            op(batch={"held_since": 5.0, "reason": SLA}),
            op(batch={"held_since": 5.0, "reason": SLA}),
            [],
        ),
        (op(), op(batch={"started_at": 6.0, "state": "draining"}), ["operation.batch_started"]),
        (
            op(batch={"started_at": 6.0}),
            op(batch={"started_at": 6.0, "ended_at": 9.0, "state": "done"}),
            ["operation.batch_done"],
        ),
        (
            op(),
            op(batch={"skipped": True, "ended_at": 9.0, "reason": {"code": "skipped"}}),
            ["operation.batch_skipped"],
        ),
        (op(), op(state="paused", reason="paused: n1 failed"), ["operation.paused"]),
        (op(state="paused"), op(), ["operation.resumed"]),
        (op(), op(state="cancelled", ended_at=9.0), ["operation.ended"]),
    ],
)
def test_operation_changes(
    before: dict[str, Any] | None, after: dict[str, Any], types: list[str]
) -> None:
    drafts = operation_changes(before, after)
    assert [d.type for d in drafts] == types
    assert all(d.facts["operation"] == "3" for d in drafts)


def test_escalation_says_what_it_cuts() -> None:
    cuts = [
        {"slot": "slot1_1@n1", "job_id": "j1", "cut_by": 600, "cut_badput": 1200},
        {"slot": "slot1_2@n1", "job_id": "j2", "cut_by": 60, "cut_badput": 30},
    ]
    event = escalation(node="n1", machine="n1", request_id="7", how="quick drain 7", cuts=cuts)
    assert event.facts["cut_jobs"] == 2
    assert event.facts["cut_badput"] == 1230
    assert "2 jobs cut" in event.text
    assert "1230 core-s" in event.text
    assert (
        "jobs cut"
        not in escalation(node="n1", machine="n1", request_id="7", how="quick", cuts=[]).text
    )


def test_evicted_cuts_are_read_from_the_slots_being_evicted() -> None:
    slots: list[dict[str, Any]] = [
        {"SlotType": "Partitionable", "Name": "slot1@n1"},
        {
            "SlotType": "Dynamic",
            "Name": "slot1_1@n1",
            "JobId": "j1",
            "RemoteOwner": "alice",
            "Cpus": 2,
            "Activity": "Vacating",
            "EnteredCurrentActivity": 1000,
            "MaxJobRetirementTime": 60,
            "TotalJobRunTime": 20,
        },
        {  # evicted at the end of its promise: nothing cut
            "SlotType": "Dynamic",
            "Name": "slot1_2@n1",
            "Activity": "Killing",
            "MaxJobRetirementTime": 10,
            "TotalJobRunTime": 12,
        },
        {"SlotType": "Dynamic", "Name": "slot1_3@n1", "Activity": "Retiring"},
    ]
    assert evicted_cuts(slots) == [
        {
            "slot": "slot1_1@n1",
            "job_id": "j1",
            "owner": "alice",
            "cpus": 2,
            "evict_at": 1000,
            "promise_end": 1040,
            "cut_by": 40,
            "cut_badput": 40,
        }
    ]


@pytest.mark.parametrize(
    ("claims", "said"),
    [
        ((), "(0 claims)"),
        ((NoticeClaim(slot="s1"),), "(1 claim)"),
        (
            (NoticeClaim(slot="s1", cut_by=0.0), NoticeClaim(slot="s2", cut_by=0.0)),
            "(2 claims, every promise kept)",
        ),
        (
            (
                NoticeClaim(slot="s1", cut_by=0.0),
                NoticeClaim(slot="s2", cut_by=600.0),
                NoticeClaim(slot="s3", cut_by=7200.0),
            ),
            "(3 claims, 2 cut at the window by up to 2 h)",
        ),
    ],
)
def test_notice_issued_says_which_promises_the_window_cuts(
    claims: tuple[NoticeClaim, ...], said: str
) -> None:
    notice = Notice(
        id="n-1",
        machine="m1",
        group="g",
        window=NoticeWindow(start=100.0),
        claims=claims,
        issued=1.0,
    )
    draft = notice_issued(notice)
    assert draft.text == f"m1: notice n-1 to g {said}"
    assert draft.facts["notice"]["claims"] == [c.to_json() for c in claims]


SHUTTING_DOWN = {
    "ShuttingDown": True,
    "DrainState": "draining",
    "DrainingRequestId": "9",
    "DrainReason": "shutdown",
    "DrainSchedule": "quick",
    "DaemonStartTime": 100,
}


@pytest.mark.parametrize(
    ("before", "after", "types"),
    [
        (ad(DaemonStartTime=100), ad(DaemonStartTime=100), []),
        (ad(DaemonStartTime=100), ad(**SHUTTING_DOWN), ["node.shutting_down"]),
        (ad(**SHUTTING_DOWN), ad(**{**SHUTTING_DOWN, "DrainState": "drained"}), []),
        # Back: a new agent run after the reboot, or the same run (cancelled).
        (ad(**SHUTTING_DOWN), ad(DaemonStartTime=900), ["node.rebooted"]),
        (ad(**SHUTTING_DOWN), ad(DaemonStartTime=100), ["node.shutdown_cancelled"]),
        (
            ad(**SHUTTING_DOWN),
            ad(**{**SHUTTING_DOWN, "ShuttingDown": False}),
            ["node.shutdown_cancelled"],
        ),
    ],
)
def test_node_shutdown_changes(
    before: dict[str, Any], after: dict[str, Any], types: list[str]
) -> None:
    drafts = node_shutdown_changes(before, after, node="n1", machine="n1.example.org", away=42)
    assert [d.type for d in drafts] == types
    for d in drafts:
        assert d.machines == ("n1.example.org",)
        assert d.text.startswith("n1: ")
        assert d.type in EVENT_TYPES
        assert d.facts["node"] == "n1"


def test_node_lost_says_when_the_reboot_grace_ran_out() -> None:
    plain = node_lost(node="n1", machine="n1.example.org", lifetime=300)
    assert plain.text == "n1: lost, no ad for 5 min"
    assert plain.facts == {"node": "n1", "lifetime": 300}
    after = node_lost(node="n1", machine="n1.example.org", lifetime=300, grace=1800)
    assert after.text == (
        "n1: lost, no ad for 35 min since it was shutting down (not back within its reboot grace)"
    )
    assert after.facts == {"node": "n1", "lifetime": 300, "reboot_grace": 1800}
