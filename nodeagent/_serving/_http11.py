"""A small HTTP/1.1 server (h11 on trio) for ASGI apps that take many small requests.

The master's TCP listeners take every agent's ad pushes, thousands a second in a large
pool, most of them on a new connection each; per request this costs less than half of
hypercorn's trio worker. Connections are accepted by the server's own loop, up to 64 in a
row without a yield, and a plain TCP connection is closed at once when it ends
(``trio.serve_listeners`` yielded after each accept and closed each connection twice, each
time through a cancelled checkpoint: ≈ 120 µs more a connection); it reads and writes at
once when its socket is ready (:class:`_TcpStream`). One request at a time per connection
(no pipelining), keep-alive with an idle timeout, a read timeout, bounded headers and
bodies, optional TLS (HTTP/1.1 only). The body is read as the app asks for it (so that the
app can refuse a request from its headers before reading any); what the app leaves unread
is read and dropped after its reply, up to :data:`~nodeagent._serving._gate.DISCARD_LIMIT`
bytes, then the connection is closed. Lifespan events are not sent: the apps served here
have none.

Listeners shared with worker processes (:class:`ListenerShare`): the workers accept on the
same TCP sockets and answer the requests they are made for; a connection whose request is
another's they give to this server's relay socket (a Unix socket of the daemon's own, mode
0600), on a connection of that socket that begins with one line, ``NODEAGENT-RELAY <scheme>
<client host> <client port> <server host> <server port>``, then the request as the client
sent it (its head written again from what was parsed). A plain TCP connection is handed
over: its descriptor comes with the line (SCM_RIGHTS), whose last word then says how many
bytes follow it, what the worker read of it; this server serves the connection itself from
then on (its addresses read from its socket), and the worker closes its copy and forgets
it. One over TLS, whose session is the worker's, is relayed: the worker copies its bytes
both ways for the rest of its life. Either is served as a TCP request of that client (the
same checks, no trust of the Unix socket). A connection on the relay socket that begins
with a request line instead (a client given the relay socket for the API's) is answered
421 ``http.wrong_socket``, which says so, and closed. While a worker accepts, the server
itself does not; while none does, it accepts every connection, and one it accepted is
closed after its next reply (``Connection: close``) once a worker accepts, so that the
client's next request, on a new connection, goes to a worker. A worker answers its own
requests on plain TCP without h11 while they are of the one kind it is made for
(:mod:`nodeagent._serving._quick`).
"""

from __future__ import annotations

import array
import contextlib
import email.utils
import errno
import json
import logging
import math
import os
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import h11
import trio
from starlette.types import ASGIApp, Message

from nodeagent import _settings
from nodeagent._serving._gate import DISCARD_LIMIT
from nodeagent._serving._http import error_body
from nodeagent._serving._quick import QuickHub, QuickRoute

__all__ = ["RELAY_PREAMBLE", "HttpServer", "ListenerShare", "serve_http", "serve_unix_http"]

http_log = logging.getLogger("nodeagent.http")


#: An idle keep-alive connection is closed after this long (hypercorn's default).
KEEP_ALIVE_TIMEOUT = 5.0
#: Once a request has begun, each read of it must arrive within this long (by default: the
#: daemons' ``read_timeout`` sets it); a connection that stalls longer is closed.
READ_TIMEOUT = _settings.READ_TIMEOUT
#: Largest request body the server passes on (413 beyond); each endpoint has a lower cap
#: of its own (the gate's, :mod:`nodeagent._serving._gate`).
MAX_BODY = 32 * 1024 * 1024
MAX_HEADERS = 64 * 1024
BACKLOG = 1024
_READ_SIZE = 64 * 1024
#: What accept(2) says when the process or the system is out of descriptors or memory: the
#: listener waits a little and tries again (as ``trio.serve_listeners`` does).
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_ACCEPT_RETRY_S = 0.1
#: The first line of a relayed connection: the scheme, client and server it came with.
RELAY_PREAMBLE = b"NODEAGENT-RELAY"
_PREAMBLE_MAX = 512
#: Connections accepted in a row before the listener lets the other tasks run.
_ACCEPT_BATCH = 64
#: Reads and writes of a plain TCP connection done at once in a row (:class:`_TcpStream`)
#: before one goes through trio and lets the other tasks run.
_DIRECT_RUN = 8


def _ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The TLS settings hypercorn uses, offering HTTP/1.1 only."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.set_ciphers("ECDHE+AESGCM")
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    context.set_alpn_protocols(["http/1.1"])
    context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    return context


def _listening_socket(bind: str) -> socket.socket:
    """A bound, listening TCP socket for ``host:port`` (IPv6 hosts in brackets)."""
    host, _, port = bind.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


def _unix_socket(path: Path, mode: int) -> socket.socket:
    """A listening Unix socket at ``path`` (a stale one replaced) with ``mode``, given
    before it listens: no one connects before."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, mode)
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


class ListenerShare:
    """The TCP listeners of a server, shared with worker processes that accept on them too.

    :func:`serve_http` fills in ``sockets`` and ``tls``, and listens at ``relay`` for the
    connections the workers relay (module docstring). A worker process counts as taking
    connections inside :meth:`taking`; the server accepts only while none does, and closes
    a connection it accepted after its next reply once one does.
    """

    def __init__(self, relay: Path) -> None:
        self.relay = relay
        self.sockets: list[socket.socket] = []
        self.tls: tuple[Path, Path] | None = None
        self._takers = 0
        self._idle = trio.Event()
        self._idle.set()

    @property
    def takers(self) -> int:
        """The worker processes taking connections now."""
        return self._takers

    @contextlib.contextmanager
    def taking(self) -> Iterator[None]:
        """A worker takes connections for the duration."""
        self._takers += 1
        if self._takers == 1:
            self._idle = trio.Event()
        try:
            yield
        finally:
            self._takers -= 1
            if not self._takers:
                self._idle.set()

    async def none_taking(self) -> None:
        """Return once no worker takes connections."""
        await self._idle.wait()


#: A TCP peer's or listener's host and port.
Address = tuple[str, int]


def _shown(address: Address | None) -> str:
    """``host:port``, or ``the Unix socket`` for a connection without an address."""
    return "the Unix socket" if address is None else f"{address[0]}:{address[1]}"


def _url(scheme: str, sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return (
        f"{scheme}://[{host}]:{port}"
        if sock.family == socket.AF_INET6
        else f"{scheme}://{host}:{port}"
    )


async def serve_http(
    nursery: trio.Nursery,
    app: ASGIApp,
    binds: list[str],
    *,
    tls: tuple[Path, Path] | None = None,
    max_body: int = MAX_BODY,
    read_timeout: float = READ_TIMEOUT,
    share: ListenerShare | None = None,
) -> list[str]:
    """Start serving ``app`` on the TCP ``binds`` in ``nursery``; returns the bound URLs.

    ``tls`` is (certificate, key); a larger body than ``max_body`` bytes is refused (413);
    a request that stalls ``read_timeout`` seconds closes its connection. ``share``: the
    listeners are shared with worker processes (:class:`ListenerShare`), and the
    connections they relay are served from its relay socket. Serving ends when ``nursery``
    is cancelled.
    """
    context = None if tls is None else _ssl_context(*tls)
    scheme = "http" if context is None else "https"
    sockets: list[socket.socket] = []
    try:
        for bind in binds:
            sockets.append(_listening_socket(bind))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    urls = [_url(scheme, sock) for sock in sockets]
    server = HttpServer(app, context=context, max_body=max_body, read_timeout=read_timeout)
    if share is not None:
        try:
            relay = _unix_socket(share.relay, 0o600)
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        share.sockets, share.tls = sockets, tls
        relay.setblocking(False)
        nursery.start_soon(server.accept_relayed, relay)
    for sock in sockets:
        sock.setblocking(False)
        nursery.start_soon(server.accept, sock, share)
    return urls


async def serve_unix_http(
    nursery: trio.Nursery,
    app: ASGIApp,
    path: Path,
    *,
    max_body: int = MAX_BODY,
    read_timeout: float = READ_TIMEOUT,
) -> list[str]:
    """Start serving ``app`` on a Unix socket at ``path`` (mode 0660: whoever may open it
    is the app's to say; a stale file replaced) in ``nursery``; returns its URL
    (``http://unix:<path>``). Its requests have no client nor server address in their
    scope, as hypercorn gives a Unix socket's. Serving ends when ``nursery`` is cancelled."""
    sock = _unix_socket(path, 0o660)
    sock.setblocking(False)
    server = HttpServer(app, max_body=max_body, read_timeout=read_timeout)
    nursery.start_soon(server.accept, sock)
    return [f"http://unix:{path}"]


#: The most a worker may send with a connection it hands over: its first line, the
#: request's head and what it read after it.
_HANDED_MAX = _PREAMBLE_MAX + MAX_HEADERS + 2 * _READ_SIZE
#: A request line: what a client that took the relay socket for the API's sends first.
_REQUEST_LINE = re.compile(rb"[A-Z]+ \S+ HTTP/1\.[01]")
_MISDIRECTED_BODY = json.dumps(
    error_body(
        "http.wrong_socket",
        "this is the socket the master's ingest workers relay connections on, not its API: "
        "use the master's socket (master.sock beside it) or its listeners",
    )
).encode()
#: The answer to such a request: the client's own HTTP, so that it says why.
_MISDIRECTED = (
    b"HTTP/1.1 421 Misdirected Request\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s"
    % (len(_MISDIRECTED_BODY), _MISDIRECTED_BODY)
)
#: Room for the descriptors of one message on the relay socket (one is sent; any more
#: are closed).
_DESCRIPTORS_ROOM = socket.CMSG_SPACE(8 * array.array("i").itemsize)


def _rights(fd: int) -> list[tuple[int, int, bytes]]:
    """The ancillary data that sends the descriptor ``fd`` (SCM_RIGHTS)."""
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes())]


async def _send_rest(sock: trio.socket.SocketType, data: bytes, sent: int) -> None:
    """Send what follows the first ``sent`` bytes of ``data``."""
    view = memoryview(data)
    while sent < len(data):
        sent += await sock.send(view[sent:])


async def _hand_over(path: Path, data: bytes, fd: int) -> None:
    """Send ``data`` with the descriptor ``fd`` attached to its first bytes on a new
    connection to the Unix socket at ``path``: at once when its backlog and the
    connection's buffer have room (the usual case: no turn of the event loop, and a busy
    worker's turns are long), else through trio's socket, waiting. Raises
    :class:`OSError` when nothing listens there."""
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with trio.socket.from_stdlib_socket(raw) as sock:  # non-blocking from here
        try:
            raw.connect(str(path))  # a Unix socket connects at once, or its backlog is full
            sent: int | None = raw.sendmsg([data], _rights(fd))
        except BlockingIOError:
            sent = None
        if sent is not None:
            await _send_rest(sock, data, sent)
            return
    async with await trio.open_unix_socket(str(path)) as peer:  # the backlog was full
        await _send_rest(peer.socket, data, await peer.socket.sendmsg([data], _rights(fd)))


async def _receive_with_descriptor(
    sock: trio.socket.SocketType,
) -> tuple[bytes, socket.socket | None]:
    """The next bytes of the Unix ``sock``, and the first descriptor that came with them
    as a socket (any other is closed)."""
    data, ancillary, _flags, _address = await sock.recvmsg(_READ_SIZE, _DESCRIPTORS_ROOM)
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    for extra in fds[1:]:
        os.close(extra)
    return data, (socket.socket(fileno=fds[0]) if fds else None)


class _TcpStream(trio.abc.Stream):
    """A plain TCP connection (``stream``, over the non-blocking socket ``sock``) that
    reads and writes at once when the socket is ready.

    trio's :class:`trio.SocketStream` yields to the scheduler after each read or write that
    did not have to wait (a checkpoint), a round of the event loop for every request and
    reply. Here a read or a write that can be done at once is done at once, up to
    :data:`_DIRECT_RUN` in a row; then, or when the socket is not ready, the call goes
    through ``stream`` (waiting, and a checkpoint), so a long body still lets the other
    connections run (and :meth:`HttpServer._serve` lets them run before each next request of
    a kept-alive connection). Errors are ``stream``'s: :class:`trio.BrokenResourceError`.
    """

    def __init__(self, stream: trio.SocketStream, sock: socket.socket) -> None:
        self._stream = stream
        self._sock = sock
        self._direct = 0

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._direct < _DIRECT_RUN:
            self._direct += 1
            try:
                return self._sock.recv(_READ_SIZE if max_bytes is None else max_bytes)
            except BlockingIOError:
                pass
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
        self._direct = 0
        return bytes(await self._stream.receive_some(max_bytes))

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._direct < _DIRECT_RUN:
            self._direct += 1
            try:
                sent = self._sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
            if sent == len(data):
                return
            data = memoryview(data)[sent:]
        self._direct = 0
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._stream.aclose()

    def fileno(self) -> int:
        """The connection's descriptor."""
        return self._sock.fileno()


class _BadRequest(Exception):
    """The request cannot be served: answer ``status`` and close the connection."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Date:
    """The ``Date`` header value, formatted once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def __call__(self) -> bytes:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._value = email.utils.formatdate(second, usegmt=True).encode("ascii")
        return self._value


class HttpServer:
    """HTTP/1.1 with keep-alive for an ASGI app (``http`` scope only, no lifespan).

    ``relay_to``, in a worker process of a :class:`ListenerShare`: a connection whose
    request ``relayed`` says is not this app's is relayed there for the rest of its life.
    ``quick``: a plain TCP connection's requests are served by that route without h11,
    and without a task of their own, while it takes them (a
    :class:`~nodeagent._serving._quick.QuickHub` for each listener), by h11 and the app
    from the first it does not take on. One request at a time per connection. The
    app reads the request body through ``receive`` as it goes (each read within
    ``read_timeout``; a stalled or vanished client, or a body past ``max_body``, is
    ``http.disconnect`` and closes the connection); then ``http.disconnect`` once the
    response is complete. What the app left unread is dropped after its reply, up to
    :data:`~nodeagent._serving._gate.DISCARD_LIMIT` bytes (the connection is kept if the
    body ends by then, else closed). A response without
    ``content-length`` is sent chunked. An exception in the app is logged and answered 500
    if no response had begun.

    ``accept_every``: the least time between two wakes of a listener. Under a steady
    stream of connections (an ingest worker's pushes) a wake then accepts every connection
    that came since the last, and their reads, pushes and replies run in the same turns of
    the loop: a wake of the process costs as much as serving a connection or more, on a
    virtual machine most of all. A connection after a quiet spell longer than that is
    accepted at once; one in a stream waits ``accept_every`` at most. 0: every connection
    as soon as it comes.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        context: ssl.SSLContext | None = None,
        max_body: int = MAX_BODY,
        read_timeout: float = READ_TIMEOUT,
        relay_to: Path | None = None,
        relayed: Callable[[h11.Request], bool] | None = None,
        quick: QuickRoute | None = None,
        accept_every: float = 0.0,
    ) -> None:
        self.relay_to = relay_to
        self.accept_every = accept_every
        self.relayed = relayed
        self.quick = quick
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.app = app
        self.context = context
        self.scheme = "http" if context is None else "https"
        self._date = _Date()

    async def accept(self, listening: socket.socket, share: ListenerShare | None = None) -> None:
        """Accept connections on the non-blocking ``listening`` socket, each served by
        :meth:`handle` in a task of its own (with a ``quick`` route and no TLS, by a
        :class:`~nodeagent._serving._quick.QuickHub` of the listener's while the route
        takes its requests, then by :meth:`handle`), until cancelled (the socket is then
        closed); while a worker of ``share`` takes them, it waits.

        Out of descriptors or memory (EMFILE, ENFILE, ENOMEM, ENOBUFS), it logs the error
        and tries again after 0.1 s; any other error of accept(2) ends it (raised).
        """
        handed_over = None if share is None else (lambda: share.takers > 0)

        async def handle(sock: socket.socket, peer: Any, read: bytes = b"") -> None:
            await self.handle(sock, peer, handed_over=handed_over, initial=read)

        await self._accept(listening, share, handle, quick=self.context is None)

    async def accept_relayed(self, listening: socket.socket) -> None:
        """:meth:`accept` for the relay socket: each connection served by
        :meth:`handle_relayed`."""
        await self._accept(listening, None, self.handle_relayed)

    async def _accept(
        self,
        listening: socket.socket,
        share: ListenerShare | None,
        handle: Callable[..., Awaitable[None]],
        *,
        quick: bool = False,
    ) -> None:
        with listening:
            async with trio.open_nursery() as connections:
                take: Callable[[socket.socket, Any], None]
                if quick and self.quick is not None:
                    hub = QuickHub(
                        self.quick,
                        hand_over=lambda sock, peer, read: connections.start_soon(
                            handle, sock, peer, read
                        ),
                        date=self._date,
                        idle_timeout=KEEP_ALIVE_TIMEOUT,
                        read_timeout=self.read_timeout,
                        max_head=MAX_HEADERS,
                    )
                    connections.start_soon(hub.run)
                    take = hub.adopt
                else:

                    def take(sock: socket.socket, peer: Any) -> None:
                        connections.start_soon(handle, sock, peer)

                accepted = 0
                woke = -math.inf
                while True:
                    if share is not None and share.takers:
                        accepted = 0
                        await share.none_taking()
                        continue
                    try:
                        sock, peer = listening.accept()
                    except BlockingIOError:
                        accepted = 0
                        await trio.lowlevel.wait_readable(listening)
                        if self.accept_every:
                            await trio.sleep_until(woke + self.accept_every)
                            woke = trio.current_time()
                        continue
                    except OSError as exc:
                        if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                            raise
                        http_log.error(
                            "accept returned %s (%s); retrying in %s seconds",
                            errno.errorcode[exc.errno],
                            os.strerror(exc.errno),
                            _ACCEPT_RETRY_S,
                        )
                        await trio.sleep(_ACCEPT_RETRY_S)
                        continue
                    take(sock, peer)
                    accepted += 1
                    if accepted >= _ACCEPT_BATCH:
                        accepted = 0
                        await trio.lowlevel.checkpoint()

    async def handle(
        self,
        sock: socket.socket,
        peer: Any,
        *,
        handed_over: Callable[[], bool] | None = None,
        initial: bytes = b"",
    ) -> None:
        """Serve one accepted connection (``sock``, from ``peer``) with h11 until it
        closes, then close it; never raises. Once ``handed_over()`` is true, the next reply
        closes the connection (``Connection: close``). ``initial``: the bytes already read
        of it (by a worker that handed it over, or by a quick route that did not take its
        request), served first."""
        try:
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
            local = sock.getsockname()
        except OSError:
            sock.close()
            return
        client: Address | None = None
        server: Address | None = None
        if sock.family != socket.AF_UNIX:
            client, server = (peer[0], peer[1]), (local[0], local[1])
        transport: trio.abc.Stream
        if self.context is None:
            transport = _TcpStream(stream, sock)
        else:
            transport = trio.SSLStream(
                stream, self.context, server_side=True, https_compatible=True
            )
        try:
            await self._serve(
                transport, client, server, self.scheme, initial=initial, closing=handed_over
            )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the peer went away (or failed the TLS handshake)
        except Exception:
            http_log.exception("connection from %s failed", _shown(client))
        finally:
            if self.context is None:  # plain TCP: nothing left to say, close at once
                stream.socket.close()
            else:
                await trio.aclose_forcefully(transport)

    async def handle_relayed(self, sock: socket.socket, _peer: Any) -> None:
        """Serve one connection a worker relayed or handed over (``sock``, on the relay
        socket): its first line says whose it is; with a descriptor, the worker handed
        over the client's connection itself, and the bytes the line's last word counts
        after it are what it read of it (module docstring); never raises."""
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        handed: socket.socket | None = None
        try:
            head = b""
            with trio.move_on_after(self.read_timeout) as waited:
                while b"\r\n" not in head and len(head) <= _PREAMBLE_MAX:
                    data, descriptor = await _receive_with_descriptor(stream.socket)
                    if descriptor is not None:
                        if handed is not None:  # one connection a line
                            descriptor.close()
                        else:
                            handed = descriptor
                    if not data:
                        return
                    head += data
                line, ended, rest = head.partition(b"\r\n")
                words = line.decode("ascii", "replace").split(" ")
                if not ended or len(words) != 6 + (handed is not None):
                    words = []
                elif handed is not None:  # the bytes read of it, as many as the line says
                    if not 0 <= (size := int(words.pop())) <= _HANDED_MAX:
                        http_log.warning("a connection handed over with too much read: closed")
                        return
                    while len(rest) < size:
                        if not (data := await stream.receive_some(size - len(rest))):
                            break
                        rest += data
            if waited.cancelled_caught or (handed is not None and words and len(rest) != size):
                http_log.warning("a connection handed over or relayed cut short: closed")
                return
            if not words or words[0] != RELAY_PREAMBLE.decode("ascii"):
                if handed is None and _REQUEST_LINE.fullmatch(line):  # the wrong socket
                    http_log.info("a request on the relay socket: answered 421, closed")
                    await stream.send_all(_MISDIRECTED)
                    return
                http_log.warning("a relayed connection without its first line: closed")
                return
            scheme, client_host, client_port, server_host, server_port = words[1:]
            client, server = (client_host, int(client_port)), (server_host, int(server_port))
            if handed is None:
                await self._serve(_TcpStream(stream, sock), client, server, scheme, initial=rest)
                return
            if self.context is not None:  # a worker hands over plain TCP connections only
                http_log.warning("a plain connection handed over to a TLS server: closed")
                return
            stream.socket.close()  # the worker's part is done
            try:
                peer = handed.getpeername()
            except OSError:  # the client went away meanwhile
                return
            connection, handed = handed, None
            await self.handle(connection, peer, initial=rest)  # which closes it
        except ValueError:
            http_log.warning("a relayed connection with a bad first line: closed")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:
            http_log.exception("a relayed connection failed")
        finally:
            stream.socket.close()
            if handed is not None:
                handed.close()

    async def _serve(
        self,
        stream: trio.abc.Stream,
        client: Address | None,
        server: Address | None,
        scheme: str,
        *,
        initial: bytes = b"",
        closing: Callable[[], bool] | None = None,
    ) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADERS)
        if initial:
            conn.receive_data(initial)
        while True:
            try:
                request = await self._head(conn, stream)
            except _BadRequest as exc:
                await self._refuse(conn, stream, exc.status)
                await self._drop(conn, stream)
                return
            except h11.RemoteProtocolError as exc:
                await self._refuse(conn, stream, exc.error_status_hint)
                return
            if request is None:
                return
            if (
                self.relay_to is not None
                and self.relayed is not None
                and client is not None
                and server is not None
                and self.relayed(request)
            ):
                await self._relay(conn, stream, request, client, server)
                return
            if not await self._respond(
                conn, stream, request, client=client, server=server, scheme=scheme, closing=closing
            ):
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return
            # The other connections' turn before this one's next request (its read may be
            # done at once: a client quick to send again would be served over and over).
            await trio.lowlevel.checkpoint()

    async def _relay(
        self,
        conn: h11.Connection,
        stream: trio.abc.Stream,
        request: h11.Request,
        client: Address,
        server: Address,
    ) -> None:
        """Give the connection, from ``request`` on, to ``relay_to`` (503 when nothing
        listens there): a plain TCP connection is handed over (its descriptor sent with the
        bytes read of it, then closed here: the master serves it from then on); one over
        TLS, whose state is this process's, is relayed until either side ends it."""
        relay_to = self.relay_to
        assert relay_to is not None
        version = request.http_version
        read = b"".join(
            [
                b"%s %s HTTP/%s\r\n" % (request.method, request.target, version),
                *(b"%s: %s\r\n" % item for item in request.headers.raw_items()),
                b"\r\n",
                conn.trailing_data[0],
            ]
        )
        line = b"%s %s %s %d %s %d" % (
            RELAY_PREAMBLE,
            self.scheme.encode("ascii"),
            client[0].encode("ascii"),
            client[1],
            server[0].encode("ascii"),
            server[1],
        )
        if isinstance(stream, _TcpStream):  # handed over: the master serves it itself
            try:
                await _hand_over(relay_to, line + b" %d\r\n" % len(read) + read, stream.fileno())
            except OSError as exc:
                http_log.warning("cannot relay a request to %s: %s", relay_to, exc)
                await self._refuse(conn, stream, 503)
            return
        try:
            peer = await trio.open_unix_socket(str(relay_to))
        except OSError as exc:
            http_log.warning("cannot relay a request to %s: %s", relay_to, exc)
            await self._refuse(conn, stream, 503)
            return
        async with peer:
            try:
                await peer.send_all(line + b"\r\n" + read)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            async with trio.open_nursery() as nursery:

                async def up() -> None:
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        while data := await stream.receive_some(_READ_SIZE):
                            await peer.send_all(data)
                        await peer.send_eof()
                        return
                    nursery.cancel_scope.cancel()

                nursery.start_soon(up)
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    while data := await peer.receive_some(_READ_SIZE):
                        await stream.send_all(data)
                nursery.cancel_scope.cancel()

    async def _event(self, conn: h11.Connection, stream: trio.abc.Stream, wait: float) -> Any:
        """The next h11 event; ``None`` when no data came within ``wait`` seconds."""
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            if conn.they_are_waiting_for_100_continue:
                await stream.send_all(
                    conn.send(h11.InformationalResponse(status_code=100, headers=[]))
                )
            with trio.move_on_after(wait) as waited:
                conn.receive_data(bytes(await stream.receive_some(_READ_SIZE)))
            if waited.cancelled_caught:
                return None

    async def _head(self, conn: h11.Connection, stream: trio.abc.Stream) -> h11.Request | None:
        """The next request's head; None when the connection ends or idles out."""
        event = await self._event(conn, stream, KEEP_ALIVE_TIMEOUT)
        if not isinstance(event, h11.Request):
            return None  # idle, ConnectionClosed, or PAUSED after a protocol switch
        for name, value in event.headers:
            if name == b"content-length" and int(value) > self.max_body:
                raise _BadRequest(413)
        return event

    async def _drop(self, conn: h11.Connection, stream: trio.abc.Stream) -> bool:
        """Read and drop the rest of the request body, up to ``DISCARD_LIMIT`` bytes;
        whether it ended by then (the connection may be used again)."""
        dropped = 0
        while dropped <= DISCARD_LIMIT and conn.their_state is h11.SEND_BODY:
            event = await self._event(conn, stream, self.read_timeout)
            if isinstance(event, h11.Data):
                dropped += len(event.data)
            elif not isinstance(event, h11.EndOfMessage):
                return False
        return conn.their_state is h11.DONE

    async def _refuse(self, conn: h11.Connection, stream: trio.abc.Stream, status: int) -> None:
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        headers = [
            (b"content-length", b"0"),
            (b"connection", b"close"),
            (b"date", self._date()),
        ]
        with contextlib.suppress(h11.LocalProtocolError):
            data = conn.send(h11.Response(status_code=status, headers=headers))
            data += conn.send(h11.EndOfMessage())
            await stream.send_all(data)

    async def _respond(
        self,
        conn: h11.Connection,
        stream: trio.abc.Stream,
        request: h11.Request,
        *,
        client: Address | None,
        server: Address | None,
        scheme: str,
        closing: Callable[[], bool] | None = None,
    ) -> bool:
        """Run the app for one request; returns whether the connection may be reused (its
        reply says ``Connection: close`` when ``closing()`` is true as it begins)."""
        raw_path, _, query = request.target.partition(b"?")
        try:
            path = unquote(raw_path.decode("ascii"))
        except UnicodeDecodeError:
            await self._refuse(conn, stream, 400)
            return False
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.http_version.decode("ascii"),
            "method": request.method.decode("ascii"),
            "scheme": scheme,
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": list(request.headers),
            "client": client,
            "server": server,
            "extensions": {},
        }
        head = request.method == b"HEAD"
        started = finished = ended = lost = False
        size = 0
        done = trio.Event()

        async def receive() -> Message:
            """The body's next bytes as they come (what has arrived, at least one byte)."""
            nonlocal ended, lost, size
            if ended:
                await done.wait()
                return {"type": "http.disconnect"}
            chunks: list[bytes] = []
            while True:
                event = conn.next_event() if chunks else None
                if event is None or event is h11.NEED_DATA:
                    if chunks:
                        return {"type": "http.request", "body": b"".join(chunks), "more_body": True}
                    event = await self._event(conn, stream, self.read_timeout)
                if isinstance(event, h11.Data):
                    size += len(event.data)
                    if size > self.max_body:
                        ended = lost = True
                        return {"type": "http.disconnect"}
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    ended = True
                    return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                else:  # stalled past the read timeout, or the client went away
                    ended = lost = True
                    return {"type": "http.disconnect"}

        status = 500
        headers: list[tuple[bytes, bytes]] = []

        async def send(message: Message) -> None:
            nonlocal started, finished, status, headers
            if message["type"] == "http.response.start":
                if started:
                    raise RuntimeError("the response has already started")
                started = True
                status = int(message["status"])
                headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", ())]
                if (
                    closing is not None
                    and closing()
                    and not any(k.lower() == b"connection" for k, _ in headers)
                ):
                    headers.append((b"connection", b"close"))
                return
            if message["type"] != "http.response.body":
                raise RuntimeError(f"unexpected ASGI message {message['type']!r}")
            if not started or finished:
                raise RuntimeError("a response body outside a response")
            # Pieces, not one concatenation: a plan's body is tens of MB, copied for nothing.
            pieces: list[bytes] = []
            if conn.our_state is h11.SEND_RESPONSE:
                if not any(k.lower() == b"date" for k, _ in headers):
                    headers.append((b"date", self._date()))
                pieces.append(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
            chunk = message.get("body", b"")
            if chunk and not head:
                pieces.extend(conn.send_with_data_passthrough(h11.Data(data=chunk)) or ())
            if not message.get("more_body", False):
                finished = True
                pieces.append(conn.send(h11.EndOfMessage()) or b"")
            if sum(map(len, pieces)) <= _READ_SIZE:
                if any(pieces):
                    await stream.send_all(b"".join(pieces))
                return
            for piece in pieces:
                if piece:
                    await stream.send_all(piece)

        try:
            await self.app(scope, receive, send)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise
        except Exception:
            http_log.exception("%s %s failed", scope["method"], path)
        finally:
            done.set()
        if finished:
            return not lost and (ended or await self._drop(conn, stream))
        if lost:  # the client stalled or went away: nobody to answer
            return False
        if conn.our_state is h11.SEND_RESPONSE:
            text = b"Internal Server Error"
            data = conn.send(
                h11.Response(
                    status_code=500,
                    headers=[
                        (b"content-length", str(len(text)).encode("ascii")),
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"connection", b"close"),
                        (b"date", self._date()),
                    ],
                )
            )
            data += conn.send(h11.Data(data=text)) + conn.send(h11.EndOfMessage())
            await stream.send_all(data)
            if not (ended or lost):
                await self._drop(conn, stream)
        return False
