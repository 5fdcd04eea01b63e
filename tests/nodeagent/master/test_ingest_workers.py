"""The ingest worker processes on a real loopback listener: real workers take many pushes at
once, made ready as the master would, and hand them to it; they relay every other request
to the relay socket as the client's; one that is killed, says nothing or cannot start
leaves the listener to the master (nobody takes connections meanwhile but it), and is
started again."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
import pytest
import trio
from starlette.types import Receive, Scope, Send

from nodeagent._auth import Scope as TokenScope
from nodeagent._auth import create_token, generate_key
from nodeagent._serving._http11 import HttpServer, ListenerShare
from nodeagent.master._adstore import NodeAd
from nodeagent.master._ingest import (
    AdReply,
    Push,
    WorkerRefusal,
    decode_answer,
    encode_push,
    prepare_push,
    split_frames,
)
from nodeagent.master._ingest_workers import IngestWorkers
from tests.nodeagent.master.test_adstore_moved_on import T, machine


def body(name: str = "n1.test") -> bytes:
    return orjson.dumps(machine().ad(T)).replace(b"n1.test", name.encode())


async def until(condition: object, what: str) -> None:
    """Wait for ``condition()`` (a state, not a time: the machine may be loaded)."""
    assert callable(condition)
    with trio.fail_after(60):
        # Polling on purpose: what is waited for happens in other processes too.
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.02)
    assert condition(), what


@pytest.fixture
def key(tmp_path: Path) -> bytes:
    return generate_key(tmp_path / "pool.key")


def token(key: bytes, node: str) -> str:
    return create_token(
        key, subject=f"agent@{node}", scope=TokenScope.DAEMON, lifetime_s=3600,
        now=time.time(), node=node,
    )  # fmt: skip


@contextmanager
def listener(tmp_path: Path) -> Iterator[ListenerShare]:
    """A loopback TCP listener shared as :func:`serve_http` shares it (the relay socket's
    path in ``tmp_path``)."""
    share = ListenerShare(tmp_path / "relay.sock")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    share.sockets = [sock]
    with sock:
        yield share


def url(share: ListenerShare) -> str:
    host, port = share.sockets[0].getsockname()[:2]
    return f"http://{host}:{port}"


def relay_socket(share: ListenerShare) -> socket.socket:
    """The master's relay socket of ``share``, listening (non-blocking)."""
    relay = socket.socket(socket.AF_UNIX)
    relay.bind(str(share.relay))
    relay.listen()
    relay.setblocking(False)
    return relay


class Master:
    """The master's side: every push it is handed, answered 200 with its node's name."""

    def __init__(self) -> None:
        self.pushes: list[Push] = []
        self.refusals: list[WorkerRefusal] = []

    def __call__(self, push: Push | WorkerRefusal) -> AdReply | None:
        if isinstance(push, WorkerRefusal):
            self.refusals.append(push)
            return None
        self.pushes.append(push)
        made = push.prepared
        name = made.machine["Name"] if isinstance(made, NodeAd) else "?"
        if name == "bug.test":
            raise RuntimeError("a bug in the master")
        return AdReply(200, orjson.dumps({"stored": name}))


@asynccontextmanager
async def running(workers: IngestWorkers) -> AsyncIterator[IngestWorkers]:
    async with trio.open_nursery() as nursery:
        await nursery.start(workers.run)
        try:
            yield workers
        finally:
            nursery.cancel_scope.cancel()


def workers_for(
    share: ListenerShare, master: Master, key: bytes, count: int = 1, **options: Any
) -> IngestWorkers:
    return IngestWorkers(count, share=share, answer=master, key=key, read_timeout=10, **options)


#: A worker that says it is ready on its link, then runs ``rest`` (Python source).
def fake(rest: str) -> Sequence[str]:
    ready = (
        "import json, os, sys, time\n"
        "settings = json.loads(sys.stdin.buffer.readline())\n"
        "os.write(settings['link'], b'\\x00\\x00\\x00\\x01\\x01')\n"
    )
    return [sys.executable, "-c", ready + rest]


async def test_workers_take_many_pushes_at_once_and_hand_them_to_the_master(
    tmp_path: Path, key: bytes
) -> None:
    master = Master()
    with listener(tmp_path) as share:
        async with running(workers_for(share, master, key, count=2)) as workers:
            await until(lambda: share.takers == 2, "two workers taking connections")
            pids = workers.pids()
            replies: dict[str, httpx.Response] = {}
            tokens = {f"n{n}.test": token(key, f"n{n}.test") for n in range(40)}

            async def push(client: httpx.AsyncClient, name: str) -> None:
                headers = {"Authorization": f"Bearer {tokens[name]}"}
                replies[name] = await client.post("/v1/ads", content=body(name), headers=headers)

            async with httpx.AsyncClient(base_url=url(share)) as client:
                async with trio.open_nursery() as nursery:
                    for n in range(40):
                        nursery.start_soon(push, client, f"n{n}.test")
                anonymous = await client.post("/v1/ads", content=body())
                foreign = await client.post(
                    "/v1/ads", content=body("n1.test"),
                    headers={"Authorization": f"Bearer {token(key, 'n2.test')}"},
                )  # fmt: skip
            assert {r.json()["stored"] for r in replies.values()} == set(replies)
            for pushed in master.pushes[:40]:
                assert isinstance(pushed.prepared, NodeAd)
                name = pushed.prepared.machine["Name"]
                here = prepare_push(body(name), name)
                assert isinstance(here, NodeAd)
                assert pushed.prepared.machine == here.machine
                assert list(pushed.prepared.slots) == list(here.slots)
                assert (pushed.subject, pushed.node) == (f"agent@{name}", name)
                assert pushed.seconds >= 0
            # refused from its head by the worker: only told to the master
            assert anonymous.status_code == 401
            assert anonymous.headers["www-authenticate"] == "Bearer"
            assert [r.status for r in master.refusals] == [401]
            # another node's ad: made ready as a refusal, which the master answers
            assert master.pushes[-1].prepared == prepare_push(body("n1.test"), "n2.test")
            assert foreign.json() == {"stored": "?"}
            assert (workers.taken, workers.prepared, workers.ended) == (41, 41, 0)
    for pid in pids:  # ended with the pool
        assert not _alive(pid)


async def test_a_worker_relays_the_other_requests_to_the_relay_socket(
    tmp_path: Path, key: bytes
) -> None:
    seen: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)
        message = await receive()
        text = f"{scope['method']} {scope['path']} {message.get('body', b'').decode()}"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": text.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b" (streamed)"})

    master = Master()
    with listener(tmp_path) as share:
        address = share.sockets[0].getsockname()[:2]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(HttpServer(app).accept_relayed, relay_socket(share))
            async with running(workers_for(share, master, key)):
                await until(lambda: share.takers == 1, "a worker taking connections")
                async with httpx.AsyncClient(base_url=url(share)) as client:
                    first = await client.post("/v1/ads?x=1", content=b"not an ad")
                    got = await client.get("/v1/ads/n1.test")
                    put = await client.put("/v1/ads", content=b"hello")
            nursery.cancel_scope.cancel()
    assert first.status_code == 401  # an ad push all the same: the worker's
    assert (got.status_code, got.text) == (200, "GET /v1/ads/n1.test  (streamed)")
    assert put.text == "PUT /v1/ads hello (streamed)"
    assert [s["client"][0] for s in seen] == ["127.0.0.1", "127.0.0.1"]
    assert seen[0]["server"] == address
    assert seen[0]["scheme"] == "http"
    assert "nodeagent.unix" not in seen[0]  # served as TCP, not as the Unix socket


async def test_a_plain_connection_is_handed_over_to_the_master_and_outlives_its_worker(
    tmp_path: Path, key: bytes
) -> None:
    """A request for the master on plain TCP: the worker hands the connection itself over
    (its descriptor, with what it read of it), and the master serves it from then on, so
    that its next requests no longer go through the worker, which may even have ended."""
    seen: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)
        read = b""
        while (message := await receive())["type"] == "http.request":
            read += message.get("body", b"")
            if not message.get("more_body"):
                break
        text = f"{scope['path']} {len(read)} {read[-3:].decode()}"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": text.encode()})

    master = Master()
    with listener(tmp_path) as share:
        address = share.sockets[0].getsockname()[:2]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(HttpServer(app).accept_relayed, relay_socket(share))
            async with httpx.AsyncClient(base_url=url(share)) as client:
                async with running(workers_for(share, master, key)) as workers:
                    await until(lambda: share.takers == 1, "a worker taking connections")
                    pids = workers.pids()
                    first = await client.put("/v1/one", content=b"x" * 299_997 + b"xyz")
                await until(lambda: not any(map(_alive, pids)), "the worker ended")
                with trio.fail_after(10):  # nothing accepts a new connection now
                    second = await client.put("/v1/two", content=b"y")
                ends = [
                    r.extensions["network_stream"].get_extra_info("socket") for r in (first, second)
                ]
                assert ends[0] is not None
                assert ends[0] is ends[1]  # one connection
                mine = ends[0].getsockname()[:2]
            nursery.cancel_scope.cancel()
    assert (first.text, second.text) == ("/v1/one 300000 xyz", "/v1/two 1 y")
    assert [s["client"] for s in seen] == [mine, mine]
    assert seen[0]["server"] == address


async def test_a_request_for_the_master_is_503_while_nothing_listens_on_the_relay_socket(
    tmp_path: Path, key: bytes
) -> None:
    """No relay socket (a master stopping): the worker answers 503 itself, and the
    connection's next push is still the worker's."""
    master = Master()
    with listener(tmp_path) as share:
        async with running(workers_for(share, master, key)):
            await until(lambda: share.takers == 1, "a worker taking connections")
            async with httpx.AsyncClient(base_url=url(share)) as client:
                refused = await client.get("/v1/status")
                headers = {"Authorization": f"Bearer {token(key, 'n1.test')}"}
                push = await client.post("/v1/ads", content=body(), headers=headers)
    assert refused.status_code == 503
    assert push.json() == {"stored": "n1.test"}


async def test_a_connection_the_master_took_before_a_worker_ran_is_handed_over_to_one(
    tmp_path: Path, key: bytes
) -> None:
    """A client that connected while no worker ran (a master just started) and keeps its
    connection alive is not the master's for good: once a worker takes connections, the
    master's next reply on it closes it, and the client's next push goes to the worker."""
    paths: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        paths.append(scope["path"])
        await receive()
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    master = Master()
    with listener(tmp_path) as share:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(HttpServer(app).accept, share.sockets[0], share)
            async with httpx.AsyncClient(base_url=url(share)) as client:
                before = await client.get("/v1/status")
                async with running(workers_for(share, master, key)) as workers:
                    await until(lambda: share.takers == 1, "a worker taking connections")
                    handed = await client.get("/v1/status")
                    headers = {"Authorization": f"Bearer {token(key, 'n1.test')}"}
                    push = await client.post("/v1/ads", content=body(), headers=headers)
                    taken = workers.taken
            nursery.cancel_scope.cancel()
    assert "connection" not in before.headers  # kept alive while no worker ran
    assert handed.headers["connection"] == "close"
    assert paths == ["/v1/status", "/v1/status"]  # the same connection, the master's
    assert push.json() == {"stored": "n1.test"}
    assert taken == 1
    assert [
        p.prepared.machine["Name"] for p in master.pushes if isinstance(p.prepared, NodeAd)
    ] == ["n1.test"]


async def test_a_push_the_master_fails_on_closes_its_connection_and_the_worker_goes_on(
    tmp_path: Path, key: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    master = Master()
    with listener(tmp_path) as share:
        async with running(workers_for(share, master, key)) as workers:
            await until(lambda: share.takers == 1, "a worker taking connections")
            async with httpx.AsyncClient(base_url=url(share)) as client:
                bug = {"Authorization": f"Bearer {token(key, 'bug.test')}"}
                with pytest.raises(httpx.RemoteProtocolError):
                    await client.post("/v1/ads", content=body("bug.test"), headers=bug)
                fine = {"Authorization": f"Bearer {token(key, 'n1.test')}"}
                reply = await client.post("/v1/ads", content=body(), headers=fine)
            assert reply.json() == {"stored": "n1.test"}
            assert (workers.ended, workers.started) == (0, 1)
    assert "could not be stored" in caplog.text


async def test_a_killed_worker_leaves_the_listener_to_the_master_and_is_started_again(
    tmp_path: Path, key: bytes
) -> None:
    master = Master()
    with listener(tmp_path) as share:
        async with running(workers_for(share, master, key)) as workers:
            await until(lambda: share.takers == 1, "a worker taking connections")
            (first,) = workers.pids()
            os.kill(first, signal.SIGKILL)
            await until(lambda: workers.ended == 1, "the end seen")
            assert share.takers == 0  # the master takes the connections meanwhile
            await until(lambda: share.takers == 1, "a worker taking connections again")
            assert workers.pids() != [first]
            assert workers.started == 2
            async with httpx.AsyncClient(base_url=url(share)) as client:
                headers = {"Authorization": f"Bearer {token(key, 'n1.test')}"}
                reply = await client.post("/v1/ads", content=body(), headers=headers)
            assert reply.json() == {"stored": "n1.test"}


async def test_a_worker_that_says_nothing_is_killed_and_started_again(
    tmp_path: Path, key: bytes
) -> None:
    master = Master()
    pids = tmp_path / "pids"
    rest = f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\ntime.sleep(3600)"
    with listener(tmp_path) as share:
        workers = workers_for(share, master, key, command=fake(rest), silence_timeout=0.3)
        async with running(workers):
            await until(lambda: pids.exists() and pids.read_text().count("\n") >= 2, "two")
            stuck = int(pids.read_text().split()[0])
            await until(lambda: not _alive(stuck), "the stuck worker killed")
            assert workers.ended >= 1
            assert workers.started >= 2


async def test_a_worker_that_cannot_start_leaves_the_listener_to_the_master(
    tmp_path: Path, key: bytes
) -> None:
    master = Master()
    with listener(tmp_path) as share:
        command = [sys.executable, "-c", "import sys; sys.exit(3)"]
        workers = workers_for(share, master, key, command=command)
        async with running(workers):
            await until(lambda: workers.ended >= 1, "the failed start seen")
            assert (workers.running, share.takers) == (0, 0)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it has ended)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


class _TurnEnded(Exception):
    """The master's loop would now serve the others (the test ends there)."""


class _Link:
    """The master's end of a link as :meth:`IngestWorkers._answer` uses it: what it sends
    is kept; its next read (the end of the turn) ends the test."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send_all(self, data: bytes) -> None:
        self.sent.append(data)

    async def receive_some(self, _max_bytes: int) -> bytes:
        raise _TurnEnded


class _Process:
    pid = 0


def _ticking(
    share: ListenerShare, answer: Callable[[Push | WorkerRefusal], AdReply], answer_slice: float
) -> IngestWorkers:
    """Workers whose work clock ticks once a look at it."""
    ticks = iter(range(1_000_000))
    return IngestWorkers(
        1,
        share=share,
        answer=answer,
        key=None,
        read_timeout=5.0,
        answer_slice=answer_slice,
        work_clock=lambda: float(next(ticks)),
    )


@pytest.mark.parametrize(
    ("answer_slice", "answered_in_the_turn"),
    [(1e9, 40), (0.5, 1)],
    ids=["every frame waiting", "its slice spent after the first"],
)
async def test_a_turn_answers_the_pushes_waiting_on_the_link_until_its_slice_is_spent(
    tmp_path: Path, answer_slice: float, answered_in_the_turn: int
) -> None:
    """40 pushes of 20 kB wait on the link (more than one read of it holds): one turn of
    the master's loop answers them all and sends their answers at once, unless its slice
    of work (here a tick of the work clock per look at it) is spent first."""
    frames = [encode_push(n, 0.0, "a", None, body=b"x" * 20_000) for n in range(1, 41)]
    ours, theirs = socket.socketpair()
    for end in (ours, theirs):
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    answered: list[int] = []

    def answer(push: Push | WorkerRefusal) -> AdReply:
        assert isinstance(push, Push)
        answered.append(push.number)
        return AdReply(200, b"{}")

    link = _Link()
    with listener(tmp_path) as share, ours, theirs:
        theirs.sendall(b"".join(frames[1:]))
        ours.setblocking(False)
        workers = _ticking(share, answer, answer_slice)
        with pytest.raises(_TurnEnded):
            await workers._answer(
                link,  # type: ignore[arg-type]
                ours,
                _Process(),  # type: ignore[arg-type]
                bytearray(),
                split_frames(bytearray(frames[0])),
            )
    assert len(link.sent) == 1  # the turn's answers, sent at once
    numbers = [decode_answer(f)[0] for f in split_frames(bytearray(link.sent[0]))]
    assert numbers == answered == list(range(1, answered_in_the_turn + 1))


async def test_a_turn_leaves_the_frames_of_a_read_its_slice_had_no_room_for(
    tmp_path: Path,
) -> None:
    """40 pushes read at once, a slice of 3.5 ticks of the work clock (a tick per look):
    each turn answers 4 of them and sends their answers, the others served between two
    turns; the next turn takes up where it stopped."""
    frames = [encode_push(n, 0.0, "a", None, body=b"x" * 100) for n in range(1, 41)]
    answered: list[int] = []
    turns_elsewhere: list[int] = []

    def answer(push: Push | WorkerRefusal) -> AdReply:
        assert isinstance(push, Push)
        answered.append(push.number)
        return AdReply(200, b"{}")

    class _Counted(_Link):
        async def send_all(self, data: bytes) -> None:
            turns_elsewhere.append(turns)
            await super().send_all(data)

    turns = 0

    async def elsewhere() -> None:
        nonlocal turns
        while True:
            turns += 1
            await trio.lowlevel.checkpoint()

    link = _Counted()
    ours, theirs = socket.socketpair()
    with listener(tmp_path) as share, ours, theirs:
        ours.setblocking(False)
        workers = _ticking(share, answer, 3.5)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(elsewhere)
            with pytest.raises(_TurnEnded):
                await workers._answer(
                    link,  # type: ignore[arg-type]
                    ours,
                    _Process(),  # type: ignore[arg-type]
                    bytearray(),
                    split_frames(bytearray(b"".join(frames))),
                )
            nursery.cancel_scope.cancel()
    batches = [[decode_answer(f)[0] for f in split_frames(bytearray(s))] for s in link.sent]
    assert batches == [list(range(n, n + 4)) for n in range(1, 41, 4)]
    assert answered == list(range(1, 41))
    # the others ran between two turns (the order of a round's tasks is trio's to choose)
    assert turns_elsewhere == sorted(turns_elsewhere)
    assert turns_elsewhere[-1] >= len(batches) - 2
