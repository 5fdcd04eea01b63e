"""The command line's HTTP/1.1 client (:mod:`nodeagent.cli._transport`) and its errors as
the commands report them (:func:`nodeagent.cli._http.call`).

Each test runs a scripted server of its own on a real socket (TCP on loopback, or a Unix
socket in a temporary directory), in a thread: it reads one request per connection and
answers with the bytes the test gives it, cut short, trickled or endless as the case
needs.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nodeagent.cli._errors import AgentFailed, Unreachable
from nodeagent.cli._http import Target, call
from nodeagent.cli._transport import (
    MAX_HEADERS,
    BrokenReply,
    Endpoint,
    ReplyTooLarge,
    exchange,
    open_stream,
)

Respond = Callable[[socket.socket, threading.Event], None]


def sends(data: bytes) -> Respond:
    """Answer with ``data``, then close."""

    def respond(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(data)

    return respond


def trickles(head: bytes) -> Respond:
    """Answer with ``head``, then one byte at a time, slowly, until the client goes."""

    def respond(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head)
        while not stop.wait(0.02):
            conn.sendall(b"x")

    return respond


def endless(head: bytes, block: bytes = b"x" * 65536) -> Respond:
    """Answer with ``head``, then ``block`` again and again, as fast as the client reads."""

    def respond(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head)
        while not stop.is_set():
            conn.sendall(block)

    return respond


class Scripted:
    """A server answering every connection with ``respond``; ``requests`` holds what each
    connection sent (the head and the body its ``Content-Length`` announced)."""

    def __init__(self, listener: socket.socket, respond: Respond) -> None:
        self.listener = listener
        self.respond = respond
        self.requests: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                try:
                    self.requests.append(_read_request(conn))
                    self.respond(conn, self.stop)
                except OSError:  # the client went: what the test wanted
                    pass


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@contextmanager
def serving(respond: Respond, *, unix: Path | None = None) -> Iterator[tuple[Scripted, Endpoint]]:
    """The scripted server on 127.0.0.1 (or the Unix socket ``unix``) for the block."""
    if unix is None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        endpoint = Endpoint(host="127.0.0.1", port=listener.getsockname()[1])
    else:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(unix))
        endpoint = Endpoint(unix=str(unix))
    listener.listen(8)
    server = Scripted(listener, respond)
    server.thread.start()
    try:
        yield server, endpoint
    finally:
        server.stop.set()
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        server.thread.join(timeout=30)
        assert not server.thread.is_alive()


def reply(status: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + b"\r\n" + body


def chunked(*parts: bytes, trailer: bytes = b"") -> bytes:
    out = b"".join(f"{len(p):x};ext=1\r\n".encode() + p + b"\r\n" for p in parts)
    return out + b"0\r\n" + trailer + b"\r\n"


JSON = {"Content-Type": "application/json"}

# --- replies read whole -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "status", "body"),
    [
        (reply("200 OK", {"Content-Length": "5"}, b"hello"), 200, b"hello"),
        (reply("200 OK", {"content-length": "2"}, b"hiEXTRA"), 200, b"hi"),
        (reply("404 Not Found", {"Content-Length": "0"}), 404, b""),
        (
            reply("200 OK", {"Transfer-Encoding": "chunked"}, chunked(b"hel", b"lo", b"!" * 70000)),
            200,
            b"hello" + b"!" * 70000,
        ),
        (
            reply(
                "200 OK", {"Transfer-Encoding": "chunked"}, chunked(b"ab", trailer=b"X-T: 1\r\n")
            ),
            200,
            b"ab",
        ),
        (reply("200 OK", {"Connection": "close"}, b"until the close"), 200, b"until the close"),
        (reply("204 No Content", {}, b""), 204, b""),
        (
            reply("100 Continue", {}) + reply("201 Created", {"Content-Length": "2"}, b"ok"),
            201,
            b"ok",
        ),
        (b"HTTP/1.0 200 OK\nContent-Length: 3\n\nabc", 200, b"abc"),
    ],
    ids=[
        "content-length",
        "content-length, more sent",
        "empty",
        "chunked",
        "chunked with trailer",
        "read to the close",
        "no content",
        "interim reply skipped",
        "bare newlines, HTTP/1.0",
    ],
)
def test_a_reply_is_read_as_it_is_framed(answer: bytes, status: int, body: bytes) -> None:
    with serving(sends(answer)) as (_, endpoint):
        response = exchange(endpoint, "GET", "/v1/ad", timeout=30)
    assert (response.status, response.body) == (status, body)


def test_the_request_as_sent_over_tcp_and_the_headers_as_read() -> None:
    answer = reply("200 OK", {"Content-Length": "2", "X-Twice": "a", "x-twice": "b", **JSON})
    with serving(sends(answer + b"{}")) as (server, endpoint):
        response = exchange(
            endpoint,
            "POST",
            "/v1/drain?x=1",
            headers=[("Authorization", "Bearer t"), ("Content-Type", "application/json")],
            body=b'{"a":1}',
            timeout=30,
        )
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-twice"] == "b"
    assert response.reason == "OK"
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/drain?x=1 HTTP/1.1"
    assert lines[1] == f"Host: 127.0.0.1:{endpoint.port}"
    assert set(lines[2:]) == {
        "Authorization: Bearer t",
        "Content-Type: application/json",
        "Content-Length: 7",
        "Connection: close",
    }
    assert body == b'{"a":1}'


@pytest.mark.parametrize(
    ("method", "length"), [("GET", None), ("DELETE", None), ("POST", "0"), ("PUT", "0")]
)
def test_a_request_without_a_body_announces_one_only_where_http_client_did(
    tmp_path: Path, method: str, length: str | None
) -> None:
    with serving(sends(reply("200 OK", {"Content-Length": "0"})), unix=tmp_path / "s") as (
        server,
        endpoint,
    ):
        exchange(endpoint, method, "/v1/drain", timeout=30)
    lines = server.requests[0].decode().split("\r\n")
    assert lines[1] == "Host: localhost"
    announced = [x.partition(": ")[2] for x in lines if x.startswith("Content-Length")]
    assert announced == ([] if length is None else [length])


@pytest.mark.parametrize(
    ("endpoint", "host"),
    [
        (Endpoint(host="example.test", port=80), "example.test"),
        (Endpoint(host="example.test", port=443, tls=True), "example.test"),
        (Endpoint(host="example.test", port=9622), "example.test:9622"),
        (Endpoint(host="::1", port=9622), "[::1]:9622"),
        (Endpoint(unix="/run/x.sock"), "localhost"),
    ],
)
def test_the_host_header(endpoint: Endpoint, host: str) -> None:
    assert endpoint.host_header() == host


# --- replies that end early, or are not HTTP ----------------------------------------------


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (b"", "closed in the status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "closed in the headers"),
        (reply("200 OK", {"Content-Length": "100"}, b"0123456789"), "closed in the body"),
        (reply("200 OK", {"Transfer-Encoding": "chunked"}, b"a\r\n01234"), "closed in the body"),
        (reply("200 OK", {"Transfer-Encoding": "chunked"}, b"5\r\nhello\r\n"), "chunk size"),
        (reply("200 OK", {"Transfer-Encoding": "chunked"}, b"zz\r\n"), "malformed chunk size"),
        (reply("200 OK", {"Content-Length": "-1"}), "malformed Content-Length"),
        (b"SSH-2.0-OpenSSH_9.2\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * (MAX_HEADERS + 1) + b"\r\n", "more than 100"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n", "longer than 65536"),
    ],
    ids=[
        "nothing",
        "in the headers",
        "content-length",
        "in a chunk",
        "before the last chunk",
        "chunk size",
        "content-length not a number",
        "not HTTP",
        "header without a colon",
        "too many headers",
        "headers too long",
    ],
)
def test_a_reply_cut_short_or_not_http_is_a_broken_reply(answer: bytes, says: str) -> None:
    with serving(sends(answer)) as (_, endpoint), pytest.raises(BrokenReply, match=says):
        exchange(endpoint, "GET", "/v1/ad", timeout=30)


def test_a_slow_peer_is_bounded_by_the_timeout(tmp_path: Path) -> None:
    """The peer sends a byte every 20 ms: each read succeeds, the exchange still ends."""
    head = reply("200 OK", {"Content-Length": "1000000"})
    with (
        serving(trickles(head), unix=tmp_path / "s") as (_, endpoint),
        pytest.raises(TimeoutError),
    ):
        exchange(endpoint, "GET", "/v1/ad", timeout=0.3)


def test_a_peer_that_never_answers_is_bounded_by_the_timeout() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepted by the kernel, never read
        endpoint = Endpoint(host="127.0.0.1", port=listener.getsockname()[1])
        with pytest.raises(TimeoutError):
            exchange(endpoint, "GET", "/v1/ad", timeout=0.3)


@pytest.mark.parametrize(
    "respond",
    [
        endless(reply("200 OK", {"Content-Length": str(10 << 20)})),
        endless(reply("200 OK", {"Transfer-Encoding": "chunked"}), chunked(b"x" * 65536)[:-5]),
        endless(reply("200 OK", {})),
    ],
    ids=["declared", "chunked", "read to the close"],
)
def test_a_reply_past_the_limit_is_refused_without_reading_it_all(respond: Respond) -> None:
    with serving(respond) as (_, endpoint), pytest.raises(ReplyTooLarge) as raised:
        exchange(endpoint, "GET", "/v1/ads", timeout=30, limit=1 << 20)
    assert (raised.value.status, raised.value.limit) == (200, 1 << 20)


def test_a_header_with_a_line_break_is_refused_before_connecting(tmp_path: Path) -> None:
    endpoint = Endpoint(unix=str(tmp_path / "nothing-here"))
    with pytest.raises(ValueError, match="invalid header"):
        exchange(endpoint, "GET", "/", headers=[("Authorization", "Bearer a\r\nX: y")], timeout=5)


@pytest.mark.parametrize("kind", ["missing socket", "refused port"])
def test_connection_failures_are_the_sockets_own(tmp_path: Path, kind: str) -> None:
    error: type[OSError]
    if kind == "missing socket":
        endpoint, error = Endpoint(unix=str(tmp_path / "none.sock")), FileNotFoundError
    else:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        endpoint, error = Endpoint(host="127.0.0.1", port=port), ConnectionRefusedError
    with pytest.raises(error):
        exchange(endpoint, "GET", "/", timeout=5)


# --- as the commands see it ---------------------------------------------------------------


def _target(endpoint: Endpoint) -> Target:
    return Target(host=endpoint.host, port=endpoint.port, token="tok", peer="master")


@pytest.mark.parametrize(
    ("respond", "error", "code", "exit_status"),
    [
        (
            sends(reply("200 OK", {"Content-Length": "9", **JSON}, b"{}")),
            Unreachable,
            "master.unreachable",
            3,
        ),
        (sends(b"garbage\r\n"), Unreachable, "master.unreachable", 3),
        (
            trickles(reply("200 OK", {"Content-Length": "99", **JSON})),
            Unreachable,
            "master.timeout",
            3,
        ),
        (endless(reply("200 OK", JSON)), AgentFailed, "master.bad_reply", 5),
    ],
    ids=["cut short", "not HTTP", "slow", "too large"],
)
def test_the_commands_report_each_failure_with_its_code_and_exit_status(
    respond: Respond, error: type[Exception], code: str, exit_status: int
) -> None:
    with serving(respond) as (_, endpoint), pytest.raises(error) as raised:
        call(_target(endpoint), "GET", "/v1/maintenance/plan", timeout=0.5, limit=1 << 20)
    assert getattr(raised.value, "code", None) == code
    assert getattr(raised.value, "exit_status", None) == exit_status


def test_a_chunked_redirect_is_followed_with_the_request_whole() -> None:
    """A follower's 307 (chunked, as hypercorn may send it) leads to the leader, which gets
    the same method, body and token."""
    leader_reply = reply(
        "200 OK", {"Transfer-Encoding": "chunked", **JSON}, chunked(b'{"ok":', b"1}")
    )
    with serving(sends(leader_reply)) as (leader, at):
        location = f"http://127.0.0.1:{at.port}/machine/down"
        moved = reply(
            "307 Temporary Redirect",
            {"Location": location, "Transfer-Encoding": "chunked", **JSON},
            chunked(json.dumps({"error": {"code": "master.not_leader", "message": "no"}}).encode()),
        )
        with serving(sends(moved)) as (follower, endpoint):
            target = Target(
                host="127.0.0.1",
                port=endpoint.port,
                token="tok",
                peer="master",
                masters=(("http", "127.0.0.1", endpoint.port), ("http", "127.0.0.1", at.port)),
            )
            got = call(target, "POST", "/machine/down", {"machines": ["n1"]})
    assert (got.status, got.data) == (200, {"ok": 1})
    sent = [s.partition(b"\r\n\r\n") for s in (*follower.requests, *leader.requests)]
    assert [head.split(b" ", 2)[:2] for head, _, _ in sent] == [
        [b"POST", b"/machine/down"],
        [b"POST", b"/machine/down"],
    ]
    assert all(b"Authorization: Bearer tok" in head for head, _, _ in sent)
    assert {body for _, _, body in sent} == {b'{"machines":["n1"]}'}


# --- replies read as they come ------------------------------------------------------------


def held(head: bytes, first: bytes, rest: bytes, go: threading.Event) -> Respond:
    """Answer with ``head`` and ``first``, then ``rest`` only once ``go`` is set (by the
    client, having read ``first``); ``go`` stays unset if it never is."""

    def respond(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head + first)
        if go.wait(30):
            conn.sendall(rest)

    return respond


def test_a_line_is_read_as_soon_as_it_has_come(tmp_path: Path) -> None:
    """The first event is read while the rest has not been sent: nothing waits for the
    body's end."""
    go = threading.Event()
    head = reply("200 OK", {"Transfer-Encoding": "chunked", "X-Last": "7"})
    first = b'5\r\n{"a":\r\n3\r\n1}\n\r\n'
    rest = chunked(b"\n", b'{"b":2}\r\n{"c"', b":3}\n")
    with (
        serving(held(head, first, rest, go), unix=tmp_path / "s") as (_, endpoint),
        open_stream(endpoint, "GET", "/v1/events", timeout=30, idle=30) as stream,
    ):
        assert (stream.status, stream.headers["x-last"]) == (200, "7")
        lines = stream.lines()
        assert next(lines) == b'{"a":1}'
        go.set()
        assert list(lines) == [b"", b'{"b":2}', b'{"c":3}']


@pytest.mark.parametrize(
    "answer",
    [
        reply("200 OK", {"Transfer-Encoding": "chunked"}, chunked(b"one\n", b"two\nthr", b"ee\n")),
        reply("200 OK", {"Content-Length": "14"}, b"one\ntwo\nthree\nNOT THIS"),
        reply("200 OK", {}, b"one\r\ntwo\nthree\n"),
    ],
    ids=["chunked", "content-length", "read to the close"],
)
def test_lines_are_read_as_the_body_is_framed(answer: bytes) -> None:
    with (
        serving(sends(answer)) as (_, endpoint),
        open_stream(endpoint, "GET", "/", timeout=30, idle=30) as stream,
    ):
        assert list(stream.lines()) == [b"one", b"two", b"three"]


def test_the_body_is_bounded_by_the_idle_time_not_the_timeout() -> None:
    """Lines trickle in for longer than ``timeout``: each read waits ``idle`` at most."""

    def respond(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(reply("200 OK", {"Transfer-Encoding": "chunked"}))
        for n in range(40):
            if stop.wait(0.05):
                return
            conn.sendall(chunked(b"%d\n" % n)[:-5])
        conn.sendall(b"0\r\n\r\n")

    with (
        serving(respond) as (_, endpoint),
        open_stream(endpoint, "GET", "/", timeout=1, idle=30) as stream,
    ):
        assert list(stream.lines()) == [b"%d" % n for n in range(40)]


def test_a_silent_peer_is_bounded_by_the_idle_time(tmp_path: Path) -> None:
    go = threading.Event()  # never set: the peer says nothing after its first line
    head = reply("200 OK", {"Transfer-Encoding": "chunked"})
    with (
        serving(held(head, chunked(b"hi\n")[:-5], b"", go), unix=tmp_path / "s") as (_, at),
        open_stream(at, "GET", "/", timeout=30, idle=0.2) as stream,
    ):
        lines = stream.lines()
        assert next(lines) == b"hi"
        with pytest.raises(TimeoutError):
            next(lines)
        go.set()


@pytest.mark.parametrize(
    ("answer", "error", "says", "before"),
    [
        (reply("200 OK", {"Transfer-Encoding": "chunked"}, b"3\r\nab\n\r\n4\r\ncd\n"),
         BrokenReply, "closed in the body", [b"ab"]),
        (reply("200 OK", {"Transfer-Encoding": "chunked"}, chunked(b"ab\n", b"cd")), BrokenReply,
         "middle of a line", [b"ab"]),
        (reply("200 OK", {"Content-Length": "10"}, b"ab\n"), BrokenReply, "closed in the body",
         [b"ab"]),
        (reply("200 OK", {"Transfer-Encoding": "chunked"}, chunked(b"x" * 100)), ReplyTooLarge,
         "larger than 64", []),
        (reply("200 OK", {}, b"ab\n" + b"x" * 100), ReplyTooLarge, "larger than 64", [b"ab"]),
    ],
    ids=["cut in a chunk", "a last line without its LF", "content-length", "a long chunk",
         "a long line"],
)  # fmt: skip
def test_a_stream_cut_short_or_too_long_raises_after_its_whole_lines(
    answer: bytes, error: type[Exception], says: str, before: list[bytes]
) -> None:
    read: list[bytes] = []
    with (
        serving(sends(answer)) as (_, endpoint),
        open_stream(endpoint, "GET", "/", timeout=30, idle=30) as stream,
        pytest.raises(error, match=says),
    ):
        read.extend(stream.lines(limit=64))
    assert read == before


def test_an_error_reply_is_read_whole() -> None:
    body = b'{"error":{"code":"request.invalid","message":"no"}}'
    answer = reply("422 Unprocessable Entity", {"Content-Length": str(len(body)), **JSON}, body)
    with (
        serving(sends(answer)) as (server, endpoint),
        open_stream(
            endpoint, "GET", "/v1/events?type=x", headers=[("X-A", "b")], timeout=30, idle=30
        ) as stream,
    ):
        assert (stream.status, stream.read()) == (422, body)
    lines = server.requests[0].decode().split("\r\n")
    assert lines[0] == "GET /v1/events?type=x HTTP/1.1"
    assert "X-A: b" in lines
    assert "Connection: close" in lines


@pytest.mark.parametrize(
    ("answer", "status", "body"),
    [
        (reply("200 OK", {"Content-Length": "5"}, b"hello"), 200, b"hello"),
        (reply("200 OK", {"content-length": "2"}, b"hiEXTRA"), 200, b"hi"),
        (reply("404 Not Found", {"Content-Length": "0"}), 404, b""),
        (
            reply("200 OK", {"Transfer-Encoding": "chunked"}, chunked(b"hel", b"lo", b"!" * 70000)),
            200,
            b"hello" + b"!" * 70000,
        ),
        (reply("200 OK", {"Content-Length": "70000"}, b"?" * 70000), 200, b"?" * 70000),
        (reply("200 OK", {"Connection": "close"}, b"until the close"), 200, b"until the close"),
        (reply("204 No Content", {}, b""), 204, b""),
        (
            reply("100 Continue", {}) + reply("201 Created", {"Content-Length": "2"}, b"ok"),
            201,
            b"ok",
        ),
    ],
    ids=[
        "content-length",
        "content-length, more sent",
        "empty",
        "chunked",
        "content-length, several reads",
        "read to the close",
        "no content",
        "interim reply skipped",
    ],
)
def test_a_streamed_reply_is_read_as_it_is_framed(answer: bytes, status: int, body: bytes) -> None:
    with (
        serving(sends(answer)) as (_, endpoint),
        open_stream(endpoint, "GET", "/v1/events", timeout=30, idle=30) as stream,
    ):
        got = b"".join(stream.body())
    assert (stream.status, got) == (status, body)


def test_a_stream_hands_out_each_piece_as_it_arrives(tmp_path: Path) -> None:
    """The peer sends one event, then waits until the client has it before the next: the
    client reads the first without the reply having ended."""
    read_first = threading.Event()

    def respond(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(reply("200 OK", {"Transfer-Encoding": "chunked"}))
        conn.sendall(b"6\r\nid: 1\n\r\n")
        assert read_first.wait(30)
        conn.sendall(b"6\r\nid: 2\n\r\n0\r\n\r\n")

    with (
        serving(respond, unix=tmp_path / "s") as (server, endpoint),
        open_stream(
            endpoint, "GET", "/v1/events", headers=[("Last-Event-ID", "0")], timeout=30, idle=30
        ) as stream,
    ):
        pieces = stream.body()
        first = next(pieces)
        read_first.set()
        rest = list(pieces)
    assert (first, rest) == (b"id: 1\n", [b"id: 2\n"])
    assert b"Last-Event-ID: 0\r\n" in server.requests[0]


def test_a_stream_silent_past_its_idle_time_ends_with_a_timeout() -> None:
    """Each read waits at most the idle time, however long the stream has lasted."""
    head = reply("200 OK", {"Transfer-Encoding": "chunked"}, b"1\r\nx\r\n")

    def respond(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head)
        stop.wait(30)

    with (
        serving(respond) as (_, endpoint),
        open_stream(endpoint, "GET", "/v1/events", timeout=30, idle=0.3) as stream,
    ):
        pieces = stream.body()
        assert next(pieces) == b"x"
        with pytest.raises(TimeoutError):
            next(pieces)
