"""The preview of a schedule (:mod:`nodeagent.master._preview`), as tables with explicit
``now``: its warnings, and what it says each machine's drain does at once."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any, cast

import pytest
import trio
import trio.testing
from starlette.types import Message

from nodeagent.master import _api
from nodeagent.master._adstore import AdStore
from nodeagent.master._api import (
    KEPT_PER_ROW,
    PREVIEW_SLICE,
    BoundedStreamingResponse,
    preview_document,
)
from nodeagent.master._event_stream import SEND_TIMEOUT
from nodeagent.master._ingest import json_bytes
from nodeagent.master._maintenance import (
    MachineId,
    MaintenanceError,
    MaintenanceSchedule,
    MaintenanceState,
    Unavailability,
    Window,
)
from nodeagent.master._notices import Answer, Notice, NoticeWindow, Verdict
from nodeagent.master._plan import PlanPolicy
from nodeagent.master._plan_view import PlanInputs
from nodeagent.master._preview import (
    SchedulePreview,
    preview_down,
    schedule_warnings,
    scheduled_meant,
    suggestions,
)
from slots import BeforeWindow, JobSpec, Machine, MachinePolicy, Resources
from tests.nodeagent.master.test_drains import EPOCH

NS = 1_000_000_000
N = MachineId(hostname="n.test", ip="10.0.0.1")
OTHER = MachineId(hostname="ghost.test", ip="10.0.0.9")


def whole_preview(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The preview as one document (:meth:`SchedulePreview.document`)."""
    return SchedulePreview(*args, **kwargs).document()


def schedule(*windows: tuple[int, int | None, tuple[MachineId, ...]]) -> MaintenanceSchedule:
    return MaintenanceSchedule(
        windows=tuple(
            Window(
                machine_ids=machines,
                unavailability=Unavailability(start_ns=start, duration_ns=duration),
            )
            for start, duration, machines in windows
        )
    )


def at(seconds: float, duration: float | None = 3600, *machines: MachineId) -> Any:
    return (int(seconds * NS), None if duration is None else int(duration * NS), machines or (N,))


@dataclass(frozen=True)
class WarningRow:
    name: str
    start_ns: int
    duration_ns: int | None
    messages: tuple[str, ...]


WARNINGS = [
    WarningRow("nanoseconds, an hour ahead", int((EPOCH + 3600) * NS), 3600 * NS, ()),
    WarningRow("no duration", int((EPOCH + 3600) * NS), None, ()),
    WarningRow(
        "seconds", int(EPOCH), 3600 * NS,
        ("window 1: times are nanoseconds since the epoch; 1800000000 reads as "
         "1970-01-01T00:00:01Z — seconds?",),
    ),
    WarningRow(
        "milliseconds", int(EPOCH) * 1000, 3600 * NS,
        ("window 1: times are nanoseconds since the epoch; 1800000000000 reads as "
         "1970-01-01T00:30:00Z — milliseconds?",),
    ),
    WarningRow(
        "microseconds", int(EPOCH) * 1_000_000, 3600 * NS,
        ("window 1: times are nanoseconds since the epoch; 1800000000000000 reads as "
         "1970-01-21T20:00:00Z — microseconds?",),
    ),
    WarningRow(
        "eleven years ahead", int((EPOCH + 11 * 366 * 86400) * NS), 3600 * NS,
        ("window 1: times are nanoseconds since the epoch; "
         f"{int((EPOCH + 11 * 366 * 86400) * NS)} reads as 2038-01-23T08:00:00Z — "
         "more than 10 years ahead",),
    ),
    WarningRow(
        "a duration in seconds", int((EPOCH + 3600) * NS), 600,
        ("window 1: durations are nanoseconds; 600 is 600 ns — seconds?",),
    ),
    WarningRow(
        "both", int(EPOCH), 600,
        ("window 1: times are nanoseconds since the epoch; 1800000000 reads as "
         "1970-01-01T00:00:01Z — seconds?",
         "window 1: durations are nanoseconds; 600 is 600 ns — seconds?"),
    ),
]  # fmt: skip


@pytest.mark.parametrize("row", WARNINGS, ids=lambda r: r.name)
def test_suspicious_times(row: WarningRow) -> None:
    proposed = schedule((row.start_ns, row.duration_ns, (N,)))
    warnings = schedule_warnings(proposed, EPOCH)
    assert tuple(w["message"] for w in warnings) == row.messages
    assert {w["code"] for w in warnings} <= {"schedule.suspicious_time"}
    assert all(w["window"] == 0 for w in warnings)


def inputs(ads: AdStore, policy: PlanPolicy, now: float) -> PlanInputs:
    return PlanInputs(
        statuses=(),
        find=ads.find,
        is_lost=ads.lost_at(now),
        drains={},
        starting=(),
        window_since={},
        policy=policy,
        counters={},
        nodes=len(ads),
    )


def pool(jobs: int = 2, admission: BeforeWindow = BeforeWindow.ADMIT) -> AdStore:
    """The master's ads: node ``n.test`` with ``jobs`` jobs of one core claimed at
    EPOCH - 100, each promised 600 s (so until EPOCH + 500), vacating in 1 s; it admits
    claims before a window by ``admission`` (any promise: its drain is due 600 s early)."""
    machine = Machine(
        host="n.test",
        ip="10.0.0.1",
        address="http://10.0.0.1:9621",
        total=Resources(cpus=4),
        policy=MachinePolicy(
            max_job_retirement_time=600, machine_max_vacate_time=1, before_window=admission
        ),
        now=EPOCH - 100,
    )
    for number in range(jobs):
        spec = JobSpec(job_id=str(number + 1), max_job_retirement_time=600)
        machine.claim(EPOCH - 100, resources=Resources(cpus=1), spec=spec)
    ads = AdStore(lifetime=100_000)
    ads.update(machine.ad(EPOCH), EPOCH)
    return ads


QUICK = PlanPolicy()


@dataclass(frozen=True)
class Row:
    name: str
    window: Any
    drain_now: str | None
    evicted: int
    codes: tuple[str, ...]
    policy: PlanPolicy = QUICK
    admission: BeforeWindow = BeforeWindow.ADMIT


ROWS = [
    Row("a window days ahead: nothing at once", at(EPOCH + 86400), None, 0, ()),
    Row("a window soon: the graceful drain starts now", at(EPOCH + 300), "graceful", 0, ()),
    Row("a window soon, a node that refuses what would outlive it: open until its vacate time",
        at(EPOCH + 300), None, 0, (), admission=BeforeWindow.REFUSE),
    Row("a window open: a quick drain evicts every job", at(EPOCH - 1), "quick", 2,
        ("schedule.window_open",)),
    Row("open under fast", at(EPOCH - 1), "fast", 2, ("schedule.window_open",),
        PlanPolicy(escalation="fast")),
    Row("open under none: graceful, nothing evicted", at(EPOCH - 1), "graceful", 0,
        ("schedule.window_open",), PlanPolicy(escalation="none")),
    Row("immediate: graceful now", at(EPOCH + 86400), "graceful", 0, (),
        PlanPolicy(drain_policy="immediate")),
    Row("in 1970", (int(EPOCH), 60, (N,)), "quick", 2,
        ("schedule.suspicious_time", "schedule.suspicious_time", "schedule.window_open")),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_what_a_new_machine_s_drain_does_at_once(row: Row) -> None:
    state = MaintenanceState()
    snapshot = state.snapshot()
    preview = whole_preview(
        state,
        schedule(row.window),
        inputs(pool(admission=row.admission), row.policy, EPOCH),
        EPOCH,
    )
    (machine,) = preview["machines"]
    assert (machine["mode_now"], machine["mode_after"], machine["change"]) == (
        "UP",
        "DRAINING",
        "added",
    )
    assert machine["node"] == "n.test"
    assert machine["drain_now"] == row.drain_now
    assert len(machine["evicted_now"]) == row.evicted
    assert tuple(w["code"] for w in preview["warnings"]) == row.codes
    totals = preview["totals"]
    assert (totals["drains_now"], totals["evicted_now"]) == (row.drain_now is not None, row.evicted)
    assert state.snapshot() == snapshot  # nothing changed


def test_an_open_window_says_what_it_evicts_and_cuts() -> None:
    preview = whole_preview(
        MaintenanceState(), schedule(at(EPOCH - 1)), inputs(pool(), PlanPolicy(), EPOCH), EPOCH
    )
    (warning,) = preview["warnings"]
    assert warning["message"] == (
        "the window starting 2027-01-15T07:59:59Z is open already (1 machine: "
        "n.test/10.0.0.1); their drains start at once with the quick escalation: 2 jobs "
        "evicted at once"
    )
    assert warning["evicted_now"] == 2
    (machine,) = preview["machines"]
    # Each job retires at EPOCH + 500: evicted now, 500 s of its promise cut.
    assert [job["cut_by"] for job in machine["evicted_now"]] == [500, 500]
    assert preview["totals"]["cut_jobs"] == 2
    assert preview["totals"]["cut_core_seconds"] == 1000


def test_unknown_kept_and_dropped_machines() -> None:
    state = MaintenanceState()
    kept_window = at(EPOCH - 1)
    state.update_schedule(schedule(kept_window, at(EPOCH + 600, 60, OTHER)))
    snapshot = state.snapshot()
    # The same open window for n.test (kept: no warning of it), ghost.test dropped, and
    # a new machine no ad matches.
    new = MachineId(hostname="typo.test")
    preview = whole_preview(
        state,
        schedule(kept_window, at(EPOCH + 600, 60, new)),
        inputs(pool(), PlanPolicy(), EPOCH),
        EPOCH,
    )
    assert [w["code"] for w in preview["warnings"]] == ["schedule.unknown_machine"]
    assert preview["warnings"][0]["message"].startswith("no node's ad matches typo.test: ")
    kept, added = preview["machines"]
    assert (kept["change"], kept["mode_now"], kept["window_open"]) == ("kept", "DRAINING", True)
    assert (added["change"], added["node"], added["nodes"]) == ("added", None, [])
    (dropped,) = preview["dropped"]
    assert dropped == {
        "machine_id": {"hostname": "ghost.test", "ip": "10.0.0.9"},
        "mode_now": "DRAINING",
        "mode_after": "UP",
        "nodes": [],
        "drain_cancelled": False,
    }
    assert preview["totals"]["dropped"] == 1
    assert preview["totals"]["unknown_machines"] == 1
    assert state.snapshot() == snapshot


def test_a_down_machine_cannot_be_dropped_as_mesos_says() -> None:
    state = MaintenanceState()
    state.update_schedule(schedule(at(EPOCH + 600)))
    state.down([N])
    snapshot = state.snapshot()
    with pytest.raises(MaintenanceError) as raised:
        whole_preview(state, schedule(), inputs(pool(), PlanPolicy(), EPOCH), EPOCH)
    assert raised.value.code == "maintenance.machine_down"
    assert state.snapshot() == snapshot


def test_a_moved_window_is_named_and_warned_when_it_opens() -> None:
    state = MaintenanceState()
    state.update_schedule(schedule(at(EPOCH + 86400)))
    preview = whole_preview(
        state, schedule(at(EPOCH - 5)), inputs(pool(), PlanPolicy(), EPOCH), EPOCH
    )
    (machine,) = preview["machines"]
    assert (machine["change"], machine["mode_now"], machine["drain_now"]) == (
        "moved",
        "DRAINING",
        "quick",
    )
    assert [w["code"] for w in preview["warnings"]] == ["schedule.window_open"]


def declined_notice(
    machine: str, verdict: Verdict | None = Verdict.DECLINE, *, group: str = "etl"
) -> Notice:
    answer = (
        None
        if verdict is None
        else Answer(
            verdict=verdict,
            reason="month-end run",
            who="owner",
            at=EPOCH - 60,
            expected_completion=EPOCH + 7200,
        )
    )
    return Notice(
        id=f"n-{machine}-{group}",
        machine=machine,
        group=group,
        window=NoticeWindow(start=EPOCH + 86400, duration=3600),
        claims=(),
        issued=EPOCH - 100,
        answer=answer,
    )


@pytest.mark.parametrize(
    ("proposed", "notices", "groups", "reissued"),
    [
        # kept: the decline stays in force, and is met
        (at(EPOCH + 86400), [declined_notice("n.test")], ["etl"], False),
        (at(EPOCH + 86400), [declined_notice("N.TEST")], ["etl"], False),
        (at(EPOCH + 86400), [declined_notice("10.0.0.1")], ["etl"], False),
        # moved: met, and rescinded and reissued (the answer not carried over)
        (at(EPOCH + 90000), [declined_notice("n.test")], ["etl"], True),
        # accepted, unanswered, another machine's: none
        (at(EPOCH + 86400), [declined_notice("n.test", Verdict.ACCEPT)], [], False),
        (at(EPOCH + 86400), [declined_notice("n.test", None)], [], False),
        (at(EPOCH + 86400), [declined_notice("ghost.test")], [], False),
        (
            at(EPOCH + 86400),
            [declined_notice("n.test", group="web"), declined_notice("n.test")],
            ["etl", "web"],
            False,
        ),
    ],
)
def test_the_declines_a_change_would_meet(
    proposed: Any, notices: list[Notice], groups: list[str], reissued: bool
) -> None:
    state = MaintenanceState()
    state.update_schedule(schedule(at(EPOCH + 86400)))
    preview = whole_preview(
        state, schedule(proposed), inputs(pool(), PlanPolicy(), EPOCH), EPOCH, notices=notices
    )
    (machine,) = preview["machines"]
    assert [d["group"] for d in machine["declines"]] == groups
    assert preview["totals"]["declines"] == len(groups)
    for d in machine["declines"]:
        assert d["reissued"] is reissued
        assert (d["reason"], d["who"], d["at"], d["expected_completion"]) == (
            "month-end run",
            "owner",
            EPOCH - 60,
            EPOCH + 7200,
        )
    warned = [w for w in preview["warnings"] if w["code"] == "schedule.declined"]
    if not groups:
        assert warned == []
        return
    (warning,) = warned
    assert warning["declines"] == len(groups)
    assert "month-end run (owner)" in warning["message"]
    assert ("rescinded and reissued" in warning["message"]) is reissued


def test_a_machine_the_change_adds_meets_no_decline() -> None:
    """Notices exist only for scheduled machines: one a change adds has none yet (a notice
    of its name left from before is not in force)."""
    preview = whole_preview(
        MaintenanceState(),
        schedule(at(EPOCH + 86400)),
        inputs(pool(), PlanPolicy(), EPOCH),
        EPOCH,
        notices=[declined_notice("n.test")],
    )
    (machine,) = preview["machines"]
    assert (machine["change"], machine["declines"]) == ("added", [])


def test_an_unknown_short_name_gets_a_did_you_mean() -> None:
    proposed = schedule(at(EPOCH + 600, 60, MachineId(hostname="N")))
    preview = whole_preview(
        MaintenanceState(),
        proposed,
        inputs(pool(), PlanPolicy(), EPOCH),
        EPOCH,
        hostnames=["n.test", "n.other", "nn.test", "m.test"],
    )
    (warning,) = preview["warnings"]
    assert warning["suggestions"] == ["n.other", "n.test"]
    assert warning["message"].startswith(
        "no node's ad matches N (did you mean n.other or n.test?): nothing drains there"
    )


@pytest.mark.parametrize(
    ("host", "names", "meant"),
    [
        ("node1", ["node1.test", "node10.test", "node1"], ["node1.test"]),
        ("NODE1", ["node1.a", "node1.b", "node1.c", "node1.d"], ["node1.a", "node1.b", "node1.c"]),
        ("node1.test", ["node1.test.x"], []),
        ("x", [], []),
    ],
)
def test_suggestions(host: str, names: list[str], meant: list[str]) -> None:
    assert suggestions(host, names) == meant


N2 = MachineId(hostname="n2.test", ip="10.0.0.2")
NODE1 = MachineId(hostname="node1.test", ip="10.0.0.1")


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        (MachineId(hostname="node1"), ["node1.test/10.0.0.1"]),
        (MachineId(hostname="NODE1"), ["node1.test/10.0.0.1"]),
        (MachineId(hostname="node1.test"), ["node1.test/10.0.0.1"]),  # its ip left out
        (MachineId(ip="10.0.0.2"), ["n2.test/10.0.0.2"]),
        (MachineId(hostname="node"), []),  # a prefix, not a first label
        (MachineId(hostname="node1.other"), []),
        (MachineId(hostname="ghost", ip="10.0.0.9"), []),
        (NODE1, []),  # scheduled: nothing to mean
    ],
)
def test_a_machine_not_scheduled_gets_the_scheduled_ones_it_may_mean(
    given: MachineId, meant: list[str]
) -> None:
    state = MaintenanceState()
    state.update_schedule(schedule(at(EPOCH + 600, 3600, NODE1, N2)))
    assert scheduled_meant(state, [given]) == meant


def test_the_down_preview_of_a_short_name_says_mesos_s_message_and_did_you_mean() -> None:
    state = MaintenanceState()
    state.update_schedule(schedule(at(EPOCH + 600, 3600, NODE1, N2)))
    snapshot = state.snapshot()
    with pytest.raises(MaintenanceError) as raised:
        preview_down(
            state, (MachineId(hostname="node1"),), inputs(pool(), PlanPolicy(), EPOCH), EPOCH
        )
    assert raised.value.code == "maintenance.not_scheduled"
    assert raised.value.message == (
        """Machine '{"hostname":"node1"}' is not part of a maintenance schedule; """
        "did you mean node1.test/10.0.0.1?"
    )
    with pytest.raises(MaintenanceError) as raised:
        preview_down(state, (OTHER,), inputs(pool(), PlanPolicy(), EPOCH), EPOCH)
    assert "did you mean" not in raised.value.message
    assert state.snapshot() == snapshot


# ------------------------------------------------------------- the rows that change


def test_a_preview_of_the_rows_that_change_counts_the_kept_machines_without_their_rows() -> None:
    """``changed_only``: rows for the machines added or moved only; a kept machine is
    counted (an ad matches it or not, its window open, the declines it meets) without its
    row, so without its drain or cuts, which are the plan's as it stands."""
    ghost_kept = MachineId(hostname="gone.test")
    moved, added = MachineId(hostname="moved.test"), MachineId(hostname="added.test")
    state = MaintenanceState()
    # n.test is kept in an open window: a full preview says its quick drain evicts 2 jobs.
    state.update_schedule(schedule(at(EPOCH - 1, 3600, N, ghost_kept), at(EPOCH + 600, 60, moved)))
    proposed = schedule(at(EPOCH - 1, 3600, N, ghost_kept), at(EPOCH + 900, 60, moved, added))
    made_from = inputs(pool(), PlanPolicy(), EPOCH)
    notices = [declined_notice("n.test")]
    full = whole_preview(state, proposed, made_from, EPOCH, notices=notices)
    changed = whole_preview(state, proposed, made_from, EPOCH, notices=notices, changed_only=True)
    assert (full["rows"], changed["rows"]) == ("all", "changed")
    assert [m["change"] for m in full["machines"]] == ["kept", "kept", "moved", "added"]
    assert changed["machines"] == full["machines"][2:]  # the same rows, the kept left out
    kept_row = full["machines"][0]
    assert (kept_row["drain_now"], len(kept_row["evicted_now"])) == ("quick", 2)
    counted = ("machines", "added", "moved", "kept", "dropped", "unknown_machines")
    assert [full["totals"][k] for k in counted] == [4, 1, 1, 2, 0, 3]
    assert [changed["totals"][k] for k in counted] == [4, 1, 1, 2, 0, 3]
    assert (changed["totals"]["windows_open"], changed["totals"]["declines"]) == (2, 1)
    assert (full["totals"]["windows_open"], full["totals"]["declines"]) == (2, 1)
    # What the kept machine's drain does is the plan's: not the change's.
    assert [full["totals"][k] for k in ("drains_now", "evicted_now", "cut_jobs")] == [1, 2, 2]
    assert [changed["totals"][k] for k in ("drains_now", "evicted_now", "cut_jobs")] == [0, 0, 0]
    assert changed["warnings"] == full["warnings"]  # unknown machines and the decline met
    (decline,) = changed["declines"]  # a kept machine's, its row not made
    assert (decline["machine"], decline["group"], decline["reissued"]) == ("n.test", "etl", False)
    assert full["declines"] == changed["declines"] == kept_row["declines"]
    assert [w["code"] for w in changed["warnings"]] == [
        "schedule.unknown_machine",
        "schedule.unknown_machine",
        "schedule.unknown_machine",
        "schedule.declined",
    ]


def test_a_change_that_keeps_every_machine_makes_no_row() -> None:
    state, _, made_from = large_change()
    preview = SchedulePreview(state, state.schedule, made_from, EPOCH, changed_only=True)
    steps = list(preview.steps())
    assert steps == [None] * 251
    totals = preview.tail()["totals"]
    assert (totals["machines"], totals["kept"], totals["unknown_machines"]) == (251, 251, 251)


# ---------------------------------------------------------------------------- the body


def large_change() -> tuple[MaintenanceState, MaintenanceSchedule, PlanInputs]:
    """A schedule of 250 machines (three slices of the body's rows) no ad matches, kept
    from the state, with n.test entering an open window, typo.test added and ghost.test
    dropped: every part of the document has something in it."""
    many = tuple(MachineId(hostname=f"m{i:03d}.test") for i in range(250))
    state = MaintenanceState()
    state.update_schedule(schedule(at(EPOCH + 600, 60, *many), at(EPOCH + 900, 60, OTHER)))
    proposed = schedule(
        at(EPOCH + 600, 60, *many), at(EPOCH - 1, 3600, N, MachineId(hostname="typo.test"))
    )
    return state, proposed, inputs(pool(), PlanPolicy(), EPOCH)


async def test_the_body_is_the_preview_written_a_slice_of_rows_at_a_time() -> None:
    state, proposed, made_from = large_change()
    whole = json_bytes(whole_preview(state, proposed, made_from, EPOCH))
    chunks = [
        chunk
        async for chunk in preview_document(
            SchedulePreview(state, proposed, made_from, EPOCH), trio.Lock()
        )
    ]
    assert b"".join(chunks) == whole
    document = json.loads(whole)
    assert document["totals"]["machines"] == 252
    assert [w["code"] for w in document["warnings"]][:1] == ["schedule.window_open"]
    assert document["dropped"][0]["machine_id"]["hostname"] == "ghost.test"
    # the head, a chunk per PREVIEW_SLICE rows, the tail
    assert len(chunks) == 2 + -(-252 // PREVIEW_SLICE)


async def test_between_two_slices_of_rows_the_others_run() -> None:
    state, proposed, made_from = large_change()
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await trio.lowlevel.checkpoint()

    seen = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        preview = SchedulePreview(state, proposed, made_from, EPOCH)
        async for _ in preview_document(preview, trio.Lock()):
            seen.append(turns)
        nursery.cancel_scope.cancel()
    rows = seen[1:-1]  # the chunks of rows, each after a slice
    assert len(rows) == 3
    assert all(a < b for a, b in itertools.pairwise(rows))  # the other ran between two


async def test_previews_take_turns_and_one_whose_reader_stalls_holds_up_none() -> None:
    state, proposed, made_from = large_change()
    previewing = trio.Lock()
    stalled = preview_document(SchedulePreview(state, proposed, made_from, EPOCH), previewing)
    await stalled.__anext__()  # its head
    await stalled.__anext__()  # its first rows: then its reader reads no more
    assert not previewing.locked()
    documents: list[bytes] = []

    async def read() -> None:
        preview = SchedulePreview(state, proposed, made_from, EPOCH)
        documents.append(b"".join([chunk async for chunk in preview_document(preview, previewing)]))

    async with trio.open_nursery() as nursery:  # two at once, taking turns
        nursery.start_soon(read)
        nursery.start_soon(read)
    whole = json_bytes(whole_preview(state, proposed, made_from, EPOCH))
    assert documents == [whole, whole]
    await stalled.aclose()
    assert not previewing.locked()


async def test_a_preview_of_the_rows_that_change_counts_kept_machines_in_its_slices() -> None:
    """250 kept machines cost what 250 / KEPT_PER_ROW rows do: with the two rows made,
    one slice; the body is the document."""
    state, proposed, made_from = large_change()
    whole = json_bytes(whole_preview(state, proposed, made_from, EPOCH, changed_only=True))
    preview = SchedulePreview(state, proposed, made_from, EPOCH, changed_only=True)
    chunks = [chunk async for chunk in preview_document(preview, trio.Lock())]
    assert b"".join(chunks) == whole
    assert 250 / KEPT_PER_ROW + 2 <= PREVIEW_SLICE
    assert len(chunks) == 3  # the head, the two rows, the tail
    document = json.loads(whole)
    assert [m["machine_id"]["hostname"] for m in document["machines"]] == ["n.test", "typo.test"]
    assert (document["totals"]["kept"], document["totals"]["dropped"]) == (250, 1)


class CountedLock:
    """A lock that counts how often it was taken: a preview takes it once a slice."""

    def __init__(self) -> None:
        self.lock = trio.Lock()
        self.taken = 0

    async def __aenter__(self) -> None:
        await self.lock.acquire()
        self.taken += 1

    async def __aexit__(self, *exc: object) -> None:
        self.lock.release()


async def test_kept_machines_alone_take_slices_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A slice counts the kept machines it looks at: a preview of many kept machines and
    no row still gives the others the loop between its slices (slices of 4 rows, 5 kept
    machines to a row)."""
    monkeypatch.setattr(_api, "PREVIEW_SLICE", 4)
    monkeypatch.setattr(_api, "KEPT_PER_ROW", 5)
    count = 3 * 4 * 5
    many = tuple(MachineId(hostname=f"k{i:05d}.test") for i in range(count))
    state = MaintenanceState()
    state.update_schedule(schedule(at(EPOCH + 600, 60, *many)))
    preview = SchedulePreview(
        state, state.schedule, inputs(pool(), PlanPolicy(), EPOCH), EPOCH, changed_only=True
    )
    lock = CountedLock()
    body = b"".join([chunk async for chunk in preview_document(preview, cast(trio.Lock, lock))])
    document = json.loads(body)
    assert (document["machines"], document["totals"]["kept"]) == ([], count)
    assert lock.taken == 4  # three slices of kept machines, then the one that ends


def test_with_a_clock_each_row_is_made_at_the_time_it_gives() -> None:
    machines = tuple(MachineId(hostname=f"t{i}.test") for i in range(3))
    proposed = schedule(at(EPOCH + 1.5, 60, *machines))
    preview = SchedulePreview(
        MaintenanceState(), proposed, inputs(pool(), PlanPolicy(), EPOCH), EPOCH
    )
    times = iter([EPOCH, EPOCH + 1, EPOCH + 2])
    rows = list(preview.rows(lambda: next(times)))
    assert [row["window_open"] for row in rows] == [False, False, True]
    assert preview.head["now"] == EPOCH  # when it was asked
    assert preview.tail()["totals"]["windows_open"] == 1


def test_the_tail_counts_the_rows_once_they_are_all_made() -> None:
    state, proposed, made_from = large_change()
    preview = SchedulePreview(state, proposed, made_from, EPOCH)
    with pytest.raises(RuntimeError):
        preview.tail()


async def test_a_reader_that_takes_nothing_ends_the_reply_and_lets_the_preview_go(
    autojump_clock: trio.testing.MockClock,
) -> None:
    state, proposed, made_from = large_change()
    previewing = trio.Lock()
    body = preview_document(SchedulePreview(state, proposed, made_from, EPOCH), previewing)
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)
        if len(sent) == 3:  # the head went, the first rows never do: the reader stalled
            await trio.sleep_forever()

    started = trio.current_time()
    with trio.fail_after(2 * SEND_TIMEOUT):  # virtual time: a reply that never ends fails
        await BoundedStreamingResponse(body, media_type="application/json").stream_response(send)
    assert trio.current_time() - started == SEND_TIMEOUT
    assert [m["type"] for m in sent] == ["http.response.start"] + ["http.response.body"] * 2
    assert all(m["more_body"] for m in sent[1:])  # the body never said it was whole
    with pytest.raises(StopAsyncIteration):  # closed: what the preview held is let go
        await body.__anext__()
    assert not previewing.locked()


async def test_a_reader_that_takes_every_chunk_gets_the_whole_body() -> None:
    state, proposed, made_from = large_change()
    body = preview_document(SchedulePreview(state, proposed, made_from, EPOCH), trio.Lock())
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await BoundedStreamingResponse(body, media_type="application/json").stream_response(send)
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    text = b"".join(m.get("body", b"") for m in sent[1:])
    assert text == json_bytes(whole_preview(state, proposed, made_from, EPOCH))
