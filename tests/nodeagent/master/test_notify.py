"""Webhooks on trio's virtual clock, against a receiver made of an httpx mock transport
(nodeagent.master._notify)."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from nodeagent._store import DocumentStore, StoreError
from nodeagent.master._event_stream import EventHub
from nodeagent.master._events import Draft
from nodeagent.master._notify import MAX_BACKOFF, Notifier, NotifyTarget, signature

SECRET = b"0123456789abcdef0123456789abcdef"


class Receiver:
    """Answers each POST with the next status of ``statuses`` (then 204), keeping what
    it was sent."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.posts: list[tuple[str, dict[str, Any], httpx.Headers]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        status = self.statuses.pop(0) if self.statuses else 204
        if status == 0:
            raise httpx.ConnectError("connection refused", request=request)
        if status == 204:
            self.posts.append((str(request.url), json.loads(request.content), request.headers))
        return httpx.Response(status)

    def ids(self, url: str | None = None) -> list[int]:
        return [body["id"] for u, body, _ in self.posts if url is None or u == url]


class FlakyStore(DocumentStore):
    failing = False

    def save(self, **documents: Any) -> None:
        if self.failing:
            raise StoreError("disk full")
        super().save(**documents)


def write(hub: EventHub, *types: str) -> None:
    made, _ = hub.take([Draft(type=t, text=t) for t in types], 1.0)
    hub.written(made, 0)


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "hook.secret"
    path.write_bytes(SECRET + b"\n")
    return path


async def test_in_order_at_least_once_signed_and_resumed(
    tmp_path: Path, secret_file: Path, autojump_clock: trio.testing.MockClock
) -> None:
    hub = EventHub()
    write(hub, "leader.elected")  # before the webhook was configured: not sent
    store = FlakyStore(tmp_path / "master.db")
    receiver = Receiver(0, 503, 500)  # down, then failing, then up
    targets = [
        NotifyTarget(url="http://hooks.test/all", secret_file=secret_file),
        NotifyTarget(url="http://hooks.test/drains", types=("drain.*",), secret_file=secret_file),
    ]
    notifier = Notifier(
        hub=hub, store=store, targets=targets, transport=httpx.MockTransport(receiver)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.run)
        write(hub, "schedule.changed", "drain.recorded", "mode.changed", "drain.committed")
        await trio.sleep(10)  # 1 + 2 + 4 s of backoff for the first target's first event
        assert receiver.ids("http://hooks.test/all") == [2, 3, 4, 5]
        assert receiver.ids("http://hooks.test/drains") == [3, 5]
        for _, body, headers in receiver.posts:
            raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
            assert headers["x-nodeagent-signature"] == signature(SECRET, raw)
            expected = "sha256=" + hmac.new(SECRET, raw, hashlib.sha256).hexdigest()
            assert headers["x-nodeagent-signature"] == expected
            assert headers["x-nodeagent-event-id"] == str(body["id"])
            assert headers["x-nodeagent-event-type"] == body["type"]
        assert sum(s.failures for s in notifier.states.values()) == 3  # one receiver
        assert notifier.lag("http://hooks.test/all") == 0
        await trio.sleep(2)
        assert store.load("notify_cursors") == {
            "http://hooks.test/all": 5,
            "http://hooks.test/drains": 5,
        }
        nursery.cancel_scope.cancel()

    # A restart: each URL goes on after its cursor; what it took is not sent again.
    write(hub, "drain.started", "node.lost")
    again = Notifier(hub=hub, store=store, targets=targets, transport=httpx.MockTransport(receiver))
    async with trio.open_nursery() as nursery:
        await nursery.start(again.run)
        await trio.sleep(1)
        assert receiver.ids("http://hooks.test/all") == [2, 3, 4, 5, 6, 7]
        assert receiver.ids("http://hooks.test/drains") == [3, 5, 6]
        nursery.cancel_scope.cancel()


async def test_a_receiver_down_holds_back_no_other_and_the_wait_is_bounded(
    tmp_path: Path, secret_file: Path, autojump_clock: trio.testing.MockClock
) -> None:
    hub = EventHub()
    down = Receiver(*([0] * 20))
    up = Receiver()

    def route(request: httpx.Request) -> httpx.Response:
        return (down if request.url.path == "/down" else up)(request)

    targets = [
        NotifyTarget(url="http://hooks.test/down", secret_file=secret_file),
        NotifyTarget(url="http://hooks.test/up", secret_file=secret_file),
    ]
    notifier = Notifier(
        hub=hub,
        store=DocumentStore(tmp_path / "master.db"),
        targets=targets,
        transport=httpx.MockTransport(route),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.run)
        write(hub, "node.lost", "node.back")
        await trio.sleep(1)
        assert up.ids() == [1, 2]
        assert down.ids() == []
        assert notifier.lag("http://hooks.test/down") == 2
        started = trio.current_time()
        await trio.sleep(20 * MAX_BACKOFF)
        assert down.ids() == [1, 2]  # once it answers: in order
        assert trio.current_time() - started <= 20 * MAX_BACKOFF
        nursery.cancel_scope.cancel()


async def test_a_cursor_older_than_the_kept_events_gets_a_gap(
    tmp_path: Path, secret_file: Path, autojump_clock: trio.testing.MockClock
) -> None:
    hub = EventHub(keep=3)
    store = DocumentStore(tmp_path / "master.db")
    store.save(notify_cursors={"http://hooks.test/x": 1})
    write(hub, *["mode.changed"] * 6)
    receiver = Receiver()
    notifier = Notifier(
        hub=hub,
        store=store,
        targets=[NotifyTarget(url="http://hooks.test/x", secret_file=secret_file)],
        transport=httpx.MockTransport(receiver),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.run)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    kinds = [(body["type"], body.get("id", body.get("resume"))) for _, body, _ in receiver.posts]
    assert kinds == [("gap", 3), ("mode.changed", 4), ("mode.changed", 5), ("mode.changed", 6)]
    assert receiver.posts[0][2]["x-nodeagent-event-type"] == "gap"
