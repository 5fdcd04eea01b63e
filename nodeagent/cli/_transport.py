"""One HTTP/1.1 exchange on a plain socket: the command line's transport.

The command line sends one request per connection and reads one reply; for that the
standard library's ``http.client`` costs a command ≈ 20 ms of imports (``email.parser``,
``email.utils``, ``ssl``), h11 ≈ 16 ms (``typing``, ``dataclasses``). This module needs
``socket`` alone, and imports ``ssl`` only to reach an ``https://`` URL.

:func:`exchange` connects (a Unix stream socket, or TCP with TLS for ``https``), sends the
request with ``Connection: close``, and reads the reply: the status line, the headers
(at most :data:`MAX_HEAD_BYTES` and :data:`MAX_HEADERS`), then the body as the reply frames
it (``Transfer-Encoding: chunked``, ``Content-Length``, or until the peer closes), at
most ``limit`` bytes. Interim ``1xx`` replies are skipped. The whole exchange, connecting
included, ends within ``timeout`` seconds.

It raises what the socket raised (:class:`OSError`: :class:`FileNotFoundError`,
:class:`ConnectionRefusedError`, :class:`PermissionError`, :class:`socket.gaierror`, TLS
errors), :class:`TimeoutError` when the time is up, :class:`BrokenReply` for a reply that
does not parse or ends early, :class:`ReplyTooLarge` past ``limit``. The connection is
closed in every case; nothing else is left behind.

:func:`open_stream` sends a request the same way and reads the reply's head, leaving its
body to be read as it comes (:meth:`Stream.body`: an event stream that never ends, say),
each read within an idle time; the caller closes the :class:`Stream`.

Standard library only, without ``typing`` or ``dataclasses``: the entry point's plain
commands import it.
"""

from __future__ import annotations

import os
import socket
import time

from nodeagent.cli._record import record

__all__ = [
    "MAX_HEADERS",
    "MAX_HEAD_BYTES",
    "MAX_REPLY_BYTES",
    "BrokenReply",
    "Endpoint",
    "ReplyTooLarge",
    "Response",
    "Stream",
    "exchange",
    "open_stream",
]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

MAX_HEAD_BYTES = 64 * 1024
"""The status line and headers of a reply, together (``http.client`` allows as much per
line)."""

MAX_HEADERS = 100
"""Headers in a reply (as ``http.client``)."""

MAX_REPLY_BYTES = 1 << 30
"""A reply's body, by default: far above any daemon's (a pool's every ad is ≈ 250 MB)."""

_READ_SIZE = 64 * 1024


class BrokenReply(Exception):
    """The reply does not parse as HTTP/1.x, or the peer closed the connection before it
    ended; the message says which."""


class ReplyTooLarge(Exception):
    """The reply's body is longer than the caller's limit (declared or as it came)."""

    def __init__(self, status: int, limit: int) -> None:
        super().__init__(f"a reply larger than {limit} bytes (HTTP {status})")
        self.status = status
        self.limit = limit


@record
class Endpoint:
    """Where to connect: a Unix socket ``unix``, else ``host`` and ``port`` over TCP (TLS
    when ``tls``)."""

    unix: str | None = None
    host: str = ""
    port: int = 80
    tls: bool = False

    def host_header(self) -> str:
        """The ``Host`` header as ``http.client`` writes it: ``localhost`` for a Unix
        socket; the host (an IPv6 address in brackets), with the port unless it is the
        scheme's."""
        if self.unix is not None:
            return "localhost"
        host = f"[{self.host}]" if ":" in self.host else self.host
        if not host.isascii():
            host = host.encode("idna").decode("ascii")
        default = 443 if self.tls else 80
        return host if self.port == default else f"{host}:{self.port}"


@record
class Response:
    """A reply: ``status``, ``reason``, the ``headers`` (names in lower case, each with its
    last value) and the whole ``body``."""

    status: int
    reason: str
    headers: dict[str, str]
    body: bytes


class _Reader:
    """The connection's bytes, read as the parser asks, each read before ``deadline``."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._buffer = bytearray()
        self.closed = False

    def give(self, seconds: float) -> None:
        """The next reads end within ``seconds`` from now (a stream's idle time)."""
        self._deadline = time.monotonic() + seconds

    def take(self) -> bytes:
        """What is buffered, now (emptied)."""
        data = bytes(self._buffer)
        self._buffer.clear()
        return data

    def fill(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self._sock.settimeout(left)
        data = self._sock.recv(_READ_SIZE)
        if not data:
            self.closed = True
        self._buffer += data

    def line(self, limit: int, what: str, too_long: str = "") -> bytes:
        """One line (without its CRLF), at most ``limit`` bytes (else ``too_long``, or
        ``what`` and the limit, is the error)."""
        too_long = too_long or f"{what} longer than {limit} bytes"
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                if len(line) > limit:
                    raise BrokenReply(too_long)
                return line.removesuffix(b"\r")
            if len(self._buffer) > limit:
                raise BrokenReply(too_long)
            if self.closed:
                raise BrokenReply(f"the connection closed in the {what}")
            self.fill()

    def exactly(self, size: int, what: str) -> bytes:
        while len(self._buffer) < size:
            if self.closed:
                raise BrokenReply(f"the connection closed in the {what}")
            self.fill()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def rest(self, limit: int, status: int) -> bytes:
        """Everything until the peer closes, at most ``limit`` bytes."""
        while not self.closed:
            if len(self._buffer) > limit:
                raise ReplyTooLarge(status, limit)
            self.fill()
        if len(self._buffer) > limit:
            raise ReplyTooLarge(status, limit)
        data = bytes(self._buffer)
        self._buffer.clear()
        return data


def _connect(endpoint: Endpoint, deadline: float) -> socket.socket:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    if endpoint.unix is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(left)
            sock.connect(os.fspath(endpoint.unix))
        except BaseException:
            sock.close()
            raise
        return sock
    sock = socket.create_connection((endpoint.host, endpoint.port), timeout=left)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if endpoint.tls:
            import ssl  # noqa: PLC0415  (its context loads the CA store: only for https)

            context = ssl.create_default_context()
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            return context.wrap_socket(sock, server_hostname=endpoint.host)
    except BaseException:
        sock.close()
        raise
    return sock


def _request_bytes(
    endpoint: Endpoint,
    method: str,
    target: str,
    headers: Iterable[tuple[str, str]],
    body: bytes | None,
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {endpoint.host_header()}"]
    for name, value in headers:
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
            raise ValueError(f"invalid header {name!r}")
        lines.append(f"{name}: {value}")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


def _head(reader: _Reader) -> tuple[int, str, dict[str, str]]:
    """The status line and headers of one reply."""
    budget = MAX_HEAD_BYTES
    too_long = f"status line and headers longer than {MAX_HEAD_BYTES} bytes"
    status_line = reader.line(budget, "status line", too_long)
    budget -= len(status_line)
    version, _, rest = status_line.partition(b" ")
    code, _, reason = rest.partition(b" ")
    if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
        shown = status_line[:60].decode("latin-1")
        raise BrokenReply(f"not an HTTP/1.x status line: {shown!r}")
    headers: dict[str, str] = {}
    count = 0
    while True:
        line = reader.line(max(budget, 0), "headers", too_long)
        budget -= len(line) + 2
        if budget < 0:
            raise BrokenReply(too_long)
        if not line:
            break
        count += 1
        if count > MAX_HEADERS:
            raise BrokenReply(f"more than {MAX_HEADERS} headers")
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise BrokenReply(f"a malformed header line: {line[:60].decode('latin-1')!r}")
        headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
    return int(code), reason.decode("latin-1").strip(), headers


def _chunked(reader: _Reader, limit: int, status: int) -> bytes:
    body = bytearray()
    while True:
        line = reader.line(1024, "chunk size")
        size_text = line.partition(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BrokenReply(f"a malformed chunk size: {size_text[:20]!r}") from None
        if size < 0:
            raise BrokenReply("a negative chunk size")
        if size == 0:
            break
        if len(body) + size > limit:
            raise ReplyTooLarge(status, limit)
        body += reader.exactly(size, "body")
        if reader.exactly(2, "body") != b"\r\n":
            raise BrokenReply("a chunk without its CRLF")
    trailers = 0
    while reader.line(MAX_HEAD_BYTES, "trailers"):
        trailers += 1
        if trailers > MAX_HEADERS:
            raise BrokenReply(f"more than {MAX_HEADERS} trailers")
    return bytes(body)


def _body(reader: _Reader, method: str, status: int, headers: dict[str, str], limit: int) -> bytes:
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _chunked(reader, limit, status)
    length_text = headers.get("content-length")
    if length_text is None:
        return reader.rest(limit, status)
    if not length_text.isdigit():
        raise BrokenReply(f"a malformed Content-Length: {length_text[:20]!r}")
    length = int(length_text)
    if length > limit:
        raise ReplyTooLarge(status, limit)
    return reader.exactly(length, "body")


def exchange(
    endpoint: Endpoint,
    method: str,
    target: str,
    *,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes | None = None,
    timeout: float,
    limit: int = MAX_REPLY_BYTES,
) -> Response:
    """Send ``method target`` with ``headers`` and ``body`` to ``endpoint``; the reply.

    ``Host``, ``Content-Length`` (with a body, and for ``POST``, ``PUT`` and ``PATCH``)
    and ``Connection: close`` are added. Raises as the module says; a header that holds a
    line break is :class:`ValueError` before anything is sent.
    """
    deadline = time.monotonic() + timeout
    payload = _request_bytes(endpoint, method, target, headers, body)
    sock = _connect(endpoint, deadline)
    try:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        sock.settimeout(left)
        sock.sendall(payload)
        reader = _Reader(sock, deadline)
        while True:
            status, reason, reply_headers = _head(reader)
            if not 100 <= status < 200 or status == 101:
                break
        content = _body(reader, method, status, reply_headers, limit)
    finally:
        sock.close()
    return Response(status=status, reason=reason, headers=reply_headers, body=content)


class Stream:
    """A reply whose head is read: ``status``, ``reason``, ``headers`` (names in lower
    case); :meth:`body` reads the rest as it comes. Close it (or use it as a context
    manager) once done: the connection is closed."""

    def __init__(
        self,
        sock: socket.socket,
        reader: _Reader,
        head: tuple[int, str, dict[str, str]],
        *,
        method: str,
        idle: float,
    ) -> None:
        self._sock = sock
        self._reader = reader
        self.status, self.reason, self.headers = head
        self._method = method
        self._idle = idle

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def _wait(self) -> None:
        self._reader.give(self._idle)

    def body(self) -> Iterator[bytes]:
        """The body's bytes as they arrive, unframed (chunks decoded), until it ends.

        Each read waits at most the idle time (:class:`TimeoutError` past it); raises
        :class:`BrokenReply` for a body cut short or badly framed, and what the socket
        raises.
        """
        reader = self._reader
        if self._method == "HEAD" or self.status in (204, 304):
            return
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            while True:
                self._wait()
                line = reader.line(1024, "chunk size")
                try:
                    size = int(line.partition(b";")[0].strip(), 16)
                except ValueError:
                    raise BrokenReply(f"a malformed chunk size: {line[:20]!r}") from None
                if size < 0:
                    raise BrokenReply("a negative chunk size")
                if size == 0:
                    return
                while size:
                    self._wait()
                    piece = reader.exactly(min(size, _READ_SIZE), "body")
                    size -= len(piece)
                    yield piece
                if reader.exactly(2, "body") != b"\r\n":
                    raise BrokenReply("a chunk without its CRLF")
        length_text = self.headers.get("content-length")
        if length_text is not None:
            if not length_text.isdigit():
                raise BrokenReply(f"a malformed Content-Length: {length_text[:20]!r}")
            left = int(length_text)
            while left:
                self._wait()
                piece = reader.exactly(min(left, _READ_SIZE), "body")
                left -= len(piece)
                yield piece
            return
        while True:
            data = reader.take()
            if data:
                yield data
            if reader.closed:
                return
            self._wait()
            reader.fill()


def open_stream(
    endpoint: Endpoint,
    method: str,
    target: str,
    *,
    headers: Iterable[tuple[str, str]] = (),
    timeout: float,
    idle: float,
) -> Stream:
    """Send ``method target`` as :func:`exchange` does and read the reply's head within
    ``timeout`` seconds; its body is left to :meth:`Stream.body`, each read of which waits
    at most ``idle`` seconds. Raises as :func:`exchange` does; the connection is closed
    on any error."""
    deadline = time.monotonic() + timeout
    payload = _request_bytes(endpoint, method, target, headers, None)
    sock = _connect(endpoint, deadline)
    try:
        reader = _Reader(sock, deadline)
        head = _send_and_read_head(sock, reader, payload, deadline)
    except BaseException:
        sock.close()
        raise
    return Stream(sock, reader, head, method=method, idle=idle)


def _send_and_read_head(
    sock: socket.socket, reader: _Reader, payload: bytes, deadline: float
) -> tuple[int, str, dict[str, str]]:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    sock.settimeout(left)
    sock.sendall(payload)
    while True:
        head = _head(reader)
        if not 100 <= head[0] < 200 or head[0] == 101:
            return head
