"""One route of an :class:`~nodeagent._serving._http11.HttpServer` answered without h11.

The master's ingest workers take thousands of ad pushes a second, each a request of
≈ 14 kB on a connection of its own; h11 takes ≈ 120 µs to read one and write its reply, and
the ASGI messages around them as much again. A *quick route* (:class:`QuickRoute`) reads its
requests with llhttp (``httptools``) and writes its replies itself, on plain TCP
connections, and only in the case it is made for: an HTTP/1.1 request with one ``Host`` and
one ``Content-Length``, no ``Transfer-Encoding``, ``Expect`` or ``Upgrade``, that the route
takes from its head (:meth:`QuickRoute.take`: for a push, its method, path and token).
Anything else, a request llhttp refuses included, is handed with every byte read so far to
the server's h11 path, which serves the connection from then on as it serves any other: the
errors, refusals and relays are h11's, as before. A reply is written as h11 writes it
(``HTTP/1.1 <status> \\r\\n``, the route's headers in their order, ``date`` when they have
none, ``Connection: close`` last when the request asked for it), so a client cannot tell
the two paths apart; a test holds them byte for byte.

Nothing is answered before a request is whole, and a request that is not the only one read
(a client sending its next request before the reply) is handed over whole, unanswered: the
bytes handed over are always those of requests not yet answered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import httptools
import trio

__all__ = ["QuickAnswer", "QuickReply", "QuickRoute", "serve_quick"]

#: A reply: its status, its headers (lower-case names), its body.
QuickReply = tuple[int, list[tuple[bytes, bytes]], bytes]
#: What a route makes of a request it takes: its reply, from the whole body.
QuickAnswer = Callable[[bytes], Awaitable[QuickReply]]


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


async def serve_quick(
    stream: trio.abc.Stream,
    route: QuickRoute,
    *,
    date: Callable[[], bytes],
    idle_timeout: float,
    read_timeout: float,
    max_head: int,
) -> bytes | None:
    """Serve the requests of ``stream`` that ``route`` takes, one after another; return the
    bytes read of the first it does not (for h11 to serve the connection from them), or
    ``None`` once the connection ended: closed by the client, idle ``idle_timeout`` seconds
    between two requests or within a head, a body stalled ``read_timeout`` seconds, or
    closed after a reply that said so."""
    while True:
        request = _Request()
        parser = httptools.HttpRequestParser(request)
        received = bytearray()
        answer: QuickAnswer | None = None
        # one scope a request, its deadline moved at each read (a scope a read costs more)
        with trio.CancelScope() as waited:
            while not request.complete:
                if not request.head_done and len(received) > max_head:
                    return bytes(received)  # h11 refuses it (431)
                wait = read_timeout if request.head_done else idle_timeout
                waited.deadline = trio.current_time() + wait
                data = await stream.receive_some()
                if not data:  # a head cut short is h11's to answer (400); a body, no one's
                    return bytes(received) if received and not request.head_done else None
                received += data
                try:
                    parser.feed_data(data)
                except httptools.HttpParserError:
                    return bytes(received)  # h11 says what is wrong with it
                if request.head_done and answer is None:
                    length = _length(request.headers)
                    if length is None or parser.get_http_version() != "1.1":
                        return bytes(received)
                    answer = route.take(
                        parser.get_method(), request.target, request.headers, length
                    )
                    if answer is None:
                        return bytes(received)
        if waited.cancelled_caught:  # stalled: closed, as h11's path closes it
            return None
        if request.began > 1 or answer is None:  # a next request already came
            return bytes(received)
        close = _closes(request.headers)
        reply = await answer(b"".join(request.body))
        await stream.send_all(reply_bytes(reply, date(), close=close))
        if close:
            return None
        # The other connections' turn before this one's next request (as h11's path).
        await trio.lowlevel.checkpoint()
