"""Rolling maintenance operations, pure: every move of a node and a batch, and the choice
of the next batch."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from nodeagent.master._notices import Answer, Notice, NoticeWindow, Verdict
from nodeagent.master._operations import (
    Batch,
    Decline,
    NodeStep,
    NodeView,
    Operation,
    OperationError,
    OperationSpec,
    SlaVerdict,
    advance,
    batch_estimate,
    cancel,
    choose,
    declines_on,
    end_state,
    mesos_mode,
    new_operation,
    pause,
    progress,
    resume,
    with_request,
)

NOW = 1_000.0


def spec(**changes: Any) -> OperationSpec:
    base = OperationSpec(hosts=("a", "b", "c", "d"), grouping="Rack", hook="reboot", batches=1)
    return replace(base, **changes)


RACKS = {"a": "r1", "b": "r1", "c": "r2", "d": "r3"}


def op_of(**changes: Any) -> Operation:
    return new_operation("1", spec(**changes), RACKS, actor="admin", now=NOW)


# ---------------------------------------------------------------- creation


def test_batches_by_attribute_and_by_host() -> None:
    op = op_of()
    assert [(b.name, b.hosts) for b in op.batches] == [
        ("r1", ("a", "b")),
        ("r2", ("c",)),
        ("r3", ("d",)),
    ]
    assert all(b.state == "waiting" for b in op.batches)
    by_host = op_of(grouping="host")
    assert [b.hosts for b in by_host.batches] == [("a",), ("b",), ("c",), ("d",)]


@pytest.mark.parametrize(
    ("changes", "groups", "busy", "code"),
    [
        ({"hosts": ()}, RACKS, (), "operation.no_hosts"),
        ({"hosts": ("a", "a")}, RACKS, (), "operation.duplicate_host"),
        ({"batches": 0}, RACKS, (), "operation.invalid"),
        ({"schedule": "slow"}, RACKS, (), "operation.invalid"),
        ({"hook": ""}, RACKS, (), "operation.invalid"),
        ({"hook": "rm -rf"}, RACKS, (), "operation.invalid"),
        ({"budget": -1.0}, RACKS, (), "operation.invalid"),
        ({"budget": math.nan}, RACKS, (), "operation.invalid"),
        ({"sla_wait": -1.0}, RACKS, (), "operation.invalid"),
        # The same bounds as the API's, for whoever builds a spec.
        ({"hook": "../../../bin/sh"}, RACKS, (), "operation.invalid"),
        ({"hook": "reboot\x00"}, RACKS, (), "operation.invalid"),
        ({"hook": "\x1b[31m"}, RACKS, (), "operation.invalid"),
        ({"hook": "r" * (1 << 20)}, RACKS, (), "operation.invalid"),
        ({"batches": 2**70}, RACKS, (), "operation.invalid"),
        ({"batches": True}, RACKS, (), "operation.invalid"),
        ({"sla_wait": math.inf}, RACKS, (), "operation.invalid"),
        ({"sla_wait": 1e12}, RACKS, (), "operation.invalid"),
        ({"grouping": "../x"}, RACKS, (), "operation.invalid"),
        ({"grouping": ""}, RACKS, (), "operation.invalid"),
        ({"hosts": ("a", "b\x1b")}, RACKS, (), "operation.invalid"),
        ({"hosts": ("a", "n" * 256)}, RACKS, (), "operation.invalid"),
        ({"hosts": tuple(f"n{i}" for i in range(10_001))}, RACKS, (), "operation.invalid"),
        ({"hosts": ("a", "zz")}, RACKS, (), "operation.unknown_host"),
        ({}, {**RACKS, "c": None}, (), "operation.no_grouping_attribute"),
        ({}, RACKS, ("d",), "operation.host_busy"),
    ],
)
def test_refused(changes: dict[str, Any], groups: dict[str, Any], busy: Any, code: str) -> None:
    with pytest.raises(OperationError) as caught:
        new_operation("1", spec(**changes), groups, actor="x", now=NOW, busy=busy)
    assert caught.value.code == code


def test_round_trip_through_json() -> None:
    op = choose(op_of(budget=5.0), {h: NodeView(completion=NOW) for h in RACKS}, NOW)
    op = with_request(op, "a", "7")
    assert Operation.from_json(op.to_json()) == op


# ---------------------------------------------------------------- a node's moves

DRAINED = NodeView(drain_state="drained", request_id="7")


@pytest.mark.parametrize(
    ("phase", "request_id", "view", "expected_phase", "reason"),
    [
        # draining, its drain not yet started: the engine's to start
        ("draining", None, NodeView(), "draining", None),
        # draining: still draining, drained, its hook due, running, ended, failed
        ("draining", "7", NodeView(drain_state="draining", request_id="7"), "draining", None),
        ("draining", "7", DRAINED, "hook", "hook pending"),
        (
            "draining",
            "7",
            replace(DRAINED, hook_request_id="7", hook_state="running"),
            "hook",
            "hook running",
        ),
        (
            "draining",
            "7",
            NodeView(hook_request_id="7", hook_state="succeeded", in_service=True),
            "health",
            None,
        ),
        (
            "draining",
            "7",
            replace(DRAINED, hook_request_id="7", hook_state="failed", hook_message="exit 1"),
            "failed",
            "hook failed: exit 1",
        ),
        # the drain gone without its hook (cancelled by someone)
        (
            "draining",
            "7",
            NodeView(),
            "failed",
            "drain 7 is gone from the node before its hook ran",
        ),
        # an ad older than the record, or no ad: no move
        ("draining", "7", NodeView(known=False), "draining", None),
        ("draining", "7", NodeView(present=False), "draining", "node not heard from"),
        # hook: running, gone (rebooting), succeeded or interrupted, failed
        (
            "hook",
            "7",
            replace(DRAINED, hook_request_id="7", hook_state="running"),
            "hook",
            "hook running",
        ),
        ("hook", "7", NodeView(present=False), "hook", "node not heard from"),
        (
            "hook",
            "7",
            NodeView(
                hook_request_id="7",
                hook_state="succeeded",
                in_service=False,
                health_state="pending",
            ),
            "health",
            "health check pending",
        ),
        (
            "hook",
            "7",
            NodeView(hook_request_id="7", hook_state="interrupted", in_service=False),
            "health",
            "not yet in service",
        ),
        (
            "hook",
            "7",
            NodeView(hook_request_id="7", hook_state="failed", hook_message="timed out"),
            "failed",
            "hook failed: timed out",
        ),
        # health: failing keeps it, passing returns it
        (
            "health",
            "7",
            NodeView(in_service=False, health_state="failing", health_message="disk"),
            "health",
            "health check failing: disk",
        ),
        ("health", "7", NodeView(in_service=True, health_state="passing"), "done", None),
        # returning (cancelled while draining): back in service
        ("returning", "7", NodeView(in_service=False), "returning", "not yet in service"),
        ("returning", "7", NodeView(in_service=True), "cancelled", None),
        # finished nodes do not move
        ("done", "7", NodeView(present=False), "done", None),
        ("failed", "7", NodeView(in_service=True), "failed", None),
    ],
)
def test_node_moves(
    phase: str, request_id: str | None, view: NodeView, expected_phase: str, reason: str | None
) -> None:
    node = NodeStep(name="a", phase=phase, request_id=request_id)
    batch = Batch(name="a", nodes=(node,), started_at=NOW - 10)
    op = Operation(id="1", spec=spec(hosts=("a",)), actor="x", created_at=0.0, batches=(batch,))
    moved = advance(op, {"a": view}, NOW).batches[0].nodes[0]
    assert (moved.phase, moved.reason) == (expected_phase, reason)


@pytest.mark.parametrize(
    ("phase", "mode"),
    [
        ("waiting", None),
        ("draining", "DRAINING"),
        ("hook", "DOWN"),
        ("health", "DOWN"),
        ("failed", "DOWN"),
        ("done", None),
        ("returning", None),
        ("cancelled", None),
        ("skipped", None),
    ],
)
def test_mesos_modes(phase: str, mode: str | None) -> None:
    assert mesos_mode(phase) == mode


# ---------------------------------------------------------------- batches and the operation


def started(op: Operation, name: str, phase: str = "draining", rid: str = "1") -> Operation:
    batches = []
    for batch in op.batches:
        if batch.name == name:
            nodes = tuple(replace(n, phase=phase, request_id=rid) for n in batch.nodes)
            batches.append(replace(batch, nodes=nodes, started_at=NOW - 5))
        else:
            batches.append(batch)
    return replace(op, batches=tuple(batches))


@pytest.mark.parametrize(
    ("phases", "state"),
    [
        (("draining", "hook"), "draining"),
        (("hook", "health"), "hook"),
        (("health", "done"), "health"),
        (("done", "done"), "done"),
        (("done", "failed"), "failed"),
        (("cancelled", "cancelled"), "cancelled"),
        (("returning", "cancelled"), "returning"),
    ],
)
def test_batch_state(phases: tuple[str, str], state: str) -> None:
    nodes = tuple(NodeStep(name=f"n{i}", phase=p) for i, p in enumerate(phases))
    assert Batch(name="x", nodes=nodes, started_at=NOW).state == state
    assert Batch(name="x", nodes=(*nodes[:0], NodeStep(name="w"))).state == "waiting"


def test_a_failed_node_pauses_the_operation_and_it_ends_failed() -> None:
    op = started(op_of(hosts=("c", "d")), "r2")
    failed = replace(NodeView(), hook_request_id="1", hook_state="failed", hook_message="exit 3")
    paused = advance(op, {"c": failed, "d": NodeView()}, NOW)
    assert paused.state == "paused"
    assert paused.reason == "paused: c: hook failed: exit 3"
    assert paused.batches[0].state == "failed"
    assert paused.batches[0].ended_at == NOW
    # resumed: the next batch starts; when it is done the operation has ended, failed:
    # one of its batches did (never "completed")
    going = choose(resume(paused, NOW), {"d": NodeView(completion=NOW)}, NOW)
    assert going.batches[1].state == "draining"
    done = started(going, "r3", phase="health")
    done = advance(done, {"d": NodeView(in_service=True)}, NOW + 1)
    assert (done.state, done.ended_at) == ("failed", NOW + 1)


def batch_in(state: str, name: str = "b") -> Batch:
    """A batch that ended (or stands) in ``state``."""
    phase = {"done": "done", "failed": "failed", "skipped": "skipped", "cancelled": "cancelled"}
    node = NodeStep(name=name, phase=phase[state])
    started_at = None if state in ("skipped", "cancelled") else NOW
    return Batch(name=name, nodes=(node,), started_at=started_at, skipped=state == "skipped")


@pytest.mark.parametrize(
    ("batches", "state"),
    [
        (("done", "done"), "completed"),
        (("done", "skipped"), "completed_with_skips"),
        (("skipped", "skipped"), "completed_with_skips"),
        (("done", "failed"), "failed"),
        (("skipped", "failed"), "failed"),
        (("done", "cancelled"), "completed_with_skips"),
    ],
)
def test_how_an_operation_ended(batches: tuple[str, ...], state: str) -> None:
    made = tuple(batch_in(s, f"b{i}") for i, s in enumerate(batches))
    assert tuple(b.state for b in made) == batches
    assert end_state(made) == state


@pytest.mark.parametrize(
    ("batches", "state"),
    [
        (("done", "done"), "completed"),
        (("done", "skipped"), "completed_with_skips"),
        (("done", "failed"), "failed"),
    ],
)
def test_an_operation_saved_completed_by_an_older_master_reads_as_its_batches_say(
    batches: tuple[str, ...], state: str
) -> None:
    op = replace(
        op_of(hosts=("c", "d")),
        batches=tuple(batch_in(s, f"b{i}") for i, s in enumerate(batches)),
        state="completed",
        ended_at=NOW,
    )
    assert Operation.from_json(op.to_json()).state == state


def test_the_last_batch_skipped_ends_the_operation_completed_with_skips() -> None:
    op = op_of(hosts=("c", "d"))
    done = replace(op, batches=(batch_in("done", "b0"), op.batches[1]))
    held = choose(done, {"d": NodeView(present=False)}, NOW)
    skipped = choose(held, {"d": NodeView(present=False)}, NOW + op.spec.sla_wait)
    ended = advance(skipped, {}, NOW + op.spec.sla_wait)
    assert (ended.state, ended.ended_at) == ("completed_with_skips", NOW + op.spec.sla_wait)
    with pytest.raises(OperationError) as finished:
        cancel(ended, NOW + op.spec.sla_wait + 1)
    assert finished.value.code == "operation.finished"


# ---------------------------------------------------------------- the choice of the next batch

VIEWS = {
    "a": NodeView(completion=NOW + 300, badput=10),
    "b": NodeView(completion=NOW + 100, badput=10),
    "c": NodeView(completion=NOW + 200, badput=50),
    "d": NodeView(completion=NOW + 200, badput=5),
}


def test_batch_estimate() -> None:
    op = op_of()
    assert batch_estimate(op.batches[0], VIEWS) == (NOW + 300, 20)
    assert batch_estimate(op.batches[0], {"a": VIEWS["a"]}) == (math.inf, 10)


@pytest.mark.parametrize(
    ("views", "batches", "first"),
    [
        # soonest empty first, not name order: r1 empties at +300, r2 and r3 at +200
        (VIEWS, 1, ["r3"]),  # tie on completion: least badput (5 < 50)
        (VIEWS, 2, ["r2", "r3"]),
        (VIEWS, 3, ["r1", "r2", "r3"]),
        ({**VIEWS, "c": replace(VIEWS["c"], completion=NOW)}, 1, ["r2"]),
        # no estimate: last
        ({**VIEWS, "d": replace(VIEWS["d"], completion=None)}, 1, ["r2"]),
    ],
)
def test_choice_by_fresh_estimates(
    views: dict[str, NodeView], batches: int, first: list[str]
) -> None:
    op = choose(op_of(batches=batches), views, NOW)
    assert [b.name for b in op.batches if b.state == "draining"] == first
    for batch in op.batches:
        if batch.state == "draining":
            assert all(n.phase == "draining" and n.request_id is None for n in batch.nodes)


def test_no_place_free_and_not_running() -> None:
    op = started(op_of(batches=1), "r1")
    assert choose(op, VIEWS, NOW) == op
    assert choose(pause(op_of(), NOW), VIEWS, NOW).batches == op_of().batches


@pytest.mark.parametrize(
    ("budget", "sla_safe", "unheard", "code"),
    [
        (20.0, True, False, "badput_budget"),  # r3 (5) and r2 (50): r2 held
        (None, False, False, "sla"),
        (None, True, True, "node_unheard"),
    ],
)
def test_held_batches_wait_then_are_skipped(
    budget: float | None, sla_safe: bool, unheard: bool, code: str
) -> None:
    views = dict(VIEWS)
    if unheard:
        views["c"] = replace(views["c"], present=False)

    def sla(hosts: tuple[str, ...]) -> SlaVerdict:
        if hosts == ("c",) and not sla_safe:
            return SlaVerdict(safe=False, groups=("web",), until=NOW + 50)
        return SlaVerdict(safe=True)

    op = op_of(batches=3, budget=budget, sla_wait=60.0)
    op = choose(op, views, NOW, sla)
    r2 = next(b for b in op.batches if b.name == "r2")
    assert r2.state == "waiting"
    assert r2.reason is not None
    assert r2.reason["code"] == code
    assert r2.held_since == NOW
    if code == "sla":
        assert r2.reason["groups"] == ["web"]
        assert r2.reason["until"] == NOW + 50
    if code == "badput_budget":
        assert (r2.reason["badput"], r2.reason["budget"]) == (50, 20.0)
    # the others were not held up by it
    assert {b.name for b in op.batches if b.state == "draining"} == {"r1", "r3"}
    # still held 59 s later: waiting; at 60 s: skipped, with its reason
    op = choose(op, views, NOW + 59, sla)
    assert next(b for b in op.batches if b.name == "r2").state == "waiting"
    op = choose(op, views, NOW + 60, sla)
    r2 = next(b for b in op.batches if b.name == "r2")
    assert r2.state == "skipped"
    assert r2.reason is not None
    assert r2.reason["code"] == code
    assert r2.reason["skipped"]
    assert r2.reason["held_for"] == 60


@pytest.mark.parametrize(
    "verdict",
    [
        # fewer instances would be left than the SLA needs: said at once (never by waiting)
        SlaVerdict(safe=False, groups=("web",), message="web: 1 of 3", never=True),
        # not by waiting, but a coordinator may change its mind
        SlaVerdict(safe=False, groups=("svc",), message="coordinator: no"),
    ],
)
def test_a_batch_that_can_never_go_by_waiting_says_so_at_once(verdict: SlaVerdict) -> None:
    """Held with the reason at once; skipped only after sla_wait (its service's scheduler
    may start the instances it lacks elsewhere meanwhile)."""

    def sla(hosts: tuple[str, ...]) -> SlaVerdict:
        return verdict if hosts == ("c",) else SlaVerdict(safe=True)

    op = choose(op_of(batches=3, sla_wait=3600.0), VIEWS, NOW, sla)
    r2 = next(b for b in op.batches if b.name == "r2")
    assert r2.state == "waiting"
    assert r2.reason is not None
    assert r2.reason["code"] == "sla"
    assert r2.reason.get("never", False) is verdict.never
    later = choose(op, VIEWS, NOW + 3600.0, sla)
    assert next(b for b in later.batches if b.name == "r2").state == "skipped"


def test_a_held_batch_starts_when_safe() -> None:
    safe = {"now": False}

    def sla(hosts: tuple[str, ...]) -> SlaVerdict:
        return SlaVerdict(safe=safe["now"], groups=("web",), until=NOW + 30)

    op = choose(op_of(hosts=("d",)), VIEWS, NOW, sla)
    assert op.batches[0].state == "waiting"
    safe["now"] = True
    op = choose(op, VIEWS, NOW + 30, sla)
    assert op.batches[0].state == "draining"
    assert op.batches[0].reason is None


def test_a_batch_left_for_want_of_a_place_no_longer_shows_why_it_was_held() -> None:
    """Every rack held by its SLA, then safe: the first starts and takes the one place;
    the others wait for a place, not for their SLA (no reason, no longer held: their time
    towards ``sla_wait`` starts again when a place is free for them)."""
    safe = {"now": False}

    def sla(hosts: tuple[str, ...]) -> SlaVerdict:
        return SlaVerdict(safe=safe["now"], groups=("web",), until=NOW + 30)

    op = choose(op_of(batches=1), VIEWS, NOW, sla)
    assert all(b.state == "waiting" and b.reason is not None for b in op.batches)
    safe["now"] = True
    op = choose(op, VIEWS, NOW + 30, sla)
    [started] = [b for b in op.batches if b.state == "draining"]
    for batch in op.batches:
        if batch is not started:
            assert batch.state == "waiting"
            assert batch.reason is None
            assert batch.held_since is None


# ---------------------------------------------------------------- declined notices


def notice(
    machine: str, verdict: Verdict | None, *, group: str = "web", rescinded: float | None = None
) -> Notice:
    answer = (
        None
        if verdict is None
        else Answer(verdict=verdict, reason="month-end run", who="owner", at=NOW - 5)
    )
    return Notice(
        id=f"n-{machine}-{group}",
        machine=machine,
        group=group,
        window=NoticeWindow(start=NOW + 3600),
        claims=(),
        issued=NOW - 10,
        rescinded=rescinded,
        answer=answer,
    )


#: The nodes' machine names (hostname, IP) as notices spell them.
NAMES = {"c": ("c.test", "10.0.0.3"), "d": ("d.test", "10.0.0.4")}


@pytest.mark.parametrize(
    ("notices", "found"),
    [
        ([], []),
        ([notice("c.test", Verdict.DECLINE)], [("c", "web")]),
        ([notice("C.TEST", Verdict.DECLINE)], [("c", "web")]),  # hostnames: any case
        ([notice("10.0.0.3", Verdict.DECLINE)], [("c", "web")]),  # named by its IP
        ([notice("c.test", Verdict.ACCEPT)], []),  # accepted (or declined, then accepted)
        ([notice("c.test", None)], []),  # not answered yet
        ([notice("d.test", Verdict.DECLINE)], []),  # another machine's
        ([notice("c.test", Verdict.DECLINE, rescinded=NOW - 1)], []),  # rescinded
        (
            [
                notice("c.test", Verdict.DECLINE, group="web"),
                notice("c.test", Verdict.DECLINE, group="etl"),
                notice("c.test", Verdict.ACCEPT, group="db"),
            ],
            [("c", "etl"), ("c", "web")],
        ),
    ],
)
def test_declines_on_a_batch(notices: list[Notice], found: list[tuple[str, str]]) -> None:
    got = declines_on(("c",), notices, NAMES)
    assert [(d.host, d.group) for d in got] == found
    for d in got:
        assert (d.reason, d.who, d.at) == ("month-end run", "owner", NOW - 5)


def test_a_host_without_names_is_matched_by_its_own() -> None:
    (d,) = declines_on(("x",), [notice("x", Verdict.DECLINE)], {})
    assert d.machine == "x"


DECLINE_C = Decline(
    host="c", notice="n-c", machine="c.test", group="etl", reason="month-end", who="o", at=NOW
)


@pytest.mark.parametrize(
    ("answers", "at", "state", "code"),
    [
        # declined: held, with who declined, on which machine, why
        ([True], NOW, "waiting", "declined"),
        # declined, then accepted at the next pass: released
        ([True, False], NOW + 1, "draining", None),
        # still declined when sla_wait runs out: it goes ahead all the same, saying why
        ([True, True], NOW + 60, "draining", "declined"),
        # still declined a second before sla_wait runs out: held
        ([True, True], NOW + 59, "waiting", "declined"),
        # a decline of another batch's machine holds only that batch
        ([False], NOW, "draining", None),
    ],
)
def test_a_declined_notice_holds_its_batch_until_sla_wait(
    answers: list[bool], at: float, state: str, code: str | None
) -> None:
    declined = {"now": False}

    def declines(hosts: tuple[str, ...]) -> tuple[Decline, ...]:
        return (DECLINE_C,) if declined["now"] and "c" in hosts else ()

    op = op_of(batches=3, sla_wait=60.0)
    for number, answer in enumerate(answers):
        declined["now"] = answer
        op = choose(op, VIEWS, NOW if number == 0 else at, declines=declines)
    r2 = next(b for b in op.batches if b.name == "r2")
    assert r2.state == state
    # the others were not held up by it
    assert {b.name for b in op.batches if b.state == "draining"} >= {"r1", "r3"}
    if code is None:
        assert r2.reason is None
        return
    assert r2.reason is not None
    assert r2.reason["code"] == code
    assert r2.reason["declines"] == [DECLINE_C.to_json()]
    assert r2.reason["message"] == "etl declined on c.test: month-end (o)"
    if state == "waiting":
        assert r2.held_since == NOW
        assert "went_ahead" not in r2.reason
    else:
        assert r2.reason["went_ahead"] is True
        assert r2.reason["held_for"] == 60.0
        assert not r2.skipped


def test_an_sla_no_and_a_decline_the_sla_is_shown_and_skips() -> None:
    """A batch the SLA holds too is held by its SLA (and skipped after sla_wait): only a
    batch held by declines alone goes ahead."""

    def sla(hosts: tuple[str, ...]) -> SlaVerdict:
        return SlaVerdict(safe="c" not in hosts, groups=("web",), until=NOW + 500)

    def declines(hosts: tuple[str, ...]) -> tuple[Decline, ...]:
        return (DECLINE_C,) if "c" in hosts else ()

    op = choose(op_of(batches=3, sla_wait=60.0), VIEWS, NOW, sla, declines)
    r2 = next(b for b in op.batches if b.name == "r2")
    assert r2.reason is not None
    assert r2.reason["code"] == "sla"
    op = choose(op, VIEWS, NOW + 60, sla, declines)
    assert next(b for b in op.batches if b.name == "r2").state == "skipped"


# ---------------------------------------------------------------- pause, resume, cancel


def test_pause_resume_refusals() -> None:
    op = op_of()
    with pytest.raises(OperationError, match="running"):
        resume(op, NOW)
    paused = pause(op, NOW)
    with pytest.raises(OperationError) as caught:
        pause(paused, NOW)
    assert caught.value.code == "operation.not_running"
    assert resume(paused, NOW).state == "running"


def test_cancel_leaves_untouched_hosts_and_returns_draining_ones() -> None:
    op = op_of(batches=3)
    op = choose(op, VIEWS, NOW)  # all three start
    op = with_request(op, "a", "5")  # a's drain is committed, b's not yet
    op = started(op, "r3", phase="hook", rid="9")
    op = replace(op, batches=(*op.batches[:1], replace(op.batches[1], started_at=None,
        nodes=(NodeStep(name="c"),)), op.batches[2]))  # fmt: skip
    out = cancel(op, NOW)
    phases = {n.name: n.phase for b in out.batches for n in b.nodes}
    assert phases == {"a": "returning", "b": "cancelled", "c": "cancelled", "d": "hook"}
    held = replace(op_of(), batches=(replace(op_of().batches[0], reason={"code": "sla"}),))
    assert cancel(held, NOW).batches[0].reason is None  # a cancelled batch waits for nothing
    assert out.state == "cancelled"
    assert out.ended_at is None
    with pytest.raises(OperationError) as caught:
        cancel(out, NOW)
    assert caught.value.code == "operation.finished"
    # the hook ends, health passes, a returns: the operation's end is recorded
    ended = advance(
        out,
        {
            "a": NodeView(in_service=True),
            "d": NodeView(hook_request_id="9", hook_state="succeeded", in_service=True),
        },
        NOW + 1,
    )
    assert ended.state == "cancelled"
    assert ended.ended_at is None
    ended = advance(ended, {"d": NodeView(in_service=True)}, NOW + 2)
    assert (ended.state, ended.ended_at) == ("cancelled", NOW + 2)


def test_progress_counts() -> None:
    op = choose(op_of(batches=1), VIEWS, NOW)
    doc = progress(op)
    assert doc["counts"] == {
        "batches": 3,
        "by_state": {"waiting": 2, "draining": 1},
        "nodes": 4,
        "by_phase": {"waiting": 3, "draining": 1},
        "finished": 0,
    }
    assert doc["spec"]["grouping"] == "Rack"
    assert doc["state"] == "running"
