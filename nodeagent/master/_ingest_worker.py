"""An ingest worker process: takes the ad pushes that reach it on the master's TCP listeners.

``python -m nodeagent.master._ingest_worker``, started by
:class:`~nodeagent.master._ingest_workers.IngestWorkers` with the master's TCP listening
sockets, one end of a socket pair to the master (the link), and its settings as one JSON
line on stdin (:class:`WorkerSettings`). It accepts connections on the listeners with the
master's HTTP server (:mod:`nodeagent._serving._http11`), as the master does while no
worker runs:

* a ``POST /v1/ads`` is checked from its head (the DAEMON token, verified with the pool
  key against this host's clock; 401/403/413 answered here; on plain TCP, a push that
  passes is read and answered without h11 and without a task of its own: :class:`_PushRoute`
  on a :class:`~nodeagent._serving._quick.QuickHub`), its body read and made ready for the
  store (:func:`~nodeagent.master._ingest.prepare_push`), and sent to the master on the link
  with the token's subject and node (the master takes the worker's word: it holds the pool
  key), which stores the ad and answers; the worker writes the answer when it comes;
* any other request is given to the master on its relay socket, which serves it as it
  serves its own TCP connections: on plain TCP the connection itself is handed over (its
  descriptor sent, the worker's copy closed), over TLS the rest of it is relayed.

It keeps nothing of the master's state; of its own, the digests of the slot ads it found
sound (:class:`~nodeagent.master._adstore.CheckedStatics`: a node's next ad, the same
claims moved on in time, has its moving values checked alone) and the tokens it verified,
which its collector does not walk again once they have lasted (:func:`run`). It runs at
the niceness its settings add to the master's (``ingest_worker_nice``): on a host whose
cores are all busy the master's loop goes first, the workers' parse after. It writes
``READY`` on the link once it accepts and ``ALIVE`` every second while its loop runs; it
exits at the end of stdin (the master's stop or death) or of the link. SIGINT is ignored
(a terminal's ^C is for the master, which ends its workers).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import h11
import trio
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as ASGIScope

from nodeagent._auth import AuthError
from nodeagent._serving._http11 import HttpServer, _ssl_context
from nodeagent._serving._quick import QuickAnswer, QuickReplyTo
from nodeagent.master._ad_pushes import (
    AD_BODY_LIMIT,
    Principals,
    TakenPush,
    is_push,
    pusher,
    send_reply,
    take_push,
)
from nodeagent.master._adstore import CheckedStatics, MovedOnAd, NodeAd
from nodeagent.master._collector import SurvivorFreezer
from nodeagent.master._ingest import (
    ALIVE,
    READY,
    AdReply,
    Refused,
    decode_answer,
    encode_push,
    encode_refusal,
    prepare_push,
    split_frames,
)

__all__ = ["WorkerSettings", "main", "run", "serve"]

log = logging.getLogger("nodeagent.master.ingest")

#: Seconds between two ``ALIVE`` frames.
ALIVE_EVERY = 1.0
#: The least seconds between two wakes of a listener (``HttpServer``'s ``accept_every``):
#: under a pool's steady pushes a wake takes the connections of 10 ms at once, and a push
#: costs the worker a fifth to a third less of a core than with a wake for each (20 ms
#: saves no more, and a request relayed to the master may wait that long).
ACCEPT_EVERY = 0.01
_READ_SIZE = 1 << 18


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    """What a worker is started with: the listening sockets' and the link's descriptors,
    the master's relay socket, the pool key (hex; ``None``: no token is accepted), the TLS
    certificate and key, the read timeout, and the niceness it adds to the master's."""

    listeners: tuple[int, ...]
    link: int
    relay: str
    key: str | None
    tls: tuple[str, str] | None
    read_timeout: float
    nice: int = 0

    def line(self) -> bytes:
        """The settings as the JSON line the master writes."""
        fields = {
            "listeners": list(self.listeners),
            "link": self.link,
            "relay": self.relay,
            "key": self.key,
            "tls": None if self.tls is None else list(self.tls),
            "read_timeout": self.read_timeout,
            "nice": self.nice,
        }
        return json.dumps(fields).encode("utf-8") + b"\n"

    @classmethod
    def of_line(cls, line: bytes) -> WorkerSettings:
        fields = json.loads(line)
        tls = fields["tls"]
        return cls(
            listeners=tuple(int(fd) for fd in fields["listeners"]),
            link=int(fields["link"]),
            relay=str(fields["relay"]),
            key=fields["key"],
            tls=None if tls is None else (str(tls[0]), str(tls[1])),
            read_timeout=float(fields["read_timeout"]),
            nice=int(fields["nice"]),
        )


class _Link:
    """The worker's end of the link: pushes made ready here (with ``checked``), frames
    written in order by one task, answers handed to the pushes waiting for them."""

    def __init__(self, stream: trio.SocketStream, checked: CheckedStatics) -> None:
        self._stream = stream
        self._checked = checked
        self._out = bytearray()
        self._ready_to_write = trio.Event()
        self._waiting: dict[int, Callable[[AdReply | None], None]] = {}
        self._number = 0
        self.lost = False

    def tell(self, frame: bytes) -> None:
        """Write ``frame`` (in order, soon)."""
        self._out += frame
        self._ready_to_write.set()

    def push_soon(
        self, taken: TakenPush, started: float, answered: Callable[[AdReply | None], None]
    ) -> None:
        """Send a push received at ``started`` (made ready here, else its body for the
        master to make ready); ``answered`` is given the master's answer when it comes, or
        ``None`` when none will (the link closed, or the master failed on it)."""
        if self.lost:
            answered(None)
            return
        prepared = _prepared(self._checked, taken)
        seconds = time.perf_counter() - started
        self._number = number = self._number % 0xFFFFFFFF + 1
        self._waiting[number] = answered
        self.tell(
            encode_push(
                number,
                seconds,
                taken.who.subject,
                taken.who.node,
                prepared=prepared,
                body=taken.body,
            )
        )

    async def push(self, taken: TakenPush, started: float) -> AdReply:
        """The master's answer to a push (:meth:`push_soon`), waited for."""
        done = trio.Event()
        answer: list[AdReply | None] = []

        def answered(reply: AdReply | None) -> None:
            answer.append(reply)
            done.set()

        self.push_soon(taken, started, answered)
        await done.wait()
        if answer[0] is None:
            raise trio.ClosedResourceError("no answer from the master: the connection is closed")
        return answer[0]

    async def write(self) -> None:
        """Write what :meth:`tell` was given, until the link breaks."""
        while True:
            await self._ready_to_write.wait()
            self._ready_to_write = trio.Event()
            data, self._out = bytes(self._out), bytearray()
            await self._stream.send_all(data)

    async def read(self) -> None:
        """Hand the master's answers to their pushes until the link ends."""
        buffer = bytearray()
        try:
            while data := await self._stream.receive_some(_READ_SIZE):
                buffer += data
                for frame in split_frames(buffer):
                    number, reply = decode_answer(frame)
                    answered = self._waiting.pop(number, None)
                    if answered is not None:  # status 0: the master failed on it
                        answered(reply if reply.status else None)
        finally:
            self.lost = True
            waiting, self._waiting = self._waiting, {}
            for answered in waiting.values():
                answered(None)

    async def beat(self) -> None:
        while True:
            self.tell(ALIVE)
            await trio.sleep(ALIVE_EVERY)


def _prepared(checked: CheckedStatics, taken: TakenPush) -> NodeAd | MovedOnAd | Refused | None:
    """``taken`` made ready for the master here (``None``: the master makes it itself)."""
    try:
        made = prepare_push(taken.body, taken.who.node, deflated=False, checked=checked)
    except Exception:  # the master makes it itself, and says what it makes of it
        log.exception("an ad push could not be prepared here")
        return None
    return made if isinstance(made, NodeAd | MovedOnAd | Refused) else None


def _ad_app(principals: Principals, link: _Link) -> ASGIApp:
    """The ASGI app for the requests a worker answers itself: ``POST /v1/ads`` that
    :class:`_PushRoute` left to h11 (over TLS, or refused from the head)."""

    async def app(scope: ASGIScope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        taken = await take_push(scope, receive, send, principals)
        if taken is None:  # the client went away
            return
        if not isinstance(taken, TakenPush):
            link.tell(encode_refusal(taken, time.perf_counter() - started))
            return
        await send_reply(send, await link.push(taken, started))

    return app


class _PushRoute:
    """``POST /v1/ads`` on plain TCP without h11
    (:class:`~nodeagent._serving._quick.QuickRoute`): a push whose token holds DAEMON and
    whose body is within :data:`~nodeagent.master._ad_pushes.AD_BODY_LIMIT`. Any other
    request, a refusal included, is left to h11 and :func:`_ad_app` (or the relay)."""

    def __init__(self, principals: Principals, link: _Link) -> None:
        self._principals = principals
        self._link = link

    def take(
        self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], length: int
    ) -> QuickAnswer | None:
        if not is_push(method, target) or length > AD_BODY_LIMIT:
            return None
        try:
            authorization, who = pusher(headers, self._principals, unix=False)
        except AuthError:
            return None
        started = time.perf_counter()

        def answer(body: bytes, reply: QuickReplyTo) -> None:
            def answered(got: AdReply | None) -> None:
                reply(None if got is None else (got.status, got.headers(), got.body))

            self._link.push_soon(TakenPush(authorization, who, body), started, answered)

        return answer


def _relayed(request: h11.Request) -> bool:
    """Whether a request is the master's to answer (all but an ad push)."""
    return not is_push(request.method, request.target)


async def _until_end(fd: int) -> None:
    """Return at the end of ``fd`` (stdin: the master stopped or died)."""
    stream = trio.lowlevel.FdStream(os.dup(fd))
    async with stream:
        while await stream.receive_some(4096):
            pass


async def serve(settings: WorkerSettings) -> None:
    """Take the pushes of ``settings``' listeners until stdin or the link ends."""
    link_socket = socket.socket(fileno=settings.link)
    link = _Link(trio.SocketStream(trio.socket.from_stdlib_socket(link_socket)), CheckedStatics())
    principals = Principals(
        time.time, None if settings.key is None else bytes.fromhex(settings.key)
    )
    context = (
        None if settings.tls is None else _ssl_context(Path(settings.tls[0]), Path(settings.tls[1]))
    )
    server = HttpServer(
        _ad_app(principals, link),
        context=context,
        read_timeout=settings.read_timeout,
        relay_to=Path(settings.relay),
        relayed=_relayed,
        quick=_PushRoute(principals, link),
        accept_every=ACCEPT_EVERY,
    )
    async with trio.open_nursery() as nursery:

        async def ending(part: Callable[[], Awaitable[None]]) -> None:
            """Run ``part``; its end (the link's or stdin's) ends the worker."""
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await part()
            nursery.cancel_scope.cancel()

        for fd in settings.listeners:
            listening = socket.socket(fileno=fd)
            listening.setblocking(False)
            nursery.start_soon(server.accept, listening)
        nursery.start_soon(ending, link.write)
        link.tell(READY)
        nursery.start_soon(link.beat)
        nursery.start_soon(ending, link.read)
        nursery.start_soon(ending, lambda: _until_end(0))


def _read_line(fd: int) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        data = os.read(fd, 1)
        if not data:
            break
        line += data
    return line


def run(settings: WorkerSettings) -> None:
    """Serve ``settings`` until stdin or the link ends, with what survives the collector's
    middle generation frozen (:class:`~nodeagent.master._collector.SurvivorFreezer`): a
    worker of a large pool remembers a token and a digest for each of its nodes, hundreds
    of thousands of objects a full collection would walk, holding every push in flight."""
    with SurvivorFreezer():
        trio.run(serve, settings)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is for the master
    logging.basicConfig(level=logging.WARNING, format="%(name)s[%(process)d]: %(message)s")
    line = _read_line(0)
    if not line:
        return 0
    settings = WorkerSettings.of_line(line)
    if settings.nice:
        os.nice(settings.nice)  # after the master's: its loop first when the cores are full
    run(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
