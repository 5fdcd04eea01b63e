"""The hub that writes and publishes the master's events, and a subscriber's stream, on
trio's virtual clock (nodeagent.master._event_stream)."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from nodeagent._store import StoreError
from nodeagent.master._event_stream import (
    HEARTBEAT,
    EventHub,
    StreamRequest,
    subscription,
)
from nodeagent.master._events import MAX_PER_WRITE, Draft, EventFilter
from slots import InvalidRequest


def draft(kind: str = "drain.started") -> Draft:
    return Draft(type=kind, text=kind, machines=("n1",))


class Writes:
    """The master's writes of its events: each takes the staged ones; ``failing`` ones
    raise, as a full disk does."""

    def __init__(self, hub: EventHub) -> None:
        self.hub = hub
        self.failing = False
        self.written: list[list[str]] = []

    def __call__(self, *drafts: Draft) -> None:
        made, staged = self.hub.take(drafts, 1.0)
        if self.failing:
            raise StoreError("disk full")
        self.written.append([e.type for e in made])
        self.hub.written(made, staged)


async def test_staged_events_are_written_whoever_writes_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hub = EventHub()
    hub.recording = True
    writes = Writes(hub)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.flush_when_staged, writes)
        hub.stage(draft("leader.elected"))
        await trio.sleep(1)
        assert writes.written == [["leader.elected"]]
        writes(draft("schedule.changed"))  # a change of state, nothing staged
        hub.stage(draft("drain.committed"))
        writes()  # a write of the master's takes it at once
        hub.stage(draft("drain.started"), draft("drain.completed"))  # then the flusher
        await trio.sleep(1)
        assert writes.written[1:] == [
            ["schedule.changed"],
            ["drain.committed"],
            ["drain.started", "drain.completed"],
        ]
        hub.stage(*[draft() for _ in range(MAX_PER_WRITE + 3)])  # more than one write takes
        await trio.sleep(1)
        assert [len(w) for w in writes.written[4:]] == [MAX_PER_WRITE, 3]
        writes.failing = True
        hub.stage(draft("node.lost"))
        await trio.sleep(3)
        assert hub.log.last_id == 5 + MAX_PER_WRITE + 3  # not written
        writes.failing = False  # the disk has room again: written, in order
        await trio.sleep(2)
        assert writes.written[-1] == ["node.lost"]
        assert [e.id for e in hub.log.after(0)[1]] == list(range(1, hub.log.last_id + 1))
        nursery.cancel_scope.cancel()


async def test_what_is_staged_when_a_master_stops_leading_is_written_first() -> None:
    hub = EventHub()
    hub.recording = True
    writes = Writes(hub)
    hub.stage(*[draft() for _ in range(MAX_PER_WRITE + 2)], draft("node.lost"))
    hub.stop_recording(writes)  # more than one write takes
    assert [len(w) for w in writes.written] == [MAX_PER_WRITE, 3]
    assert writes.written[-1][-1] == "node.lost"
    assert (hub.recording, hub.staged) == (False, [])


async def test_a_stop_whose_write_fails_leaves_the_staged_events_to_the_next_leader(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hub = EventHub()
    hub.recording = True
    writes = Writes(hub)
    writes.failing = True  # a full disk, or a term already fenced out
    hub.stage(draft("node.lost"))
    hub.stop_recording(writes)
    assert writes.written == []
    assert (hub.recording, hub.staged, hub.log.last_id) == (False, [], 0)
    assert "1 staged events not written as this master stops leading: disk full" in caplog.text


async def test_nothing_is_staged_while_not_recording() -> None:
    hub = EventHub()
    hub.stage(draft())
    assert hub.staged == []
    hub.recording = True
    hub.stage(draft())
    hub.stop_recording()
    assert hub.staged == []


async def test_a_subscriber_gets_a_gap_then_the_kept_then_what_comes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hub = EventHub(keep=3)
    for _ in range(5):
        made, _ = hub.take([draft()], 1.0)
        hub.written(made, 0)
    got: list[bytes] = []

    async def read() -> None:
        request = StreamRequest(since=0, jsonl=True)
        async for chunk in subscription(hub, request):
            got.append(chunk)

    def lines() -> list[bytes]:
        return b"".join(got).split(b"\n")[:-1]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.sleep(1)
        assert len(got) == 1  # the gap and the kept, in one piece
        first = json.loads(lines()[0])
        assert (first["type"], first["missed"], first["resume"]) == ("gap", 2, 2)
        assert [json.loads(line)["id"] for line in lines()[1:]] == [3, 4, 5]
        made, _ = hub.take([draft("mode.changed")], 1.0)
        hub.written(made, 0)
        await trio.sleep(1)
        assert json.loads(lines()[-1])["id"] == 6
        await trio.sleep(HEARTBEAT + 1)
        assert got[-1] == b"\n"  # a heartbeat of JSON lines
        nursery.cancel_scope.cancel()


async def test_last_and_filters_and_not_following() -> None:
    hub = EventHub()
    for kind in ("mode.changed", "drain.started", "mode.changed", "drain.completed"):
        made, _ = hub.take([draft(kind)], 1.0)
        hub.written(made, 0)
    request = StreamRequest(last=1, wanted=EventFilter.parse(types="mode.*"), follow=False)
    text = b"".join([c async for c in subscription(hub, request)])
    assert [line for line in text.split(b"\n") if line.startswith(b"id: ")] == [b"id: 3"]
    everything = StreamRequest(since=0, follow=False, jsonl=True)
    text = b"".join([c async for c in subscription(hub, everything)])
    assert len(text.splitlines()) == 4


@pytest.mark.parametrize(
    ("query", "last_event_id", "expected"),
    [
        ("", None, StreamRequest()),
        (
            "since=4&format=jsonl&follow=false",
            None,
            StreamRequest(since=4, jsonl=True, follow=False),
        ),
        ("since=4", "9", StreamRequest(since=9)),  # the header wins
        (
            "last=20&type=drain.*",
            None,
            StreamRequest(last=20, wanted=EventFilter(types=("drain.*",))),
        ),
    ],
)
def test_stream_requests(query: str, last_event_id: str | None, expected: StreamRequest) -> None:
    assert StreamRequest.parse(query, last_event_id) == expected


@pytest.mark.parametrize(
    ("query", "last_event_id", "message"),
    [
        ("since=x", None, "since 'x' is not an event id"),
        (
            "since=1795995891000000000",
            None,
            r"since '1795995891000000000' is not an event id: 18 digits at most, counted from 1 "
            r"\(a time is not an event id\)",
        ),
        ("last=ten", None, r"last 'ten' is not a number of events \(an integer ≥ 0\)"),
        ("last=1795995891000000000", None, "is not a number of events: 18 digits at most$"),
        ("since=1&since=2", None, "since is given 2 times"),
        ("", "-3", "Last-Event-ID '-3'"),
        ("follow=maybe", None, "follow 'maybe'"),
        ("machine=n1&grop=a/b/c", None, "unknown parameter 'grop'"),
    ],
)
def test_bad_stream_requests(query: str, last_event_id: str | None, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        StreamRequest.parse(query, last_event_id)
