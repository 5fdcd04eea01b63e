""":meth:`nodeagent.client.MasterClient.notices`, ``accept`` and ``decline`` against a
scripted master (:class:`httpx.MockTransport`, virtual time): the listing's typed results,
a follow that lists once, then yields each change once across a broken stream and a gap,
and the refusals as the client's errors with the master's codes. Against a real master:
tests/integration/test_notices_clients.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from nodeagent.client import (
    Forbidden,
    InvalidRequest,
    MasterClient,
    NoticeAnswer,
    NoticeChange,
    NoticeClaim,
    NoticeWindow,
    Refused,
    SyncMasterClient,
)
from tests.nodeagent.test_master_client_events import Body


def notice(
    notice_id: str, *, machine: str = "n1.test", answer: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": notice_id,
        "machine": machine,
        "group": "web/prod/front",
        "window": {"start": 2000.0, "duration": 600.0},
        "claims": [{"slot": "slot1_1@n1.test", "job_id": "j1", "promise_end": 1500.0}],
        "issued": 100.0,
        "rescinded": None,
        "answer": answer,
    }


def answer(at: float, verdict: str = "accept") -> dict[str, Any]:
    return {
        "verdict": verdict,
        "reason": "fine",
        "expected_completion": 1800.0,
        "who": "o",
        "at": at,
    }


def line(event_id: int, kind: str, facts: dict[str, Any]) -> bytes:
    event = {"id": event_id, "time": 50.0 + event_id, "type": kind, "text": "", "facts": facts}
    return json.dumps(event).encode()


def gap(after: int, resume: int) -> bytes:
    return json.dumps({"type": "gap", "after": after, "resume": resume, "missed": 3}).encode()


class Master:
    """A master answering ``/v1/events`` with the scripted streams in turn, ``/v1/notices``
    with the scripted listings in turn, and the answers with ``answers``' replies;
    ``asked`` holds each request's path and query."""

    def __init__(
        self,
        *,
        streams: list[Callable[[], httpx.Response]] = (),  # type: ignore[assignment]
        listings: list[list[dict[str, Any]] | httpx.Response] = (),  # type: ignore[assignment]
        answers: Callable[[httpx.Request], httpx.Response] | None = None,
    ) -> None:
        self.streams = list(streams)
        self.listings = list(listings)
        self.answers = answers
        self.asked: list[tuple[str, dict[str, str]]] = []
        self.transport = httpx.MockTransport(self._handle)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        self.asked.append((request.url.path, dict(request.url.params)))
        if request.url.path == "/v1/events" and self.streams:
            return self.streams.pop(0)()
        if request.url.path == "/v1/notices" and self.listings:
            listing = self.listings.pop(0)
            if isinstance(listing, httpx.Response):
                return listing
            return httpx.Response(200, json={"notices": listing})
        if request.method == "POST" and self.answers is not None:
            return self.answers(request)
        return httpx.Response(418, json={"error": {"code": "test.no_more", "message": "no"}})

    def queries(self, path: str) -> list[dict[str, str]]:
        return [query for asked, query in self.asked if asked == path]


def stream(
    *lines: bytes, end: str = "break", last: int | None = None
) -> Callable[[], httpx.Response]:
    headers = {"Content-Type": "application/x-ndjson"}
    if last is not None:
        headers["X-Nodeagent-Last-Event-Id"] = str(last)
    return lambda: httpx.Response(200, headers=headers, stream=Body(list(lines), end))


def client(master: Master, **kwargs: Any) -> MasterClient:
    return MasterClient(url="http://m.test", token="t", transport=master.transport, **kwargs)


async def test_the_notices_in_force_as_results() -> None:
    master = Master(listings=[[notice("n-1", answer=answer(120.0, "decline"))]])
    async with client(master) as m:
        (found,) = await m.notices("web/prod/front,batch/dev/etl", machine=["n1.test"])
    assert master.queries("/v1/notices") == [
        {"group": "web/prod/front,batch/dev/etl", "machine": "n1.test"}
    ]
    assert found.id == "n-1"
    assert found.window == NoticeWindow(start=2000.0, duration=600.0)
    assert found.claims == (NoticeClaim(slot="slot1_1@n1.test", job_id="j1", promise_end=1500.0),)
    assert found.answer == NoticeAnswer(
        verdict="decline", reason="fine", expected_completion=1800.0, who="o", at=120.0
    )


async def follow(master: Master, count: int, **kwargs: Any) -> list[NoticeChange]:
    found: list[NoticeChange] = []
    async with (
        client(master) as m,
        contextlib.aclosing(m.notices(follow=True, **kwargs)) as changes,
    ):
        async for change in changes:
            found.append(change)
            if len(found) == count:
                break
    return found


async def test_following_lists_once_then_yields_each_change_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    master = Master(
        streams=[
            stream(
                line(11, "notice.issued", {"notice": notice("n-1")}),  # listed already
                line(12, "notice.issued", {"notice": notice("n-2")}),
                line(13, "notice.answered", {"id": "n-1", "answer": answer(130.0)}),
                last=10,
            ),
            stream(
                line(13, "notice.answered", {"id": "n-1", "answer": answer(130.0)}),  # again
                line(14, "notice.rescinded", {"id": "n-2", "machine": "n1.test", "group": "g"}),
                gap(14, 30),
                end="wait",
            ),
        ],
        listings=[
            [notice("n-1")],
            httpx.Response(503, json={"error": {"code": "store.error", "message": "busy"}}),
            [notice("n-1", answer=answer(130.0)), notice("n-3")],
        ],
    )
    changes = await follow(master, 5, group="web/prod/front")
    assert [(c.kind, c.notice.id, c.event_id) for c in changes] == [
        ("listed", "n-1", None),
        ("issued", "n-2", 12),
        ("answered", "n-1", 13),
        ("rescinded", "n-2", 14),
        ("listed", "n-3", None),  # the listing after the gap
    ]
    answered = changes[2].notice.answer
    assert answered is not None
    assert answered.verdict == "accept"
    assert changes[3].notice.rescinded == changes[3].time == 64.0
    events = master.queries("/v1/events")
    assert [q.get("since") for q in events] == [None, "13"]
    assert events[0] == {
        "format": "jsonl",
        "follow": "true",
        "last": "0",
        "type": "notice.*",
        "group": "web/prod/front",
    }
    # first, and after the gap (twice: a 503 is asked again); not on resuming
    assert len(master.queries("/v1/notices")) == 3


async def test_following_drops_what_the_listing_would_not_show(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The stream matches a machine by its first label; the notices' filter is exact."""
    master = Master(
        streams=[
            stream(
                line(11, "notice.issued", {"notice": notice("n-9", machine="n1.other")}),
                line(12, "notice.issued", {"notice": notice("n-2")}),
                last=10,
                end="wait",
            )
        ],
        listings=[[]],
    )
    changes = await follow(master, 1, machine="n1.test")
    assert [(c.kind, c.notice.id) for c in changes] == [("issued", "n-2")]


def test_following_needs_two_connections() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        MasterClient(url="http://m.test", max_concurrency=1).notices(follow=True)


def answering(status: int, body: dict[str, Any]) -> tuple[Master, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json=body)

    return Master(answers=reply), seen


async def test_an_answer_is_posted_and_the_notice_returned() -> None:
    master, seen = answering(200, notice("n-1", answer=answer(140.0, "decline")))
    async with client(master) as m:
        done = await m.decline("n-1", reason="month-end run", expected_completion=1800.0)
        await m.accept("n-1", reason="fine")
    assert done.answer is not None
    assert done.answer.verdict == "decline"
    assert [r.url.path for r in seen] == ["/v1/notices/n-1/decline", "/v1/notices/n-1/accept"]
    assert json.loads(seen[0].content) == {"reason": "month-end run", "expected_completion": 1800.0}
    assert json.loads(seen[1].content) == {"reason": "fine"}


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [
        (403, "auth.wrong_group", Forbidden),
        (404, "notice.no_such_notice", Refused),
        (422, "notice.bad_reason", InvalidRequest),
        (422, "notice.bad_expected_completion", InvalidRequest),
    ],
)
async def test_a_refused_answer_is_the_clients_error_with_the_masters_code(
    status: int, code: str, error: type[Refused]
) -> None:
    master, _ = answering(status, {"error": {"code": code, "message": "no"}})
    async with client(master) as m:
        with pytest.raises(error) as raised:
            await m.accept("n-1", reason="x")
    assert (raised.value.code, raised.value.status) == (code, status)


async def test_an_id_that_is_no_path_segment_is_refused_before_anything_is_sent() -> None:
    master, seen = answering(200, notice("n-1"))
    async with client(master) as m:
        with pytest.raises(ValueError, match="not an id"):
            await m.accept("../x", reason="x")
    assert seen == []


def test_the_sync_client_lists_and_answers() -> None:
    master, seen = answering(200, notice("n-1", answer=answer(140.0)))
    master.listings = [[notice("n-1")]]
    sync = SyncMasterClient(url="http://m.test", token="t", transport=master.transport)
    assert [n.id for n in sync.notices(group="web/prod/front")] == ["n-1"]
    assert sync.accept("n-1", reason="fine").answer is not None
    assert [r.url.path for r in seen] == ["/v1/notices/n-1/accept"]
