"""The master's reconcile logic on virtual time, with an agent link that fails."""

from __future__ import annotations

import itertools
import json
import math
import sqlite3
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent._auth import Scope, create_token, generate_key, load_key
from nodeagent._clock import TrioClock
from nodeagent._peer import AgentCallFailed
from nodeagent._store import DocumentStore, StoreError
from nodeagent.agent._schemas import drain_json
from nodeagent.master import _master as _master_module
from nodeagent.master._ad_pushes import Principals
from nodeagent.master._adstore import AdStore, may_hold_control
from nodeagent.master._api import _json_bytes, push_ad, push_reply_bytes
from nodeagent.master._maintenance import (
    MachineId,
    MaintenanceSchedule,
    MaintenanceState,
    Unavailability,
    Window,
)
from nodeagent.master._master import Master, loop_idle
from nodeagent.master._plan import PlanPolicy, planned_escalation
from nodeagent.master._plan_view import ROWS_KEPT_FOR, PlanInputs
from slots import (
    Action,
    BeforeWindow,
    JobSpec,
    Machine,
    MachinePolicy,
    Resources,
    Schedule,
    SignalJob,
    SlotsError,
)

EPOCH = 1_800_000_000.0


class DownLink:
    """Every call fails as an unreachable agent would; calls are counted with their time."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def call(
        self, address: str, method: str, path: str, *, node: str, actor: str, body: Any = None
    ) -> dict[str, Any]:
        self.calls.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        raise AgentCallFailed("agent.unreachable", f"{address}: connection refused")


def node_ad(now: float) -> dict[str, Any]:
    machine = Machine(
        host="n1.test",
        ip="10.0.0.1",
        address="http://10.0.0.1:9621",
        total=Resources(cpus=4),
        # admits any promise: its drain is due its retirement time before a window
        policy=MachinePolicy(max_job_retirement_time=60, before_window=BeforeWindow.ADMIT),
        now=now,
    )
    machine.claim(now, resources=Resources(cpus=1), spec=JobSpec())
    return machine.ad(now)


def daemon_token(key: bytes, *, now: float) -> str:
    """The DAEMON token of node ``n1.test``, as its agent pushes with."""
    return create_token(
        key, subject="agent", scope=Scope.DAEMON, node="n1.test", lifetime_s=60, now=now
    )


def make_master(tmp_path: Path, link: DownLink, *, ads: AdStore | None = None) -> Master:
    clock = TrioClock(EPOCH)
    return Master(
        store=DocumentStore(tmp_path / "master.db"),
        link=link,
        clock=clock,
        ads=AdStore(lifetime=10_000) if ads is None else ads,
        policy=PlanPolicy(drain_policy="immediate"),
        reconcile_interval=1.0,
    )


def schedule(start: float) -> MaintenanceSchedule:
    return MaintenanceSchedule(
        windows=(
            Window(
                machine_ids=(MachineId(hostname="n1.test", ip="10.0.0.1"),),
                unavailability=Unavailability(start_ns=int(start * 1e9), duration_ns=None),
            ),
        )
    )


async def test_a_failing_node_is_retried_with_backoff(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    link = DownLink()
    master = make_master(tmp_path, link)
    master.receive_ad(node_ad(EPOCH))
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")
    t0 = trio.current_time()
    with trio.move_on_after(40):
        await master.run()
    offsets = [round(t - t0) for t in link.calls]
    assert offsets == [0, 2, 6, 14, 30]  # not once a second
    assert master.counters.drain_failures == 5


async def test_other_daemons_ads_are_kept_out_of_the_nodes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    master = make_master(tmp_path, DownLink())
    reply = master.receive_ad(
        {"machine": {"MyType": "Defrag", "Name": "defrag-main", "DrainSuccesses": 3}, "slots": []}
    )
    assert reply == {"machine_id": None, "mode": None, "unavailability": None}
    master.receive_ad(node_ad(EPOCH))
    now = master.clock.now()
    assert [a["Name"] for a in master.ads.query(now)] == ["n1.test"]
    assert master.ads.query(now, my_type="Defrag")[0]["DrainSuccesses"] == 3
    assert master.plan()["totals"]["nodes"] == 1


async def test_an_ad_with_a_non_finite_number_is_refused(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:

    master = make_master(tmp_path, DownLink())
    key = b"k" * 32
    token = daemon_token(key, now=master.clock.now())
    body = b'{"machine": {"Name": "n1.test", "CpuUsage": NaN}, "slots": []}'
    reply = push_ad(master, Principals(master.clock.now, key), f"Bearer {token}", body, unix=False)
    assert reply.status == 422
    assert master.ads.query(master.clock.now()) == []


#: Where a control character hides in a pushed ad → refused (True) or taken.
CONTROL_CHARACTERS = {
    "a newline in the machine's string": (("machine", "DrainReason", "x\nStart = true"), True),
    "ESC in a slot's string": (("slot", "RemoteOwner", "\x1b[2Jalice"), True),
    "DEL": (("machine", "DrainReason", "x\x7f"), True),
    "a Unicode line separator": (("machine", "DrainReason", "x\u2028y"), True),
    "a newline inside a record": (("machine", "Unavailability", {"Note": "a\rb"}), True),
    "a newline in a list": (("machine", "Racks", ["r1", "r2\n"]), True),
    "a tab is text": (("machine", "DrainReason", "a\tb"), False),
    "an escaped newline is text": (("machine", "DrainHookOutput", "line 1\\nline 2"), False),
}


@pytest.mark.parametrize(
    ("where", "refused"), CONTROL_CHARACTERS.values(), ids=list(CONTROL_CHARACTERS)
)
async def test_an_ad_whose_text_holds_a_control_character_is_refused(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    where: tuple[str, str, Any],
    refused: bool,
) -> None:
    """The ClassAd long format cannot carry them (a newline would print another attribute),
    and a terminal would obey them: refused with the attribute named, nothing stored."""
    master = make_master(tmp_path, DownLink())
    ad = node_ad(EPOCH)
    part, name, value = where
    (ad["machine"] if part == "machine" else ad["slots"][-1])[name] = value
    if refused:
        with pytest.raises(SlotsError, match=f"{name} holds a control character"):
            master.receive_ad(ad)
        assert master.ads.query(master.clock.now()) == []
    else:
        master.receive_ad(ad)
        assert master.ads.query(master.clock.now())[0]["Name"] == "n1.test"


@pytest.mark.parametrize(
    ("where", "refused"), CONTROL_CHARACTERS.values(), ids=list(CONTROL_CHARACTERS)
)
@pytest.mark.parametrize("ascii_only", [True, False], ids=["escaped", "utf-8"])
async def test_a_pushed_ad_is_judged_the_same_whatever_its_json_escapes(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    where: tuple[str, str, Any],
    refused: bool,
    ascii_only: bool,
) -> None:
    """The push reads the body's bytes first (an ad whose JSON escapes no control
    character holds none, and its texts are not searched again): the verdict is that of
    the ad itself, whether its JSON escapes every non-ASCII character or none."""
    key_file = tmp_path / "pool.key"
    generate_key(key_file)
    key = load_key(key_file)
    master = make_master(tmp_path, DownLink())
    token = daemon_token(key, now=EPOCH)
    ad = node_ad(EPOCH)
    part, name, value = where
    (ad["machine"] if part == "machine" else ad["slots"][-1])[name] = value
    body = json.dumps(ad, ensure_ascii=ascii_only).encode()
    reply = push_ad(master, Principals(master.clock.now, key), f"Bearer {token}", body, unix=False)
    if refused:
        assert reply.status == 422
        assert b"holds a control character" in reply.body
        assert master.ads.query(master.clock.now()) == []
    else:
        assert reply.status == 200
        assert master.ads.query(master.clock.now())[0]["Name"] == "n1.test"


@pytest.mark.parametrize(
    ("body", "may"),
    [
        (b'{"a": "plain text", "b": [1, 2.5, true, null]}', False),
        ('{"a": "caf\u00e9 \u00e0 la cr\u00e8me"}'.encode(), False),  # UTF-8, no 0xE2
        (b'{"a": "x\\ny"}', True),
        (b'{"a": "\\u0007"}', True),
        (b'{"a": "a tab\\t, quotes \\"q\\""}', True),  # any escape: searched one by one
        (b'{"a": "x\x7fy"}', True),
        ('{"a": "x\u2028y"}'.encode(), True),
        ('{"a": "10 \u20ac"}'.encode(), True),  # 0xE2 too: searched one by one
    ],
)
def test_what_json_may_hold_a_control_character(body: bytes, may: bool) -> None:
    assert may_hold_control(body) is may


_TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]))
_INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=300)
@given(
    st.dictionaries(
        _TEXT, st.one_of(_TEXT, _INT64, st.none(), st.dictionaries(_TEXT, _INT64 | st.none()))
    )
)
def test_a_push_reply_is_written_as_the_rest_of_the_api_writes_json(reply: dict[str, Any]) -> None:
    assert push_reply_bytes(reply) == _json_bytes(reply)


def many_nodes_schedule(count: int, start: float) -> MaintenanceSchedule:
    return MaintenanceSchedule(
        windows=(
            Window(
                machine_ids=tuple(
                    MachineId(hostname=f"n{i}.test", ip=f"10.0.0.{i}") for i in range(count)
                ),
                unavailability=Unavailability(start_ns=int(start * 1e9), duration_ns=None),
            ),
        )
    )


def five_nodes_scheduled(master: Master) -> None:
    """Five nodes running the same jobs, scheduled a week ahead."""
    template = node_ad(EPOCH)
    for i in range(5):
        machine = {**template["machine"], "Name": f"n{i}.test", "Machine": f"n{i}.test"}
        master.receive_ad(
            {"machine": {**machine, "MachineIp": f"10.0.0.{i}"}, "slots": template["slots"]}
        )
    master.set_schedule(many_nodes_schedule(5, EPOCH + 7 * 86400), actor="ops")


async def test_passes_make_a_bounded_number_of_forecasts_and_the_row_templates_of_rows_read(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A pass makes at most ``forecasts_per_pass`` forecasts, without their blockers; the
    machines whose rows a reply wrote lately get their blockers and row templates made
    too, with each new piece, until nobody has read their rows for ``ROWS_KEPT_FOR``."""
    master = make_master(tmp_path, DownLink(), ads=AdStore(lifetime=30 * 86400))
    master.forecasts_per_pass = 2
    master.policy = PlanPolicy()  # just in time: no drain is due an hour ahead
    five_nodes_scheduled(master)
    entries = master.ads.entries()

    def made(*, blockers: bool = False) -> int:
        now = master.clock.now()
        return sum(
            p.node.forecast.ready(
                now,
                window_start=p.window_start,
                escalation=planned_escalation(p, master.policy.escalation),
                blockers=blockers,
            )
            for p in master.plans(now)
            if p.node is not None
        )

    def written() -> int:
        """Rows whose text a reply can write from a template made for the current piece."""
        now = master.clock.now()
        current = 0
        for plan in master.plans(now):
            text = master.plan_view.row_texts.get(plan.key)
            assert plan.node is not None
            found = plan.node.forecast.piece_at(
                now,
                window_start=plan.window_start,
                escalation=planned_escalation(plan, master.policy.escalation),
            )
            fast = None if text is None else text._fast
            current += fast is not None and found is not None and fast.piece is found[0]
        return current

    def whole_plan() -> bytes:
        now = master.clock.now()
        return b"".join(master.plan_view.stream(master.plan_inputs(now), now))

    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        assert (made(), made(blockers=True), len(master.plan_view.row_texts)) == (2, 0, 0)
        master.reconcile(nursery)
        master.reconcile(nursery)
        assert (made(), made(blockers=True), len(master.plan_view.row_texts)) == (5, 0, 0)
        row = master.plan()["machines"][0]
        assert row["expected"]["graceful"]["completion"] == EPOCH + 600  # the vacate time
        assert whole_plan().count(b'{"row"') == 5  # the reply makes blockers and templates
        assert (made(blockers=True), written()) == (5, 5)
        # Past the pieces' end, the passes make the new ones with blockers and templates.
        first = min(e.forecast.made_until() for e in entries)
        autojump_clock.jump(first + 1 - master.clock.now())
        assert made(blockers=True) < 5
        for _ in range(3):
            master.reconcile(nursery)
        assert (made(blockers=True), written()) == (5, 5)
        # Nobody reads the rows for longer than ROWS_KEPT_FOR: new pieces without them.
        autojump_clock.jump(ROWS_KEPT_FOR + 1)
        ends = [e.forecast.made_until() for e in entries]
        autojump_clock.jump(max(max(ends) + 1 - master.clock.now(), 0))
        for _ in range(3):
            master.reconcile(nursery)
        assert (made(), made(blockers=True)) == (5, 0)


async def test_a_pass_makes_again_the_forecasts_whose_piece_ended_and_no_other(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A forecast made ahead holds until its piece's last second: the passes before it make
    none, the first pass after it makes again those that ended (no ad came in)."""
    master = make_master(tmp_path, DownLink())
    master.policy = PlanPolicy()
    five_nodes_scheduled(master)

    def ends() -> list[float]:
        plans = master.plans(master.clock.now())
        return [
            p.node.forecast.made_until(
                window_start=p.window_start,
                escalation=planned_escalation(p, master.policy.escalation),
            )
            for p in plans
            if p.node is not None
        ]

    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        made = master.forecasts_made_ahead
        assert made == 5
        first = min(ends())
        assert EPOCH < first < math.inf
        autojump_clock.jump(first - master.clock.now())  # its last second: still made
        master.reconcile(nursery)
        assert master.forecasts_made_ahead == made
        ended = sum(end == first for end in ends())
        autojump_clock.jump(1)
        master.reconcile(nursery)
        assert master.forecasts_made_ahead == made + ended
        assert min(ends()) > first
        nursery.cancel_scope.cancel()


def timed_master(tmp_path: Path, *, share: float) -> Master:
    """A master whose passes may spend ``share`` of each second (``reconcile_interval``)
    making forecasts, each of which takes 0.05 s of its ``work_clock``."""
    master = make_master(tmp_path, DownLink())
    master.policy = PlanPolicy()
    ticks = itertools.count()
    master.work_clock = lambda: next(ticks) * 0.05  # each forecast takes 0.05 s
    master.reconcile_interval = 1.0
    master.forecasts_time_share = share
    return master


async def test_a_pass_makes_forecasts_ahead_for_its_share_of_the_interval_at_most(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """With forecasts_time_share, a pass stops making forecasts once their making took
    that share of reconcile_interval (on work_clock); the rest wait for the next pass. The
    share is of the master's time: passes run sooner share it, and what a pass overspent
    is made up by the next."""
    master = timed_master(tmp_path, share=0.12)  # 0.12 s: the third forecast ends past it
    five_nodes_scheduled(master)
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)  # 0.15 s spent of 0.12
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (3, 2)
        master.reconcile(nursery)  # at once: nothing more to spend
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (3, 2)
        await trio.sleep(0.25)  # 0.03 s more: the debt of 0.03 s paid, none to spend
        master.reconcile(nursery)
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (3, 2)
        await trio.sleep(0.3)  # 0.036 s: one forecast, which overspends
        master.reconcile(nursery)
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (4, 1)
        await trio.sleep(10)  # never more than the share of the time since the last pass
        master.reconcile(nursery)
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (5, 0)
        nursery.cancel_scope.cancel()


async def test_past_their_share_the_passes_make_forecasts_while_the_loop_is_idle(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Past the share of the master's time, a pass goes on making the forecasts owed
    while nothing else waits for the loop, and owes the next passes nothing for them."""
    master = timed_master(tmp_path, share=0.1)  # 0.1 s an interval: two forecasts
    idle = iter([True, False])  # idle for the third forecast, then busy
    master.loop_idle = lambda: next(idle, False)
    five_nodes_scheduled(master)
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (3, 2)
        await trio.sleep(0.5)  # busy: 0.05 s, one forecast, none owed for the idle one
        master.reconcile(nursery)
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (4, 1)
        master.loop_idle = lambda: True  # idle: the rest, whatever the share
        master.reconcile(nursery)
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (5, 0)
        nursery.cancel_scope.cancel()


async def test_the_loop_is_idle_when_no_other_task_is_ready_to_run() -> None:
    assert loop_idle()
    woken = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(woken.wait)
        assert not loop_idle()  # the task started is ready to run
        await trio.sleep(0.01)
        assert loop_idle()  # it waits for its event
        woken.set()
        assert not loop_idle()


async def test_passes_further_apart_than_the_interval_have_their_share_all_the_same(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A loaded master's passes come further apart than reconcile_interval: each has the
    share of the time since the last one (not of one interval), and banks none beyond it."""
    master = timed_master(tmp_path, share=0.1)  # 0.1 s an interval: two forecasts
    five_nodes_scheduled(master)
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (2, 3)
        await trio.sleep(2)  # 0.2 s: four forecasts' time, three left
        master.reconcile(nursery)
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (5, 0)
        nursery.cancel_scope.cancel()


#: How long each slice of :func:`_slice_gaps`'s pass works.
_TOOK = [0.04, 0.1, 0.02]


async def _slice_gaps(
    master: Master, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> list[float]:
    """The time from the start of each slice of a pass of three (:data:`_TOOK`) to the
    next's start, and to the pass's end, as the master's reconcile service runs them."""
    slices: list[float] = []

    def three_slices(nursery: trio.Nursery) -> Generator[None, None, None]:
        for seconds in _TOOK:
            slices.append(trio.current_time())
            autojump_clock.jump(seconds)  # the slice's work
            yield
        slices.append(trio.current_time())

    monkeypatch.setattr(master, "_pass", three_slices)
    async with trio.open_nursery() as nursery:
        await nursery.start(master.run)
        with trio.fail_after(10):
            while len(slices) < 4:  # noqa: ASYNC110 (the service's own steps are waited for)
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    return [later - earlier for earlier, later in itertools.pairwise(slices)]


async def test_the_reconcile_service_leaves_the_others_as_long_as_each_slice_took(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two slices of a pass the service waits as long as the slice took: a request
    that needs several rounds of the loop (an ad prepared by an ingest worker) is not
    starved by a pass that has many slices to make."""
    master = make_master(tmp_path, DownLink())
    gaps = await _slice_gaps(master, autojump_clock, monkeypatch)
    assert gaps == pytest.approx([2 * seconds for seconds in _TOOK])


@pytest.mark.parametrize(
    ("idle", "gaps"),
    [
        ((True, True), [0.04, 0.1, 0.02]),  # idle before and after a turn: no pause
        ((True, False), [0.08, 0.2, 0.04]),  # a task ready after the turn: the pause
        ((False, True), [0.08, 0.2, 0.04]),  # busy: the pause
    ],
    ids=["idle", "woken by the turn", "busy"],
)
async def test_the_reconcile_service_runs_its_slices_back_to_back_on_an_idle_loop(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    idle: tuple[bool, bool],
    gaps: list[float],
) -> None:
    master = make_master(tmp_path, DownLink())
    answers = itertools.cycle(idle)  # before the turn of the loop, after it
    master.loop_idle = lambda: next(answers)
    assert await _slice_gaps(master, autojump_clock, monkeypatch) == pytest.approx(gaps)


async def test_a_summary_answers_at_once_and_the_totals_are_brought_in_after_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A summary remakes at most its answer limit of the plan's shares and says how many
    it left (``behind``); after the read, keep_totals brings the others in a slice at a
    time, serving the others between two slices for as long as each took, and the next
    summary finds them whole and says so."""
    master = make_master(tmp_path, DownLink())
    master.policy = PlanPolicy()
    monkeypatch.setattr(_master_module, "_LEDGER_SLICE", 1)
    five_nodes_scheduled(master)
    view = master.plan_view
    view.answer_limit = 2
    warm = view.warm
    slices: list[float] = []
    seen: list[int] = []

    def slowly(inputs: PlanInputs, now: float, *, limit: int, seconds: float | None) -> bool:
        slices.append(trio.current_time())
        done = warm(inputs, now, limit=limit, seconds=seconds)
        autojump_clock.jump(0.1)  # the slice's work
        return done

    async def watch() -> None:
        while True:
            seen.append(view.kept.behind if view.kept is not None else -1)
            await trio.sleep(0.05)

    monkeypatch.setattr(view, "warm", slowly)
    async with trio.open_nursery() as nursery:
        await nursery.start(master.keep_totals)
        nursery.start_soon(watch)
        await trio.sleep(1)
        assert slices == []  # nobody read: idle
        master.note_totals_read()
        totals = master.plan(late=True, limit=0)["totals"]
        assert (totals["machines"], totals["behind"]) == (2, 3)
        with trio.fail_after(60):
            while view.kept is None or not view.kept.complete:  # noqa: ASYNC110
                await trio.sleep(0.01)
        # a share a slice, each followed by as long a pause (the last found none left)
        assert len(slices) == 3
        gaps = [later - earlier for earlier, later in itertools.pairwise(slices)]
        assert gaps == pytest.approx([0.2, 0.2])
        assert {1, 2} <= set(seen)  # the others ran between the slices
        totals = master.plan(late=True, limit=0)["totals"]
        view.answer_limit = None
        assert totals == master.plan(late=True, limit=0)["totals"]
        assert (totals["machines"], totals["behind"]) == (5, 0)
        # the forecasts the totals kept made, ahead of the next reader (not the summary's)
        assert master.forecasts_made_ahead == 3
        nursery.cancel_scope.cancel()


async def test_the_totals_are_kept_for_a_while_after_the_last_read_only(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a read the totals are brought to now every reconcile_interval; from
    _KEEP_WARM_FOR after the last read on, no more, until the next read."""
    master = make_master(tmp_path, DownLink())
    master.policy = PlanPolicy()
    five_nodes_scheduled(master)
    warmed: list[float] = []
    warm = master.plan_view.warm

    def counted(inputs: PlanInputs, now: float, *, limit: int, seconds: float | None) -> bool:
        warmed.append(trio.current_time())
        return warm(inputs, now, limit=limit, seconds=seconds)

    monkeypatch.setattr(master.plan_view, "warm", counted)
    keep = _master_module._KEEP_WARM_FOR
    async with trio.open_nursery() as nursery:
        await nursery.start(master.keep_totals)
        began = trio.current_time()
        master.note_totals_read()
        await trio.sleep(keep + 10 * master.reconcile_interval)
        assert warmed[-1] - began == pytest.approx(keep, abs=master.reconcile_interval)
        assert len(warmed) >= keep / master.reconcile_interval  # once an interval
        count = len(warmed)
        await trio.sleep(keep)
        assert len(warmed) == count  # nobody read: idle
        master.note_totals_read()
        await trio.sleep(master.reconcile_interval / 2)
        assert len(warmed) == count + 1
        nursery.cancel_scope.cancel()


async def test_the_reconcile_service_makes_the_forecasts_ahead_in_slices(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A pass yields after every forecasts_per_slice forecasts made (the service serves the
    others there); reconcile() makes them all."""
    master = make_master(tmp_path, DownLink())
    master.policy = PlanPolicy()
    master.forecasts_per_slice = 2
    master.slice_seconds = math.inf  # the count alone
    five_nodes_scheduled(master)
    async with trio.open_nursery() as nursery:
        made = [master.forecasts_made_ahead for _ in master._pass(nursery)]
        assert (made, master.forecasts_made_ahead, master.forecasts_waiting) == ([2, 4], 5, 0)
        master._pass_index = None  # every machine looked at again: nothing to make
        assert list(master._pass(nursery)) == []
        # a pass left after its first slice (the service cancelled): the rest waits
        for entry in master.ads.entries():
            entry.forecast._piece = None
        master._pass_index = None
        one_pass = master._pass(nursery)
        next(one_pass)
        one_pass.close()
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (7, 3)
        master.reconcile(nursery)
        assert (master.forecasts_made_ahead, master.forecasts_waiting) == (10, 0)
        nursery.cancel_scope.cancel()


async def test_a_slice_of_forecasts_ends_once_its_time_is_spent(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Each reading of work_clock 0.01 s later (a forecast: three readings), a slice of
    0.035 s: the pass yields after every second forecast, whatever forecasts_per_slice."""
    master = make_master(tmp_path, DownLink())
    master.policy = PlanPolicy()
    ticks = itertools.count()
    master.work_clock = lambda: next(ticks) * 0.01
    master.slice_seconds = 0.035
    five_nodes_scheduled(master)
    async with trio.open_nursery() as nursery:
        made = [master.forecasts_made_ahead for _ in master._pass(nursery)]
        assert (made, master.forecasts_made_ahead, master.forecasts_waiting) == ([2, 4], 5, 0)
        nursery.cancel_scope.cancel()


async def test_a_slice_of_looks_at_forecasts_made_ends_once_its_time_is_spent(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every forecast made, every machine looked at again (a new index) with nothing to
    make, each look 0.01 s of work_clock (read after every look) and a slice of 0.035 s:
    the pass yields after every fourth look all the same (a whole pool's looks held the
    loop for seconds)."""
    monkeypatch.setattr(_master_module, "_LOOKS_A_CLOCK", 1)
    master = make_master(tmp_path, DownLink())
    master.policy = PlanPolicy()
    five_nodes_scheduled(master)
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        made = master.forecasts_made_ahead
        assert (made, master.forecasts_waiting) == (5, 0)
        ticks = itertools.count()
        master.work_clock = lambda: next(ticks) * 0.01
        master.slice_seconds = 0.035
        master._pass_index = None
        assert len(list(master._pass(nursery))) == 1  # after the fourth of five looks
        assert master.forecasts_made_ahead == made
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("where", "attribute", "value"),
    [
        ("slot", "TotalJobRunTime", "600"),
        ("slot", "MaxJobRetirementTime", True),
        ("slot", "Cpus", [1]),
        ("slot", "MyCurrentTime", float("inf")),
        ("machine", "MachineMaxVacateTime", {"s": 1}),
        ("machine", "DrainingDeadline", "tomorrow"),
        ("machine", "ExpectedMachineGracefulDrainingCompletion", "soon"),
        ("machine", "DrainSuspendedJobs", "ignore"),
    ],
)
async def test_an_ad_the_estimates_cannot_read_is_refused_and_changes_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, where: str, attribute: str, value: Any
) -> None:

    master = make_master(tmp_path, DownLink())
    master.receive_ad(node_ad(EPOCH))
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")
    before = master.ads.get("n1.test")
    bad = node_ad(EPOCH + 10)
    target = bad["machine"] if where == "machine" else bad["slots"][1]
    target[attribute] = value
    key = b"k" * 32
    token = daemon_token(key, now=master.clock.now())
    # 1e400 reads as infinity: JSON's own Infinity is refused earlier, as not JSON
    body = json.dumps(bad).replace("Infinity", "1e400").encode()
    reply = push_ad(master, Principals(master.clock.now, key), f"Bearer {token}", body, unix=False)
    assert reply.status == 422
    assert json.loads(reply.body)["error"]["code"] == "request.invalid"
    assert attribute in json.loads(reply.body)["error"]["message"]
    assert master.ads.get("n1.test") is before
    # the plan and a reconcile pass still work
    assert master.plan()["machines"][0]["expected"] is not None
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        nursery.cancel_scope.cancel()


async def test_the_plan_body_is_the_plan_even_with_integers_beyond_64_bits(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from nodeagent.master._api import plan_body

    master = make_master(tmp_path, DownLink())
    ad = node_ad(EPOCH)
    ad["machine"]["TotalMachineDrainingBadput"] = 2**70  # orjson refuses it; json does not
    master.receive_ad(ad)
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")
    body = json.loads(plan_body(master))
    assert body == master.plan()
    assert body["machines"][0]["statistics"]["TotalMachineDrainingBadput"] == 2**70
    master.receive_ad(node_ad(EPOCH))
    assert json.loads(plan_body(master, with_blockers=False)) == master.plan(with_blockers=False)


# ----------------------------------------------------------------------- escalation

ADDRESS = "http://10.0.0.1:9621"
#: A soft-killed job of the model node exits this long after its signal.
TERM_DELAY = 1.0


class ModelNode:
    """A node on virtual time: a :class:`slots.Machine` behind the agent's drain API.

    Replies are the agent's own bodies (``drain_json``) and refusals its error codes; the
    model's actions are carried out as the agent does (a soft-killed job exits
    ``TERM_DELAY`` later, a hard-killed one at once, timers at ``next_wakeup``); the ad
    goes to ``master`` (while one runs) every ``push_every`` seconds, and at once after a
    change unless ``push_on_change`` is false (an agent whose pushes lag).
    Every call and every signal is logged with its offset from ``EPOCH``; ``refusals``
    holds calls (``"POST /v1/drain"``) to refuse once, as a node that fails would;
    ``hangs`` holds calls never answered, once each: ``"before"`` they are carried out
    (the request never arrived), ``"after"`` (the reply was lost).
    """

    def __init__(
        self,
        clock: TrioClock,
        *,
        retirement: int,
        jobs: int,
        push_every: float = 0.5,
        push_on_change: bool = True,
    ) -> None:
        now = clock.now()
        self.clock = clock
        self.machine = Machine(
            host="n1.test",
            ip="10.0.0.1",
            address=ADDRESS,
            total=Resources(cpus=4),
            # admits any promise: the master's drain is due its retirement time early
            policy=MachinePolicy(
                max_job_retirement_time=retirement,
                machine_max_vacate_time=5,
                before_window=BeforeWindow.ADMIT,
            ),
            now=now,
        )
        for _ in range(jobs):
            self.machine.claim(now, resources=Resources(cpus=1), spec=JobSpec())
        self.master: Master | None = None
        self.calls: list[tuple[float, str]] = []
        self.signals: list[tuple[float, str]] = []
        self.refusals: set[str] = set()
        self.hangs: dict[str, str] = {}
        self.push_every = push_every
        self.push_on_change = push_on_change
        self._exits: dict[str, float] = {}
        self._dirty = True
        self._changed = trio.Event()

    async def call(
        self, address: str, method: str, path: str, *, node: str, actor: str, body: Any = None
    ) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        assert (address, node) == (ADDRESS, self.machine.host)  # the token is bound to it
        now = self.clock.now()
        words = path.split("/")
        if (method, path) == ("GET", "/v1/ad"):
            said = "ad"
        elif (method, path) == ("DELETE", "/v1/drain"):
            said = "cancel current"
        elif (method, path) == ("POST", "/v1/drain"):
            said = f"start {body['schedule']}" + (
                "" if body.get("deadline") is None else f" deadline {body['deadline']:g}"
            )
        else:
            said = f"{words[-1]} {words[-2]}"
        if f"{method} {path}" in self.refusals:
            self.refusals.discard(f"{method} {path}")
            self.calls.append((now - EPOCH, f"{said} refused"))
            raise AgentCallFailed("agent.error", "refused by the test", 503)
        hang = self.hangs.pop(f"{method} {path}", None)
        if hang == "before":
            self.calls.append((now - EPOCH, f"{said} never arrived"))
            await trio.sleep_forever()
        self.calls.append((now - EPOCH, said if hang is None else f"{said}, reply lost"))
        if said == "ad":
            return self.machine.ad(now)
        try:
            reply, actions = self._serve(now, method, words, body or {}, actor)
        except SlotsError as exc:
            raise AgentCallFailed(exc.code, exc.message, exc.http_status) from None
        self._carry_out(now, actions)
        if hang == "after":
            await trio.sleep_forever()
        return reply

    def _serve(
        self, now: float, method: str, words: list[str], body: dict[str, Any], actor: str
    ) -> tuple[dict[str, Any], list[Action]]:
        machine = self.machine
        if method == "DELETE" and words == ["", "v1", "drain"]:
            return {}, machine.cancel_draining(now)
        if method == "POST" and words == ["", "v1", "drain"]:
            request, estimate, actions = machine.start_draining(
                now,
                schedule=Schedule(body["schedule"]),
                reason=body.get("reason", ""),
                deadline=body.get("deadline"),
                commit=body.get("commit", False),
                ttl=body.get("ttl"),
                requested_by=f"master:{actor}",
            )
            return drain_json(request, estimate, current=True), actions
        assert method == "POST"
        assert words[:3] == ["", "v1", "drain"]
        assert len(words) == 5
        if words[4] == "commit":
            request, estimate, actions = machine.commit_draining(now, words[3])
            return drain_json(request, estimate, current=True), actions
        assert words[4] == "cancel"
        actions = machine.cancel_draining(now, words[3])
        return drain_json(machine.last_request, None, current=False), actions

    def _carry_out(self, now: float, actions: list[Action]) -> None:
        for action in actions:
            self._dirty = True
            if isinstance(action, SignalJob):
                self.signals.append((now - EPOCH, action.signal))
                delay = 0.0 if action.signal == "SIGKILL" else TERM_DELAY
                self._exits[action.claim_id] = min(
                    self._exits.get(action.claim_id, math.inf), now + delay
                )
        if actions:
            self._changed.set()

    def attach(self, master: Master | None) -> None:
        """Push the ad to ``master`` from now on (``None``: to nobody)."""
        self.master = master
        self._dirty = True
        self._changed.set()

    async def run(self) -> None:
        next_push = self.clock.now()
        while True:
            now = self.clock.now()
            self._carry_out(now, self.machine.tick(now))
            for claim_id, at in sorted(self._exits.items()):
                if at <= now:
                    del self._exits[claim_id]
                    self._carry_out(now, self.machine.job_exited(now, claim_id))
            if self.master is not None and (
                (self._dirty and self.push_on_change) or now >= next_push
            ):
                self.master.receive_ad(self.machine.ad(now))
                self._dirty, next_push = False, now + self.push_every
            wake = self.machine.next_wakeup()
            wakeups = [*self._exits.values(), *([] if wake is None else [wake])]
            if self.master is not None:
                wakeups.append(next_push)
            wakeups.append(math.inf)
            self._changed = trio.Event()
            with trio.move_on_after(max(0.0, min(wakeups) - now)):
                await self._changed.wait()


def told(machine: Machine, window: float, escalation: str) -> bool:
    """Whether the node holds a committed drain that evicts what still runs at ``window``
    as ``escalation`` asks: what the plan's ``escalated`` must imply."""
    request = machine.request
    if request is None or request.committed_at is None:
        return False
    if request.schedule is Schedule.FAST:
        return True
    deadline = request.deadline_at
    return escalation == "quick" and (
        request.schedule is Schedule.QUICK or (deadline is not None and deadline <= window)
    )


@dataclass(frozen=True, kw_only=True)
class Story:
    """An order of events (offsets from ``EPOCH``) and what the node must have been told.

    Events: ``up`` the master (re)starts from its store; ``down`` it stops (a crash:
    nothing more is saved); ``schedule`` a window opening at ``arg`` is posted (to a
    master loaded from the store when none runs); ``escalation`` the policy is reloaded;
    ``refuse`` the node refuses its next ``arg`` call once; ``hang`` the node never
    answers its next ``arg[0]`` call (``arg[1]``: ``"before"`` or ``"after"`` carrying
    it out). ``push_every`` and ``push_on_change`` are the node's (:class:`ModelNode`).
    """

    events: tuple[tuple[float, str, Any], ...]
    escalation: str = "quick"
    jobs: int = 1
    push_every: float = 0.5
    push_on_change: bool = True
    calls: tuple[str, ...]
    #: ``drains_started`` at the end (None: not checked).
    started: int | None = None
    #: The job's first signal: which, and the offsets it falls between (None: never).
    evicted: tuple[str, float, float] | None
    #: The offsets between which the plan first says escalated (None: never).
    escalated: tuple[float, float] | None
    end: float = 200.0


STORIES = {
    "a drain started before the window carries it as its deadline": Story(
        events=((0, "up", None), (1, "schedule", 100)),
        calls=("start graceful deadline 99", "commit 1"),
        evicted=("SIGTERM", 100, 100),
        escalated=(100, 101.5),
    ),
    "the master down across the window starts the drain quick at once": Story(
        events=((0, "schedule", 100), (150, "up", None)),
        calls=("start quick", "commit 1"),
        evicted=("SIGTERM", 150, 150.6),
        escalated=(150, 150.6),
    ),
    "a schedule posted after its window opened starts the drain quick at once": Story(
        events=((0, "up", None), (150, "schedule", 100)),
        calls=("start quick", "commit 1"),
        evicted=("SIGTERM", 150, 150),
        escalated=(150, 150.3),
    ),
    "a drain without a deadline is replaced by a quick one at the window": Story(
        events=((0, "up", None), (1, "schedule", 100), (50, "escalation", "quick")),
        escalation="none",
        calls=("start graceful", "commit 1", "cancel 1", "start quick", "commit 2"),
        evicted=("SIGTERM", 100, 101),
        escalated=(100, 101.3),
    ),
    "a window moved before the drain's deadline: replaced by a quick drain": Story(
        events=((0, "up", None), (1, "schedule", 200), (50, "schedule", 100)),
        calls=("start graceful deadline 199", "commit 1", "cancel 1", "start quick", "commit 2"),
        evicted=("SIGTERM", 100, 101),
        escalated=(100, 101.3),
    ),
    "a master restarted across the window finds the deadline did it": Story(
        events=((0, "up", None), (1, "schedule", 100), (50, "down", None), (150, "up", None)),
        calls=("start graceful deadline 99", "commit 1"),
        evicted=("SIGTERM", 100, 100),
        escalated=(150, 150.6),
    ),
    "the replacement refused after the cancel: a later pass starts it quick": Story(
        events=(
            (0, "up", None),
            (1, "schedule", 100),
            (50, "escalation", "quick"),
            (60, "refuse", "POST /v1/drain"),
        ),
        escalation="none",
        calls=(
            "start graceful",
            "commit 1",
            "cancel 1",
            "start quick refused",
            "start quick",
            "commit 2",
        ),
        evicted=("SIGTERM", 102, 103.5),
        escalated=(102, 103.5),
    ),
    "fast: the drain is replaced by a fast one at the window": Story(
        events=((0, "up", None), (1, "schedule", 100)),
        escalation="fast",
        calls=("start graceful", "commit 1", "cancel 1", "start fast", "commit 2"),
        evicted=("SIGKILL", 100, 101),
        escalated=(100, 101.3),
    ),
    "fast: the master down across the window starts the drain fast": Story(
        events=((0, "schedule", 100), (150, "up", None)),
        escalation="fast",
        calls=("start fast", "commit 1"),
        evicted=("SIGKILL", 150, 150.6),
        escalated=(150, 150.6),
    ),
    "none: the job keeps its whole promise": Story(
        events=((0, "up", None), (1, "schedule", 100)),
        escalation="none",
        calls=("start graceful", "commit 1"),
        evicted=("SIGTERM", 595, 595),  # retirement 600 − vacate 5
        escalated=None,
        end=620,
    ),
    # ---- the master's own record first (a pass never acts on an ad older than it)
    "a pass before the node's next push starts no second drain; at the window it asks": Story(
        events=((0, "schedule", 30), (1, "up", None)),
        push_every=50,  # the next push after the commit comes after the window
        push_on_change=False,
        calls=("start graceful deadline 29", "commit 1", "ad"),
        evicted=("SIGTERM", 30, 30),
        escalated=(30, 31.5),
        started=1,
    ),
    "stopped between record and commit, unsent: the pending drain is cancelled, redone": Story(
        events=(
            (0, "up", None),
            (0.5, "hang", ("POST /v1/drain/1/commit", "before")),
            (1, "schedule", 100),
            (5, "down", None),
            (10, "up", None),
        ),
        calls=(
            "start graceful deadline 99",
            "commit 1 never arrived",
            "ad",
            "cancel 1",
            "start graceful deadline 90",
            "commit 2",
        ),
        evicted=("SIGTERM", 100, 100),
        escalated=(100, 101.5),
        started=1,
    ),
    "stopped between record and commit, expired on the node: forgotten, redone": Story(
        events=(
            (0, "up", None),
            (0.5, "hang", ("POST /v1/drain/1/commit", "before")),
            (1, "schedule", 100),
            (5, "down", None),
            (40, "up", None),
        ),
        calls=(
            "start graceful deadline 99",
            "commit 1 never arrived",
            "ad",
            "start graceful deadline 60",
            "commit 2",
        ),
        evicted=("SIGTERM", 100, 100),
        escalated=(100, 101.5),
        started=1,
    ),
    "stopped after the commit before its reply: adopted, escalated at the window": Story(
        events=(
            (0, "up", None),
            (0.5, "hang", ("POST /v1/drain/1/commit", "after")),
            (1, "schedule", 100),
            (5, "down", None),
            (10, "up", None),
        ),
        calls=("start graceful deadline 99", "commit 1, reply lost", "ad"),
        evicted=("SIGTERM", 100, 100),
        escalated=(100, 101.5),
        started=1,
    ),
    "an empty node at an open window is drained, with nothing to escalate": Story(
        events=((0, "schedule", 100), (150, "up", None)),
        jobs=0,
        calls=("start quick", "commit 1"),
        evicted=None,
        escalated=None,
    ),
}


@pytest.mark.parametrize("story", STORIES.values(), ids=list(STORIES))
async def test_escalation_acts_on_the_node_whatever_the_order_of_events(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, story: Story
) -> None:
    clock = TrioClock(EPOCH)
    node = ModelNode(
        clock,
        retirement=600,
        jobs=story.jobs,
        push_every=story.push_every,
        push_on_change=story.push_on_change,
    )
    policy = PlanPolicy(drain_margin=10, escalation=story.escalation)
    stores: list[DocumentStore] = []
    window = math.inf
    first_escalated: float | None = None

    def from_store() -> Master:
        stores.append(DocumentStore(tmp_path / "master.db"))
        master = Master(
            store=stores[-1],
            link=node,
            clock=clock,
            ads=AdStore(lifetime=60),
            policy=policy,
            reconcile_interval=1.0,
        )
        master.load()
        return master

    async def watch(master: Master) -> None:
        """The plan never says escalated before the node was told (checked every 0.1 s)."""
        nonlocal first_escalated
        while True:
            rows = master.plan()["machines"]
            if rows and rows[0]["escalated"]:
                assert told(node.machine, window, master.policy.escalation)
                if first_escalated is None:
                    first_escalated = clock.now() - EPOCH
            await trio.sleep(0.1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(node.run)
        running: tuple[Master, trio.CancelScope] | None = None
        for offset, what, arg in (*story.events, (story.end, "end", None)):
            await trio.sleep(EPOCH + offset - clock.now())
            if what == "up":
                master, scope = from_store(), trio.CancelScope()
                running = (master, scope)

                async def serve(master: Master = master, scope: trio.CancelScope = scope) -> None:
                    with scope:
                        async with trio.open_nursery() as inner:
                            inner.start_soon(master.run)
                            inner.start_soon(watch, master)

                nursery.start_soon(serve)
                node.attach(master)
            elif what in ("down", "end"):
                assert running is not None
                running[1].cancel()
                running = None
                node.attach(None)
            elif what == "schedule":
                window = EPOCH + arg
                master = running[0] if running is not None else from_store()
                master.set_schedule(schedule(window), actor="ops")
            elif what == "escalation":
                policy = PlanPolicy(drain_margin=10, escalation=arg)
                assert running is not None
                running[0].policy = policy
            elif what == "hang":
                node.hangs[arg[0]] = arg[1]
            else:
                assert what == "refuse"
                node.refusals.add(arg)
        nursery.cancel_scope.cancel()

    # Every call that changes the node is exactly the story's. A read of the node's ad
    # ("ad") the story names must happen; another one may: whether a pass runs before the
    # node's next push is up to trio's scheduling, which is deliberately not ordered, and
    # a pass that finds the ad older than its own record reads it rather than act on it.
    said = [said for _, said in node.calls]
    assert [c for c in said if c != "ad"] == [c for c in story.calls if c != "ad"]
    assert said.count("ad") >= story.calls.count("ad")
    if story.evicted is None:
        assert node.signals == []
    else:
        signal, earliest, latest = story.evicted
        assert node.signals[0][1] == signal
        assert earliest <= node.signals[0][0] <= latest
    last = from_store()
    if story.escalated is None:
        assert first_escalated is None
        assert last.counters.drains_escalated == 0
    else:
        assert first_escalated is not None
        assert story.escalated[0] <= first_escalated <= story.escalated[1]
        assert node.signals[0][0] <= first_escalated  # told first, then said so
        assert last.counters.drains_escalated == 1
    if story.started is not None:
        assert last.counters.drains_started == story.started
    assert all(r.phase != "pending" for r in last.drains.values())
    for store in stores:
        store.close()


# ----------------------------------------------------------------------- fresh figures

#: How the node answers ``GET /v1/ad``; what the first plan after the schedule shows.
FETCHES = {
    "answers: the plan shows the job": ("answers", ["ad"], False, 0.0),
    "refuses: old figures, flagged stale": ("refuses", ["ad refused"], True, 0.0),
    "never answers: old figures after the timeout": ("hangs", ["ad never arrived"], True, 5.0),
}


@pytest.mark.parametrize(("how", "calls", "stale", "waited"), FETCHES.values(), ids=list(FETCHES))
async def test_the_first_plan_after_a_schedule_change_has_figures_newer_than_it(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    how: str,
    calls: list[str],
    stale: bool,
    waited: float,
) -> None:
    """The node's ad predates a job (its pushes lag); a schedule puts it in a window:
    the plan fetches its ad once (per schedule change), or says its figures are stale."""
    clock = TrioClock(EPOCH)
    node = ModelNode(clock, retirement=600, jobs=0, push_every=1000, push_on_change=False)
    master = Master(
        store=DocumentStore(tmp_path / "master.db"),
        link=node,
        clock=clock,
        ads=AdStore(lifetime=10_000),
        fetch_timeout=5.0,
    )
    master.receive_ad(node.machine.ad(clock.now()))  # empty
    await trio.sleep(5)
    node.machine.claim(clock.now(), resources=Resources(cpus=1), spec=JobSpec(job_id="7.0"))
    await trio.sleep(5)
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")
    (before,) = master.plan()["machines"]
    assert (before["empty"], before["figures_stale"], before["figures_age"]) == (True, True, 10)
    if how == "refuses":
        node.refusals.add("GET /v1/ad")
    elif how == "hangs":
        node.hangs["GET /v1/ad"] = "before"
    t0 = clock.now()
    await master.refresh_figures()
    assert clock.now() - t0 == waited
    (row,) = master.plan()["machines"]
    assert [said for _, said in node.calls] == calls
    assert row["figures_stale"] is stale
    assert row["empty"] is stale  # the job shows once fetched
    assert row["figures_at"] == (EPOCH if stale else EPOCH + 10)
    if not stale:
        assert [b["job_id"] for b in row["blockers"]] == ["7.0"]
        assert row["figures_age"] == 0
    # at most once per schedule change: neither a plan nor a pass asks again
    await master.refresh_figures()
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)
        nursery.cancel_scope.cancel()
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")  # the same window
    await master.refresh_figures()
    assert len(node.calls) == 1
    # a window that moves is a change of its own: the node is asked again
    await trio.sleep(1)
    master.set_schedule(schedule(EPOCH + 7200), actor="ops")
    await master.refresh_figures()
    assert len(node.calls) == 2
    assert master.plan()["machines"][0]["figures_stale"] is False
    master.store.close()


async def test_a_plan_waits_for_the_fetch_a_pass_started_and_does_not_repeat_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = TrioClock(EPOCH)
    node = ModelNode(clock, retirement=600, jobs=1, push_every=1000, push_on_change=False)
    slow = SlowLink(node, delay=2.0)
    master = Master(
        store=DocumentStore(tmp_path / "master.db"),
        link=slow,
        clock=clock,
        ads=AdStore(lifetime=10_000),
        policy=PlanPolicy(drain_policy="just_in_time"),  # no drain due a day ahead
    )
    master.receive_ad(node.machine.ad(clock.now()))
    await trio.sleep(1)
    master.set_schedule(schedule(EPOCH + 86400), actor="ops")
    async with trio.open_nursery() as nursery:
        master.reconcile(nursery)  # starts the fetch
        await trio.sleep(0.5)
        t0 = clock.now()
        await master.refresh_figures()  # waits for it
        assert clock.now() - t0 == 1.5
        nursery.cancel_scope.cancel()
    assert [said for _, said in node.calls] == ["ad"]
    assert master.plan()["machines"][0]["figures_stale"] is False
    master.store.close()


class SlowLink:
    """``link``'s answers, each ``delay`` seconds late."""

    def __init__(self, link: ModelNode, *, delay: float) -> None:
        self.link = link
        self.delay = delay

    async def call(
        self, address: str, method: str, path: str, *, node: str, actor: str, body: Any = None
    ) -> dict[str, Any]:
        await trio.sleep(self.delay)
        return await self.link.call(address, method, path, node=node, actor=actor, body=body)


# ----------------------------------------------------------------------- the record's phases

#: (record, the ad's DrainingRequestId, DrainState, MyCurrentTime, received at) → known.
RECORD_VS_AD = {
    "committed, the ad shows the drain": (
        {"request_id": "4", "phase": "committed", "committed_at": 100.5},
        ("4", "draining", 100, 100.6),
        True,
    ),
    "committed, the ad made before the commit shows none": (
        {"request_id": "4", "phase": "committed", "committed_at": 100.5},
        (None, "none", 100, 101.0),
        False,
    ),
    "committed, the ad made between phase 1 and the commit": (
        {"request_id": "4", "phase": "committed", "committed_at": 100.5},
        ("4", "pending", 100, 100.9),
        False,
    ),
    "committed, the drain gone in an ad made after the commit": (
        {"request_id": "4", "phase": "committed", "committed_at": 100.5},
        (None, "none", 101, 101.2),
        True,
    ),
    "committed, a later request in the ad (someone else's)": (
        {"request_id": "4", "phase": "committed", "committed_at": 100.5},
        ("5", "draining", 100, 100.8),
        True,
    ),
    "pending, the ad shows it pending": (
        {"request_id": "4", "phase": "pending", "recorded_at": 100.0},
        ("4", "pending", 100, 100.2),
        True,
    ),
    "pending, an ad from before phase 1": (
        {"request_id": "4", "phase": "pending", "recorded_at": 100.0},
        ("3", "none", 99, 99.5),
        False,
    ),
    "a record of an older master (no phase, no times)": (
        {"request_id": "4"},
        (None, "none", 100, 100.0),
        True,
    ),
    "a down record before its drain": ({"down": False}, (None, "none", 100, 100.0), True),
}


@pytest.mark.parametrize(("record", "ad", "known"), RECORD_VS_AD.values(), ids=list(RECORD_VS_AD))
async def test_a_pass_reads_an_ad_only_when_it_is_not_older_than_the_record(
    record: dict[str, Any], ad: tuple[Any, str, int, float], known: bool
) -> None:
    from nodeagent.master._drains import DrainRecord
    from nodeagent.master._master import ad_knows

    request_id, state, made, received = ad
    machine = {
        "Name": "n1.test",
        "DrainingRequestId": request_id,
        "DrainState": state,
        "MyCurrentTime": made,
    }
    store = AdStore(lifetime=60)
    entry = store.update({"machine": machine, "slots": []}, received)
    assert ad_knows(DrainRecord.from_json(record), entry) is known


# ------------------------------------------------------------- what a write writes


def saved_at(path: Path) -> dict[str, float]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT name, saved_at FROM documents"))


async def test_a_write_that_changes_no_mode_makes_and_writes_neither_schedule_nor_actors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The schedule and modes of 100,000 machines are 5 MB of JSON: a drain's write
    (``save``) makes their snapshot and writes them, and the actors, only when they
    changed; what is on disk is the state all the same."""
    made: list[MaintenanceState] = []
    snapshot = MaintenanceState.snapshot

    def counted(state: MaintenanceState) -> dict[str, Any]:
        made.append(state)
        return snapshot(state)

    monkeypatch.setattr(MaintenanceState, "snapshot", counted)
    master = make_master(tmp_path, DownLink())
    master.set_schedule(schedule(EPOCH + 3600), actor="ops")
    assert len(made) == 1
    with sqlite3.connect(tmp_path / "master.db") as db:
        db.execute("UPDATE documents SET saved_at = 0")
    master.save()
    master.save()
    assert len(made) == 1
    written = saved_at(tmp_path / "master.db")
    assert (written["maintenance"], written["actors"]) == (0, 0)
    assert min(written["drains"], written["counters"]) > 0
    master.machines_down((MachineId(hostname="n1.test", ip="10.0.0.1"),), actor="ops")
    assert len(made) == 2
    written = saved_at(tmp_path / "master.db")
    assert min(written["maintenance"], written["actors"]) > 0
    master.store.close()
    again = DocumentStore(tmp_path / "master.db")
    try:
        assert again.load("maintenance") == snapshot(master.state)
        assert again.load("actors") == master.actors
    finally:
        again.close()


# ------------------------------------------------------------------ a failed write


class FailingStore(DocumentStore):
    """A :class:`DocumentStore` whose ``save`` raises :class:`StoreError` while ``failing``
    is set, as on a full disk (the documents saved before stay saved)."""

    failing = False

    def save(self, **documents: Any) -> None:
        if self.failing:
            raise StoreError(f"cannot write {self.path}: database or disk is full")
        super().save(**documents)


def on_disk(path: Path) -> dict[str, Any]:
    store = DocumentStore(path)
    try:
        return {name: store.load(name) for name in ("maintenance", "drains", "actors", "counters")}
    finally:
        store.close()


def in_memory(master: Master) -> dict[str, Any]:
    return {
        "maintenance": master.state.snapshot(),
        "actors": dict(master.actors),
        "window_since": dict(master.window_since),
        "to_fetch": dict(master._to_fetch),
    }


async def test_a_change_the_store_cannot_write_changes_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    store = FailingStore(tmp_path / "master.db")
    master = Master(
        store=store, link=DownLink(), clock=TrioClock(EPOCH), ads=AdStore(lifetime=10_000)
    )
    two = many_nodes_schedule(2, EPOCH + 3600)
    first, second = two.windows[0].machine_ids
    master.set_schedule(two, actor="ops")
    master.machines_down((first,), actor="ops")
    await trio.sleep(5)
    memory, disk = in_memory(master), on_disk(store.path)
    assert disk["maintenance"] == memory["maintenance"]
    store.failing = True
    with pytest.raises(StoreError):
        master.set_schedule(many_nodes_schedule(3, EPOCH + 7200), actor="eve")
    with pytest.raises(StoreError):
        master.machines_down((second,), actor="eve")
    with pytest.raises(StoreError):
        master.machines_up((first,), actor="eve")
    assert in_memory(master) == memory
    assert on_disk(store.path) == disk
    store.failing = False
    master.machines_up((first,), actor="ops")
    assert [str(m.id) for m in master.state.machines()] == [str(second)]
    assert on_disk(store.path)["maintenance"] == master.state.snapshot()


async def test_a_master_that_stops_writes_the_events_it_saw_last(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A node lost in the last pass before a stop is on disk, although the stop came
    within the flush's delay (the events staged are written before the master stops
    recording)."""
    master = make_master(tmp_path, DownLink())
    master.ads = AdStore(lifetime=5)
    master.receive_ad(node_ad(EPOCH))
    async with trio.open_nursery() as nursery:
        await nursery.start(master.run)
        with trio.fail_after(60):  # virtual time: the master's own steps, polled
            while master.events.log.last_id < 1:  # noqa: ASYNC110 (leader.elected, written)
                await trio.sleep(0.01)
            while not master.events.staged:  # noqa: ASYNC110 (node.lost, after the lifetime)
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()  # the stop, within the flush's delay
    assert master.events.staged == []
    master.store.close()
    again = make_master(tmp_path, DownLink())
    try:
        again.load()
        _, kept = again.events.log.after(0)
    finally:
        again.store.close()
    assert [e.type for e in kept] == ["leader.elected", "node.lost"]


async def test_while_the_master_starts_a_drain_the_plan_reads_it_as_its_own(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Phase 1 is carried out on the node, whose ad shows the request pending, before its
    reply reaches the master: the plan still says the master's escalation will apply."""
    clock = TrioClock(EPOCH)
    node = ModelNode(clock, retirement=120, jobs=1, push_every=0.5, push_on_change=True)
    master = Master(
        store=DocumentStore(tmp_path / "master.db"),
        link=node,
        clock=clock,
        ads=AdStore(lifetime=10_000),
        policy=PlanPolicy(drain_policy="immediate", escalation="quick"),
    )
    node.hangs["POST /v1/drain"] = "after"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(node.run)
        node.attach(master)
        await trio.sleep(1)
        master.set_schedule(schedule(EPOCH + 61), actor="ops")
        await trio.sleep(0.1)
        async with trio.open_nursery() as passes:
            master.reconcile(passes)
            await trio.sleep(1)  # phase 1 carried out, its reply never comes
            (row,) = master.plan()["machines"]
            assert master.drains == {}
            assert node.machine.ad(clock.now())["machine"]["DrainState"] == "pending"
            assert row["started_by_master"] is True
            assert row["as_planned"]["escalation"] == "quick"
            assert row["as_planned"]["will_escalate"] is True
            assert row["promises"]["late_by"] == pytest.approx(60, abs=1)
            passes.cancel_scope.cancel()
        # once the start has failed, the request on the node is someone else's to the plan
        (row,) = master.plan()["machines"]
        assert row["started_by_master"] is False
        assert row["as_planned"]["escalation"] == "none"
        nursery.cancel_scope.cancel()
    master.store.close()


async def test_passes_woken_early_keep_their_gap(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """New nodes' ads arriving ten times a second wake the reconcile pass each time; with
    wake_gap 0.25 passes start at most four times a second, and at least once per
    interval without any wake."""
    master = make_master(tmp_path, DownLink())
    master.wake_gap = 0.25
    master.reconcile_interval = 1.0
    starts: list[float] = []
    one_pass = master._pass

    def counted(nursery: trio.Nursery) -> Generator[None, None, None]:
        starts.append(trio.current_time())
        return one_pass(nursery)

    master._pass = counted  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(master.run)
        t0 = trio.current_time()
        for _ in range(20):  # 2 s of wakes, as every new node's ad makes
            await trio.sleep(0.1)
            master.wake()
        await trio.sleep(3)  # then quiet: the interval
        nursery.cancel_scope.cancel()
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.25 - 1e-9
    woken = [s for s in starts if s - t0 <= 2.05]
    assert 7 <= len(woken) <= 9  # every 0.25 s or so while woken, not every 0.1 s
    assert [round(g, 6) for g in gaps[-2:]] == [1.0, 1.0]
    master.store.close()


#: A node's attributes → (in_service, hook_holds).
SERVICE = {
    "an ad of before hooks and health": ({}, (True, False)),
    "closed by its START expression": ({"Start": False}, (False, False)),
    "health passing": ({"HealthState": "passing"}, (True, False)),
    "health failing": ({"HealthState": "failing", "Start": False}, (False, False)),
    "health pending": ({"HealthState": "pending", "Start": False}, (False, False)),
    "the hook of the drain in force runs": (
        {
            "DrainHookName": "reboot",
            "DrainHookState": "running",
            "DrainHookRequestId": "7",
            "DrainingRequestId": "7",
            "DrainState": "drained",
            "Start": False,
        },
        (False, True),
    ),
    "the hook of the drain in force failed": (
        {
            "DrainHookName": "reboot",
            "DrainHookState": "failed",
            "DrainHookRequestId": "7",
            "DrainingRequestId": "7",
            "DrainState": "drained",
            "Start": False,
        },
        (False, True),
    ),
    "the failed hook of a drain that ended": (
        {
            "DrainHookName": "reboot",
            "DrainHookState": "failed",
            "DrainHookRequestId": "7",
            "DrainState": "none",
        },
        (True, False),
    ),
    "a hook that succeeded, the health gate still closed": (
        {
            "DrainHookName": "reboot",
            "DrainHookState": "succeeded",
            "DrainHookRequestId": "7",
            "HealthState": "pending",
            "Start": False,
        },
        (False, False),
    ),
}


@pytest.mark.parametrize(("attributes", "expected"), SERVICE.values(), ids=list(SERVICE))
def test_a_nodes_service_from_its_ad(
    attributes: dict[str, Any], expected: tuple[bool, bool]
) -> None:
    from nodeagent.master._adstore import AdEntry

    ad = node_ad(EPOCH)
    ad["machine"].update(attributes)
    entry = AdEntry(
        name="n1.test", machine=ad["machine"], slots=ad["slots"], received_at=EPOCH, updates=1
    )
    service = entry.service
    assert (service["in_service"], service["hook_holds"]) == expected
    assert (service["hook"] is None) == ("DrainHookName" not in attributes)
    assert (service["health"] is None) == ("HealthState" not in attributes)
    if service["hook"] is not None:
        assert service["hook"]["state"] == attributes["DrainHookState"]


async def test_the_plan_counts_the_nodes_held_out_of_service(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    master = make_master(tmp_path, DownLink())
    held = {
        "n0.test": {"HealthState": "failing", "Start": False},
        "n1.test": {
            "DrainHookName": "reboot",
            "DrainHookState": "running",
            "DrainHookRequestId": "3",
            "DrainingRequestId": "3",
            "Start": False,
        },
        "n2.test": {
            "DrainHookName": "reboot",
            "DrainHookState": "failed",
            "DrainHookRequestId": "4",
            "DrainingRequestId": "4",
            "Start": False,
        },
        "n3.test": {},
    }
    for i, (name, attributes) in enumerate(held.items()):
        ad = node_ad(EPOCH)
        ad["machine"].update(attributes, Name=name, Machine=name, MachineIp=f"10.0.0.{i}")
        master.receive_ad(ad)
    master.set_schedule(many_nodes_schedule(4, EPOCH + 86400), actor="ops")
    plan = master.plan()
    totals = plan["totals"]
    assert (
        totals["out_of_service"],
        totals["hooks_running"],
        totals["hooks_failed"],
        totals["health_failing"],
    ) == (3, 1, 1, 1)
    services = {row["node"]: row["service"] for row in plan["machines"]}
    assert services["n3.test"]["in_service"] is True
    assert services["n2.test"]["hook"]["state"] == "failed"
    master.store.close()


async def test_a_master_killed_after_committing_a_down_drain_adopts_it_when_back(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """machine/down: the fast drain's commit is carried out on the node, and the master
    dies before its reply is saved. The master back from its store settles the record it
    wrote before the commit: the drain is its own, never made a second time."""
    clock = TrioClock(EPOCH)
    node = ModelNode(clock, retirement=600, jobs=1, push_every=0.5, push_on_change=True)

    def from_store() -> Master:
        master = Master(
            store=DocumentStore(tmp_path / "master.db"),
            link=node,
            clock=clock,
            ads=AdStore(lifetime=60),
            policy=PlanPolicy(),  # just in time: nothing is due a day ahead
            reconcile_interval=1.0,
        )
        master.load()
        return master

    first = from_store()
    node.hangs["POST /v1/drain/1/commit"] = "after"  # carried out; the reply never comes
    async with trio.open_nursery() as nursery:
        nursery.start_soon(node.run)
        node.attach(first)
        with trio.CancelScope() as crashed:
            nursery.start_soon(first.run)
            first.set_schedule(schedule(EPOCH + 86400), actor="ops")
            await trio.sleep(1)
            first.machines_down((MachineId(hostname="n1.test", ip="10.0.0.1"),), actor="ops")
            await trio.sleep(2)
            crashed.cancel()
        first.store.close()
        assert first.drains["n1.test|10.0.0.1"].phase == "pending"  # as it was saved
        second = from_store()
        node.attach(second)
        nursery.start_soon(second.run)
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    said = [c for _, c in node.calls if c != "ad"]
    assert said == ["cancel current", "start fast", "commit 1, reply lost"]
    record = second.drains["n1.test|10.0.0.1"]
    assert (record.request_id, record.phase, record.down) == ("1", "committed", True)
    request = node.machine.request
    assert request is not None
    assert (request.id, request.schedule) == ("1", Schedule.FAST)
    second.store.close()


async def test_a_pass_whose_record_cannot_be_written_keeps_running_and_commits_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The disk is full when the master records the drain it starts: phase 1 is done on
    the node, nothing is committed, memory holds no record the disk does not, and the
    master keeps reconciling; once the disk has room, the drain starts, once."""
    clock = TrioClock(EPOCH)
    node = ModelNode(clock, retirement=600, jobs=1, push_every=0.5, push_on_change=True)
    store = FailingStore(tmp_path / "master.db")
    master = Master(
        store=store,
        link=node,
        clock=clock,
        ads=AdStore(lifetime=60),
        policy=PlanPolicy(drain_policy="immediate"),
        reconcile_interval=1.0,
    )
    master.set_schedule(schedule(EPOCH + 86400), actor="ops")
    store.failing = True
    async with trio.open_nursery() as nursery:
        nursery.start_soon(node.run)
        node.attach(master)
        nursery.start_soon(master.run)
        await trio.sleep(10)
        assert master.drains == {}
        assert (on_disk(store.path)["drains"] or {}) == {}
        assert next(c for _, c in node.calls if c != "ad").startswith("start graceful")
        assert "commit 1" not in [c for _, c in node.calls]
        assert master.counters.drain_failures >= 1
        store.failing = False
        await trio.sleep(90)  # the first transaction expires on the node (ttl 30 s)
        nursery.cancel_scope.cancel()
    said = [c for _, c in node.calls if c.startswith(("commit", "start"))]
    starts = [c for c in said if c.startswith("start")]
    assert len(starts) >= 2
    assert [c for c in said if c.startswith("commit")] == [f"commit {len(starts)}"]
    record = master.drains["n1.test|10.0.0.1"]
    assert record.phase == "committed"
    assert on_disk(store.path)["drains"] == {k: r.to_json() for k, r in master.drains.items()}
    store.close()


@pytest.mark.parametrize(
    ("moved_to", "calls", "first_signal"),
    [
        # Far later: not due under the new window; cancelled, started again just in time.
        (
            2000,
            [
                "start graceful deadline 100",
                "commit 1",
                "cancel 1",
                "start graceful deadline 610",
                "commit 2",
            ],
            1390,
        ),
        # A little later: still due; replaced by a drain whose deadline is the new window.
        (
            300,
            [
                "start graceful deadline 100",
                "commit 1",
                "cancel 1",
                "start graceful deadline 295",
                "commit 2",
            ],
            300,
        ),
    ],
)
async def test_a_window_moved_later_moves_the_deadline_of_the_masters_drain(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    moved_to: float,
    calls: list[str],
    first_signal: float,
) -> None:
    """The master drains for a window at +100 (the job's promise ends at +600, so the
    drain's deadline is the window); the window moves later: the old deadline must not
    evict the job at +100."""
    clock = TrioClock(EPOCH)
    node = ModelNode(clock, retirement=600, jobs=1, push_every=0.5, push_on_change=True)
    master = Master(
        store=DocumentStore(tmp_path / "master.db"),
        link=node,
        clock=clock,
        ads=AdStore(lifetime=60),
        policy=PlanPolicy(drain_margin=10, escalation="quick"),
        reconcile_interval=1.0,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(node.run)
        node.attach(master)
        nursery.start_soon(master.run)
        master.set_schedule(schedule(EPOCH + 100), actor="ops")
        await trio.sleep(5)
        master.set_schedule(schedule(EPOCH + moved_to), actor="ops")
        await trio.sleep(moved_to + 10)
        nursery.cancel_scope.cancel()
    assert [c for _, c in node.calls if c != "ad"] == calls
    assert node.signals, "the job is evicted at the new window at the latest"
    assert node.signals[0][0] >= first_signal - 1
    master.store.close()
