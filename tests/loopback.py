"""Loopback servers that show, from the server side, how a client uses its connections.

:class:`LoopbackPeer` is a small HTTP/1.1 server (h11 on trio) answering every request with
a function of it; :class:`CountingProxy` forwards TCP connections to a real daemon. Both
count the connections they accept, the requests they see and the connections that ended,
so a test proves connection reuse without timing anything.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import h11
import trio

__all__ = [
    "CountingProxy",
    "EndlessReply",
    "LoopbackPeer",
    "Seen",
    "json_reply",
    "listening_socket",
    "serving",
]


@dataclass(frozen=True, kw_only=True)
class Seen:
    """One request as the server received it."""

    method: str
    target: str
    authorization: str | None
    body: bytes
    connection: int

    @property
    def token(self) -> str | None:
        if self.authorization is None or not self.authorization.startswith("Bearer "):
            return None
        return self.authorization.removeprefix("Bearer ")


Reply = tuple[int, bytes]
Handler = Callable[[Seen], Awaitable[Reply]]


def json_reply(status: int, document: Any) -> Reply:
    return status, json.dumps(document).encode()


def listening_socket(port: int = 0) -> trio.socket.SocketType:
    """A listening TCP socket on 127.0.0.1 (``port`` 0: a free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return trio.socket.from_stdlib_socket(sock)


@dataclass
class _Counts:
    connections: int = 0
    ended: int = 0
    requests: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    changed: trio.Event = field(default_factory=trio.Event)

    def _notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Return once ``predicate()`` holds (checked after every change); the caller bounds
        the wait with a cancel scope."""
        while not predicate():
            await self.changed.wait()


class LoopbackPeer(_Counts):
    """An HTTP/1.1 server: ``handler(seen)`` gives each reply's status and body (sent as
    JSON when it starts like a JSON document, else as an HTML page, like a proxy's)."""

    def __init__(self, handler: Handler) -> None:
        super().__init__()
        self.handler = handler
        self.url = ""

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        number = self.connections
        self._notify()
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                seen = await self._receive(conn, stream, number)
                if seen is None:
                    return
                self.requests.append(seen)
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                self._notify()
                try:
                    status, body = await self.handler(seen)
                finally:
                    self.in_flight -= 1
                kind = "application/json" if body[:1] in (b"{", b"[") else "text/html"
                headers = [("content-type", kind), ("content-length", str(len(body)))]
                await stream.send_all(
                    conn.send(h11.Response(status_code=status, headers=headers))
                    + conn.send(h11.Data(data=body))
                    + conn.send(h11.EndOfMessage())
                )
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            return
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
            self.ended += 1
            self._notify()

    @staticmethod
    async def _receive(conn: h11.Connection, stream: trio.SocketStream, number: int) -> Seen | None:
        request: h11.Request | None = None
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                headers = {name.decode(): value.decode() for name, value in request.headers}
                return Seen(
                    method=request.method.decode(),
                    target=request.target.decode(),
                    authorization=headers.get("authorization"),
                    body=body,
                    connection=number,
                )
            else:
                return None


_REQUEST_LINE = re.compile(rb"(?:GET|POST|PUT|DELETE|HEAD|PATCH) /\S* HTTP/1\.1\r\n")


class CountingProxy(_Counts):
    """Forwards each accepted connection to ``upstream`` (host, port), counting connections
    and the request lines sent through them (JSON bodies never hold a raw CRLF)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__()
        self.upstream = upstream
        self.url = ""

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        number = self.connections
        self._notify()
        try:
            upstream = await trio.open_tcp_stream(*self.upstream)
        except OSError:
            await stream.aclose()
            return
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, stream, upstream, number, nursery.cancel_scope)
                nursery.start_soon(self._pump, upstream, stream, 0, nursery.cancel_scope)
        finally:
            with trio.CancelScope(shield=True):
                await upstream.aclose()
                await stream.aclose()
            self.ended += 1
            self._notify()

    async def _pump(
        self,
        source: trio.SocketStream,
        sink: trio.SocketStream,
        number: int,
        done: trio.CancelScope,
    ) -> None:
        """Copy ``source`` to ``sink``; ``number`` > 0 marks the client's side."""
        pending = b""  # the client's bytes after the last request line counted
        try:
            while data := await source.receive_some(65536):
                if number:
                    pending += data
                    last = 0
                    for match in _REQUEST_LINE.finditer(pending):
                        self.requests.append(
                            Seen(
                                method=match[0].split(b" ", 1)[0].decode(),
                                target=match[0].split(b" ")[1].decode(),
                                authorization=None,
                                body=b"",
                                connection=number,
                            )
                        )
                        last = match.end()
                    pending = pending[last:][-512:]  # a request line cut in two stays
                    self._notify()
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        done.cancel()


@asynccontextmanager
async def serving(
    server: LoopbackPeer | CountingProxy | EndlessReply,
    sock: trio.socket.SocketType | None = None,
) -> AsyncIterator[None]:
    """Serve ``server`` on ``sock`` (default: a free port on 127.0.0.1) for the block; its
    ``url`` is set. Leaving the block closes the listener and every connection."""
    sock = sock or listening_socket()
    port = sock.getsockname()[1]
    server.url = f"http://127.0.0.1:{port}"
    async with trio.open_nursery() as nursery:
        listener = trio.SocketListener(sock)
        await nursery.start(partial(trio.serve_listeners, server.serve, [listener]))
        yield
        nursery.cancel_scope.cancel()


class EndlessReply:
    """A peer whose every reply is 200 with a JSON body that never ends (chunked), or, with
    ``declared``, a ``Content-Length`` of that many bytes; ``sent`` counts the body bytes
    the kernel took, ``ended`` the connections that the client closed."""

    def __init__(self, *, declared: int | None = None) -> None:
        self.declared = declared
        self.sent = 0
        self.ended = 0
        self.url = ""
        self.changed = trio.Event()

    async def serve(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while not isinstance(event := conn.next_event(), h11.EndOfMessage):
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(65536))
            if self.declared is None:
                headers = [("content-type", "application/json"), ("transfer-encoding", "chunked")]
            else:
                headers = [("content-type", "application/json")]
                headers.append(("content-length", str(self.declared)))
            await stream.send_all(conn.send(h11.Response(status_code=200, headers=headers)))
            piece = b'{"allow": true, "reason": "' + b"a" * 65536
            while True:
                await stream.send_all(conn.send(h11.Data(data=piece)))
                self.sent += len(piece)
                piece = b"a" * 65536
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
            self.ended += 1
            self.changed.set()
            self.changed = trio.Event()

    async def wait_ended(self, count: int) -> None:
        while self.ended < count:
            await self.changed.wait()
