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

:func:`open_stream` is the same request for a reply that does not end (an event stream):
it returns once the status line and headers are read, within ``timeout``, and its
:class:`Stream` reads the body as it comes, line by line (:meth:`Stream.lines`), each
read within ``idle`` seconds of the one before (a peer that sends nothing for that long
is :class:`TimeoutError`), until the body ends as it is framed. The caller closes it.

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
    "MAX_LINE_BYTES",
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

MAX_LINE_BYTES = 16 << 20
"""A line of a streamed body, by default (an event naming every machine of a large
schedule is some hundreds of KiB)."""

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
    """The connection's bytes, read as the parser asks, each read before ``deadline``, or,
    once ``idle`` is set, within ``idle`` seconds."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._buffer = bytearray()
        self.closed = False
        self.idle: float | None = None

    def _fill(self) -> None:
        if self.idle is not None:
            left = self.idle
        else:
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
            self._fill()

    def exactly(self, size: int, what: str) -> bytes:
        while len(self._buffer) < size:
            if self.closed:
                raise BrokenReply(f"the connection closed in the {what}")
            self._fill()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def some(self, size: int) -> bytes:
        """What is buffered, or what the next read brings (``b""`` once the peer has
        closed), at most ``size`` bytes."""
        if not self._buffer and not self.closed:
            self._fill()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def rest(self, limit: int, status: int) -> bytes:
        """Everything until the peer closes, at most ``limit`` bytes."""
        while not self.closed:
            if len(self._buffer) > limit:
                raise ReplyTooLarge(status, limit)
            self._fill()
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


def _chunks(reader: _Reader, limit: int, status: int, *, whole: bool) -> Iterator[bytes]:
    """The data of each chunk of a chunked body as it comes, then its trailers read and
    dropped. ``limit`` bounds the body (``whole``), or each chunk; a chunk past it is not
    read."""
    taken = 0
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
        if size + (taken if whole else 0) > limit:
            raise ReplyTooLarge(status, limit)
        taken += size
        data = reader.exactly(size, "body")
        if reader.exactly(2, "body") != b"\r\n":
            raise BrokenReply("a chunk without its CRLF")
        yield data
    trailers = 0
    while reader.line(MAX_HEAD_BYTES, "trailers"):
        trailers += 1
        if trailers > MAX_HEADERS:
            raise BrokenReply(f"more than {MAX_HEADERS} trailers")


def _chunked(reader: _Reader, limit: int, status: int) -> bytes:
    return b"".join(_chunks(reader, limit, status, whole=True))


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


def _left(deadline: float) -> float:
    """Seconds until ``deadline``; :class:`TimeoutError` once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def _send(
    endpoint: Endpoint,
    method: str,
    target: str,
    *,
    headers: Iterable[tuple[str, str]],
    body: bytes | None,
    deadline: float,
) -> tuple[socket.socket, _Reader, int, str, dict[str, str]]:
    """Connect, send the request and read the reply's head (interim replies skipped),
    before ``deadline``: the open socket, its reader, and the status, reason and headers.
    The socket is closed if anything fails."""
    payload = _request_bytes(endpoint, method, target, headers, body)
    sock = _connect(endpoint, deadline)
    try:
        sock.settimeout(_left(deadline))
        sock.sendall(payload)
        reader = _Reader(sock, deadline)
        while True:
            status, reason, reply_headers = _head(reader)
            if not 100 <= status < 200 or status == 101:
                break
    except BaseException:
        sock.close()
        raise
    return sock, reader, status, reason, reply_headers


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
    sock, reader, status, reason, reply_headers = _send(
        endpoint, method, target, headers=headers, body=body, deadline=deadline
    )
    try:
        content = _body(reader, method, status, reply_headers, limit)
    finally:
        sock.close()
    return Response(status=status, reason=reason, headers=reply_headers, body=content)


class Stream:
    """A reply whose body is read as it comes (:func:`open_stream`): ``status``,
    ``reason``, the ``headers`` (as :class:`Response` has them), then :meth:`lines` or
    :meth:`read`. Close it (it is a context manager); closing twice is harmless."""

    def __init__(
        self,
        sock: socket.socket,
        reader: _Reader,
        *,
        method: str,
        status: int,
        reason: str,
        headers: dict[str, str],
    ) -> None:
        self._sock = sock
        self._reader = reader
        self._method = method
        self.status = status
        self.reason = reason
        self.headers = headers

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def read(self, limit: int = MAX_REPLY_BYTES) -> bytes:
        """The rest of the body, whole (an error reply's), as :func:`exchange` reads it."""
        return _body(self._reader, self._method, self.status, self.headers, limit)

    def _pieces(self, limit: int) -> Iterator[bytes]:
        """The body's bytes as they come, until it ends as it is framed."""
        reader, status, headers = self._reader, self.status, self.headers
        if self._method == "HEAD" or status in (204, 304):
            return
        if "chunked" in headers.get("transfer-encoding", "").lower():
            yield from _chunks(reader, limit, status, whole=False)
            return
        length_text = headers.get("content-length")
        if length_text is None:  # until the peer closes
            while data := reader.some(_READ_SIZE):
                yield data
            return
        if not length_text.isdigit():
            raise BrokenReply(f"a malformed Content-Length: {length_text[:20]!r}")
        left = int(length_text)
        while left > 0:
            data = reader.some(min(left, _READ_SIZE))
            if not data:
                raise BrokenReply("the connection closed in the body")
            left -= len(data)
            yield data

    def body(self) -> Iterator[bytes]:
        """The body's bytes as they come (chunks decoded), until it ends: what a proxy
        relays. Raises as :meth:`lines` does."""
        return self._pieces(MAX_REPLY_BYTES)

    def lines(self, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
        """Each line of the body (without its LF or CRLF) as soon as it has come, until
        the body ends. Raises :class:`BrokenReply` when the connection closes before the
        body ends (or a last line without its LF), :class:`ReplyTooLarge` for a line (or
        a chunk) longer than ``limit``, :class:`TimeoutError` when nothing comes for the
        stream's ``idle`` seconds, and what the socket raises."""
        pending = bytearray()
        for piece in self._pieces(limit):
            pending += piece
            start = 0
            while (end := pending.find(b"\n", start)) >= 0:
                yield bytes(pending[start:end]).removesuffix(b"\r")
                start = end + 1
            del pending[:start]
            if len(pending) > limit:
                raise ReplyTooLarge(self.status, limit)
        if pending:
            raise BrokenReply("the body ended in the middle of a line")


def open_stream(
    endpoint: Endpoint,
    method: str,
    target: str,
    *,
    headers: Iterable[tuple[str, str]] = (),
    timeout: float,
    idle: float,
) -> Stream:
    """Send ``method target`` as :func:`exchange` does; the reply once its head is read
    (within ``timeout``), its body left to read as it comes, each read of it within
    ``idle`` seconds. Raises as :func:`exchange` does, before the body."""
    deadline = time.monotonic() + timeout
    sock, reader, status, reason, reply_headers = _send(
        endpoint, method, target, headers=headers, body=None, deadline=deadline
    )
    reader.idle = idle
    return Stream(sock, reader, method=method, status=status, reason=reason, headers=reply_headers)
