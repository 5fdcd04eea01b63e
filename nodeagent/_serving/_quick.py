"""One route of an :class:`~nodeagent._serving._http11.HttpServer` answered without h11.

The master's ingest workers take thousands of ad pushes a second, each a request on a
connection of its own; h11 takes ≈ 120 µs to read one and write its reply, the ASGI
messages around them as much again, and a trio task for each connection (its socket
stream, its cancel scopes, a registration with the event loop for each wait) as much
again. A *quick route* (:class:`QuickRoute`) reads its requests with llhttp
(``httptools``) and writes its replies itself, on plain TCP connections, and only in the
case it is made for: an HTTP/1.1 request with one ``Host`` and one ``Content-Length``, no
``Transfer-Encoding``, ``Expect`` or ``Upgrade``, that the route takes from its head
(:meth:`QuickRoute.take`: for a push, its method, path and token). Anything else, a request
llhttp refuses included, is handed with every byte read so far to the server's h11 path,
which serves the connection from then on as it serves any other: the errors, refusals and
relays are h11's, as before. A reply is written as h11 writes it (``HTTP/1.1 <status>
\\r\\n``, the route's headers in their order, ``date`` when they have none, ``Connection:
close`` last when the request asked for it), so a client cannot tell the two paths apart;
a test holds them byte for byte.

A listener's connections are served by one :class:`QuickHub` and one task, without a task
of their own: a connection is read at once when it is accepted (its request has usually
come by then), and waits for its next bytes in an epoll set of the hub's own, whose
descriptor is the one the task waits on; the route answers through a callback (the
worker's, when the master's answer comes on its link), and the reply is written at once.
A connection waits ``idle_timeout`` at most for a head's next bytes (and between requests),
``read_timeout`` for a body's or for its reply to be taken; then it is closed.

Nothing is answered before a request is whole, and a request that is not the only one read
(a client sending its next request before the reply) is handed over whole, unanswered: the
bytes handed over are always those of requests not yet answered.
"""

from __future__ import annotations

import contextlib
import logging
import math
import select
import socket
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import httptools
import trio

__all__ = ["QuickAnswer", "QuickHub", "QuickReply", "QuickReplyTo", "QuickRoute", "reply_bytes"]

log = logging.getLogger("nodeagent.http")

#: A reply: its status, its headers (lower-case names), its body.
QuickReply = tuple[int, list[tuple[bytes, bytes]], bytes]
#: Where a route's reply goes: called once, at once or later, with the reply, or with
#: ``None`` when there is none to give (the connection is closed unanswered).
QuickReplyTo = Callable[[QuickReply | None], None]
#: What a route makes of a request it takes: given the whole body and where the reply goes.
QuickAnswer = Callable[[bytes, QuickReplyTo], None]

_READ_SIZE = 64 * 1024
#: Events read from the hub's epoll set at a time, before the other tasks run.
_EVENTS_A_TURN = 256
_IN = select.EPOLLIN
_OUT = select.EPOLLOUT


class QuickRoute(Protocol):
    """The requests a server answers without h11 (module docstring)."""

    def take(
        self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], length: int
    ) -> QuickAnswer | None:
        """How to answer a request from its head (``headers`` with lower-case names, the
        body ``length`` bytes long), before a byte of its body is waited for; ``None``:
        not this route's (h11 serves it)."""
        ...


class _Request:
    """llhttp's callbacks: one request's head and body as they are parsed."""

    __slots__ = ("began", "body", "complete", "head_done", "headers", "target")

    def __init__(self) -> None:
        self.began = 0
        self.target = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.body: list[bytes] = []
        self.complete = False

    def on_message_begin(self) -> None:
        self.began += 1

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


def _length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The body's length when the head is one the quick path serves, else ``None``."""
    hosts = 0
    length: int | None = None
    for name, value in headers:
        if name == b"host":
            hosts += 1
        elif name == b"content-length":
            if length is not None or not value.isdigit():
                return None
            length = int(value)
        elif name in (b"transfer-encoding", b"expect", b"upgrade"):
            return None
    return length if hosts == 1 else None


def _closes(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the request asks the connection closed after its reply (as h11 reads it)."""
    return any(
        name == b"connection" and b"close" in (token.strip().lower() for token in value.split(b","))
        for name, value in headers
    )


def reply_bytes(reply: QuickReply, date: bytes, *, close: bool) -> bytes:
    """``reply`` as h11 writes it for a kept (``close``: an ended) connection."""
    status, headers, body = reply
    lines = [b"HTTP/1.1 %d \r\n" % status]
    lines += [b"%s: %s\r\n" % item for item in headers]
    if not any(name == b"date" for name, _ in headers):
        lines.append(b"date: %s\r\n" % date)
    if close:
        lines.append(b"Connection: close\r\n")
    lines += [b"\r\n", body]
    return b"".join(lines)


class _Connection:
    """One connection of a hub: its socket, the request being read, what waits to be
    written, the epoll events it waits for (0: none) and until when."""

    __slots__ = (
        "answer",
        "close_after",
        "deadline",
        "ended",
        "parser",
        "peer",
        "received",
        "request",
        "sock",
        "spent",
        "unsent",
        "waits_for",
    )

    def __init__(self, sock: socket.socket, peer: Any) -> None:
        self.sock = sock
        self.peer = peer
        self.waits_for = 0
        self.deadline = 0.0
        self.unsent = memoryview(b"")
        self.close_after = False
        self.ended = False
        self.next_request()

    def next_request(self) -> None:
        """Ready to read a request (``spent``: its last was answered, and it is made
        ready when the next one's first bytes come)."""
        self.spent = False
        self.request = _Request()
        self.parser = httptools.HttpRequestParser(self.request)
        self.received = bytearray()
        self.answer: QuickAnswer | None = None

    def release(self) -> None:
        """Let go of the last request's bytes and its reply's: the hub's deadline queues
        hold a connection for seconds after its last wait began (it may have ended)."""
        self.received = bytearray()
        self.request.body = []
        self.answer = None
        self.unsent = memoryview(b"")


class QuickHub:
    """Serves a listener's plain TCP connections with ``route`` (module docstring): each
    accepted one is given to :meth:`adopt`, and :meth:`run`, one task, waits for them all.
    A connection whose request the route does not take is given, with the bytes read of
    it, to ``hand_over`` (for h11 to serve it); ``date`` is the ``Date`` header's value."""

    def __init__(
        self,
        route: QuickRoute,
        *,
        hand_over: Callable[[socket.socket, Any, bytes], None],
        date: Callable[[], bytes],
        idle_timeout: float,
        read_timeout: float,
        max_head: int,
    ) -> None:
        self._route = route
        self._hand_over = hand_over
        self._date = date
        self._idle_timeout = idle_timeout
        self._read_timeout = read_timeout
        self._max_head = max_head
        self._epoll = select.epoll()
        self._waiting: dict[int, _Connection] = {}
        self._open: set[_Connection] = set()
        # The connections that wait, in the order of their deadlines: one queue for each
        # of the two timeouts, each in the order the waits began.
        self._deadlines: dict[float, deque[tuple[float, _Connection]]] = {
            idle_timeout: deque(),
            read_timeout: deque(),
        }

    def adopt(self, sock: socket.socket, peer: Any) -> None:
        """Serve the accepted ``sock`` (from ``peer``): read what has come of it at once."""
        connection = _Connection(sock, peer)
        self._open.add(connection)
        try:
            sock.setblocking(False)
        except OSError:
            self._close(connection)
            return
        self._guarded(self._read, connection)

    async def run(self) -> None:
        """Serve the connections that wait, until cancelled; then close every one."""
        try:
            while True:
                with trio.move_on_at(self._next_deadline()):
                    await trio.lowlevel.wait_readable(self._epoll.fileno())
                for fd, _events in self._epoll.poll(0, _EVENTS_A_TURN):
                    connection = self._waiting.get(fd)
                    if connection is None:
                        continue
                    if connection.waits_for == _OUT:
                        self._guarded(self._write, connection)
                    else:
                        self._guarded(self._read, connection)
                self._expire(trio.current_time())
        finally:
            for connection in list(self._open):
                self._close(connection)
            self._epoll.close()

    def _guarded(self, step: Callable[[_Connection], None], connection: _Connection) -> None:
        """``step`` for ``connection``; a failure closes it (the hub serves on)."""
        try:
            step(connection)
        except Exception:
            log.exception("connection from %s failed", connection.peer)
            self._close(connection)

    def _read(self, connection: _Connection) -> None:
        """Read what came of ``connection`` and take its request as far as it goes."""
        try:
            data = connection.sock.recv(_READ_SIZE)
        except BlockingIOError:
            self._wait(connection, _IN, self._wait_for_read(connection))
            return
        except OSError:  # reset
            self._close(connection)
            return
        if not data:  # a head cut short is h11's to answer (400); a body, no one's
            if connection.received and not connection.spent and not connection.request.head_done:
                self._give_h11(connection)
            else:
                self._close(connection)
            return
        if connection.spent:
            connection.next_request()
        request = connection.request
        connection.received += data
        try:
            connection.parser.feed_data(data)
        except httptools.HttpParserError:
            self._give_h11(connection)  # h11 says what is wrong with it
            return
        if request.head_done and connection.answer is None:
            length = _length(request.headers)
            if length is None or connection.parser.get_http_version() != "1.1":
                self._give_h11(connection)
                return
            connection.answer = self._route.take(
                connection.parser.get_method(), request.target, request.headers, length
            )
            if connection.answer is None:
                self._give_h11(connection)
                return
        if not request.complete:
            if not request.head_done and len(connection.received) > self._max_head:
                self._give_h11(connection)  # h11 refuses it (431)
                return
            self._wait(connection, _IN, self._wait_for_read(connection))
            return
        if request.began > 1 or connection.answer is None:  # a next request already came
            self._give_h11(connection)
            return
        self._wait(connection, 0, 0.0)  # nothing of it read until its reply is written
        connection.close_after = _closes(request.headers)
        connection.answer(b"".join(request.body), lambda reply: self._reply(connection, reply))

    def _wait_for_read(self, connection: _Connection) -> float:
        """How long ``connection`` may wait for its next bytes: a body's, or a head's."""
        body = not connection.spent and connection.request.head_done
        return self._read_timeout if body else self._idle_timeout

    def _reply(self, connection: _Connection, reply: QuickReply | None) -> None:
        """Write the route's ``reply`` to ``connection`` (``None``: close it unanswered)."""
        if connection.ended:
            return
        if reply is None:
            self._close(connection)
            return

        def write(connection: _Connection) -> None:
            data = reply_bytes(reply, self._date(), close=connection.close_after)
            connection.unsent = memoryview(data)
            self._write(connection)

        self._guarded(write, connection)

    def _write(self, connection: _Connection) -> None:
        """Write what waits of ``connection``'s reply; once it is all written, read the
        next request (or close, as the request asked)."""
        try:
            sent = connection.sock.send(connection.unsent)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._close(connection)
            return
        connection.unsent = connection.unsent[sent:]
        if connection.unsent:
            self._wait(connection, _OUT, self._read_timeout)
            return
        if connection.close_after:
            self._close(connection)
            return
        connection.spent = True
        connection.release()
        self._wait(connection, _IN, self._idle_timeout)

    def _wait(self, connection: _Connection, events: int, seconds: float) -> None:
        """Let ``connection`` wait for ``events`` (0: none) for ``seconds`` at most."""
        fd = connection.sock.fileno()
        if events != connection.waits_for:
            if not connection.waits_for:
                self._epoll.register(fd, events)
                self._waiting[fd] = connection
            elif not events:
                self._epoll.unregister(fd)
                del self._waiting[fd]
            else:
                self._epoll.modify(fd, events)
            connection.waits_for = events
        if events:
            connection.deadline = deadline = trio.current_time() + seconds
            self._deadlines[seconds].append((deadline, connection))

    def _next_deadline(self) -> float:
        return min((waits[0][0] for waits in self._deadlines.values() if waits), default=math.inf)

    def _expire(self, now: float) -> None:
        """Close the connections that waited past their deadline."""
        for waits in self._deadlines.values():
            while waits and waits[0][0] <= now:
                deadline, connection = waits.popleft()
                if (
                    not connection.ended
                    and connection.waits_for
                    and connection.deadline == deadline
                ):
                    self._close(connection)

    def _forget(self, connection: _Connection) -> None:
        connection.ended = True
        self._open.discard(connection)
        if connection.waits_for:
            fd = connection.sock.fileno()
            self._waiting.pop(fd, None)
            with contextlib.suppress(OSError, ValueError):
                self._epoll.unregister(fd)
            connection.waits_for = 0

    def _close(self, connection: _Connection) -> None:
        if not connection.ended:
            self._forget(connection)
            connection.sock.close()
            connection.release()

    def _give_h11(self, connection: _Connection) -> None:
        """Hand ``connection`` and what was read of it to h11."""
        self._forget(connection)
        self._hand_over(connection.sock, connection.peer, bytes(connection.received))
        connection.release()
