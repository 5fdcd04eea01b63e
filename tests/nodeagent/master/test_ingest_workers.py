"""The ingest worker processes: real workers prepare pushes as the master would; one that
ends, never answers or cannot start leaves the pushes to the master, and is started again."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import orjson
import psutil
import trio

from nodeagent.master._adstore import NodeAd
from nodeagent.master._ingest import prepare_push
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


@asynccontextmanager
async def running(workers: IngestWorkers) -> AsyncIterator[IngestWorkers]:
    async with trio.open_nursery() as nursery:
        await nursery.start(workers.run)
        try:
            yield workers
        finally:
            nursery.cancel_scope.cancel()


#: A worker that says it is ready, then ``rest`` (Python source run after it).
def fake(rest: str) -> Sequence[str]:
    ready = "sys.stdout.buffer.write(b'\\x00\\x00\\x00\\x05\\x00\\x00\\x00\\x00\\x03')"
    return [sys.executable, "-c", f"import sys, time\n{ready}\nsys.stdout.flush()\n{rest}"]


async def test_workers_prepare_many_pushes_at_once_as_the_master_would() -> None:
    async with running(IngestWorkers(2)) as workers:
        await until(lambda: workers.running == 2, "two workers running")
        pids = workers.pids()
        results: dict[str, object] = {}

        async def push(name: str) -> None:
            results[name] = await workers.prepare(body(name), name)

        async with trio.open_nursery() as nursery:
            for n in range(40):
                nursery.start_soon(push, f"n{n}.test")
        for name, prepared in results.items():
            here = prepare_push(body(name), name)
            assert isinstance(prepared, NodeAd), name
            assert isinstance(here, NodeAd)
            assert prepared.machine == here.machine
            assert list(prepared.slots) == list(here.slots)
            assert (prepared.clocks, prepared.active) == (here.clocks, here.active)
        refused = await workers.prepare(body("n1.test"), "n2.test")  # another node's token
        assert refused == prepare_push(body("n1.test"), "n2.test")
        assert (workers.prepared, workers.made_here, workers.ended) == (41, 0, 0)
    for pid in pids:  # ended with the pool
        assert not _alive(pid)


async def test_a_killed_worker_leaves_its_pushes_to_the_master_and_is_started_again() -> None:
    async with running(IngestWorkers(1)) as workers:
        await until(lambda: workers.running == 1, "a worker running")
        (first,) = workers.pids()
        os.kill(first, signal.SIGKILL)
        # until its end is seen the push may be sent to it: then it is made here
        prepared = await workers.prepare(body(), "n1.test")
        assert prepared is None or isinstance(prepared, NodeAd)
        await until(lambda: workers.ended == 1, "the end seen")
        await until(lambda: workers.running == 1, "a worker running again")
        assert workers.pids() != [first]
        assert isinstance(await workers.prepare(body(), "n1.test"), NodeAd)
        assert workers.started == 2


async def test_a_worker_that_ends_with_a_push_in_flight_leaves_it_to_the_master() -> None:
    # reads the first request, then exits without answering it
    workers = IngestWorkers(1, command=fake("sys.stdin.buffer.read(4)\nsys.exit(0)"))
    async with running(workers):
        await until(lambda: workers.running == 1, "a worker running")
        assert await workers.prepare(body(), "n1.test") is None
        assert workers.made_here == 1
        await until(lambda: workers.ended == 1, "its end seen")


async def test_a_worker_that_never_answers_is_killed_and_the_push_made_by_the_master() -> None:
    workers = IngestWorkers(1, command=fake("time.sleep(3600)"), answer_timeout=0.2)
    async with running(workers):
        await until(lambda: workers.running == 1, "a worker running")
        (stuck,) = workers.pids()
        assert await workers.prepare(body(), "n1.test") is None
        assert workers.made_here == 1
        await until(lambda: not _alive(stuck), "the stuck worker killed")
        await until(lambda: workers.started == 2, "another started")


async def test_a_worker_that_cannot_start_leaves_every_push_to_the_master() -> None:
    workers = IngestWorkers(1, command=[sys.executable, "-c", "import sys; sys.exit(3)"])
    async with running(workers):
        await until(lambda: workers.ended >= 1, "the failed start seen")
        assert workers.running == 0
        assert await workers.prepare(body(), "n1.test") is None
        assert workers.made_here == 1


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it has ended)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
