"""The plan view, pure: its caches, the reply's assembling, and its encoding."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from nodeagent.master import _plan_view
from nodeagent.master._adstore import AdStore
from nodeagent.master._drains import STARTING, DrainRecord
from nodeagent.master._maintenance import (
    MachineId,
    MaintenanceSchedule,
    MaintenanceState,
    Unavailability,
    Window,
)
from nodeagent.master._plan import PlanPolicy, machine_key
from nodeagent.master._plan_view import (
    PlanInputs,
    PlanQueryError,
    PlanSelect,
    PlanView,
    chunk_starts,
)
from slots import JobSpec, Machine, MachinePolicy, Resources

NOW = 1_800_000_000.0
LIFETIME = 600.0


def _ad(n: int, now: float, *, jobs: int) -> dict[str, Any]:
    """Node ``n<n>.test``: 8 cpus, ``jobs`` jobs started 100 s ago, each promised 2 hours."""
    return _machine(n, now, jobs=jobs).ad(now)


def _machine(n: int, now: float, *, jobs: int) -> Machine:
    """The node of :func:`_ad` (its ad at any later instant: the same claims moved on)."""
    machine = Machine(
        host=f"n{n}.test",
        ip=f"10.0.0.{n}",
        address=f"http://10.0.0.{n}:9621",
        total=Resources(cpus=8),
        policy=MachinePolicy(max_job_retirement_time=7200),
        now=now - 900,
    )
    for j in range(jobs):
        machine.claim(
            now - 100 - j,
            resources=Resources(cpus=1),
            spec=JobSpec(job_id=f"{n}.{j}", owner="alice"),
        )
    return machine


def _id(n: int) -> MachineId:
    return MachineId(hostname=f"n{n}.test", ip=f"10.0.0.{n}")


def _key(n: int) -> str:
    return machine_key(_id(n))


def _schedule(windows: dict[int, float]) -> MaintenanceSchedule:
    """One window an hour long per machine ``n``, starting ``windows[n]`` seconds after
    NOW, in the order given."""
    return MaintenanceSchedule(
        windows=tuple(
            Window(
                machine_ids=(_id(n),),
                unavailability=Unavailability(
                    start_ns=int((NOW + start) * 1e9), duration_ns=3600 * 10**9
                ),
            )
            for n, start in windows.items()
        )
    )


@dataclass
class World:
    """What the master holds, as the view reads it."""

    ads: AdStore = field(default_factory=lambda: AdStore(lifetime=LIFETIME))
    state: MaintenanceState = field(default_factory=MaintenanceState)
    drains: dict[str, DrainRecord] = field(default_factory=dict)
    starting: set[str] = field(default_factory=set)
    window_since: dict[str, float] = field(default_factory=dict)
    policy: PlanPolicy = field(default_factory=PlanPolicy)
    counters: dict[str, int] = field(default_factory=lambda: {"drains_started": 7})
    now: float = NOW

    def inputs(self) -> PlanInputs:
        return PlanInputs(
            statuses=self.state.machines(),
            find=self.ads.find,
            is_lost=self.ads.lost_at(self.now),
            drains=self.drains,
            starting=self.starting,
            window_since=self.window_since,
            policy=self.policy,
            counters=self.counters,
            nodes=len(self.ads),
        )


def _world(windows: dict[int, float], jobs: dict[int, int]) -> World:
    """Machines ``n`` of ``windows`` scheduled; a node for each of ``jobs``."""
    world = World()
    for n, count in jobs.items():
        world.ads.update(_ad(n, NOW, jobs=count), NOW)
    world.state.update_schedule(_schedule(windows))
    return world


# ---------------------------------------------------------------------------- the cache

WINDOWS = {0: 7200.0, 1: 7800.0, 2: 8400.0}
ALL = {_key(n) for n in WINDOWS}


def _new_ad(world: World) -> None:
    world.ads.update(_ad(0, world.now, jobs=1), world.now)


def _lose(world: World) -> None:
    world.now = NOW + 150  # n0's ad was received 500 s before NOW, the others' at NOW


def _rec(**stored: Any) -> DrainRecord:
    """A drain record as a store holds it."""
    return DrainRecord.from_json(stored)


def _escalate(world: World) -> None:
    world.drains[_key(0)] = dataclasses.replace(world.drains[_key(0)], escalated=True)


def _move_window(world: World) -> None:
    world.state.update_schedule(_schedule({**WINDOWS, 0: 9000.0}))


def _down(world: World) -> None:
    world.state.down([_id(2)])


def _same_schedule(world: World) -> None:
    world.state.update_schedule(_schedule(WINDOWS))


def _set(name: str, value: Any) -> Callable[[World], None]:
    return lambda world: setattr(world, name, value)


#: (what changes, the machines whose plan and row state are made again)
CHANGES: list[tuple[str, Callable[[World], None], set[str]]] = [
    ("nothing; time moves on", lambda w: setattr(w, "now", w.now + 30), set()),
    ("a machine's window (a new schedule)", _move_window, {_key(0)}),
    ("the same schedule set again", _same_schedule, set()),
    ("a machine's mode", _down, {_key(2)}),
    ("its node's ad", _new_ad, {_key(0)}),
    ("its node is lost", _lose, {_key(0)}),
    ("its drain record", lambda w: w.drains.update({_key(0): _rec(request_id="9")}), {_key(0)}),
    (
        "its drain record, for an equal one",
        lambda w: w.drains.update({_key(0): _rec(**w.drains[_key(0)].to_json())}),
        {_key(0)},
    ),
    ("its record escalated", _escalate, {_key(0)}),
    ("its drain being started", lambda w: w.starting.add(_key(1)), {_key(1)}),
    ("when it entered its window", lambda w: w.window_since.update({_key(2): NOW}), {_key(2)}),
    ("the policy", _set("policy", PlanPolicy(drain_margin=120.0)), ALL),
    ("the policy, for an equal one", _set("policy", PlanPolicy()), ALL),
    ("the escalation policy", _set("policy", PlanPolicy(escalation="fast")), ALL),
    ("the counters", lambda w: w.counters.update({"drains_started": 8}), set()),
]


def _cache_world() -> World:
    world = _world(WINDOWS, {1: 2, 2: 0})
    world.ads.update(_ad(0, NOW - 500, jobs=1), NOW - 500)
    world.drains[_key(0)] = _rec(request_id="3", phase="committed")
    return world


@pytest.mark.parametrize(
    ("change", "remade"), [(c, r) for _, c, r in CHANGES], ids=[n for n, _, _ in CHANGES]
)
def test_a_row_is_kept_while_what_it_is_made_of_holds(
    change: Callable[[World], None], remade: set[str]
) -> None:
    """The machine, its nodes' ads and whether each is lost, the drain record (the same
    object) and whether it is escalated, when it entered its window, the policy (the same
    object): a row's plan and state are kept while these hold, made again when one
    changes, and the same as made anew."""
    world = _cache_world()
    view = PlanView()
    first = {plan.key: plan for plan, _ in view.rows(world.inputs(), world.now, with_blockers=True)}
    change(world)
    second = view.rows(world.inputs(), world.now, with_blockers=True)
    kept = {plan.key for plan, _ in second if plan is first[plan.key]}
    assert kept == ALL - remade
    assert second == PlanView().rows(world.inputs(), world.now, with_blockers=True)


def test_a_machine_that_leaves_the_schedule_leaves_the_caches() -> None:
    """A schedule that replaces one machine by another (as many machines as before, no
    row written): nothing made of the one that left is kept; the others' plans are."""
    world = _cache_world()
    view = PlanView()
    first = {plan.key: plan for plan, _ in view.rows(world.inputs(), world.now, with_blockers=True)}
    world.state.update_schedule(_schedule({0: 7200.0, 3: 7800.0, 2: 8400.0}))
    second = {
        plan.key: plan for plan, _ in view.rows(world.inputs(), world.now, with_blockers=True)
    }
    assert set(second) == {_key(0), _key(3), _key(2)}
    assert {k for k, plan in second.items() if plan is first.get(k)} == {_key(0), _key(2)}
    assert _key(1) not in view.row_texts
    assert all(_key(1) not in cache for cache in view._plan_cache.values())


@pytest.mark.parametrize("with_blockers", [True, False])
def test_rows_with_and_without_blockers_are_made_again_when_the_other_is_asked(
    with_blockers: bool,
) -> None:
    world = _cache_world()
    view = PlanView()
    first = view.rows(world.inputs(), world.now, with_blockers=with_blockers)
    other = view.rows(world.inputs(), world.now, with_blockers=not with_blockers)
    assert all(a[0] is not b[0] for a, b in zip(first, other, strict=True))
    assert [state.with_blockers for _, state in other] == [not with_blockers] * len(WINDOWS)


def test_under_the_immediate_policy_nothing_is_kept() -> None:
    """The drain start is ``now``: every row is made again, every time."""
    world = _cache_world()
    world.policy = PlanPolicy(drain_policy="immediate")
    view = PlanView()
    first = view.rows(world.inputs(), world.now, with_blockers=True)
    world.now += 1
    second = view.rows(world.inputs(), world.now, with_blockers=True)
    assert all(a[0] is not b[0] for a, b in zip(first, second, strict=True))
    assert [plan.drain_start for plan, _ in second] == [world.now] * len(WINDOWS)


def test_a_new_schedule_lets_go_of_the_rows_of_the_machines_it_drops() -> None:
    world = _cache_world()
    view = PlanView()
    view.body(world.inputs(), world.now)
    assert set(view.row_texts) == ALL
    world.state.update_schedule(_schedule({1: 7800.0}))
    assert [m.key for m in view.scheduled(world.state.machines())] == [_key(1)]
    assert set(view.row_texts) == {_key(1)}


# ---------------------------------------------------------------------------- the reply


def _reply_world() -> World:
    """Machines late and on time, in schedule order unlike their windows' order: n0 (its
    window in 40 min, a job promised 2 hours: late), n1 (in 20 min, empty: on time), n2
    (in 30 min, late), n3 (in 30 min as n2, late: after n2), n4 (in 10 min, late, and
    DOWN), n5 (in an hour, no node); n2's drain the master's, escalated; n3's being
    started; n0's figures stale."""
    world = _world(
        {0: 2400.0, 1: 1200.0, 2: 1800.0, 3: 1800.0, 4: 600.0, 5: 3600.0},
        {0: 1, 1: 0, 2: 2, 3: 1, 4: 3},
    )
    world.state.down([_id(4)])
    world.drains[_key(2)] = _rec(request_id="4", phase="committed", escalated=True)
    world.starting.add(_key(3))
    world.window_since[_key(0)] = NOW + 1
    return world


def _machines(reply: dict[str, Any]) -> list[str]:
    return [row["machine_id"]["hostname"] for row in reply["machines"]]


@pytest.mark.parametrize(
    ("late", "limit", "machines", "matched"),
    [
        (False, None, ["n0.test", "n1.test", "n2.test", "n3.test", "n4.test", "n5.test"], 6),
        (False, 2, ["n0.test", "n1.test"], 6),
        (False, 0, [], 6),
        (True, None, ["n4.test", "n2.test", "n3.test", "n0.test"], 4),  # window-start order
        (True, 3, ["n4.test", "n2.test", "n3.test"], 4),
        (True, 100, ["n4.test", "n2.test", "n3.test", "n0.test"], 4),
        (True, 0, [], 4),
    ],
)
@pytest.mark.parametrize("encoded", [False, True])
def test_late_and_limit_choose_the_rows_and_the_totals_count_every_machine(
    late: bool, limit: int | None, machines: list[str], matched: int, encoded: bool
) -> None:
    world = _reply_world()
    view = PlanView()
    everything = view.reply(world.inputs(), world.now)
    if encoded:
        reply = orjson.loads(view.body(world.inputs(), world.now, late=late, limit=limit))
    else:
        reply = view.reply(world.inputs(), world.now, late=late, limit=limit)
    assert (_machines(reply), reply["matched"]) == (machines, matched)
    assert reply["totals"] == everything["totals"]
    if late and limit is None:  # the rows late by their promises or to be escalated
        assert set(machines) == {
            row["machine_id"]["hostname"]
            for row in everything["machines"]
            if row["on_time"] is False or (row["as_planned"] or {}).get("will_escalate")
        }


def test_the_totals_show_the_counters_the_nodes_and_the_policy() -> None:
    world = _reply_world()
    world.policy = PlanPolicy(drain_margin=90.0, escalation="fast")
    reply = PlanView().reply(world.inputs(), world.now)
    assert reply["now"] == world.now
    assert reply["policy"] == {
        "drain_policy": "just_in_time",
        "drain_margin": 90.0,
        "escalation": "fast",
        "up_after_window": False,
        "on_all_accepted": "drain_now",
    }
    totals = reply["totals"]
    assert (totals["drains_started"], totals["nodes"], totals["machines"]) == (7, 5, 6)
    assert totals["modes"] == {"UP": 0, "DRAINING": 5, "DOWN": 1}
    assert list(reply) == ["now", "policy", "machines", "matched", "totals", "after_window"]


def test_the_body_is_the_reply_byte_for_byte_as_its_state_changes() -> None:
    """Written from the rows' templates, the body is the reply as orjson writes it: with
    and without blockers, late, limited, second after second as the rows' states change
    (the time, a lost node, a drain started and escalated, a window entered)."""
    world = _reply_world()
    view = PlanView()
    rows: list[dict[str, Any]] = []
    for step in range(6):
        for late in (False, True):
            for with_blockers in (True, False):
                for limit in (None, 2):
                    asked: dict[str, Any] = {
                        "with_blockers": with_blockers,
                        "late": late,
                        "limit": limit,
                    }
                    body = view.body(world.inputs(), world.now, **asked)
                    plain = view.reply(world.inputs(), world.now, **asked)
                    assert body == orjson.dumps(plain)
                    rows.extend(plain["machines"])
        world.now += 130
        if step == 1:
            world.drains[_key(0)] = _rec(request_id="5", phase="committed")
            world.starting.clear()
        if step == 2:
            _escalate(world)
            world.window_since[_key(1)] = world.now
        if step == 3:  # n1 reports again; the others' ads age until they are lost
            world.ads.update(_ad(1, world.now, jobs=2), world.now)
    assert any(n["lost"] for r in rows for n in r["nodes"])
    assert any(r["as_planned"]["cuts"] for r in rows if r["node"])  # written from a template
    assert any(not r["as_planned"]["cuts"] for r in rows if r["node"])  # written the fast way
    assert set(view.row_texts) == {_key(n) for n in range(6)}


def test_a_plan_orjson_refuses_is_written_by_json_as_the_response_class_would() -> None:
    """An integer beyond 64 bits in an ad: the rows cannot be written by orjson; the body
    is the reply, at the same ``now``, as json writes it."""
    world = _reply_world()
    ad = _ad(1, NOW, jobs=0)
    ad["machine"]["TotalMachineDrainingBadput"] = 2**70
    world.ads.update(ad, NOW)
    view = PlanView()
    for late in (False, True):
        body = view.body(world.inputs(), world.now, late=late)
        plain = view.reply(world.inputs(), world.now, late=late)
        assert body == json.dumps(
            plain, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
        ).encode("utf-8")
    statistics = json.loads(view.body(world.inputs(), world.now))["machines"][1]["statistics"]
    assert statistics["TotalMachineDrainingBadput"] == 2**70


def test_a_row_prepared_ahead_is_the_row_the_body_writes() -> None:
    world = _reply_world()
    view = PlanView()
    inputs = world.inputs()
    for plan in view.plans(inputs, world.now):
        if plan.node is not None:
            view.prepare_row(plan, inputs, world.now)
    prepared = dict(view.row_texts)
    assert len(prepared) == 5  # every machine with a node
    body = view.body(inputs, world.now)
    assert body == orjson.dumps(view.reply(inputs, world.now))
    assert all(view.row_texts[key] is text for key, text in prepared.items())


def test_the_plans_a_pass_acts_on_read_the_records_and_the_drains_being_started() -> None:
    world = _reply_world()
    plans = PlanView().plans(world.inputs(), world.now)
    records = {plan.machine.machine_id["hostname"]: plan.drain_record for plan in plans}
    assert records["n2.test"] is world.drains[_key(2)]
    assert records["n3.test"] is STARTING
    assert records["n0.test"] is None
    assert [plan.node_name for plan in plans] == [
        "n0.test",
        "n1.test",
        "n2.test",
        "n3.test",
        "n4.test",
        None,
    ]


def test_the_view_loads_without_trio_or_sockets() -> None:
    code = (
        "import sys\n"
        "import nodeagent.master._plan_view\n"
        "bad = {'trio', 'httpx', 'httpcore', 'fastapi', 'hypercorn', 'psutil', 'sqlite3',\n"
        "       'socket', 'asyncio', 'pydantic'}\n"
        "print(sorted(bad & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------- after the window


def test_the_machines_still_out_of_service_after_their_window_are_listed_whatever_the_rows() -> (
    None
):
    """Machine 0's window ended an hour ago (DRAINING), machine 2's too (DOWN), machine
    1's is still open: only 0 and 2, in schedule order, with or without ``late`` and
    ``limit``; a machine brought UP leaves the list."""
    world = _world({0: -7200.0, 1: -3000.0, 2: -7000.0}, {0: 1, 1: 1, 2: 0})
    world.state.down([_id(2)])
    view = PlanView()
    every = view.reply(world.inputs(), world.now)
    for reply in (every, view.reply(world.inputs(), world.now, late=True, limit=0)):
        listed = [(m["machine_id"], m["mode"], m["window"]["end"]) for m in reply["after_window"]]
        assert listed == [
            (_id(0).to_json(), "DRAINING", NOW - 3600),
            (_id(2).to_json(), "DOWN", NOW - 3400),
        ]
        assert [m["node"] for m in reply["after_window"]] == [f"n{n}.test" for n in (0, 2)]
    world.state.up([_id(2)])
    reply = view.reply(world.inputs(), world.now)
    assert [m["mode"] for m in reply["after_window"]] == ["DRAINING"]
    assert orjson.loads(view.body(world.inputs(), world.now))["after_window"] == json.loads(
        json.dumps(reply["after_window"])
    )


# ------------------------------------------------------------- streamed, filtered, paged


def _lines(chunks: Iterable[bytes]) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in b"".join(chunks).splitlines()]


def _streamed(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The streamed lines as the JSON document's keys (head, rows, end)."""
    assert list(lines[0]) == ["plan"]
    assert list(lines[-1]) == ["end"]
    assert all(list(line) == ["row"] for line in lines[1:-1])
    end = lines[-1]["end"]
    return {
        **lines[0]["plan"],
        "matched": end["matched"],
        "machines": [line["row"] for line in lines[1:-1]],
        "totals": end["totals"],
        "after_window": end["after_window"],
        "next": end["next"],
    }


@pytest.mark.parametrize("late", [False, True])
@pytest.mark.parametrize("limit", [None, 0, 2, 100])
@pytest.mark.parametrize("blockers", [True, False])
@pytest.mark.parametrize("chunk", [1, 2, 256])
@pytest.mark.parametrize("kept_most", [_plan_view.ROWS_KEPT_MOST, 1])
def test_the_stream_is_the_reply_in_lines(
    late: bool, limit: int | None, blockers: bool, chunk: int, kept_most: int
) -> None:
    """Whether the reply keeps its rows or lets go of them (a reply of more than
    ``kept_most`` rows), the lines are the reply's."""
    world = _reply_world()
    view = PlanView(rows_kept_most=kept_most)
    reply = view.reply(world.inputs(), world.now, with_blockers=blockers, late=late, limit=limit)
    stream = view.stream(
        world.inputs(), world.now, with_blockers=blockers, late=late, limit=limit, chunk=chunk
    )
    streamed = _streamed(_lines(stream))
    more = limit is not None and 0 < limit < reply["matched"]  # limit=0: no row to go on from
    assert (streamed.pop("next") is not None) == more
    assert streamed == orjson.loads(orjson.dumps(reply))


def test_the_stream_sends_its_head_before_it_makes_a_row() -> None:
    world = _reply_world()
    made: list[str] = []

    def find(hostname: str | None, ip: str | None) -> list[Any]:
        made.append(str(hostname))
        return world.ads.find(hostname, ip)

    inputs = dataclasses.replace(world.inputs(), find=find)
    chunks = PlanView().stream(inputs, world.now, chunk=2)
    assert orjson.loads(next(chunks)) == {"plan": {"now": world.now, "policy": ANY_POLICY}}
    assert made == []
    assert [
        orjson.loads(line)["row"]["machine_id"]["hostname"] for line in next(chunks).splitlines()
    ] == ["n0.test", "n1.test"]
    assert made == ["n0.test", "n1.test"]


@pytest.mark.parametrize(
    ("machines", "rows"),
    [(20, [3, 6, 8, 3]), (3, [3]), (4, [3, 1]), (11, [3, 6, 2]), (1, [1]), (0, [])],
)
def test_the_stream_s_first_chunk_is_small_so_that_its_first_rows_leave_at_once(
    monkeypatch: pytest.MonkeyPatch, machines: int, rows: list[int]
) -> None:
    """Chunks of at most 8, a first chunk of at most 3, each next twice the one before:
    the rows of each chunk, between the head and the end; the same lines as in one
    chunk."""
    monkeypatch.setattr(_plan_view, "FIRST_CHUNK", 3)
    world = World()
    for n in range(machines):
        world.ads.update(_ad(n, world.now, jobs=1), world.now)
    world.state.update_schedule(_schedule({n: 3600.0 + n for n in range(machines)}))
    items = list(PlanView().stream(world.inputs(), world.now, chunk=8))
    assert [len(item.splitlines()) for item in items] == [1, *rows, 1]
    assert b"".join(items) == b"".join(PlanView().stream(world.inputs(), world.now, chunk=20))


@pytest.mark.parametrize(
    ("count", "chunk", "starts"),
    [
        (0, 256, [0]),
        (16, 256, [16]),
        (17, 256, [16, 17]),
        (1000, 256, [16, 48, 112, 240, 496, 752, 1000]),
        (100, 20, [16, 36, 56, 76, 96, 100]),
        (10, 4, [4, 8, 10]),
        (3, 0, [1, 2, 3]),  # a chunk of at least one machine
    ],
)
def test_each_chunk_is_twice_the_one_before_up_to_the_chunk(
    count: int, chunk: int, starts: list[int]
) -> None:
    assert chunk_starts(count, chunk) == starts


@pytest.mark.parametrize(
    ("windows", "machines", "looked_at"),
    [
        ((str(NOW + 1800.0),), (), ["n2.test", "n3.test"]),
        ((), ("10.0.0.5", "n1.test"), ["n1.test", "n5.test"]),
        ((str(int(NOW + 1800)),), ("n3.test",), ["n3.test"]),
    ],
)
def test_a_filtered_reply_looks_only_at_the_machines_it_selects(
    monkeypatch: pytest.MonkeyPatch,
    windows: tuple[str, ...],
    machines: tuple[str, ...],
    looked_at: list[str],
) -> None:
    """The view finds the machines of a window or a name in its catalog of the schedule:
    a filter is checked against those alone, not against every scheduled machine, and a
    second reply of the same schedule uses the same catalog."""
    world = _reply_world()
    seen: list[str] = []
    takes = PlanSelect.takes

    def spied(self: PlanSelect, machine: Any) -> bool:
        seen.append(str(machine.id.hostname))
        return takes(self, machine)

    monkeypatch.setattr(PlanSelect, "takes", spied)
    view = PlanView()
    select = PlanSelect.parse(windows=windows, machines=machines)
    for _ in range(2):
        rows = view.reply(world.inputs(), world.now, select=select)["machines"]
        assert [row["machine_id"]["hostname"] for row in rows] == looked_at
        assert sorted(seen) == sorted(looked_at)
        seen.clear()


ANY_POLICY = PlanView().reply(_reply_world().inputs(), NOW)["policy"]


@pytest.mark.parametrize(
    ("windows", "machines", "rows"),
    [
        ((), (), ["n0.test", "n1.test", "n2.test", "n3.test", "n4.test", "n5.test"]),
        ((str(NOW + 1800.0),), (), ["n2.test", "n3.test"]),
        ((str(NOW + 1800.0), str(NOW + 600)), (), ["n2.test", "n3.test", "n4.test"]),
        ((str(int(NOW + 600)),), (), ["n4.test"]),  # as an integer
        ((), ("n1.test", "10.0.0.5"), ["n1.test", "n5.test"]),  # by hostname, by ip
        ((str(NOW + 1800.0),), ("n3.test", "n4.test"), ["n3.test"]),  # both
    ],
)
def test_a_plan_of_some_windows_or_machines_makes_their_rows_only(
    windows: tuple[str, ...], machines: tuple[str, ...], rows: list[str]
) -> None:
    """Only the selected machines are looked up (their rows made), the totals count them,
    and their rows are the rows of the whole plan."""
    world = _reply_world()
    everything = PlanView().reply(world.inputs(), world.now)
    made: list[str] = []

    def find(hostname: str | None, ip: str | None) -> list[Any]:
        made.append(str(hostname))
        return world.ads.find(hostname, ip)

    inputs = dataclasses.replace(world.inputs(), find=find)
    select = PlanSelect.parse(windows=windows, machines=machines)
    reply = PlanView().reply(inputs, world.now, select=select)
    assert _machines(reply) == rows
    assert sorted(made) == sorted(rows)
    assert reply["machines"] == [
        r for r in everything["machines"] if r["machine_id"]["hostname"] in rows
    ]
    assert reply["totals"]["machines"] == len(rows)
    assert reply.pop("next", None) is None  # present when a filter is given
    assert ("next" in PlanView().reply(inputs, world.now, select=select)) == select.given
    streamed = _streamed(_lines(PlanView().stream(inputs, world.now, select=select, chunk=1)))
    assert streamed.pop("next") is None
    assert streamed == orjson.loads(orjson.dumps(reply))


@pytest.mark.parametrize("late", [False, True])
@pytest.mark.parametrize("limit", [1, 2, 3])
@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("kept_most", [_plan_view.ROWS_KEPT_MOST, 1])
def test_pages_followed_by_their_cursors_are_the_rows_of_one_reply(
    late: bool, limit: int, streamed: bool, kept_most: int
) -> None:
    world = _reply_world()
    view = PlanView(rows_kept_most=kept_most)
    whole = view.reply(world.inputs(), world.now, late=late)
    pages: list[dict[str, Any]] = []
    after: str | None = ""  # from the first row
    while after is not None:
        select = PlanSelect.parse(after=after)
        if streamed:
            page = _streamed(
                _lines(
                    view.stream(world.inputs(), world.now, late=late, limit=limit, select=select)
                )
            )
        else:
            page = orjson.loads(
                view.body(world.inputs(), world.now, late=late, limit=limit, select=select)
            )
        assert page["totals"] == whole["totals"]
        assert page["matched"] == whole["matched"] - sum(len(p["machines"]) for p in pages)
        pages.append(page)
        after = page["next"]
        assert len(pages) <= 6
    assert [row for page in pages for row in page["machines"]] == whole["machines"]
    assert len(pages) == max(1, -(-whole["matched"] // limit))


def test_a_cursor_whose_machine_left_or_moved_is_stale() -> None:
    world = _reply_world()
    view = PlanView()
    first = view.reply(world.inputs(), world.now, limit=2, select=PlanSelect.parse(after=""))
    select = PlanSelect.parse(after=first["next"])
    assert _machines(view.reply(world.inputs(), world.now, limit=2, select=select)) == [
        "n2.test",
        "n3.test",
    ]
    for windows in (
        {0: 2400.0, 2: 1800.0, 4: 600.0},
        {0: 2400.0, 1: 1300.0, 4: 600.0},
    ):  # n1 left, moved
        world.state.update_schedule(_schedule(windows))
        with pytest.raises(PlanQueryError) as raised:
            view.reply(world.inputs(), world.now, limit=2, select=select)
        assert (raised.value.code, raised.value.status) == ("plan.cursor_stale", 409)
        with pytest.raises(PlanQueryError):
            view.stream(world.inputs(), world.now, limit=2, select=select)


@pytest.mark.parametrize(
    ("windows", "machines", "after", "code"),
    [
        (("x",), (), None, "plan.bad_window"),
        (("",), (), None, "plan.bad_window"),
        (("inf",), (), None, "plan.bad_window"),
        (("nan",), (), None, "plan.bad_window"),
        ((), ("",), None, "plan.bad_machine"),
        ((), (" ",), None, "plan.bad_machine"),
        ((), (), "!!", "plan.bad_cursor"),
        ((), (), "e30", "plan.bad_cursor"),  # {}
        ((), (), "WzEsMl0", "plan.bad_cursor"),  # [1,2]
        ((), (), "WyJrIix0cnVlXQ", "plan.bad_cursor"),  # ["k",true]
    ],
)
def test_a_bad_window_machine_or_cursor_is_refused(
    windows: tuple[str, ...], machines: tuple[str, ...], after: str | None, code: str
) -> None:
    with pytest.raises(PlanQueryError) as raised:
        PlanSelect.parse(windows=windows, machines=machines, after=after)
    assert (raised.value.code, raised.value.status) == (code, 422)


def test_streams_interleaved_with_a_pass_and_a_new_schedule_give_the_rows_of_one_reply() -> None:
    """Two streams made a chunk at a time, with a reconcile pass (plans, rows prepared), a
    reply of other parameters and a new schedule between their chunks: each gives what
    one reply at its start gives, and the view's caches are left to the new schedule."""
    world = _reply_world()
    view = PlanView()
    inputs = world.inputs()
    wanted = [
        orjson.loads(view.body(inputs, world.now)),
        orjson.loads(view.body(inputs, world.now, with_blockers=False, late=True)),
    ]
    fresh = PlanView()
    streams: list[Iterator[bytes] | None] = [
        view.stream(inputs, world.now, chunk=1),
        view.stream(inputs, world.now, with_blockers=False, late=True, chunk=1),
    ]
    got: list[list[bytes]] = [[], []]
    steps = 0
    while streams[0] is not None or streams[1] is not None:
        for i, stream in enumerate(streams):
            if stream is None:
                continue
            chunk = next(stream, None)
            if chunk is None:
                streams[i] = None
            else:
                got[i].append(chunk)
        pass_inputs = world.inputs()
        for plan in view.plans(pass_inputs, world.now):  # a reconcile pass
            if plan.node is not None:
                view.prepare_row(plan, pass_inputs, world.now)
        view.body(pass_inputs, world.now, late=True, limit=1)
        steps += 1
        if steps == 3:
            world.state.update_schedule(_schedule({1: 1200.0, 4: 600.0}))
            fresh.body(world.inputs(), world.now)
    assert [_streamed(_lines(chunks)) for chunks in got] == [{**w, "next": None} for w in wanted]
    assert set(view.row_texts) <= {_key(1), _key(4)}
    assert view.body(world.inputs(), world.now) == fresh.body(world.inputs(), world.now)


@pytest.mark.parametrize("late", [False, True])
def test_a_streamed_row_orjson_refuses_is_written_by_json(late: bool) -> None:
    world = _reply_world()
    ad = _ad(1, NOW, jobs=0)
    ad["machine"]["TotalMachineDrainingBadput"] = 2**70
    world.ads.update(ad, NOW)
    view = PlanView()
    lines = [
        json.loads(line)
        for line in b"".join(
            view.stream(world.inputs(), world.now, late=late, chunk=2)
        ).splitlines()
    ]
    streamed = _streamed(lines)
    streamed.pop("next")
    assert streamed == view.reply(world.inputs(), world.now, late=late)
    if not late:
        assert streamed["machines"][1]["statistics"]["TotalMachineDrainingBadput"] == 2**70


@pytest.mark.parametrize(
    ("windows", "machines", "code", "said"),
    [
        ((str(NOW + 1.0),), (), "plan.unknown_window", "the windows start at"),
        ((str(int(NOW + 600) * 10**9),), (), "plan.unknown_window", "reads as nanoseconds"),
        ((str(int(NOW + 600) * 1000),), (), "plan.unknown_window", "reads as milliseconds"),
        ((), ("n1",), "plan.unknown_machine", "did you mean n1.test?"),
        ((), ("n1.test", "10.9.9.9"), "plan.unknown_machine", "machine=10.9.9.9"),
        ((), ("other.test",), "plan.unknown_machine", "no scheduled machine"),
    ],
)
def test_a_filter_that_names_no_scheduled_machine_or_window_is_refused(
    windows: tuple[str, ...], machines: tuple[str, ...], code: str, said: str
) -> None:
    """A mistyped filter (a window's start in another unit, a short host name, a machine
    not scheduled) is said, with what was meant, not answered with an empty plan."""
    world = _reply_world()
    select = PlanSelect.parse(windows=windows, machines=machines)
    for make in (
        lambda: PlanView().reply(world.inputs(), world.now, select=select),
        lambda: list(PlanView().stream(world.inputs(), world.now, select=select)),
    ):
        with pytest.raises(PlanQueryError) as refused:
            make()
        assert (refused.value.code, refused.value.status) == (code, 422)
        assert said in str(refused.value)


#: Windows starting at a fraction of a second, as a schedule in nanoseconds gives them:
#: n0 and n1 within one second, n2 in another, n3 at a whole second.
FRACTIONS = {0: 600.2958415, 1: 600.75, 2: 1200.5, 3: 1800.0}
#: Each machine's window start, as the plan reads it from the schedule's nanoseconds.
STARTED = {n: int((NOW + s) * 1e9) / 1_000_000_000 for n, s in FRACTIONS.items()}
SECOND = int(NOW) + 600  # n0's and n1's


@pytest.mark.parametrize(
    ("windows", "rows"),
    [
        ((str(SECOND),), ["n0.test", "n1.test"]),  # two windows in one second
        ((f"{SECOND}.0",), ["n0.test", "n1.test"]),
        ((repr(STARTED[0]),), ["n0.test"]),  # exactly, as the rows show it
        ((repr(STARTED[1]),), ["n1.test"]),
        ((str(SECOND + 600),), ["n2.test"]),
        ((str(SECOND + 1200),), ["n3.test"]),  # a whole start, by its second
        ((repr(STARTED[2]), str(SECOND + 1200)), ["n2.test", "n3.test"]),
        ((repr(STARTED[0]), str(SECOND)), ["n0.test", "n1.test"]),
    ],
)
def test_a_whole_second_selects_the_windows_starting_within_it(
    windows: tuple[str, ...], rows: list[str]
) -> None:
    """A window filter in whole seconds selects every window starting in that second; one
    with a fraction the window starting exactly then; the reply and the stream agree."""
    world = _world(FRACTIONS, {0: 1, 1: 0, 2: 1, 3: 0})
    everything = PlanView().reply(world.inputs(), world.now)
    assert {r["machine_id"]["hostname"]: r["window"]["start"] for r in everything["machines"]} == {
        f"n{n}.test": start for n, start in STARTED.items()
    }
    select = PlanSelect.parse(windows=windows)
    reply = PlanView().reply(world.inputs(), world.now, select=select)
    assert _machines(reply) == rows
    assert reply["totals"]["machines"] == len(rows)
    streamed = _streamed(_lines(PlanView().stream(world.inputs(), world.now, select=select)))
    assert streamed == orjson.loads(orjson.dumps(reply))


LISTED = f"the windows start at {STARTED[0]!r}, {STARTED[1]!r}, {STARTED[2]!r}, {SECOND + 1200})"


@pytest.mark.parametrize(
    ("window", "said"),
    [
        (str(SECOND + 1), f"window={SECOND + 1}: no window starts then ({LISTED}"),
        (f"{SECOND - 1}.0", f"window={SECOND - 1}: no window starts then ({LISTED}"),
        (str(SECOND + 0.5), f"window={SECOND + 0.5!r}: no window starts then ({LISTED}"),
        (
            str(SECOND * 10**9),
            f"it reads as nanoseconds; the start in seconds is {SECOND}",
        ),
        (
            str(int(STARTED[0] * 1000)),  # its milliseconds, cut: its second
            f"it reads as milliseconds; the start in seconds is {SECOND}",
        ),
        (
            str(int(STARTED[2] * 1000)),  # exactly its milliseconds
            f"it reads as milliseconds; the start in seconds is {STARTED[2]!r}",
        ),
        (
            str(int((NOW + FRACTIONS[0]) * 1e9)),  # the schedule's nanoseconds
            f"it reads as nanoseconds; the start in seconds is {STARTED[0]!r}",
        ),
        (
            str((SECOND + 1200) * 10**6),
            f"it reads as microseconds; the start in seconds is {SECOND + 1200}",
        ),
    ],
)
def test_a_window_filter_naming_no_window_is_refused_with_the_starts_or_its_unit(
    window: str, said: str
) -> None:
    """A second no window starts within, or a fraction no window starts at, lists the
    starts; a number in another unit names the start as the filter takes it (a whole
    second, or the exact start when the number gives it)."""
    world = _world(FRACTIONS, {0: 1, 1: 0, 2: 1, 3: 0})
    select = PlanSelect.parse(windows=(window,))
    with pytest.raises(PlanQueryError) as refused:
        PlanView().reply(world.inputs(), world.now, select=select)
    assert (refused.value.code, refused.value.status) == ("plan.unknown_window", 422)
    assert said in str(refused.value)


# ------------------------------------------------------------------- the rows kept


def _framed(world: World) -> set[str]:
    """The nodes whose forecast holds its blockers' frames at ``world.now``."""
    return {
        entry.machine["Machine"]
        for entry in world.ads.entries()
        if entry.forecast.ready(world.now, blockers=True)
    }


WRITTEN = ["n0.test", "n1.test", "n2.test", "n3.test", "n4.test", "n5.test"]
LATE_ORDER = ["n4.test", "n2.test", "n3.test", "n0.test"]


@pytest.mark.parametrize(
    ("late", "limit", "after", "kept_most", "chunk", "kept"),
    [
        (False, None, None, 10, 256, WRITTEN),  # every row written, and kept
        (False, 2, None, 10, 256, WRITTEN[:2]),  # the rows written alone
        (False, 0, None, 10, 256, []),
        (False, 2, 1, 10, 256, WRITTEN[1:3]),  # after the cursor of the first page (n0)
        (False, None, None, 5, 256, []),  # a chunk of more than kept_most: none kept
        (False, None, None, 3, 1, WRITTEN[:3]),  # the first kept_most, a chunk at a time
        (False, None, None, 4, 2, WRITTEN[:4]),
        (False, 5, None, 5, 256, WRITTEN[:5]),
        (True, None, None, 10, 256, LATE_ORDER),  # the late rows sent
        (True, 1, None, 10, 256, LATE_ORDER[:1]),
        (True, None, None, 3, 256, []),
        (True, None, None, 3, 1, LATE_ORDER[:3]),
        (True, 3, None, 3, 256, LATE_ORDER[:3]),
    ],
)
@pytest.mark.parametrize("streamed", [False, True])
def test_a_reply_keeps_the_first_rows_it_writes_and_no_other(
    late: bool,
    limit: int | None,
    after: int | None,
    kept_most: int,
    chunk: int,
    kept: list[str],
    streamed: bool,
) -> None:
    """A reply marks read (the passes keep them current: ``keeps_row``) and keeps the
    templates and blockers' frames of the rows it writes, at most ``rows_kept_most`` (the
    first chunks that fit), and none of those it only counts or writes past them: it lets
    go of their nodes' frames (a whole plan of a large pool). The text is the same."""
    world, other = _reply_world(), _reply_world()  # the other's forecasts for the checks
    view = PlanView(rows_kept_most=kept_most)
    select = None
    if after is not None:
        first = PlanView().reply(
            other.inputs(), NOW, limit=after, select=PlanSelect.parse(after="")
        )
        select = PlanSelect.parse(after=first["next"])
    make = view.stream if streamed else view.document
    text = b"".join(
        make(world.inputs(), world.now, late=late, limit=limit, select=select, chunk=chunk)
    )
    expected = PlanView().body(other.inputs(), NOW, late=late, limit=limit, select=select)
    if streamed:
        assert _streamed(_lines([text]))["machines"] == orjson.loads(expected)["machines"]
    else:
        assert text == expected
    keys = {_key(int(name[1])) for name in kept}
    assert {k for k in view.row_texts if view.keeps_row(k, world.now)} == keys
    assert set(view.row_texts) == keys
    # the rows kept listing blockers have them (n1's node is empty, n5 has none)
    assert _framed(world) == set(kept) - {"n1.test", "n5.test"}


def test_a_reply_that_keeps_no_row_leaves_those_another_reply_keeps() -> None:
    """A whole plan of more than ``rows_kept_most`` rows writes the rows a window's reply
    read lately from their templates, and leaves them (and their frames) kept."""
    world = _reply_world()
    view = PlanView(rows_kept_most=2)
    window = PlanSelect.parse(windows=(str(NOW + 1800.0),))  # n2's and n3's
    view.body(world.inputs(), world.now, select=window)
    kept = {_key(2), _key(3)}
    texts = {key: view.row_texts[key] for key in kept}
    assert set(view.row_texts) == kept
    assert _framed(world) == {"n2.test", "n3.test"}
    world.now += 5.0
    other = _reply_world()  # its forecasts for the check
    other.now = world.now
    assert view.body(world.inputs(), world.now) == PlanView().body(other.inputs(), world.now)
    assert dict(view.row_texts) == texts  # the same templates, not marked read again
    assert all(view.row_texts[key].read_at == NOW for key in kept)
    assert _framed(world) == {"n2.test", "n3.test"}
