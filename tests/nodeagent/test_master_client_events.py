"""How :meth:`nodeagent.client.MasterClient.events` resumes, on virtual time: scripted
masters (:class:`httpx.MockTransport`) whose streams break, restart, send a gap, refuse,
or send an event again; what the client asks each time (``since``), what it yields, and
how long it waits between attempts. Against a real master: tests/integration/
test_events_clients.py.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from nodeagent.client import (
    BadResponse,
    InvalidRequest,
    MasterClient,
    NoLeader,
    Unauthorized,
    Unreachable,
)


def event(event_id: int, kind: str = "drain.committed") -> bytes:
    return json.dumps({"id": event_id, "time": 1.0, "type": kind, "text": f"e{event_id}"}).encode()


def gap(after: int, resume: int) -> bytes:
    return json.dumps(
        {"type": "gap", "after": after, "resume": resume, "missed": resume - after, "text": "…"}
    ).encode()


class Body(httpx.AsyncByteStream):
    """A stream's body: ``lines``, then ``end``: ``"close"`` (the body ends), ``"break"``
    (the connection breaks) or ``"wait"`` (nothing more, ever)."""

    def __init__(self, lines: list[bytes], end: str) -> None:
        self._pieces = [line + b"\n" for line in lines]
        self._end = end

    def __aiter__(self) -> Body:
        return self

    async def __anext__(self) -> bytes:
        await trio.lowlevel.checkpoint()
        if self._pieces:
            return self._pieces.pop(0)
        if self._end == "break":
            raise httpx.RemoteProtocolError("peer closed connection")
        if self._end == "wait":
            await trio.sleep_forever()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._pieces.clear()


Reply = Callable[[], httpx.Response]


def stream(*lines: bytes, end: str = "break", last: int | None = None) -> Reply:
    headers = {"Content-Type": "application/x-ndjson"}
    if last is not None:
        headers["X-Nodeagent-Last-Event-Id"] = str(last)
    return lambda: httpx.Response(200, headers=headers, stream=Body(list(lines), end))


def refused(status: int, code: str) -> Reply:
    return lambda: httpx.Response(status, json={"error": {"code": code, "message": "no"}})


def unreachable() -> httpx.Response:
    raise httpx.ConnectError("connection refused")


class Masters:
    """Masters answering, in turn, the replies scripted for each host (then a refusal, so
    that a test asking too much fails rather than waits); ``asked`` holds (virtual time,
    host, query) of every request."""

    def __init__(self, **replies: list[Reply]) -> None:
        self.replies = replies
        self.asked: list[tuple[float, str, dict[str, str]]] = []
        self.transport = httpx.MockTransport(self._handle)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host.partition(".")[0]
        self.asked.append((trio.current_time(), host, dict(request.url.params)))
        assert request.url.path == "/v1/events"
        script = self.replies[host]
        return script.pop(0)() if script else refused(418, "test.no_more_replies")()

    def since(self) -> list[str | None]:
        return [query.get("since") for _, _, query in self.asked]


async def read(
    masters: Masters, count: int, *, urls: tuple[str, ...] = ("a",), **kwargs: Any
) -> list[dict[str, Any]]:
    """The first ``count`` items :meth:`MasterClient.events` yields."""
    found: list[dict[str, Any]] = []
    bases = [f"http://{host}.test" for host in urls]
    async with (
        MasterClient(urls=bases, token="t", transport=masters.transport) as client,
        contextlib.aclosing(client.events(**kwargs)) as events,
    ):
        async for item in events:
            found.append(item)
            if len(found) == count:
                break
    return found


def ids(items: list[dict[str, Any]]) -> list[Any]:
    return [item.get("id", ("gap", item.get("resume"))) for item in items]


async def test_a_broken_stream_is_asked_again_after_the_last_event(
    autojump_clock: trio.abc.Clock,
) -> None:
    masters = Masters(
        a=[
            stream(event(1), event(2), last=0),
            stream(event(2), event(3), end="close"),  # 2 again: not yielded twice
            stream(event(4)),
        ]
    )
    assert ids(await read(masters, 4, last=5)) == [1, 2, 3, 4]
    assert masters.since() == [None, "2", "3"]
    assert "last" in masters.asked[0][2]
    assert "last" not in masters.asked[1][2]  # the last ones were shown: not again


async def test_a_fresh_stream_resumes_after_the_id_it_started_from(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Following new events only, a stream broken before its first event is asked again
    from where it started (the reply's X-Nodeagent-Last-Event-Id): none is missed."""
    masters = Masters(a=[stream(last=41), stream(event(42))])
    assert ids(await read(masters, 1)) == [42]
    assert masters.since() == [None, "41"]


async def test_a_gap_is_yielded_and_resumed_from(autojump_clock: trio.abc.Clock) -> None:
    masters = Masters(a=[stream(gap(3, 9), event(10)), stream(gap(3, 9), event(10), event(11))])
    assert ids(await read(masters, 3, since=3)) == [("gap", 9), 10, 11]
    assert masters.since() == ["3", "10"]


async def test_the_next_master_is_asked_in_turn(autojump_clock: trio.abc.Clock) -> None:
    masters = Masters(
        a=[unreachable, stream(event(3), event(4)), stream()],
        b=[stream(event(1), event(2)), unreachable, stream(event(5))],
    )
    found = await read(masters, 5, urls=("a", "b"), since=0)
    assert ids(found) == [1, 2, 3, 4, 5]
    assert [(host, query.get("since")) for _, host, query in masters.asked] == [
        ("a", "0"),  # unreachable: the first connection goes to the next at once
        ("b", "0"),
        ("a", "2"),
        ("b", "4"),  # unreachable
        ("a", "4"),  # broke before its first event
        ("b", "4"),
    ]


async def test_the_backoff_doubles_until_a_line_comes(autojump_clock: trio.abc.Clock) -> None:
    masters = Masters(
        a=[
            stream(event(1)),
            *[unreachable] * 8,
            refused(503, "master.no_leader"),
            stream(event(2)),
            unreachable,
            stream(event(3)),
        ]
    )
    assert ids(await read(masters, 3, since=0)) == [1, 2, 3]
    times = [when for when, _, _ in masters.asked]
    waits = [round(b - a, 3) for a, b in itertools.pairwise(times)]
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0, 5.0, 0.1, 0.2]
    assert masters.since() == ["0", *["1"] * 10, "2", "2"]


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (refused(422, "request.invalid"), InvalidRequest),
        (refused(401, "auth.unauthenticated"), Unauthorized),
        (stream(b"<html>proxy</html>"), BadResponse),
    ],
    ids=["422", "401", "not an event"],
)
async def test_a_refusal_is_raised_at_once_even_when_resuming(
    autojump_clock: trio.abc.Clock, reply: Reply, error: type[Exception]
) -> None:
    masters = Masters(a=[stream(event(1)), reply, stream(event(2))])
    found: list[dict[str, Any]] = []
    with pytest.raises(error):
        found.extend(await read(masters, 2, since=0))
    assert len(masters.asked) == 2  # not retried


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ({"a": [unreachable]}, Unreachable),
        ({"a": [refused(503, "master.no_leader")]}, NoLeader),
        ({"a": [unreachable], "b": [unreachable]}, Unreachable),
    ],
    ids=["unreachable", "5xx", "every master"],
)
async def test_the_first_connection_that_no_master_answers_raises(
    autojump_clock: trio.abc.Clock, script: dict[str, list[Reply]], error: type[Exception]
) -> None:
    masters = Masters(**script)
    with pytest.raises(error) as raised:
        await read(masters, 1, urls=tuple(script))
    if len(script) > 1:
        assert raised.value.args[0].startswith("no master answered: http://a.test: ")
        assert "http://b.test: " in raised.value.args[0]


async def test_not_following_the_kept_events_end_it(autojump_clock: trio.abc.Clock) -> None:
    masters = Masters(a=[stream(event(1), end="break"), stream(event(2), end="close")])
    async with MasterClient(url="http://a.test", token="t", transport=masters.transport) as c:
        found = [e async for e in c.events(follow=False, types=["drain.*", "mode.changed"])]
    assert ids(found) == [1, 2]  # resumed once, then the body ended: the end
    first, second = (query for _, _, query in masters.asked)
    assert first == {"format": "jsonl", "follow": "false", "type": "drain.*,mode.changed"}
    assert second == {**first, "since": "1"}


@pytest.mark.parametrize(
    "kwargs",
    [{"since": -1}, {"last": -2}, {"since": True}, {"since": 1, "last": 2}],
)
def test_bad_arguments_are_refused_before_anything_is_sent(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"since|last"):
        MasterClient(url="http://a.test").events(**kwargs)
