"""The fleet's figures the master's metrics export (nodeagent.master._fleet), on tables."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.master._adstore import AdEntry, AdStore
from nodeagent.master._fleet import (
    DRAIN_STATES,
    HEALTH_STATES,
    HOOK_STATES,
    OPERATION_STATES,
    Escalating,
    LateMachine,
    NodeLedger,
    node_figures,
    notice_figures,
    operation_figures,
    schedule_figures,
)
from nodeagent.master._maintenance import (
    MachineId,
    MaintenanceSchedule,
    Unavailability,
    Window,
)
from nodeagent.master._notices import Answer, Notice, NoticeWindow, Verdict
from nodeagent.master._plan import PlanPolicy
from nodeagent.master._plan_view import PlanView
from tests.nodeagent.master.test_plan_view import NOW, World, _ad, _reply_world

# ------------------------------------------------------------------ the scheduled machines


def _figures(world: World) -> Any:
    view = PlanView()
    return schedule_figures(view.rows(world.inputs(), world.now, with_blockers=True), world.now)


def test_late_machines_and_escalations_are_the_plan_rows_that_say_so() -> None:
    """n0 (a job promised 2 hours, its window in 40 min), n2, n3 and n4 are late by their
    promises; n2's drain is already escalated (its record says so), n4 is DOWN (a fast
    escalation), n1 is empty, n5 has no node."""
    figures = _figures(_reply_world())
    assert figures.late == (
        LateMachine(machine="n0.test", node="n0.test", late_by=4700.0),
        LateMachine(machine="n2.test", node="n2.test", late_by=5300.0),
        LateMachine(machine="n3.test", node="n3.test", late_by=5300.0),
        LateMachine(machine="n4.test", node="n4.test", late_by=6500.0),
    )
    assert figures.escalations == (
        Escalating(
            machine="n0.test",
            node="n0.test",
            escalation="quick",
            window_start=NOW + 2400,
            cut_jobs=1,
            cut_badput=2500,
        ),
        Escalating(
            machine="n3.test",
            node="n3.test",
            escalation="quick",
            window_start=NOW + 1800,
            cut_jobs=1,
            cut_badput=1900,
        ),
        Escalating(
            machine="n4.test",
            node="n4.test",
            escalation="fast",
            window_start=NOW + 600,
            cut_jobs=3,
            cut_badput=2103,
        ),
    )
    assert figures.expected_badput == {"graceful": 50400, "quick": 4904, "fast": 704}


@pytest.mark.parametrize(
    "policy",
    [
        PlanPolicy(),
        PlanPolicy(escalation="fast"),
        PlanPolicy(escalation="none"),
        PlanPolicy(drain_policy="immediate"),
        PlanPolicy(drain_margin=3600.0),
    ],
    ids=["quick", "fast", "none", "immediate", "margin"],
)
@pytest.mark.parametrize("later", [0.0, 1800.0, 3000.0], ids=["now", "+30min", "+50min"])
def test_the_figures_count_what_the_plan_totals_count(policy: PlanPolicy, later: float) -> None:
    world = _reply_world()
    world.policy = policy
    world.now = NOW + later
    totals = PlanView().reply(world.inputs(), world.now)["totals"]
    figures = _figures(world)
    assert (len(figures.late), len(figures.escalations)) == (
        totals["late"],
        totals["escalations"],
    )
    assert sum(e.cut_jobs for e in figures.escalations) <= totals["cut_jobs"]
    assert (figures.expected_badput["graceful"], figures.expected_badput["quick"]) == (
        totals["expected_graceful_badput"],
        totals["expected_quick_badput"],
    )


def test_a_machine_known_by_its_ip_alone_is_labelled_by_it() -> None:
    world = World()
    world.ads.update(_ad(7, NOW, jobs=1), NOW)
    world.state.update_schedule(
        MaintenanceSchedule(
            windows=(
                Window(
                    machine_ids=(MachineId(hostname=None, ip="10.0.0.7"),),
                    unavailability=Unavailability(start_ns=int((NOW + 600) * 1e9)),
                ),
            )
        )
    )
    assert [(m.machine, m.node) for m in _figures(world).late] == [("10.0.0.7", "n7.test")]


# ------------------------------------------------------------------ the nodes

LIFETIME = 60.0


def _entry(name: str, age: float, **machine: Any) -> AdEntry:
    return AdEntry(name=name, machine=machine, slots=[], received_at=NOW - age, updates=1)


def _hook(state: str, request: str = "7", *, held_by: str | None = "7") -> dict[str, Any]:
    """A completion hook ``reboot`` of request ``request`` in ``state``; the drain in
    force is ``held_by`` (``None``: none)."""
    out = {"DrainHookName": "reboot", "DrainHookState": state, "DrainHookRequestId": request}
    if held_by is not None:
        out.update(DrainState="drained", DrainingRequestId=held_by)
    return out


#: (the nodes, what is counted): drain, hook and health states are counted on live nodes;
#: the oldest live ad is 1 s old unless said.
NODES: list[tuple[str, list[AdEntry], dict[str, Any]]] = [
    ("no node", [], {"oldest": 0.0}),
    (
        "an idle node, a draining one, one without DrainState",
        [
            _entry("a", 5, DrainState="none"),
            _entry("b", 12, DrainState="draining"),
            _entry("c", 1),
        ],
        {"drain": {"none": 2, "draining": 1}, "oldest": 12.0},
    ),
    (
        "a lost node is listed with its age, not counted by state",
        [
            _entry("a", 5, DrainState="none"),
            _entry("z", 600, **_hook("failed")),
        ],
        {"drain": {"none": 1}, "lost": (("z", 600.0),), "oldest": 5.0},
    ),
    (
        "a failed hook of the drain in force holds its node closed",
        [_entry("h", 1, **_hook("failed"))],
        {"drain": {"drained": 1}, "hook": {"failed": 1}, "failed": (("h", "reboot"),)},
    ),
    (
        "a failed hook of an older request does not",
        [_entry("h", 1, **_hook("failed", "6"))],
        {"drain": {"drained": 1}, "hook": {"failed": 1}},
    ),
    (
        "nor does one when no drain is in force",
        [_entry("h", 1, DrainState="none", **_hook("failed", held_by=None))],
        {"drain": {"none": 1}, "hook": {"failed": 1}},
    ),
    (
        "hooks running and succeeded",
        [_entry("r", 1, **_hook("running")), _entry("s", 2, **_hook("succeeded"))],
        {"drain": {"drained": 2}, "hook": {"running": 1, "succeeded": 1}, "oldest": 2.0},
    ),
    (
        "health checks by state; the failing ones listed",
        [
            _entry("p", 1, HealthState="passing"),
            _entry("q", 1, HealthState="pending"),
            _entry("y", 1, HealthState="failing"),
            _entry("x", 1, HealthState="failing"),
            _entry("lost", 61, HealthState="failing"),
        ],
        {
            "drain": {"none": 4},
            "health": {"passing": 1, "pending": 1, "failing": 2},
            "failing": ("x", "y"),
            "lost": (("lost", 61.0),),
        },
    ),
    (
        "a rebooting node (shut down, within its grace) is neither live nor lost",
        [
            _entry("a", 5, DrainState="none"),
            _entry("r", 600, DrainState="drained", ShuttingDown=True),
            _entry("s", 2, DrainState="draining", ShuttingDown=True),
        ],
        {"drain": {"none": 1, "draining": 1}, "oldest": 5.0},
    ),
    (
        "a state the list does not know is counted as published",
        [_entry("n", 1, DrainState="rebooting")],
        {"drain": {"rebooting": 1}},
    ),
]


@pytest.mark.parametrize(
    ("entries", "expected"), [(e, x) for _, e, x in NODES], ids=[n for n, _, _ in NODES]
)
def test_nodes_are_counted_by_state_and_listed_by_condition(
    entries: list[AdEntry], expected: dict[str, Any]
) -> None:
    store = AdStore(lifetime=LIFETIME, reboot_grace=3600)
    figures = node_figures(entries, store.lost_at(NOW), NOW, store.rebooting_at(NOW))
    assert figures.drain_states == {**dict.fromkeys(DRAIN_STATES, 0), **expected.get("drain", {})}
    assert figures.hook_states == {**dict.fromkeys(HOOK_STATES, 0), **expected.get("hook", {})}
    assert figures.health_states == {
        **dict.fromkeys(HEALTH_STATES, 0),
        **expected.get("health", {}),
    }
    assert figures.hooks_failed == expected.get("failed", ())
    assert figures.health_failing == expected.get("failing", ())
    assert figures.lost == expected.get("lost", ())
    assert figures.oldest_live_ad == expected.get("oldest", 1.0)


# ------------------------------------------------------------------ the operations


def _operation(state: str, *batches: tuple[str, bool]) -> dict[str, Any]:
    """An operation as saved, its batches (state, held) in order."""
    return {
        "state": state,
        "batches": [
            {"state": s, "reason": {"code": "sla"} if held else None} for s, held in batches
        ],
    }


#: (the operations, by state, their batches by state, held batches)
OPERATIONS: list[tuple[str, list[dict[str, Any]], dict[str, int], dict[str, int], int]] = [
    ("none", [], {}, {}, 0),
    (
        "a running operation: a batch done, one draining, one held, one waiting",
        [
            _operation(
                "running",
                ("done", False),
                ("draining", False),
                ("waiting", True),
                ("waiting", False),
            )
        ],
        {"running": 1},
        {"done": 1, "draining": 1, "waiting": 2},
        1,
    ),
    (
        "a paused operation's batches count; a held one of it is not held",
        [_operation("paused", ("failed", False), ("waiting", True))],
        {"paused": 1},
        {"failed": 1, "waiting": 1},
        0,
    ),
    (
        "the batches of ended operations are not counted",
        [
            _operation("completed", ("done", False)),
            _operation("completed_with_skips", ("done", False), ("skipped", False)),
            _operation("cancelled", ("cancelled", False)),
            _operation("failed", ("failed", False)),
        ],
        {"completed": 1, "completed_with_skips": 1, "cancelled": 1, "failed": 1},
        {},
        0,
    ),
]


@pytest.mark.parametrize(
    ("operations", "states", "batches", "held"),
    [row[1:] for row in OPERATIONS],
    ids=[row[0] for row in OPERATIONS],
)
def test_operations_and_their_batches_are_counted_by_state(
    operations: list[dict[str, Any]], states: dict[str, int], batches: dict[str, int], held: int
) -> None:
    figures = operation_figures(operations)
    assert figures.operations == {**dict.fromkeys(OPERATION_STATES, 0), **states}
    assert (figures.batches, figures.held) == (batches, held)


# ------------------------------------------------------------------ the workloads' side


@pytest.mark.parametrize("later", [0.0, 1800.0], ids=["now", "+30min"])
def test_the_closed_capacity_is_the_plan_totals(later: float) -> None:
    world = _reply_world()
    world.now = NOW + later
    totals = PlanView().reply(world.inputs(), world.now)["totals"]
    closed = _figures(world).closed
    assert {k: round(v / 3600, 3) for k, v in closed.items()} == totals["closed_core_hours"]
    assert closed["admit"] >= closed["planned"] >= closed["refuse"] > 0


def _notice(machine: str, group: str, verdict: Verdict | None, **changes: Any) -> Notice:
    answer = None if verdict is None else Answer(verdict=verdict, reason="r", who="w", at=1.0)
    return Notice(
        id=f"n-{machine}-{group}",
        machine=machine,
        group=group,
        window=NoticeWindow(start=NOW),
        claims=(),
        issued=0.0,
        answer=answer,
        **changes,
    )


def test_notices_are_counted_by_answer_and_the_declined_named() -> None:
    figures = notice_figures(
        [
            _notice("n2", "b", Verdict.DECLINE),
            _notice("n1", "a", Verdict.DECLINE),
            _notice("n1", "b", Verdict.ACCEPT),
            _notice("n3", "a", None),
            _notice("n4", "a", Verdict.DECLINE, rescinded=5.0),  # not in force
        ]
    )
    assert figures.answers == {"accepted": 1, "declined": 2, "unanswered": 1}
    assert figures.declined == (("n1", "a"), ("n2", "b"))
    assert notice_figures([]).answers == {"accepted": 0, "declined": 0, "unanswered": 0}


@pytest.mark.parametrize("entries", [e for _, e, _ in NODES], ids=[n for n, _, _ in NODES])
def test_the_node_ledger_counts_as_the_nodes_are_counted(entries: list[AdEntry]) -> None:
    store = AdStore(lifetime=LIFETIME, reboot_grace=3600)
    by_name = {entry.name: entry for entry in entries}
    ledger = NodeLedger(LIFETIME)
    ledger.bring_to(NOW, list(by_name), by_name.get)
    figures = node_figures(entries, store.lost_at(NOW), NOW, store.rebooting_at(NOW))
    assert ledger.figures(NOW, store.lost_at(NOW), store.rebooting_at(NOW)) == figures


def _node_ad(name: str, **machine: Any) -> dict[str, Any]:
    return {"machine": {"Name": name, "Machine": f"{name}.test", **machine}, "slots": []}


#: A story of ads: (seconds after NOW, what arrives or goes).
STORY: list[tuple[float, list[dict[str, Any] | str]]] = [
    (0, [_node_ad("a", DrainState="none"), _node_ad("b", DrainState="draining")]),
    (10, [_node_ad("c", HealthState="failing"), _node_ad("d", **_hook("failed"))]),
    (30, [_node_ad("a", DrainState="draining", HealthState="passing")]),
    (61, []),  # b lost; a's first ad replaced, not lost
    (65, [_node_ad("b", DrainState="none"), _node_ad("e", ShuttingDown=True)]),
    (71, [_node_ad("c", HealthState="passing"), "d"]),  # d forgotten
    (140, []),  # e rebooting; a and b lost
    (141, [_node_ad("f", DrainState="odd")]),
    (4000, [_node_ad("f", DrainState="none")]),  # e lost after its grace
    (4000.5, ["f", "a"]),
]


@pytest.mark.parametrize("part", [None, 1, 2, 3], ids=lambda p: f"part={p}")
def test_the_node_ledger_follows_ads_that_arrive_go_and_grow_old(part: int | None) -> None:
    """Brought whole (``bring_to``) or a part of ``part`` nodes at a time (``bring_part``
    until it says it is whole), the ledger counts as :func:`node_figures` does."""
    store = AdStore(lifetime=LIFETIME, reboot_grace=3600)
    changed = store.watch_names()
    ledger = NodeLedger(LIFETIME)
    seen = []
    parts = 0
    for later, happenings in STORY:
        now = NOW + later
        for happening in happenings:
            if isinstance(happening, str):
                store.forget(happening)
            else:
                store.update(happening, now)
        if part is None:
            ledger.bring_to(now, changed, store.get)
            changed.clear()
        else:
            while not ledger.bring_part(now, changed, store.get, part, part) or changed:
                parts += 1
        lost, rebooting = store.lost_at(now), store.rebooting_at(now)
        expected = node_figures(store.entries(), lost, now, rebooting)
        assert ledger.figures(now, lost, rebooting) == expected, later
        seen.append(expected)
    # the story reaches what it is about
    assert any(f.rebooting for f in seen)
    assert any(f.hooks_failed for f in seen)
    assert any(f.health_failing for f in seen)
    assert any(f.drain_states.get("odd") for f in seen)
    assert [name for name, _ in seen[-2].lost] == ["a", "b", "c", "e"]
    assert parts >= {None: 0, 1: 12, 2: 2, 3: 1}[part]  # the parts were parts


def test_a_node_ledger_part_takes_at_most_its_nodes_and_its_oldest_ads() -> None:
    """A part takes ``most`` changed nodes and looks at ``most`` of the oldest ads."""
    store = AdStore(lifetime=LIFETIME, reboot_grace=3600)
    changed = store.watch_names()
    for i in range(10):
        store.update(_node_ad(f"n{i}", DrainState="draining"), NOW + i)
    ledger = NodeLedger(LIFETIME)
    assert ledger.bring_part(NOW + 10, changed, store.get, 4, 4)
    assert len(changed) == 6
    assert not ledger.bring_part(NOW + 10, changed, store.get, 4, 0)  # the oldest not read
    assert len(changed) == 2
    assert ledger.bring_part(NOW + 10, changed, store.get, 4, 4)
    assert not changed
    for i in range(5):  # replaced: their heap entries stale
        store.update(_node_ad(f"n{i}", DrainState="draining"), NOW + 20)
    now = NOW + 9 + LIFETIME + 0.5  # n5 … n9 grown too old, n0 … n4 live
    steps = [ledger.bring_part(now, changed, store.get, 2, 2) for _ in range(8)]
    # 5 taken again (in the first 3 parts); 10 of the oldest let go of, 2 a part (the 5
    # replaced, the 5 grown too old): the sixth part finds the oldest live
    assert steps == [False] * 5 + [True] * 3
    assert not changed
    lost, rebooting = store.lost_at(now), store.rebooting_at(now)
    figures = ledger.figures(now, lost, rebooting)
    assert figures == node_figures(store.entries(), lost, now, rebooting)
    assert figures.drain_states["draining"] == 5
