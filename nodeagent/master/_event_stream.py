"""The master's events on the wire: the hub that writes and publishes them, and
``GET /v1/events`` (Server-Sent Events, or JSON lines).

:class:`EventHub` holds the :class:`~nodeagent.master._events.EventLog` and what the
master has seen but not written yet (:meth:`EventHub.stage`: a node's drain completed,
a node lost…), which goes out with the next write of the master's state, or on its own
within :data:`FLUSH_DELAY` (:meth:`EventHub.flush_when_staged`). Events reach the
subscribers only once the store holds them (:meth:`EventHub.written`): a subscriber
never sees an event a restarted master, or the next leader, would not have.

**Subscribers.** Each one is a task reading the log from its own position
(:func:`subscription`); the log is the only buffer. An idle subscriber costs one task
and one connection; a slow one falls behind and, once its position is no longer kept,
gets a ``gap`` event and goes on from the oldest kept event. A connection that takes
no bytes for :data:`SEND_TIMEOUT` is closed (the client resumes with ``Last-Event-ID``),
so a stalled reader holds nothing but its socket's buffer for that long. A comment
(SSE) or an empty line (JSON lines) goes out every :data:`HEARTBEAT` seconds of
silence, through proxies that close idle connections, and so that a reader that went
away is noticed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import orjson
import trio
from starlette.types import Receive, Send
from starlette.types import Scope as ASGIScope

from nodeagent._auth import AuthError, Principal, Scope, Unauthenticated, require
from nodeagent._serving._gate import has_body, refuse
from nodeagent._serving._http import error_body
from nodeagent._store import StoreError
from nodeagent._when import in_words
from nodeagent.master._events import (
    MAX_PER_WRITE,
    Draft,
    Event,
    EventFilter,
    EventLog,
    Gap,
)
from slots import InvalidRequest

__all__ = [
    "FLUSH_DELAY",
    "HEARTBEAT",
    "SEND_TIMEOUT",
    "EventHub",
    "StreamRequest",
    "events_endpoint",
    "subscription",
]

log = logging.getLogger("nodeagent.master")

#: Staged events are written at most this long after the first of them (when no other
#: write of the master's takes them first).
FLUSH_DELAY = 0.05
#: Seconds of silence after which a subscriber gets a heartbeat.
HEARTBEAT = 15.0
#: A subscriber's connection that takes no bytes for this long is closed.
SEND_TIMEOUT = 60.0
#: Events staged and not yet written, at most (beyond: the oldest are dropped, counted).
MAX_STAGED = 10_000


class EventHub:
    """The event log, what is staged for it, and who is waiting for new events."""

    def __init__(self, *, keep: int | None = None) -> None:
        self.log = EventLog() if keep is None else EventLog(keep=keep)
        self.staged: list[Draft] = []
        #: Whether this master writes events (it leads: its reconcile service runs).
        self.recording = False
        #: Staged events dropped because too many waited (a store that cannot be written).
        self.dropped = 0
        self.subscribers = 0
        self._new = trio.Event()
        self._staged = trio.Event()

    # ------------------------------------------------------------------ writing

    def stage(self, *drafts: Draft) -> None:
        """Events the master has seen, for its next write (nothing while it does not
        lead: the leader sees the same and writes them)."""
        if not self.recording or not drafts:
            return
        self.staged.extend(drafts)
        over = len(self.staged) - MAX_STAGED
        if over > 0:
            del self.staged[:over]
            self.dropped += over
        self._staged.set()

    def take(self, drafts: Sequence[Draft], now: float) -> tuple[list[Event], int]:
        """The events a write of the master's state carries: the staged ones (at most
        :data:`~nodeagent.master._events.MAX_PER_WRITE`) then ``drafts``, with their
        ids; and how many of them were staged. Nothing changes until :meth:`written`."""
        staged = self.staged[:MAX_PER_WRITE]
        return self.log.assign([*staged, *drafts], now), len(staged)

    def written(self, events: Sequence[Event], staged: int) -> None:
        """The store holds ``events`` (of which the first ``staged`` were staged): keep
        them and tell the subscribers."""
        if staged:
            del self.staged[:staged]
        if events:
            self.log.commit(events)
            self.published()

    def published(self) -> None:
        """New events are kept (written here, or by the leader: a follower's copy)."""
        self._new.set()
        self._new = trio.Event()

    def stop_recording(self, flush: Callable[[], None] | None = None) -> None:
        """This master no longer leads: what it staged is the next leader's to see.

        ``flush`` (the master's write of the staged events, as :meth:`flush_when_staged`
        is given): it is tried first, until nothing is staged, so that a master that stops
        while it leads does not lose what it saw in its last :data:`FLUSH_DELAY`. A write
        that fails (a store that cannot be written, a term already over: fenced out)
        leaves them to the next leader, and is logged."""
        while flush is not None and self.staged:
            waiting = len(self.staged)
            try:
                flush()
            except StoreError as exc:
                log.warning(
                    "%d staged events not written as this master stops leading: %s",
                    len(self.staged),
                    exc,
                )
                break
            if len(self.staged) >= waiting:
                break
        self.recording = False
        self.staged.clear()
        self._staged = trio.Event()

    async def flush_when_staged(self, flush: Callable[[], None]) -> None:
        """Forever: once events are staged, wait :data:`FLUSH_DELAY` (more may come),
        then ``flush`` (the master's write of them; a failure is logged and tried again
        a second later)."""
        failures = 0
        while True:
            await self._staged.wait()
            self._staged = trio.Event()  # replaced by the waiter alone: never orphaned
            await trio.sleep(FLUSH_DELAY)
            if not self.staged:  # a write of the master's took them
                continue
            try:
                flush()
            except StoreError as exc:  # logged, kept staged, tried again
                failures += 1
                if failures == 1 or failures % 60 == 0:
                    log.error("events not written (%d times in a row): %s", failures, exc)
                self._staged.set()  # still staged: tried again
                await trio.sleep(1.0)
            else:
                failures = 0
                if self.staged:  # more than one write takes
                    self._staged.set()

    # ------------------------------------------------------------------ reading

    async def wait_after(self, event_id: int) -> None:
        """Return once an event after ``event_id`` is kept."""
        while self.log.last_id <= event_id:
            await self._new.wait()


@dataclass(frozen=True, kw_only=True)
class StreamRequest:
    """What a subscriber asked for (the query of ``GET /v1/events``)."""

    since: int | None = None
    last: int | None = None
    wanted: EventFilter = field(default_factory=EventFilter)
    jsonl: bool = False
    follow: bool = True

    @classmethod
    def parse(cls, query: str, last_event_id: str | None) -> StreamRequest:
        """Raises :class:`InvalidRequest` naming the bad parameter."""
        params = parse_qs(query, keep_blank_values=True)

        def one(name: str) -> str | None:
            values = params.get(name)
            if not values:
                return None
            if len(values) > 1:
                raise InvalidRequest(f"{name} is given {len(values)} times")
            return values[0]

        unknown = sorted(
            set(params) - {"since", "last", "type", "machine", "group", "format", "follow"}
        )
        if unknown:
            raise InvalidRequest(
                f"unknown parameter {unknown[0]!r}: since, last, type, machine, group, "
                "format, follow"
            )
        since = _count("Last-Event-ID", last_event_id) if last_event_id else None
        if since is None:
            since = _count("since", one("since"))
        last = _count("last", one("last"), ids=False)
        fmt = one("format") or "sse"
        if fmt not in ("sse", "jsonl"):
            raise InvalidRequest(f"format {fmt!r} is not sse or jsonl")
        follow_text = (one("follow") or "true").lower()
        if follow_text not in ("true", "false", "1", "0"):
            raise InvalidRequest(f"follow {follow_text!r} is not true or false")
        return cls(
            since=since,
            last=last,
            wanted=EventFilter.parse(
                types=one("type"), machines=one("machine"), groups=one("group")
            ),
            jsonl=fmt == "jsonl",
            follow=follow_text in ("true", "1"),
        )


def _count(name: str, text: str | None, *, ids: bool = True) -> int | None:
    """An event id (``ids``) or a number of events, of 18 digits at most."""
    if text is None or text == "":
        return None
    what = "an event id" if ids else "a number of events"
    if not text.isdecimal():
        raise InvalidRequest(f"{name} {text!r} is not {what} (an integer ≥ 0)")
    if len(text) > 18:
        aside = ", counted from 1 (a time is not an event id)" if ids else ""
        raise InvalidRequest(f"{name} {text!r} is not {what}: 18 digits at most{aside}")
    return int(text)


async def subscription(hub: EventHub, request: StreamRequest) -> AsyncGenerator[bytes, None]:
    """The bytes of one subscriber's stream: the events it asked for, as they are kept
    (see the module docstring), heartbeats included; ends after the kept ones unless
    ``request.follow``."""
    log_ = hub.log
    wanted = request.wanted
    if request.since is not None:
        position = request.since
    elif request.last is not None:
        shown = log_.last(request.last, wanted)
        position = log_.last_id
        if shown:
            yield b"".join(_write(event, request.jsonl) for event in shown)
    else:
        position = log_.last_id if request.follow else 0
    while True:
        gap, events = log_.after(position, limit=1000)
        # What has come since the last wake-up goes out in one piece: under load a
        # subscriber's sends grow larger, not more numerous.
        pieces = [] if gap is None else [_write(gap, request.jsonl)]
        pieces += [_write(event, request.jsonl) for event in events if wanted.matches(event)]
        if pieces:
            yield b"".join(pieces)
        if events:
            position = events[-1].id
            continue
        if gap is not None:
            position = gap.resume
            continue
        if not request.follow:
            return
        with trio.move_on_after(HEARTBEAT) as idle:
            await hub.wait_after(position)
        if idle.cancelled_caught:
            yield b"\n" if request.jsonl else b": keep-alive\n\n"


def _write(event: Event | Gap, jsonl: bool) -> bytes:
    return event.jsonl() if jsonl else event.sse()


def events_endpoint(
    hub: EventHub,
    principal: Callable[[str | None, bool], Principal],
    observe: Callable[[float], None] | None = None,
) -> Callable[[ASGIScope, Receive, Send], Awaitable[None]]:
    """``GET /v1/events`` as an ASGI app (served in front of the API, as ad pushes are:
    a stream that lasts hours is no request for the API's middleware). READ scope,
    checked from the headers; a bad query is 422 ``request.invalid``; any other method
    405."""

    async def endpoint(scope: ASGIScope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        if scope["method"] not in ("GET", "HEAD"):
            await _error(
                receive,
                send,
                scope,
                status=405,
                code="http.method_not_allowed",
                message="Method Not Allowed",
                extra=[("Allow", "GET, HEAD")],
            )
            return
        authorization = headers.get(b"authorization")
        try:
            who = principal(
                None if authorization is None else authorization.decode("latin-1"),
                bool(scope.get("nodeagent.unix")),
            )
            require(who, Scope.READ)
        except AuthError as exc:
            extra = [("WWW-Authenticate", "Bearer")] if isinstance(exc, Unauthenticated) else []
            await _error(
                receive,
                send,
                scope,
                status=exc.http_status,
                code=exc.code,
                message=str(exc),
                extra=extra,
            )
            return
        last_event_id = headers.get(b"last-event-id")
        try:
            request = StreamRequest.parse(
                scope.get("query_string", b"").decode("latin-1"),
                None if last_event_id is None else last_event_id.decode("latin-1").strip(),
            )
        except InvalidRequest as exc:
            await _error(
                receive, send, scope, status=422, code="request.invalid", message=exc.message
            )
            return
        last_id = hub.log.last_id
        if request.since is None and request.last is None and request.follow:
            # What comes next, from now: not from when the stream is read first.
            request = dataclasses.replace(request, since=last_id)
        media = b"application/x-ndjson" if request.jsonl else b"text/event-stream; charset=utf-8"
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", media),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                    (b"x-nodeagent-last-event-id", str(last_id).encode()),
                ],
            }
        )
        if scope["method"] == "HEAD":
            await send({"type": "http.response.body", "body": b""})
            return
        hub.subscribers += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_until_disconnected, receive, nursery.cancel_scope)
                await _stream(hub, request, send)
                nursery.cancel_scope.cancel()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the subscriber went away
        finally:
            hub.subscribers -= 1

    return endpoint


async def _until_disconnected(receive: Receive, stream: trio.CancelScope) -> None:
    """End the stream (cancel ``stream``) once the server says the subscriber went away:
    a server that drops what is sent to a closed connection would not tell it otherwise."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            stream.cancel()
            return


async def _stream(hub: EventHub, request: StreamRequest, send: Send) -> None:
    """Send the subscription's bytes; a send that takes no bytes for
    :data:`SEND_TIMEOUT` ends it."""
    # The head now (a server may hold it back until the first bytes of the body): the
    # subscriber knows it is connected before any event comes.
    await send({"type": "http.response.body", "body": b"", "more_body": True})
    async with contextlib.aclosing(subscription(hub, request)) as chunks:
        async for chunk in chunks:
            with trio.move_on_after(SEND_TIMEOUT) as stalled:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if stalled.cancelled_caught:
                log.info("an event subscriber took nothing for %s: closed", in_words(SEND_TIMEOUT))
                return
    await send({"type": "http.response.body", "body": b""})


async def _error(
    receive: Receive,
    send: Send,
    scope: ASGIScope,
    *,
    status: int,
    code: str,
    message: str,
    extra: list[tuple[str, str]] | None = None,
) -> None:
    payload = orjson.dumps(error_body(code, message))
    await refuse(receive, send, status, payload, headers=extra or [], unread=has_body(scope))
