"""HTTP/1.1 by hand over a raw socket, for tests of what a server does with a body it
refuses, a client that stalls, or a body it must not hold."""

from __future__ import annotations

import contextlib
import socket
from urllib.parse import urlsplit

import psutil

MIB = 1 << 20

#: Every socket operation of these helpers gives up after this long: generous, so that a
#: loaded machine passes, while a server that never answers or never closes fails.
SOCKET_TIMEOUT = 10.0


def rss_mib(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / MIB


def open_descriptors(pid: int) -> int:
    return int(psutil.Process(pid).num_fds())


def post_head(
    url: str,
    path: str,
    length: int | None,
    token: str | None,
    *,
    method: str = "POST",
    timeout: float = SOCKET_TIMEOUT,
) -> socket.socket:
    """Open a connection and send the head of a request declaring a ``length``-byte body
    (``None``: a chunked one)."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    framing = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
    sock.sendall(
        f"{method} {path} HTTP/1.1\r\nHost: daemon\r\nContent-Type: application/json\r\n"
        f"{auth}{framing}\r\n\r\n".encode()
    )
    return sock


def read_reply(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers (lower-case names) and body of one reply with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a reply: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, _, v in (h.partition(": ") for h in lines[1:])}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed in the middle of the reply"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def closed_by_peer(sock: socket.socket) -> bool:
    """Wait (within the socket's timeout) until the server closes; whether it did (a reset
    counts: the server is gone from the connection either way)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def send_whole_body(
    url: str, path: str, size: int, token: str | None, *, method: str = "POST"
) -> tuple[int, dict[str, str], bytes]:
    """Send a request with a ``size``-byte body, whole, as a plain client does (sendall),
    then read the reply; asserts that the server then closes the connection. A server that
    stops reading makes ``sendall`` time out; one that never closes, the wait for EOF."""
    sock = post_head(url, path, size, token, method=method)
    try:
        chunk = b" " * MIB
        left = size
        while left:
            piece = chunk[: min(left, MIB)]
            sock.sendall(piece)
            left -= len(piece)
        reply = read_reply(sock)
        assert closed_by_peer(sock), "the server kept the connection open after its reply"
        return reply
    finally:
        with contextlib.suppress(OSError):
            sock.close()


def check_stalled_connections_released(
    url: str, pid: int, refusing_path: str, count: int = 300
) -> None:
    """Open ``count`` anonymous connections that declare a body and stall, half of them to
    ``/healthz`` (which takes anonymous callers: the server waits for the body) and half to
    ``refusing_path`` (which refuses them: the server waits for the rest to drop it); assert
    that the server at ``url`` (process ``pid``) closes every one by its read timeout and
    lets their descriptors go."""
    before = open_descriptors(pid)
    socks: list[socket.socket] = []
    try:
        for i in range(count):
            if i % 2:
                sock = post_head(url, "/healthz", 1000, None, method="GET")
            else:
                sock = post_head(url, refusing_path, 1000, None)
            sock.sendall(b"{" + b" " * 9)
            socks.append(sock)
        for sock in socks:
            assert closed_by_peer(sock)
        from tests.harness import wait_for

        wait_for(lambda: open_descriptors(pid) <= before + 5)
    finally:
        for sock in socks:
            sock.close()
