"""The plan's ledger: totals and late rows kept between replies are those of every row.

Each case is a story of changes — ads, drains, time, the policy, the schedule — and after
each step a view keeping its ledger answers exactly as a view that reads every machine's
row: the ``late`` reply (as data, as the body, as JSON lines, by pages) and the metrics'
figures.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import weakref
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from nodeagent.master import _plan_ledger
from nodeagent.master._fleet import schedule_figures
from nodeagent.master._plan import PlanPolicy
from nodeagent.master._plan_ledger import AdChanges
from nodeagent.master._plan_view import PlanInputs, PlanSelect, PlanView, reads_totals_kept
from slots import JobSpec, Machine, MachinePolicy, Resources
from tests.nodeagent.master.test_plan_view import (
    LIFETIME,
    NOW,
    World,
    _ad,
    _id,
    _key,
    _machine,
    _rec,
    _schedule,
)


def _unpromised(n: int, now: float, *, jobs: int) -> dict[str, Any]:
    """Node ``n<n>.test`` whose ``jobs`` jobs are promised nothing: each is gone a vacate
    time after a drain starts, so its promise completion moves on with ``now`` and the
    machine turns late as its window comes near."""
    return _unpromised_machine(n, now, jobs=jobs).ad(now)


def _unpromised_machine(n: int, now: float, *, jobs: int) -> Machine:
    """The node of :func:`_unpromised`."""
    machine = Machine(
        host=f"n{n}.test",
        ip=f"10.0.0.{n}",
        address=f"http://10.0.0.{n}:9621",
        total=Resources(cpus=8),
        policy=MachinePolicy(max_job_retirement_time=0, machine_max_vacate_time=600),
        now=now - 900,
    )
    for j in range(jobs):
        machine.claim(
            now - 100 - j,
            resources=Resources(cpus=2),
            spec=JobSpec(job_id=f"{n}.{j}", owner="bob", max_job_retirement_time=0),
        )
    return machine


class Ledgered:
    """A world, a view that keeps its ledger, and the changes it is told of."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.moved: set[tuple[str, str | None]] = set()
        self.touched = world.ads.watch(quietly=self.moved)  # as the master watches them
        self.view = PlanView()

    def inputs(self) -> PlanInputs:
        return dataclasses.replace(
            self.world.inputs(),
            is_rebooting=self.world.ads.rebooting_at(self.world.now),
            changes=AdChanges(
                touched=self.touched,
                moved=self.moved,
                latest=self.world.ads.get,
                lifetime=self.world.ads.lifetime,
                reboot_grace=self.world.ads.reboot_grace,
            ),
        )

    def every_row(self) -> PlanInputs:
        return dataclasses.replace(self.inputs(), changes=None)


def _world() -> Ledgered:
    """Six machines, windows 20 min to 2 h ahead: n0 late by its promises (2 h), n1
    empty, n2 unpromised (late once its window is less than a vacate time ahead), n3
    promised and its drain the master's, n4 with no node, n5 unpromised and far."""
    world = World()
    now = NOW
    world.ads.update(_ad(0, now, jobs=2), now)
    world.ads.update(_ad(1, now, jobs=0), now)
    world.ads.update(_unpromised(2, now, jobs=2), now)
    world.ads.update(_ad(3, now, jobs=1), now)
    world.ads.update(_unpromised(5, now, jobs=3), now)
    world.state.update_schedule(
        _schedule({0: 2400.0, 1: 1200.0, 2: 1800.0, 3: 3000.0, 4: 3600.0, 5: 7200.0})
    )
    world.drains[_key(3)] = _rec(request_id="3", phase="committed")
    return Ledgered(world)


def _advance(seconds: float) -> Callable[[World], None]:
    def step(world: World) -> None:
        world.now += seconds

    return step


def _push(n: int, jobs: int, *, unpromised: bool = False) -> Callable[[World], None]:
    def step(world: World) -> None:
        make = _unpromised if unpromised else _ad
        world.ads.update(make(n, world.now, jobs=jobs), world.now)

    return step


def _moved_on(n: int, jobs: int, *, unpromised: bool = False) -> Callable[[World], None]:
    """Node ``n``'s first ad (made at ``NOW``) at the world's ``now``: the same claims moved
    on in time, of which the ledger is not told."""

    def step(world: World) -> None:
        make = _unpromised_machine if unpromised else _machine
        world.ads.update(make(n, NOW, jobs=jobs).ad(world.now), world.now)

    return step


def _deadline(world: World) -> None:
    """Node n0 draining with a deadline that is not a whole second: its forecast is not
    exact, its row volatile."""
    ad = _ad(0, world.now, jobs=2)
    ad["slots"] = [
        {**slot, "DrainState": "draining", "DrainingDeadline": world.now + 700.5}
        for slot in ad["slots"]
    ]
    world.ads.update(ad, world.now)


def _started(world: World) -> None:
    """n0's drain started: its record replaces its being started."""
    world.starting.discard(_key(0))
    world.drains[_key(0)] = _rec(request_id="5")


def _down(world: World) -> None:
    world.state.down([_id(1)])


def _drop_record(world: World) -> None:
    world.drains.pop(_key(3), None)


def _escalated(world: World) -> None:
    world.drains[_key(3)] = dataclasses.replace(world.drains[_key(3)], escalated=True)


def _reschedule(world: World) -> None:
    world.state.update_schedule(
        _schedule({0: 2400.0, 1: 1300.0, 2: 1800.0, 3: 3000.0, 4: 3600.0, 5: 7200.0})
    )


#: The windows of :func:`_world`'s schedule, by node.
_WINDOWS = {0: 2400.0, 1: 1200.0, 2: 1800.0, 3: 3000.0, 4: 3600.0, 5: 7200.0}


def _schedule_step(windows: dict[int, float]) -> Callable[[World], None]:
    """The schedule replaced by one of these windows (each a new object)."""

    def step(world: World) -> None:
        world.state.update_schedule(_schedule(windows))

    return step


def _forget(world: World) -> None:
    world.ads.forget("n1.test")


def _policy(**values: Any) -> Callable[[World], None]:
    def step(world: World) -> None:
        world.policy = PlanPolicy(**values)

    return step


#: Stories: the steps, each answered the same both ways after it.
STORIES: dict[str, list[Callable[[World], None]]] = {
    "time passes a second at a time": [_advance(1)] * 5,
    "an unpromised node turns late as its window nears": [_advance(300)] * 6,
    "ads arrive, moved on and changed": [
        _advance(10),
        _push(0, 2),
        _push(1, 3),
        _advance(1),
        _push(2, 1, unpromised=True),
        _push(1, 0),
    ],
    # each ad its node's first moved on: n0 and n2 not lost past the first one's lifetime
    "ads moved on in time, past the first ones' lifetime": [
        _advance(30),
        _moved_on(0, 2),
        _moved_on(2, 2, unpromised=True),
        _advance(LIFETIME - 40),
        _moved_on(0, 2),
        _moved_on(2, 2, unpromised=True),
        _advance(20),
        _advance(LIFETIME - 20),
        _advance(30),
        _moved_on(0, 2),  # lost, then back with its first ad moved on: told
        _advance(1),
    ],
    "a node is lost, comes back, and goes": [
        _advance(LIFETIME + 1),
        _push(0, 1),
        _advance(5),
        _forget,
        _advance(1),
    ],
    "drains start, escalate and end": [
        lambda w: w.starting.add(_key(0)),
        _advance(1),
        _started,
        _escalated,
        _advance(1),
        _drop_record,
        lambda w: w.drains.clear(),
    ],
    "escalations cut jobs": [
        _policy(escalation="fast"),
        _advance(1),
        _push(0, 3),
        _advance(600),
        _policy(escalation="none"),
        _advance(1),
        _policy(),
    ],
    # n5's jobs promised past its window (at 2 h): escalated at it, within the hour at 1 h
    "an escalation comes within the hour": [
        _policy(escalation="fast"),
        _advance(200),
        _push(5, 2),
        _advance(2990),
        _push(5, 2),
        _advance(409),
        _advance(1),
    ],
    "a forecast that is not exact: a volatile row": [
        _deadline,
        _advance(1),
        _advance(700),
        _push(0, 1),
        _advance(1),
    ],
    "windows come, and end with machines still out of service": [
        _advance(1500),
        _advance(1200),
        _advance(3600),
        _down,
        _advance(1),
        _advance(7200),
    ],
    "the schedule and the windows' times change": [
        _reschedule,
        # replaced, as the master does (the view compares it by identity)
        lambda w: setattr(w, "window_since", {**w.window_since, _key(0): w.now}),
        _advance(1),
        lambda w: setattr(w, "window_since", {}),
    ],
    "the clock goes back": [_advance(100), _advance(-50), _push(0, 1), _advance(-1)],
    # the ledger carried over each change: the shares of the machines it leaves kept
    "machines added, moved, dropped and kept by schedules": [
        _reschedule,
        _advance(1),
        _schedule_step({**_WINDOWS, 6: 5400.0}),  # n6 added (no node)
        _schedule_step({**_WINDOWS, 0: 600.0, 6: 5400.0}),  # n0 moved: late no more
        _schedule_step({k: v for k, v in _WINDOWS.items() if k != 2}),  # n2 and n6 dropped
        _schedule_step({k: v for k, v in _WINDOWS.items() if k != 2}),  # the same again
        _down,
        _advance(1500),
        _schedule_step(_WINDOWS),  # n2 back, n1 (DOWN) kept
        lambda w: setattr(w, "window_since", {_key(2): w.now}),
        _advance(1),
    ],
}


def _same(ledgered: Ledgered) -> None:
    """The ledger's answers are those of every row, at the world's ``now``."""
    now = ledgered.world.now
    view, fresh = ledgered.view, PlanView()
    for limit in (None, 1, 3):
        for blockers in (False, True):
            kept = view.reply(
                ledgered.inputs(), now, late=True, limit=limit, with_blockers=blockers
            )
            read = fresh.reply(
                ledgered.every_row(), now, late=True, limit=limit, with_blockers=blockers
            )
            assert kept == read
    for limit in (0, 1, 4):  # a page of the plan in schedule order (the live page's)
        kept = view.reply(ledgered.inputs(), now, limit=limit, with_blockers=False)
        assert kept == fresh.reply(ledgered.every_row(), now, limit=limit, with_blockers=False)
    body = view.body(ledgered.inputs(), now, limit=2, with_blockers=False)
    assert body == fresh.body(ledgered.every_row(), now, limit=2, with_blockers=False)
    body = view.body(ledgered.inputs(), now, late=True, limit=20, with_blockers=False)
    assert body == fresh.body(ledgered.every_row(), now, late=True, limit=20, with_blockers=False)
    lines = b"".join(view.stream(ledgered.inputs(), now, late=True, limit=2, chunk=1))
    assert lines == b"".join(fresh.stream(ledgered.every_row(), now, late=True, limit=2, chunk=1))
    figures = view.schedule_figures(ledgered.inputs(), now)
    assert figures == schedule_figures(
        fresh.rows(ledgered.every_row(), now, with_blockers=True), now
    )


@pytest.mark.parametrize("story", list(STORIES.values()), ids=list(STORIES))
def test_the_ledger_answers_as_every_row_does(story: list[Callable[[World], None]]) -> None:
    ledgered = _world()
    _same(ledgered)
    for step in story:
        step(ledgered.world)
        _same(ledgered)


@pytest.mark.parametrize("story", list(STORIES.values()), ids=list(STORIES))
@pytest.mark.parametrize("steps", [1, 2])
def test_a_ledger_brought_in_steps_answers_as_every_row_does(
    story: list[Callable[[World], None]], steps: int
) -> None:
    """A read warms the ledger a few shares at a time before it answers (the master does,
    between slices of its loop); whatever it left waiting, the reply remakes: the answers
    are those of every row."""
    ledgered = _world()
    for step in [lambda w: None, *story]:
        step(ledgered.world)
        for _ in range(steps):
            ledgered.view.warm(ledgered.inputs(), ledgered.world.now, limit=2)
        _same(ledgered)


def test_a_ledger_is_brought_in_steps_of_at_most_the_limit() -> None:
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    warmed = [view.warm(ledgered.inputs(), world.now, limit=4) for _ in range(2)]
    ledger = view.kept
    assert ledger is not None
    assert (warmed, ledger.remade, ledger.complete) == ([False, True], 2, True)
    world.now += 1
    for i in range(3):  # three nodes' ads arrived: two looked at, then one
        world.ads.update(_ad(i, world.now, jobs=2), world.now)
    assert not view.warm(ledgered.inputs(), world.now, limit=2)
    assert not ledger.complete
    assert ledger.remade <= 2
    assert view.warm(ledgered.inputs(), world.now, limit=2)
    assert ledger.remade <= 1
    assert view.ledger(ledgered.inputs(), world.now) is ledger
    _same(ledgered)


def test_machines_read_at_every_call_do_not_hold_a_ledger_brought_in_steps() -> None:
    """Machines with a drain record (read at every call) are left to the reply: steps of
    one still reach the end, however many there are."""
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    for i in range(6):
        world.drains[_key(i)] = _rec(request_id=str(i))
    assert view.ledger(ledgered.inputs(), world.now) is not None
    world.now += 1
    world.ads.update(_ad(1, world.now, jobs=2), world.now)
    assert view.warm(ledgered.inputs(), world.now, limit=1)
    _same(ledgered)


@pytest.mark.parametrize("story", list(STORIES.values()), ids=list(STORIES))
def test_a_reply_remakes_at_most_its_limit_and_says_how_many_it_left(
    story: list[Callable[[World], None]],
) -> None:
    """With an answer limit, a reply remakes at most that many of the shares that changed
    or came due and counts the others as they were (``behind``); the replies that follow
    bring the rest in, and once none is behind the answers are those of every row."""
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    view.answer_limit = 2
    for step in [lambda w: None, *story]:
        step(world)
        behind = []
        for _ in range(len(world.state.machines()) + 1):
            behind.append(view.reply(ledgered.inputs(), world.now, late=True)["totals"]["behind"])
            if behind[-1] == 0:
                break
        assert behind[-1] == 0
        assert behind == sorted(behind, reverse=True)
        _same(ledgered)


@pytest.mark.parametrize("story", list(STORIES.values()), ids=list(STORIES))
def test_a_reply_remakes_what_its_time_allows_and_says_how_many_it_left(
    story: list[Callable[[World], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a time budget (a work clock a second later at each reading, 2.5 s, the budget
    asked after every share), a reply remakes three of the shares that changed or came
    due, besides those read at every reply; the others are counted as they were
    (``behind``) and the replies that follow bring them in."""
    monkeypatch.setattr(_plan_ledger, "_ENOUGH_EVERY", 1)
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    ticks = itertools.count()
    view.work_clock = lambda: float(next(ticks))
    view.answer_seconds = 2.5
    first = view.reply(ledgered.inputs(), world.now, late=True)["totals"]
    assert (first["machines"], first["behind"]) in ((3, 3), (4, 2))  # + the drain record's
    ledger = view.kept
    assert ledger is not None
    assert _key(3) in ledger.shares  # its drain record: read whatever the budget
    for step in [lambda w: None, *story]:
        step(world)
        behind = []
        for _ in range(len(world.state.machines()) + 1):
            behind.append(view.reply(ledgered.inputs(), world.now, late=True)["totals"]["behind"])
            if behind[-1] == 0:
                break
        assert behind[-1] == 0
        assert behind == sorted(behind, reverse=True)
        _same(ledgered)


def test_warming_in_steps_of_time_reaches_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps of a work clock's 2.5 s (a second a reading, asked after every share): three
    shares a step, until the ledger is whole; then a reply finds nothing behind."""
    monkeypatch.setattr(_plan_ledger, "_ENOUGH_EVERY", 1)
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    ticks = itertools.count()
    view.work_clock = lambda: float(next(ticks))
    steps = 1
    while not view.warm(ledgered.inputs(), world.now, limit=100, seconds=2.5):
        steps += 1
    assert steps == 2  # six machines, three a step
    assert view.reply(ledgered.inputs(), world.now, late=True)["totals"]["behind"] == 0
    _same(ledgered)


def test_a_first_reply_with_a_limit_counts_the_machines_it_has_not_read() -> None:
    """A new ledger and an answer limit of 2: the totals count the machines read (2, and
    the one with the master's drain record, read at every reply) and say how many are
    not; the metrics' figures say the same."""
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    view.answer_limit = 2
    totals = view.reply(ledgered.inputs(), world.now, late=True)["totals"]
    assert totals["machines"] + totals["behind"] == 6
    assert totals["machines"] in (2, 3)
    ledger = view.kept
    assert ledger is not None
    assert _key(3) in ledger.shares  # its drain record: read whatever the limit
    assert not ledger.complete
    figures = view.schedule_figures(ledgered.inputs(), world.now)
    assert figures.behind == max(0, totals["behind"] - 2)


def test_machines_read_at_every_call_are_read_by_a_reply_whatever_its_limit() -> None:
    """Every machine with a drain record: a reply limited to one share reads them all,
    and none is behind."""
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    view.answer_limit = 1
    for i in range(6):
        world.drains[_key(i)] = _rec(request_id=str(i))
    totals = view.reply(ledgered.inputs(), world.now, late=True)["totals"]
    assert (totals["machines"], totals["behind"]) == (6, 0)
    world.now += 1
    world.ads.update(_ad(1, world.now, jobs=2), world.now)
    assert view.reply(ledgered.inputs(), world.now, late=True)["totals"]["behind"] == 0
    _same(ledgered)


def test_the_stories_meet_what_they_are_about() -> None:
    """The stories reach what they test: late rows, escalations, a flip from on time to
    late, a volatile row, a lost node, a machine after its window."""
    seen: set[str] = set()
    for name, story in STORIES.items():
        ledgered = _world()
        for step in [lambda w: None, *story]:
            step(ledgered.world)
            ledger = ledgered.view.ledger(ledgered.inputs(), ledgered.world.now)
            assert ledger is not None
            totals = ledgered.view.reply(ledgered.inputs(), ledgered.world.now, late=True)
            if any(ledger.shares[k].late for k in ledger.late):
                seen.add("late")
            if any(ledger.shares[k].escalates for k in ledger.late):
                seen.add("escalates")
            if ledger.volatile:
                seen.add(f"volatile: {name}")
            if totals["totals"]["lost"]:
                seen.add("lost")
            if ledger.ended:
                seen.add("after window")
            if _key(2) in ledger.late:
                seen.add("n2 late")
    assert {"late", "escalates", "lost", "after window", "n2 late"} <= seen
    assert "volatile: a forecast that is not exact: a volatile row" in seen


@pytest.mark.parametrize("late", [True, False])
@pytest.mark.parametrize("streamed", [False, True])
def test_pages_of_the_ledger_follow_their_cursors(late: bool, streamed: bool) -> None:
    ledgered = _world()
    ledgered.world.now += 1500  # n0, n2, n3 late
    inputs, now = ledgered.inputs(), ledgered.world.now
    whole = PlanView().reply(ledgered.every_row(), now, late=late)
    rows: list[dict[str, Any]] = []
    after = ""
    while True:
        select = PlanSelect.parse(after=after)
        if streamed:
            lines = b"".join(ledgered.view.stream(inputs, now, late=late, limit=2, select=select))
            parsed = [orjson.loads(line) for line in lines.splitlines()]
            page = {
                "machines": [line["row"] for line in parsed[1:-1]],
                **parsed[-1]["end"],
            }
        else:
            page = ledgered.view.reply(inputs, now, late=late, limit=2, select=select)
        assert page["totals"] == whole["totals"]
        assert page["matched"] == whole["matched"] - len(rows)
        rows += page["machines"]
        if page["next"] is None:
            break
        after = page["next"]
    assert len(rows) >= 3
    assert orjson.loads(orjson.dumps(rows)) == orjson.loads(orjson.dumps(whole["machines"]))


def test_a_page_of_every_machine_makes_its_own_rows_alone() -> None:
    """A page of the plan in schedule order (``limit``, no window nor machine: the live
    page asks the first 2,000 rows) takes its totals from the ledger and makes the rows it
    sends, and those the ledger reads at every call (n3's, whose drain is the master's),
    not every machine's."""
    ledgered = _world()
    now = ledgered.world.now
    assert ledgered.view.warm(ledgered.inputs(), now, limit=100)
    made: list[str] = []

    def find(hostname: str | None, ip: str | None) -> list[Any]:
        made.append(str(hostname))
        return ledgered.world.ads.find(hostname, ip)

    inputs = dataclasses.replace(ledgered.inputs(), find=find)
    for select in (None, PlanSelect.parse(after="")):
        reply = ledgered.view.reply(inputs, now, limit=1, with_blockers=False, select=select)
        assert [row["machine_id"]["hostname"] for row in reply["machines"]] == ["n0.test"]
        assert reply["matched"] == 6
        assert reply["totals"] == PlanView().reply(ledgered.every_row(), now)["totals"]
        assert sorted(set(made)) == ["n0.test", "n3.test"]
        made.clear()
    assert reads_totals_kept(None, late=False, limit=2000)
    assert reads_totals_kept(PlanSelect.parse(after=""), late=False, limit=1)
    assert reads_totals_kept(None, late=True, limit=None)
    assert not reads_totals_kept(None, late=False, limit=None)  # every row: made anyway
    assert not reads_totals_kept(PlanSelect.parse(machines=("n0.test",)), late=True, limit=1)
    assert not reads_totals_kept(PlanSelect.parse(windows=(str(NOW),)), late=False, limit=1)


def test_only_the_machines_that_changed_are_remade() -> None:
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    ledger = view.ledger(ledgered.inputs(), world.now)
    assert ledger is not None
    assert ledger.remade == 6
    world.now += 1
    assert view.ledger(ledgered.inputs(), world.now) is ledger
    assert ledger.remade == 0
    world.ads.update(_ad(1, world.now, jobs=1), world.now)
    view.ledger(ledgered.inputs(), world.now)
    assert ledger.remade == 1
    world.drains[_key(0)] = _rec(request_id="7")
    view.ledger(ledgered.inputs(), world.now)
    assert ledger.remade == 1  # n0, its new record; n3 is looked at (a record) but kept
    world.policy = PlanPolicy(drain_margin=60.0)
    assert view.ledger(ledgered.inputs(), world.now) is not ledger


#: (a change of the schedule or of the machines' modes, the machines whose share it remakes)
SCHEDULE_CHANGES: list[tuple[str, Callable[[World], None], set[int]]] = [
    ("the same schedule set again", _schedule_step(_WINDOWS), set()),
    ("one machine moved", _reschedule, {1}),
    ("one machine added", _schedule_step({**_WINDOWS, 6: 600.0}), {6}),
    ("one machine dropped", _schedule_step({k: v for k, v in _WINDOWS.items() if k}), set()),
    ("one machine brought down", _down, {1}),
    (
        "one machine's entry in its window",
        lambda w: setattr(w, "window_since", {**w.window_since, _key(4): w.now}),
        {4},
    ),
    ("the policy", _policy(drain_margin=60.0), {0, 1, 2, 3, 4, 5}),
]


@pytest.mark.parametrize(
    ("change", "remade"),
    [(c, r) for _, c, r in SCHEDULE_CHANGES],
    ids=[n for n, _, _ in SCHEDULE_CHANGES],
)
def test_a_change_of_the_schedule_remakes_the_shares_of_the_machines_it_changes(
    change: Callable[[World], None], remade: set[int]
) -> None:
    """A new schedule, a mode or a machine's entry in its window carries the ledger over:
    until it is brought to ``now`` again, the machines changed wait (``behind``), the
    others' shares are kept and counted; what every machine's row reads (the policy)
    makes a new ledger."""
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    ledger = view.ledger(ledgered.inputs(), world.now)
    assert ledger is not None
    change(world)
    kept = dict(ledger.shares)
    steps = view.ledger(ledgered.inputs(), world.now, limit=0)
    assert steps is not None
    waiting = len(remade - {3})  # n3 has a drain record: read at every call
    assert steps.behind == waiting
    assert {k for k, share in steps.shares.items() if share is kept.get(k)} == (
        set(steps.shares) - {_key(n) for n in remade}
    )
    whole = view.ledger(ledgered.inputs(), world.now)
    assert whole is steps
    assert (whole.remade, whole.complete) == (waiting, True)
    _same(ledgered)


def test_an_ad_moved_on_in_time_is_swapped_into_its_share_due_when_the_newer_would_be_lost() -> (
    None
):
    """A share whose ads moved on in time holds until the instants the newer ads are read
    at: not the first ad's age (every share made at one instant would come due at once,
    however recent their ads), nor past what the share reads of itself."""
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    ledger = view.ledger(ledgered.inputs(), world.now)
    assert ledger is not None
    first = ledger.shares[_key(0)]
    assert first.until == NOW + LIFETIME < first.bound  # the first ad's age comes first
    world.now += 60
    moved = world.ads.moved_on_ads
    _moved_on(0, 2)(world)
    assert world.ads.moved_on_ads == moved + 1
    assert view.ledger(ledgered.inputs(), world.now) is ledger
    assert ledger.remade == 0
    # its share holds, the ad swapped for the newer
    swapped = ledger.shares[_key(0)].plan
    assert swapped.node is world.ads.get("n0.test")
    world.now = NOW + LIFETIME + 1  # n0's first ad would be lost; its newer is not
    view.ledger(ledgered.inputs(), world.now)
    share = ledger.shares[_key(0)]
    assert share.plan is swapped  # not remade
    assert (share.until, share.bound) == (NOW + 60 + LIFETIME, first.bound)
    _same(ledgered)
    world.now = NOW + 60 + LIFETIME  # the newer's turn: remade
    view.ledger(ledgered.inputs(), world.now)
    assert ledger.shares[_key(0)].plan is not swapped
    assert ledger.shares[_key(0)].plan.node is world.ads.get("n0.test")
    _same(ledgered)
    _push(0, 1)(world)  # another claim: told, remade at once
    view.ledger(ledgered.inputs(), world.now)
    assert ledger.remade == 1


def test_the_ads_moved_on_are_swapped_a_few_a_call_and_a_share_due_first_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three nodes' ads moved on in time, one swapped a call: a call swaps one and leaves
    two waiting, none remade; the first ads' age then comes while a swap waits: that
    share is swapped as it comes due, not remade; the answers are those of every row."""
    monkeypatch.setattr(_plan_ledger, "SWAPS_A_CALL", 1)
    remade: list[str] = []
    remake = _plan_ledger.PlanLedger._remake

    def counted(self: _plan_ledger.PlanLedger, plan: Any, *args: Any) -> None:
        remade.append(plan.key)
        remake(self, plan, *args)

    monkeypatch.setattr(_plan_ledger.PlanLedger, "_remake", counted)
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    ledger = view.ledger(ledgered.inputs(), world.now)
    assert ledger is not None
    world.now += 60
    for step in (_moved_on(0, 2), _moved_on(1, 0), _moved_on(5, 3, unpromised=True)):
        step(world)
    assert len(ledgered.moved) == 3
    remade.clear()
    view.ledger(ledgered.inputs(), world.now)
    moved = {_key(0), _key(1), _key(5)}
    assert len(ledgered.moved) == 2
    assert not moved & set(remade)  # (n3, whose drain is the master's, is read every call)
    remade.clear()
    world.now = NOW + LIFETIME + 1  # the first ads would be lost; the newer are not
    view.ledger(ledgered.inputs(), world.now)
    assert len(ledgered.moved) == 1  # its share came due first: swapped then
    assert not moved & set(remade)
    for n in (0, 1, 5):
        share = ledger.shares[_key(n)]
        assert share.plan.node is world.ads.get(f"n{n}.test")
        assert share.until == NOW + 60 + LIFETIME
    _same(ledgered)


@pytest.mark.parametrize(
    ("n", "moved_at", "due"),
    [
        (0, 60.0, NOW + 60 + LIFETIME),  # the newer ad's age comes first
        (0, 2000.0, NOW + 2400),  # the window's start comes first
        (2, 900.0, NOW + 1140),  # the drain's start comes first
        (0, 2400.0, None),  # the share's time has come: remade, not swapped
    ],
    ids=["newer ad's age", "window's start", "drain's start", "time come"],
)
def test_a_share_swapped_for_a_newer_ad_is_due_at_the_first_of_its_own_instants_and_the_ads(
    n: int, moved_at: float, due: float | None
) -> None:
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    ledger = view.ledger(ledgered.inputs(), world.now)
    assert ledger is not None
    move = _moved_on(n, 2, unpromised=n == 2)
    for at in range(300, int(moved_at), 300):  # its ads moved on every 5 minutes
        world.now = NOW + at
        move(world)
        view.ledger(ledgered.inputs(), world.now)
    before = ledger.shares[_key(n)]
    world.now = NOW + moved_at
    move(world)
    view.ledger(ledgered.inputs(), world.now)
    share = ledger.shares[_key(n)]
    assert share.plan.node is world.ads.get(f"n{n}.test")
    _same(ledgered)
    if due is None:
        assert share.plan is not before.plan
        return
    world.now = due - 1
    view.ledger(ledgered.inputs(), world.now)
    held = ledger.shares[_key(n)]
    assert held.plan is share.plan  # swapped, not remade
    assert held.until == due
    assert held.bound == before.bound
    _same(ledgered)
    world.now = due
    view.ledger(ledgered.inputs(), world.now)
    assert ledger.shares[_key(n)].plan is not share.plan
    _same(ledgered)


def test_under_the_immediate_policy_or_unwatched_there_is_no_ledger() -> None:
    ledgered = _world()
    ledgered.world.policy = PlanPolicy(drain_policy="immediate")
    assert ledgered.view.ledger(ledgered.inputs(), ledgered.world.now) is None
    assert ledgered.view.ledger(_world().every_row(), NOW) is None


def test_a_body_of_the_ledger_is_json_of_the_reply() -> None:
    ledgered = _world()
    ledgered.world.now += 1500
    body = ledgered.view.body(ledgered.inputs(), ledgered.world.now, late=True)
    assert json.loads(body) == ledgered.view.reply(ledgered.inputs(), ledgered.world.now, late=True)


def test_plans_kept_of_ads_since_replaced_are_dropped_as_the_ledger_hears_of_them() -> None:
    """A whole plan keeps each machine's plan (and the ads it was made of) for the next;
    once a node's ad is replaced, moved on in time or not, the ledger's next read drops
    what was kept of the old ad: no replaced ad stays alive for the plans."""
    ledgered = _world()
    view, world = ledgered.view, ledgered.world
    assert view.ledger(ledgered.inputs(), world.now) is not None
    view.rows(ledgered.inputs(), world.now, with_blockers=True)  # a whole plan's
    old = [weakref.ref(world.ads.get(f"n{n}.test")) for n in (0, 1)]
    world.now += 60
    _moved_on(0, 2)(world)  # the same claims, moved on
    _push(1, 1)(world)  # another claim
    gc.collect()
    assert all(ref() is not None for ref in old)  # kept by the plans until told
    view.ledger(ledgered.inputs(), world.now)
    gc.collect()
    assert [ref() for ref in old] == [None, None]
    kept = view.rows(ledgered.inputs(), world.now, with_blockers=True)
    assert [plan.node for plan, _ in kept[:2]] == [
        world.ads.get("n0.test"),
        world.ads.get("n1.test"),
    ]
