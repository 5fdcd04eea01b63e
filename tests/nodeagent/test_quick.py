"""A quick route of the HTTP server (llhttp, no h11): its replies are h11's byte for byte,
and every request it is not made for is served by h11 from the bytes it read."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import h11
import pytest
import trio
from starlette.types import Receive, Scope, Send

from nodeagent._serving import _http11
from nodeagent._serving._http11 import HttpServer
from nodeagent._serving._quick import QuickAnswer, QuickReply, QuickReplyTo, QuickRoute

DATE = b"Mon, 30 Nov 2026 05:00:00 GMT"
HEAD = b"POST /push HTTP/1.1\r\nHost: x\r\nX-Ok: yes\r\n"


def push(body: bytes, *, extra: bytes = b"", target: bytes = b"/push") -> bytes:
    head = HEAD.replace(b"/push", target)
    return head + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body


def answer_of(body: bytes) -> QuickReply:
    """What both paths answer a push: 201, its body reversed."""
    reversed_ = body[::-1]
    headers = [
        (b"content-length", str(len(reversed_)).encode()),
        (b"content-type", b"application/octet-stream"),
    ]
    return 201, headers, reversed_


class Route:
    """Takes ``POST /push`` (any query) with ``X-Ok: yes``; counts what it answered.
    ``later``: each reply is given from the event loop's next turn (as a worker's, when the
    master's answer comes on its link), not from within the call."""

    def __init__(self, *, later: bool = False) -> None:
        self.answered = 0
        self.later = later

    def take(
        self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], length: int
    ) -> QuickAnswer | None:
        if method != b"POST" or target.partition(b"?")[0] != b"/push":
            return None
        if (b"x-ok", b"yes") not in headers:
            return None

        def answer(body: bytes, reply: QuickReplyTo) -> None:
            self.answered += 1
            if self.later:
                trio.lowlevel.current_trio_token().run_sync_soon(reply, answer_of(body))
            else:
                reply(answer_of(body))

        return answer


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """h11's side: a push as the route answers it, anything else 403 with its method."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = dict(scope["headers"])
    if scope["method"] == "POST" and scope["path"] == "/push" and headers.get(b"x-ok") == b"yes":
        status, reply_headers, reply = answer_of(body)
    else:
        status, reply = 403, scope["method"].encode()
        reply_headers = [(b"content-length", str(len(reply)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": reply_headers})
    await send({"type": "http.response.body", "body": reply})


@asynccontextmanager
async def serving(route: QuickRoute | None, read_timeout: float = 10.0) -> AsyncIterator[int]:
    server = HttpServer(app, quick=route, read_timeout=read_timeout)
    server._date = lambda: DATE  # type: ignore[assignment]
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    listening.setblocking(False)
    port = listening.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.accept, listening)
        yield port
        nursery.cancel_scope.cancel()


async def exchange(port: int, sends: list[bytes]) -> bytes:
    """Each of ``sends`` sent once the replies to the one before are whole; every byte the
    server sent, until it closed the connection."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    client = h11.Connection(h11.CLIENT)
    received = b""
    async with stream:
        for data in sends:
            await stream.send_all(data)
            client.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
            client.send(h11.EndOfMessage())
            requests = max(data.count(b" HTTP/1."), 1)
            while requests:
                event = client.next_event()
                if event is h11.NEED_DATA:
                    chunk = await stream.receive_some()
                    received += chunk
                    client.receive_data(chunk)
                    if not chunk:
                        return received
                elif isinstance(event, h11.EndOfMessage):
                    requests -= 1
                    if requests:
                        client.start_next_cycle()
                        client.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
                        client.send(h11.EndOfMessage())
                elif isinstance(event, h11.ConnectionClosed):
                    return received
            if client.our_state is h11.MUST_CLOSE or client.their_state is h11.MUST_CLOSE:
                break
            client.start_next_cycle()
        while chunk := await stream.receive_some():
            received += chunk
    return received


CLOSE = b"Connection: close\r\n"

CASES = {
    # answered by the route, kept alive, then closed as asked
    "pushes kept alive": (
        [push(b"one"), push(b"two", target=b"/push?x=1"), push(b"three", extra=CLOSE)],
        3,
    ),
    "close among other tokens": ([push(b"one", extra=b"Connection: foo, CLOSE\r\n")], 1),
    "an empty body": ([push(b"", extra=CLOSE)], 1),
    # served by h11 from the bytes the route read
    "another path": ([b"GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"], 0),
    "refused from its head": (
        [b"POST /push HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno"],
        0,
    ),
    "a push after one taken": (
        [push(b"one"), b"GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"],
        1,
    ),
    "chunked": (
        [HEAD + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n"],
        0,
    ),
    "HTTP/1.0": (
        [b"POST /push HTTP/1.0\r\nHost: x\r\nX-Ok: yes\r\nContent-Length: 2\r\n\r\nab"],
        0,
    ),
    "no host": ([b"POST /push HTTP/1.1\r\nX-Ok: yes\r\nContent-Length: 2\r\n\r\nab"], 0),
    "two lengths": (
        [HEAD + b"Content-Length: 2\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab"],
        0,
    ),
    "malformed": ([b"GARBAGE\r\n\r\n"], 0),
    "pipelined: both by h11": ([push(b"one") + push(b"two", extra=CLOSE)], 0),
    "a head cut short": ([b"POST /push HTTP/1.1\r\nHost: x\r\nX-O"], 0),
    # a reply larger than the socket's buffers: written as the client takes it
    "a reply written in parts": ([push(b"ab" * 8_000_000, extra=CLOSE)], 1),
}


@pytest.mark.parametrize("later", [False, True], ids=["replied at once", "replied later"])
@pytest.mark.parametrize("case", CASES)
async def test_the_quick_path_answers_as_h11_and_hands_it_the_rest(case: str, later: bool) -> None:
    sends, quick_answers = CASES[case]
    if case == "a head cut short":  # the client ends its side: both read the end
        sends = [sends[0]]
    route = Route(later=later)
    async with serving(route) as quick, serving(None) as plain:
        if case == "a head cut short":
            got = await cut_short(quick, sends[0])
            want = await cut_short(plain, sends[0])
        else:
            got = await exchange(quick, sends)
            want = await exchange(plain, sends)
    assert got == want
    assert got.startswith(b"HTTP/1.1 ")
    assert route.answered == quick_answers


async def cut_short(port: int, data: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    received = b""
    async with stream:
        await stream.send_all(data)
        await stream.send_eof()
        while chunk := await stream.receive_some():
            received += chunk
    return received


async def test_a_body_that_stalls_closes_the_connection_unanswered() -> None:
    route = Route()
    async with serving(route, read_timeout=0.2) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(HEAD + b"Content-Length: 10\r\n\r\nabc")
            assert await stream.receive_some() == b""  # closed, nothing answered
    assert route.answered == 0


class NoReply:
    """Takes every push and gives no reply (``None``: a worker whose master's link closed)."""

    def take(
        self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], length: int
    ) -> QuickAnswer | None:
        def answer(body: bytes, reply: QuickReplyTo) -> None:
            trio.lowlevel.current_trio_token().run_sync_soon(reply, None)

        return answer


async def test_a_request_without_a_reply_closes_the_connection_and_the_next_is_served() -> None:
    async with serving(NoReply()) as port:
        for _ in range(2):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(push(b"one"))
                assert await stream.receive_some() == b""  # closed, nothing answered


async def test_a_head_that_stalls_closes_the_connection_unanswered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_http11, "KEEP_ALIVE_TIMEOUT", 0.2)
    route = Route()
    async with serving(route) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(HEAD)  # no end of the head
            assert await stream.receive_some() == b""
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:  # and an idle connection, between two requests
            await stream.send_all(push(b"one"))
            reply = b""
            while not reply.endswith(b"eno"):
                reply += await stream.receive_some()
            assert reply.startswith(b"HTTP/1.1 201 ")
            assert await stream.receive_some() == b""
    assert route.answered == 1
