"""The h11 server: ASGI requests, keep-alive, bounded bodies, malformed input."""

from __future__ import annotations

import array
import json
import logging
import socket
import ssl
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from nodeagent._serving._gate import Gate, Rule
from nodeagent._serving._http11 import HttpServer, serve_http, serve_unix_http
from tests.certificates import self_signed_or_skip


async def _body(receive: Receive) -> bytes:
    """The request's whole body."""
    body: bytes = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    body = await _body(receive)
    reply = json.dumps(
        {
            "method": scope["method"],
            "path": scope["path"],
            "query": scope["query_string"].decode(),
            "body": len(body),
            "client": scope["client"][0],
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": reply})


async def mirror(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers the request's body, reversed, with its length."""
    body = await _body(receive)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body[::-1]})


async def cut_short(scope: Scope, receive: Receive, send: Send) -> None:
    """Starts a body, then fails: a bug after the first bytes."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b'{"begun":', "more_body": True})
    raise RuntimeError("a bug after the first bytes")


@asynccontextmanager
async def server(
    max_body: int = 1024 * 1024, tls: tuple[Path, Path] | None = None, app: ASGIApp = echo
) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        (url,) = await serve_http(nursery, app, ["127.0.0.1:0"], max_body=max_body, tls=tls)
        yield url
        nursery.cancel_scope.cancel()


async def test_requests_and_keep_alive() -> None:
    async with server() as url, httpx.AsyncClient(base_url=url) as client:
        for i in range(5):
            reply = await client.post(f"/v1/ads?n={i}", content=b"x" * (1000 * i))
            assert reply.json() == {
                "method": "POST",
                "path": "/v1/ads",
                "query": f"n={i}",
                "body": 1000 * i,
                "client": "127.0.0.1",
            }
        assert (await client.get("/a%20b")).json()["path"] == "/a b"


async def test_a_unix_socket_is_served_with_no_addresses_in_its_scope(tmp_path: Path) -> None:
    """The socket replaces a stale file, has mode 0660, keeps its connections alive, and
    its requests carry no client nor server address (as hypercorn gives a Unix socket's)."""

    async def where(scope: Scope, receive: Receive, send: Send) -> None:
        body = await _body(receive)
        reply = json.dumps([scope["client"], scope["server"], len(body)]).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": reply})

    path = tmp_path / "d.sock"
    path.write_text("left by a daemon that died")
    async with trio.open_nursery() as nursery:
        assert await serve_unix_http(nursery, where, path) == [f"http://unix:{path}"]
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
        peers: set[int] = set()
        transport = httpx.AsyncHTTPTransport(uds=str(path))
        async with httpx.AsyncClient(transport=transport, base_url="http://local") as client:
            for size in (0, 70_000, 3):
                reply = await client.post("/", content=b"x" * size)
                assert reply.json() == [None, None, size]
                sock = reply.extensions["network_stream"].get_extra_info("socket")
                assert sock is not None
                peers.add(id(sock))
        assert len(peers) == 1  # one connection, kept alive
        nursery.cancel_scope.cancel()


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """A loopback TCP connection: (the client's end, the server's end)."""
    with socket.create_server(("127.0.0.1", 0)) as listening:
        client = socket.create_connection(listening.getsockname()[:2])
        accepted, _ = listening.accept()
    return client, accepted


async def _until_closed(sock: socket.socket) -> bytes:
    """What ``sock`` reads until its peer closes (within 10 s)."""
    stream = trio.socket.from_stdlib_socket(sock)
    read = b""
    with trio.fail_after(10):
        while data := await stream.recv(65536):
            read += data
    return read


_LINE = b"NODEAGENT-RELAY http 127.0.0.1 4 127.0.0.1 5"
_REQUEST = b"GET /x HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n"


@pytest.mark.parametrize(
    ("sent", "extra", "ends", "answered", "logged"),
    [
        (_LINE + b" %d\r\n" % len(_REQUEST) + _REQUEST, True, True, True, ""),
        (b"NODEAGENT-RELAY http 8\r\n" + _REQUEST, False, True, False, "first line"),
        (_LINE + b"\r\n" + _REQUEST, False, True, False, "first line"),
        (_LINE + b" 9999999\r\n" + _REQUEST, False, True, False, "too much read"),
        (_LINE + b" 500\r\n" + _REQUEST, False, True, False, "cut short"),
        (_LINE + b" 500\r\n" + _REQUEST, False, False, False, "cut short"),
    ],
    ids=["served", "bad-first-line", "no-length", "too-much", "ended-early", "no-end"],
)
async def test_a_connection_handed_over_on_the_relay_socket_is_served_or_closed(
    caplog: pytest.LogCaptureFixture,
    sent: bytes,
    extra: bool,
    ends: bool,
    answered: bool,
    logged: str,
) -> None:
    """A worker sends the client's connection with its first line and what it read of
    it, then ends: served as the client's own (the addresses its socket's, not the
    line's), any other descriptor sent with it closed; a bad line, more than a head and
    a read, or no end within the read timeout close it, logged."""
    client, accepted = _tcp_pair()
    other_client, other = _tcp_pair()
    ours, worker = socket.socketpair()
    fds = [accepted.fileno(), *([other.fileno()] if extra else [])]
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
    sender = trio.socket.from_stdlib_socket(worker)

    async def work() -> None:
        done = await sender.sendmsg([sent[:65536]], rights)
        while done < len(sent):
            done += await sender.send(sent[done:])
        accepted.close()  # the worker's part is done
        other.close()
        if ends:
            worker.close()

    async def where(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        text = json.dumps([scope["path"], scope["client"], scope["server"]]).encode()
        length = [(b"content-length", b"%d" % len(text))]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": text})

    server = HttpServer(where, read_timeout=0.5)
    with client, accepted, other_client, other, ours, worker:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.handle_relayed, ours, None)
            nursery.start_soon(work)
            reply = await _until_closed(client)
            assert await _until_closed(other_client) == b""  # closed by the master
        if answered:
            head, _, body = reply.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert json.loads(body) == [
                "/x",
                list(client.getsockname()[:2]),
                list(client.getpeername()[:2]),
            ]
        else:
            assert reply == b""
    assert logged in caplog.text


async def test_a_body_too_large_is_413() -> None:
    async with server(max_body=100) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/", content=b"x" * 101)).status_code == 413
        assert (await client.post("/", content=b"x" * 100)).status_code == 200


async def test_a_request_sent_to_the_relay_socket_is_told_it_took_the_wrong_socket(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client given the relay socket for the API's (a path typed wrong) gets an HTTP
    answer that says so, not a connection closed without a word; nothing is served."""
    served: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        served.append(scope["path"])

    caplog.set_level(logging.INFO, logger="nodeagent")
    ours, client = socket.socketpair()
    with ours, client:
        client.sendall(_REQUEST)
        await HttpServer(app, read_timeout=0.5).handle_relayed(ours, None)
        reply = await _until_closed(client)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 421 ")
    assert json.loads(body)["error"]["code"] == "http.wrong_socket"
    assert "master.sock" in json.loads(body)["error"]["message"]
    assert served == []
    assert any("on the relay socket" in r.getMessage() for r in caplog.records)


async def test_a_body_that_fails_after_its_first_bytes_ends_its_connection_without_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client never takes a body cut short for a whole one: the chunked body has no last
    chunk, and the connection closes."""
    async with (
        server(app=cut_short) as url,
        httpx.AsyncClient(base_url=url) as client,
        client.stream("GET", "/") as reply,
    ):
        assert reply.status_code == 200
        chunks = reply.aiter_raw()
        assert await chunks.__anext__() == b'{"begun":'
        with pytest.raises(httpx.RemoteProtocolError):
            await chunks.__anext__()
    assert "a bug after the first bytes" in caplog.text


async def test_malformed_requests_are_400() -> None:
    async with server() as url:
        host, port = url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")
            reply = b""
            with trio.fail_after(5):
                while chunk := await stream.receive_some():
                    reply += chunk
        assert reply.startswith(b"HTTP/1.1 400 ")


async def test_connections_at_once_past_an_accept_batch_are_all_served() -> None:
    """More connections arrive at once than the listener accepts in a row (64) before it
    lets the others run: each is answered, each on a connection of its own."""
    answered: list[int] = []
    async with server() as url:
        host, port = url.removeprefix("http://").split(":")

        async def one(i: int) -> None:
            stream = await trio.open_tcp_stream(host, int(port))
            async with stream:
                await stream.send_all(
                    b"POST /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (i, b"x" * i)
                )
                reply = b""
                while chunk := await stream.receive_some():
                    reply += chunk
            assert reply.startswith(b"HTTP/1.1 200 ")
            assert b'"body": %d,' % i in reply  # the echo's JSON, chunked
            answered.append(i)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for i in range(150):
                    nursery.start_soon(one, i)
    assert sorted(answered) == list(range(150))


async def test_a_paced_listener_takes_a_stream_of_connections_a_wake_at_a_time(
    mock_clock: trio.testing.MockClock,
) -> None:
    """With ``accept_every``, a connection after a quiet spell is served at once; those
    that come while the listener's last wake is younger than that wait in the kernel's
    queue for the rest of it (the clock stands still here), then are served together."""
    served: list[float] = []

    async def stamped(scope: Scope, receive: Receive, send: Send) -> None:
        served.append(trio.current_time())
        await echo(scope, receive, send)

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    listening.setblocking(False)
    port = listening.getsockname()[1]

    async def send_one() -> trio.SocketStream:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return stream

    async def reply_of(stream: trio.SocketStream) -> bytes:
        reply = b""
        async with stream:
            while chunk := await stream.receive_some():
                reply += chunk
        return reply

    async with trio.open_nursery() as nursery:
        nursery.start_soon(HttpServer(stamped, accept_every=10.0).accept, listening)
        assert (await reply_of(await send_one())).startswith(b"HTTP/1.1 200 ")
        assert served == [0.0]  # the first: at once

        streams = [await send_one(), await send_one()]
        await trio.testing.wait_all_tasks_blocked()
        assert served == [0.0]  # in the kernel's queue: the last wake is 0 s old
        mock_clock.jump(10.0)
        for stream in streams:
            assert (await reply_of(stream)).startswith(b"HTTP/1.1 200 ")
        assert served == [0.0, 10.0, 10.0]  # one wake, 10 s after the last

        mock_clock.jump(30.0)  # a quiet spell: the next is served at once
        assert (await reply_of(await send_one())).startswith(b"HTTP/1.1 200 ")
        assert served == [0.0, 10.0, 10.0, 40.0]
        nursery.cancel_scope.cancel()


async def test_requests_over_tls_with_keep_alive_and_new_connections(tmp_path: Path) -> None:
    cert, key = self_signed_or_skip(tmp_path)
    trusted = ssl.create_default_context(cafile=str(cert))
    async with server(tls=(cert, key)) as url:
        assert url.startswith("https://127.0.0.1:")
        for _ in range(2):  # a new connection each time round, two requests on each
            async with httpx.AsyncClient(base_url=url, verify=trusted) as client:
                for i in (1, 2):
                    reply = await client.post(f"/t?n={i}", content=b"y" * (70_000 * i))
                    assert reply.json()["body"] == 70_000 * i


async def test_bodies_larger_than_the_sockets_buffers_go_both_ways_whole() -> None:
    """A body and a reply of megabytes: many reads in a row, and writes the socket takes in
    parts, on one kept-alive connection."""
    body = bytes(range(256)) * 32 * 1024  # 8 MiB
    async with trio.open_nursery() as nursery:
        (url,) = await serve_http(nursery, mirror, ["127.0.0.1:0"], max_body=len(body))
        async with httpx.AsyncClient(base_url=url) as client:
            for size in (len(body), 10, len(body) // 3):
                reply = await client.post("/m", content=body[:size])
                assert reply.status_code == 200
                assert reply.content == body[:size][::-1]
        nursery.cancel_scope.cancel()


async def test_a_reader_gone_while_its_reply_streams_is_no_error_of_the_gate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A plan read to its first rows and closed: the reply's next write fails, and the
    gate neither logs an error with its traceback nor leaves the request untimed."""

    async def rows() -> AsyncIterator[bytes]:
        while True:  # more than any socket buffer holds
            yield b"x" * 65536

    async def endless(request: Request) -> StreamingResponse:
        return StreamingResponse(rows())

    app = Starlette(routes=[Route("/rows", endless)])
    observed: list[tuple[str, str, int]] = []
    gate = Gate(
        app,
        routes=app.routes,
        rules={("GET", "/rows"): Rule(scope=None)},
        verify=None,
        body_limit=1024,
        observe=lambda method, path, status, _started: observed.append((method, path, status)),
    )
    caplog.set_level(logging.DEBUG, logger="nodeagent")
    async with trio.open_nursery() as nursery:
        (url,) = await serve_http(nursery, gate, ["127.0.0.1:0"])
        host, port = url.removeprefix("http://").rsplit(":", 1)
        client = await trio.open_tcp_stream(host, int(port))
        await client.send_all(b"GET /rows HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await client.receive_some(4096)).startswith(b"HTTP/1.1 200 ")
        await client.aclose()  # the rest unread: the server's next writes fail
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        while not observed and not errors:  # the request's end, or an error logged
            await trio.sleep(0.01)
            errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == []
        assert observed == [("GET", "/rows", 200)]
        assert any("the client went away" in r.getMessage() for r in caplog.records)
        nursery.cancel_scope.cancel()
