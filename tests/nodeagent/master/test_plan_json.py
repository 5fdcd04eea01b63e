"""The plan's reply written from templates is the plan, byte for byte where it matters."""

from __future__ import annotations

import array
import gc
import itertools
import json
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from nodeagent._peer import HttpAgentLink
from nodeagent._store import DocumentStore
from nodeagent.master import _adstore as adstore
from nodeagent.master import _api, _plan_view
from nodeagent.master._adstore import AdStore
from nodeagent.master._api import PlanReply, plan_body, plan_chunks
from nodeagent.master._drains import DrainPhase, DrainRecord
from nodeagent.master._maintenance import MachineId, MaintenanceSchedule, Unavailability, Window
from nodeagent.master._master import Master
from nodeagent.master._plan import PlanPolicy
from nodeagent.master._plan_view import PlanView
from nodeagent.master._row_json import _TemplatePacker
from slots import JobSpec, Machine, MachinePolicy, Resources


class StepClock:
    """Wall-clock time that moves only when told."""

    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


#: Owners whose text a ``%`` template or a JSON string would misread if not escaped.
OWNERS = ("alice", "50%", "%d", "%%s", 'a"b\\c', "ünï")


def _node_ad(n: int, now: float, jobs: int) -> dict[str, Any]:
    machine = Machine(
        host=f"n{n}.test",
        ip=f"10.0.0.{n}",
        address=f"http://10.0.0.{n}:9621",
        total=Resources(cpus=8),
        policy=MachinePolicy(max_job_retirement_time=600 * (n + 1)),
        now=now - 900,
    )
    for j in range(jobs):
        machine.claim(
            now - 900 + 100 * j,
            resources=Resources(cpus=1 + j % 3),
            spec=JobSpec(job_id=f"{n}.{j}", owner=OWNERS[(n + j) % len(OWNERS)]),
        )
    return machine.ad(now)


def _schedule(now: float, ids: list[MachineId]) -> MaintenanceSchedule:
    return MaintenanceSchedule(
        windows=tuple(
            Window(
                machine_ids=(machine_id,),
                unavailability=Unavailability(
                    start_ns=int((now + 300 * (n + 1)) * 1e9), duration_ns=3600 * 10**9
                ),
            )
            for n, machine_id in enumerate(ids)
        )
    )


def _assert_reply_is_the_plan(master: Master) -> None:
    for late in (False, True):
        for blockers in (True, False):
            plain = master.plan(with_blockers=blockers, late=late)
            body = plan_body(master, with_blockers=blockers, late=late)
            assert orjson.loads(body) == orjson.loads(orjson.dumps(plain))


@pytest.mark.parametrize("policy", ["just_in_time", "immediate"])
def test_the_encoded_reply_is_the_plan(tmp_path: Path, policy: str) -> None:
    """Machines early and late, with and without jobs, with a drain of the master's, one
    being started, one escalated, two nodes for one id, a node lost, a node shutting
    down then rebooting, a machine with no node, a DOWN machine, stale figures: the reply
    plan_body writes decodes to exactly Master.plan(), second after second, as the rows'
    states change."""
    clock = StepClock(1_800_000_000.0)
    store = DocumentStore(tmp_path / "master.db")
    master = Master(
        store=store,
        link=HttpAgentLink(b"k" * 32),  # no pass runs: nothing is called
        clock=clock,
        ads=AdStore(lifetime=600),
        policy=PlanPolicy(escalation="quick", drain_policy=policy),
    )
    now = clock.now()
    for n in range(6):
        master.receive_ad(_node_ad(n, now, jobs=n % 4))
    twin = _node_ad(3, now, jobs=2)
    twin["machine"]["Name"] = twin["machine"]["Machine"] = "n3.test"
    twin["machine"]["MachineIp"] = "10.0.1.3"
    for ad in twin["slots"]:
        ad["Name"] = str(ad["Name"]).replace("n3.test", "n3-twin.test")
    twin["machine"]["Name"] = "n3-twin.test"
    master.receive_ad(twin)
    # n6's machine shuts down (its agent's own drain), then goes silent: rebooting
    going = _node_ad(6, now, jobs=2)
    going["machine"] |= {
        "ShuttingDown": True,
        "DrainState": "draining",
        "DrainingRequestId": "12",
        "DrainReason": "shutdown",
        "DrainSchedule": "quick",
    }
    master.receive_ad(going)
    ids = [MachineId(hostname=f"n{n}.test", ip=f"10.0.0.{n}") for n in range(7)]
    ids[3] = MachineId(hostname="n3.test", ip=None)  # two nodes match
    ids.append(MachineId(hostname="gone.test", ip="10.9.9.9"))  # no node
    master.set_schedule(_schedule(now, ids), actor="ops")
    master.drains["n1.test|10.0.0.1"] = DrainRecord(request_id="3", phase=DrainPhase.COMMITTED)
    master.drains["n2.test|10.0.0.2"] = DrainRecord(request_id="4", escalated=True)
    master._starting.add("n4.test|10.0.0.4")
    try:
        for step in range(8):
            _assert_reply_is_the_plan(master)
            clock.t += 97.5
            if step == 2:
                master.state.down([ids[5]])
            if step == 3:  # n0 reports again; n5's ad ages until it is lost
                master.receive_ad(_node_ad(0, clock.now(), jobs=1))
            if step == 4:
                master.window_since["n2.test|10.0.0.2"] = clock.now()  # n2's figures stale
                master._starting.clear()
        rows = master.plan()["machines"]
        assert any(r["as_planned"]["cuts"] for r in rows)  # rows that list their cuts
        assert any(len(r["nodes"]) == 2 for r in rows)
        assert any(n["lost"] for r in rows for n in r["nodes"])
        assert any(r["node"] is None for r in rows)
        assert any(r["figures_stale"] for r in rows)
        assert any(r["mode"] == "DOWN" for r in rows)
        assert any(r["drain"] and r["drain"]["shutting_down"] for r in rows)
        assert any(n["rebooting"] and not n["lost"] for r in rows for n in r["nodes"])
        # rows without a cut are written the fast way, the others the template way
        fast = [t._fast for t in master.plan_view.row_texts.values()]
        assert sum(f is not None for f in fast) >= 3
        made = [(t._fast, t._templates) for t in master.plan_view.row_texts.values()]
        written = sum(f is not None or any(m.values()) for f, m in made)
        assert written == 7  # every row with a node has its template
    finally:
        store.close()


def test_a_node_that_publishes_a_marker_gets_its_row_written_the_slow_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ads cannot hold a NUL (the master refuses control characters), so no ad can hold a
    template's marker; should one ever reach a row, the row is written the slow way."""
    monkeypatch.setattr(adstore, "check_node_ad", lambda machine, slots, **_: None)
    clock = StepClock(1_800_000_000.0)
    store = DocumentStore(tmp_path / "master.db")
    master = Master(
        store=store, link=HttpAgentLink(b"k" * 32), clock=clock, ads=AdStore(lifetime=600)
    )
    ad = _node_ad(1, clock.now(), jobs=2)
    ad["machine"]["DrainReason"] = "\x003\x00"  # as the templates' markers of a value
    ad["machine"]["DrainSchedule"] = "\x00L3\x00"
    master.receive_ad(ad)
    master.set_schedule(_schedule(clock.now(), [MachineId(hostname="n1.test")]), actor="ops")
    try:
        for _ in range(3):
            _assert_reply_is_the_plan(master)
            clock.t += 1
        (row_text,) = master.plan_view.row_texts.values()
        assert row_text._templates
        assert all(t is None for t in row_text._templates.values())
        assert row_text._fast is None
    finally:
        store.close()


@pytest.mark.parametrize("run", [1234, 2**63 + 5, 1e22])
def test_a_row_s_moving_blockers_are_kept_as_integers_of_any_size(
    tmp_path: Path, run: float
) -> None:
    """A fast template keeps its blockers' moving values as 64-bit integers when they fit,
    as a tuple when one does not (a job's run time is any finite number: JSON brings an
    integer up to 2⁶⁴ − 1, a float beyond); either way the reply is the plan, second after
    second."""
    clock = StepClock(1_800_000_000.0)
    store = DocumentStore(tmp_path / "master.db")
    master = Master(
        store=store, link=HttpAgentLink(b"k" * 32), clock=clock, ads=AdStore(lifetime=600)
    )
    ad = _node_ad(1, clock.now(), jobs=3)
    busy = [s for s in ad["slots"] if s.get("Activity") == "Busy"]
    busy[0]["TotalJobRunTime"] = run
    master.receive_ad(ad)
    master.set_schedule(_schedule(clock.now(), [MachineId(hostname="n1.test")]), actor="ops")
    try:
        for _ in range(3):
            for blockers in (False, True):  # the template with blockers made last
                plain = master.plan(with_blockers=blockers)
                body = plan_body(master, with_blockers=blockers, late=False)
                # the standard library reads and writes an integer of any size
                assert json.loads(body) == json.loads(json.dumps(plain))
            clock.t += 61
        (row_text,) = master.plan_view.row_texts.values()
        assert row_text._fast is not None
        moving = row_text._fast.moving
        assert max(moving) >= run
        assert type(moving) is (array.array if run < 2**62 else tuple)
    finally:
        store.close()


def test_ads_that_only_moved_on_keep_their_rows_templates_and_the_reply_is_the_plan(
    tmp_path: Path,
) -> None:
    """Every node pushes its ad again a minute later, only moved on in time: the rows'
    templates are kept (no forecast or template made again) and the reply is still
    exactly the plan, ad ages included; an ad that changed gets a new template. The
    templates kept do not keep the replaced entries alive."""
    clock = StepClock(1_800_000_000.0)
    store = DocumentStore(tmp_path / "master.db")
    master = Master(
        store=store, link=HttpAgentLink(b"k" * 32), clock=clock, ads=AdStore(lifetime=600)
    )
    now = clock.now()
    nodes = []
    for n in range(4):
        node = Machine(
            host=f"n{n}.test",
            ip=f"10.0.0.{n}",
            address=f"http://10.0.0.{n}:9621",
            total=Resources(cpus=8),
            policy=MachinePolicy(max_job_retirement_time=3600),
            now=now - 900,
        )
        for j in range(3):
            node.claim(now - 800 + 10 * j, resources=Resources(cpus=1), spec=JobSpec())
        nodes.append(node)
        master.receive_ad(node.ad(now))
    ids = [MachineId(hostname=f"n{n}.test", ip=f"10.0.0.{n}") for n in range(4)]
    master.set_schedule(_schedule(now + 7200, ids), actor="ops")
    try:
        _assert_reply_is_the_plan(master)
        plan_body(master)  # the whole plan: each row's template for its state
        texts = master.plan_view.row_texts
        before = {key: text._fast for key, text in texts.items()}
        forecasts = [master.ads.get(f"n{n}.test").forecast for n in range(4)]  # type: ignore[union-attr]
        assert all(before.values())
        replaced = [weakref.ref(master.ads.get(f"n{n}.test")) for n in range(4)]
        clock.t += 60
        for node in nodes:
            master.receive_ad(node.ad(clock.now()))
        nodes[0].claim(clock.now(), resources=Resources(cpus=1), spec=JobSpec())
        master.receive_ad(nodes[0].ad(clock.now()))  # this one changed
        clock.t += 1
        plan_body(master)
        kept = [key for key, text in texts.items() if text._fast is before[key]]
        assert sorted(kept) == [f"n{n}.test|10.0.0.{n}" for n in range(1, 4)]
        _assert_reply_is_the_plan(master)
        entries = [master.ads.get(f"n{n}.test") for n in range(4)]
        assert [e.forecast is f for e, f in zip(entries, forecasts, strict=True)] == [  # type: ignore[union-attr]
            False,
            True,
            True,
            True,
        ]
        assert master.ads.moved_on_ads == 4  # n0's first push again moved on, then changed
        del entries
        gc.collect()
        assert [ref() for ref in replaced] == [None] * 4
    finally:
        store.close()


def test_fast_templates_are_kept_deflated_with_the_first_large_one_as_the_dictionary() -> None:
    """A template made before any is large enough to be the dictionary is deflated
    without one, and still inflates after the dictionary is set; rows that differ in
    their names and numbers deflate to a fraction of their text."""
    packer = _TemplatePacker()
    small = b'{"node":"%s","age":%d}'
    packed_small, none = packer.pack(small)
    assert none == b""
    assert packer.unpack(packed_small, none) == small

    def row(n: int) -> bytes:
        blockers = ",".join(
            f'{{"slot":"slot1_{j}@n{n}.test","job_id":"{n}.{j}","run":%d,"vacate":300}}'
            for j in range(16)
        )
        return f'{{"machine_id":{{"hostname":"n{n}.test"}},"blockers":[{blockers}]}}'.encode()

    first, second = row(1), row(2)
    assert len(first) >= _TemplatePacker.DICTIONARY_BYTES
    packed_first, dictionary = packer.pack(first)
    assert dictionary == first
    assert packer.dictionary == first
    packed_second, same = packer.pack(second)
    assert same is dictionary
    assert packer.unpack(packed_second, same) == second
    assert packer.unpack(packed_first, dictionary) == first
    assert packer.unpack(packed_small, none) == small
    assert len(packed_second) * 8 < len(second)


def _pool(tmp_path: Path, machines: int) -> tuple[Master, DocumentStore]:
    """A master of ``machines`` nodes, each scheduled, on a clock that stands still."""
    clock = StepClock(1_800_000_000.0)
    store = DocumentStore(tmp_path / "master.db")
    master = Master(
        store=store, link=HttpAgentLink(b"k" * 32), clock=clock, ads=AdStore(lifetime=600)
    )
    for n in range(machines):
        master.receive_ad(_node_ad(n, clock.now(), jobs=n % 3))
    ids = [MachineId(hostname=f"n{n}.test", ip=f"10.0.0.{n}") for n in range(machines)]
    master.set_schedule(_schedule(clock.now(), ids), actor="ops")
    return master, store


def rest_of(reply: PlanReply) -> bytes:
    """The slices of ``reply`` until its end."""
    rest = b""
    while not reply.ended:
        rest += reply.take()
    return rest


def test_a_reply_of_rows_sends_its_head_and_first_rows_at_once_and_a_summary_is_one_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However long a slice may last, the first one of the whole plan ends with its first
    chunk of rows once they took FIRST_ROWS_AFTER (here, at once); a summary (``late``)
    takes its slice and, ended within it, is one body."""
    monkeypatch.setattr(_plan_view, "FIRST_CHUNK", 2)
    monkeypatch.setattr(_api, "PLAN_SLICE", 3600.0)
    monkeypatch.setattr(_api, "FIRST_ROWS_AFTER", 0.0)
    master, store = _pool(tmp_path, 8)
    try:
        for jsonl in (True, False):
            reply = PlanReply(master, jsonl=jsonl)
            first = reply.take()
            assert not reply.ended
            whole = first + rest_of(reply)
            if jsonl:
                assert [orjson.loads(line).keys() for line in first.splitlines()] == [
                    {"plan"},
                    {"row"},
                    {"row"},
                ]
            else:
                assert whole == plan_body(master)
                assert first.count(b'"machine_id"') == 2
        summary = PlanReply(master, late=True, with_blockers=False, limit=20)
        assert summary.take() == plan_body(master, late=True, with_blockers=False, limit=20)
        assert summary.ended
    finally:
        store.close()


def test_the_first_slice_of_rows_ends_once_its_first_rows_took_their_time_however_quick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows made quickly do not keep the first rows for the whole slice: the first slice
    ends at the first chunk made once FIRST_ROWS_AFTER has passed (here, each look at the
    clock a second on: the head, the first 2 rows, the next 4, then the time is spent)."""
    monkeypatch.setattr(_plan_view, "FIRST_CHUNK", 2)
    monkeypatch.setattr(_api, "PLAN_SLICE", 3600.0)
    monkeypatch.setattr(_api, "FIRST_ROWS_AFTER", 2.5)
    ticks = itertools.count()
    monkeypatch.setattr(_api, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    master, store = _pool(tmp_path, 8)
    try:
        reply = PlanReply(master, jsonl=True)
        first = reply.take()
        assert [list(orjson.loads(line)) for line in first.splitlines()] == [
            ["plan"],
            *[["row"]] * 6,
        ]
        assert not reply.ended
        second = reply.take()  # no first slice's bound: the slice's own
        assert (second.count(b'{"row"'), reply.ended) == (2, True)
    finally:
        store.close()


async def test_the_api_s_document_is_the_body_sent_a_chunk_at_a_time_with_the_others_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_plan_view, "FIRST_CHUNK", 2)
    monkeypatch.setattr(_api, "PLAN_SLICE", 0.0)  # a chunk a slice
    master, store = _pool(tmp_path, 8)
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await trio.lowlevel.checkpoint()

    try:
        chunks: list[bytes] = []
        seen: list[int] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            async for chunk in plan_chunks(master):
                chunks.append(chunk)
                seen.append(turns)
            nursery.cancel_scope.cancel()
        assert b"".join(chunks) == plan_body(master)
        assert len(chunks) == 5  # the head, the first 2 rows, the next 4, the last 2, the end
        assert chunks[0].startswith(b'{"now":')
        assert chunks[0].endswith(b'"machines":[')
        # Made in one go, no other task would run until its end; a chunk at a time, the
        # other runs once in each of trio's batches between the head's and the end's.
        assert seen[-1] - seen[0] >= len(chunks) - 2
        lines = b"".join([chunk async for chunk in plan_chunks(master, jsonl=True)])
        head, *rows, end = [orjson.loads(line) for line in lines.splitlines()]
        document = orjson.loads(b"".join(chunks))
        assert list(document) == ["now", "policy", "machines", "matched", "totals", "after_window"]
        assert document == {
            **head["plan"],
            "machines": [row["row"] for row in rows],
            **{key: value for key, value in end["end"].items() if key != "next"},
        }
    finally:
        store.close()


async def test_a_plan_that_fails_after_its_first_bytes_is_never_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The document's body raises (the server ends its connection without the end); the
    lines end with an error line."""
    monkeypatch.setattr(_api, "PLAN_SLICE", 0.0)  # the head sent before the first row
    master, store = _pool(tmp_path, 3)

    def fail(self: PlanView, row: Any, now: float, *, keep: bool = True) -> bytes:
        raise RuntimeError("a bug")

    monkeypatch.setattr(PlanView, "_text", fail)
    try:
        document = plan_chunks(master)
        assert (await document.__anext__()).startswith(b'{"now":')
        with pytest.raises(RuntimeError, match="a bug"):
            await document.__anext__()
        lines = [chunk async for chunk in plan_chunks(master, jsonl=True)]
        assert list(orjson.loads(lines[0])) == ["plan"]
        assert orjson.loads(lines[-1])["error"]["code"] == "plan.failed"
    finally:
        store.close()


async def test_a_small_plan_goes_in_one_piece_with_no_turn_of_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within a slice (PLAN_SLICE) the chunks are sent as one: a summary, or a plan of a
    few machines, costs its reader no wait for the others between its head and its end.
    (The slice is made long here: on a loaded machine 8 rows may take more than 10 ms.)"""
    monkeypatch.setattr(_api, "PLAN_SLICE", 60.0)
    monkeypatch.setattr(_api, "FIRST_ROWS_AFTER", 60.0)
    master, store = _pool(tmp_path, 8)
    try:
        for jsonl in (False, True):
            for late in (False, True):
                body = plan_chunks(master, jsonl=jsonl, late=late, with_blockers=False)
                with trio.testing.assert_no_checkpoints():
                    whole = await body.__anext__()
                    with pytest.raises(StopAsyncIteration):
                        await body.__anext__()
                if not jsonl:
                    assert whole == plan_body(master, late=late, with_blockers=False)
    finally:
        store.close()


async def test_a_summary_reads_the_kept_totals_when_asked_not_when_its_bytes_are_made(
    tmp_path: Path,
) -> None:
    """Between the request and its first bytes the totals may be brought further
    (``Master.keep_totals``); a summary that read them then, at its older instant, would
    make them anew, every machine's share."""
    master, store = _pool(tmp_path, 8)
    master.plan_view.answer_limit = 2  # a reply remakes 2 shares at most
    try:
        now = master.clock.now()
        while not master.plan_view.warm(master.plan_inputs(now), now, limit=100):
            pass
        kept = master.plan_view.kept
        summary = plan_chunks(master, late=True, with_blockers=False)
        clock = master.clock
        assert isinstance(clock, StepClock)
        clock.t += 1.0
        later = clock.now()
        assert master.plan_view.warm(master.plan_inputs(later), later, limit=100)
        body = orjson.loads(b"".join([chunk async for chunk in summary]))
        assert master.plan_view.kept is kept
        assert body["now"] == now
        assert body["totals"]["behind"] == 0
        assert body["totals"]["machines"] == 8
    finally:
        store.close()
