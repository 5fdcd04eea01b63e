"""The master's ingest worker processes: the ad pushes prepared on other cores.

A push's parse, checks and packing (:func:`~nodeagent.master._ingest.prepare_push`) are
about half of what an ad costs the master and need none of its state, so with
``ingest_workers = N`` the master sends each push's body to one of ``N`` worker processes
(:mod:`nodeagent.master._ingest_worker`) and stores what comes back; its own core is left
the HTTP, the store, the plans and the passes. A push is answered the same either way.

* Requests go to the running worker with the fewest in flight; each worker answers its own
  in order. A worker's pipe holds a few pushes (its buffer is raised to 1 MiB), so the
  master rarely waits to write one.
* A push no worker answers is made in the master itself: while the workers start (≈ 0.2
  s), when a worker has ended (its pushes in flight are made again here; the worker is
  started again, after 1 s, then after up to 30 s while it keeps ending) or has not
  answered within :data:`ANSWER_TIMEOUT` (it is then killed). No push is lost or refused
  because a worker is gone.
* The workers are ended when the master stops (at the end of their stdin, killed past
  :data:`EXIT_TIMEOUT`), and end by themselves when it dies.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import logging
import os
import select
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio

from nodeagent._children import end_worker
from nodeagent._when import in_words
from nodeagent.master._ingest import FRAME, Prepared, decode_reply, encode_request

__all__ = ["ANSWER_TIMEOUT", "EXIT_TIMEOUT", "IngestWorkers"]

log = logging.getLogger("nodeagent.master")

#: Seconds a worker may take to answer a push (≈ 0.5 ms of work) before it is deemed stuck,
#: killed, and the push made in the master.
ANSWER_TIMEOUT = 10.0
#: Seconds a new worker may take to say it is ready.
START_TIMEOUT = 30.0
#: Seconds an ended worker may take to exit before it is killed.
EXIT_TIMEOUT = 5.0
#: Seconds before a worker that ended is started again: the first, then doubled while it
#: keeps ending within a minute of its start, up to the last.
RESTART_DELAYS = (1.0, 30.0)
_PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class _Ended(Exception):
    """The worker's stdout ended, or held what no worker writes."""


@dataclass(eq=False, slots=True)
class _Waiting:
    """A push sent to a worker: its answer once it comes (``None``: make it here)."""

    sent_at: float
    done: trio.Event = field(default_factory=trio.Event)
    prepared: Prepared | None = None


class _Worker:
    """One running worker process, its pipes and the pushes it has in flight.

    Frames are written to its stdin at once when the pipe takes them (it holds 1 MiB, some
    70 pushes), else queued in order and written by :meth:`flush` as it drains: a push
    costs the master no await to send, and no cancel scope of its own."""

    def __init__(self, process: trio.Process) -> None:
        assert isinstance(process.stdin, trio.lowlevel.FdStream)
        assert process.stdout is not None
        self.process = process
        self.stdin = process.stdin
        self.stdout = process.stdout
        self._fd = process.stdin.fileno()  # non-blocking: trio's
        self._queued: collections.deque[memoryview] = collections.deque()
        self._writable = trio.Event()
        self.waiting: dict[int, _Waiting] = {}  # in the order sent
        self.next_number = 0
        self._buffer = bytearray()
        # capped by /proc/sys/fs/pipe-max-size: the default will do then
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._fd, _F_SETPIPE_SZ, _PIPE_SIZE)

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, frame: bytes) -> None:
        """Write ``frame`` now, or queue what the pipe does not take yet; raises
        :class:`_Ended` when the worker's stdin is closed."""
        if self._queued:
            self._queued.append(memoryview(frame))
            return
        try:
            written = os.write(self._fd, frame)
        except BlockingIOError:
            written = 0
        except OSError as exc:  # EPIPE: the worker ended
            raise _Ended(f"ingest worker {self.pid}: {exc}") from None
        if written < len(frame):
            self._queued.append(memoryview(frame)[written:])
            self._writable.set()

    async def flush(self) -> None:
        """Write what :meth:`send` queued, as the pipe takes it, until cancelled; a worker
        whose stdin is closed is killed (its end is then read as any other's)."""
        while True:
            await self._writable.wait()
            self._writable = trio.Event()
            while self._queued:
                await trio.lowlevel.wait_writable(self._fd)
                while self._queued:
                    data = self._queued[0]
                    try:
                        written = os.write(self._fd, data)
                    except BlockingIOError:
                        break
                    except OSError:  # EPIPE: the worker ended
                        self._queued.clear()
                        self.process.kill()
                        return
                    if written < len(data):
                        self._queued[0] = data[written:]
                        break
                    self._queued.popleft()

    async def frames(self) -> bytes:
        """The next frame the worker wrote; raises :class:`_Ended` at the end of stdout."""
        while True:
            if len(self._buffer) >= FRAME.size:
                (size,) = FRAME.unpack_from(self._buffer)
                end = FRAME.size + size
                if len(self._buffer) >= end:
                    frame = bytes(self._buffer[FRAME.size : end])
                    del self._buffer[:end]
                    return frame
            chunk = await self.stdout.receive_some(1 << 18)
            if not chunk:
                raise _Ended(f"ingest worker {self.pid} ended")
            self._buffer += chunk

    def answer_waiting(self) -> bool:
        """Whether the worker has written what the master has not read yet."""
        if len(self._buffer) >= FRAME.size:
            return True
        assert isinstance(self.stdout, trio.lowlevel.FdStream)
        readable, _, _ = select.select([self.stdout.fileno()], [], [], 0)
        return bool(readable)

    def oldest(self) -> float | None:
        """When the push in flight longest was sent (``None``: none is)."""
        for push in self.waiting.values():
            return push.sent_at
        return None

    def release(self) -> None:
        """Every push in flight is made in the master instead."""
        waiting, self.waiting = self.waiting, {}
        for push in waiting.values():
            push.done.set()

    async def end(self, *, kill: bool) -> None:
        """Make the worker exit (at once with ``kill``, else at the end of its stdin) and
        reap it; cannot be cancelled."""
        self.release()
        self._queued.clear()
        await end_worker(self.process, kill=kill, exit_within=EXIT_TIMEOUT)


class IngestWorkers:
    """``count`` ingest worker processes, kept running by :meth:`run` (module docstring).

    ``command``: how a worker is started (the default runs
    :mod:`nodeagent.master._ingest_worker` with this interpreter); ``answer_timeout``:
    seconds a worker has to take and answer a push.
    """

    def __init__(
        self,
        count: int,
        *,
        command: Sequence[str] | None = None,
        answer_timeout: float = ANSWER_TIMEOUT,
    ) -> None:
        if count < 1:
            raise ValueError("ingest workers: at least one")
        self.count = count
        self.answer_timeout = answer_timeout
        self.command = (
            list(command)
            if command is not None
            else [sys.executable, "-m", "nodeagent.master._ingest_worker"]
        )
        self._running: list[_Worker] = []
        #: Workers started, and those that ended other than by the master's stop.
        self.started = 0
        self.ended = 0
        #: Pushes prepared by a worker, and made in the master because none answered.
        self.prepared = 0
        self.made_here = 0

    @property
    def running(self) -> int:
        """The workers taking pushes now."""
        return len(self._running)

    def pids(self) -> list[int]:
        return sorted(worker.pid for worker in self._running)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep ``count`` workers running until cancelled, then end them."""
        async with trio.open_nursery() as nursery:
            for _ in range(self.count):
                nursery.start_soon(self._keep_one)
            task_status.started()

    async def _keep_one(self) -> None:
        delay = RESTART_DELAYS[0]
        while True:
            started_at = trio.current_time()
            try:
                await self._serve_one()
            except (OSError, _Ended, trio.TooSlowError) as exc:
                self.ended += 1
                log.warning("ingest worker: %s (started again in %s)", exc, in_words(delay))
            await trio.sleep(delay)
            if trio.current_time() - started_at > 60.0:
                delay = RESTART_DELAYS[0]
            else:
                delay = min(delay * 2, RESTART_DELAYS[1])

    async def _serve_one(self) -> None:
        """Start one worker, then take its answers until it ends (raises) or the master
        stops (cancelled: the worker is ended)."""
        process = await trio.lowlevel.open_process(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        worker = _Worker(process)
        self.started += 1
        try:
            with trio.fail_after(START_TIMEOUT):
                number, ready = decode_reply(await worker.frames())
            if number != 0 or ready is not None:
                raise _Ended(f"ingest worker {worker.pid} did not say it was ready")
            failure: Exception | None = None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker.flush)
                nursery.start_soon(self._watch, worker)
                self._running.append(worker)
                try:
                    await self._answers(worker)
                except (_Ended, ValueError) as exc:  # raised from here, not as a group
                    failure = exc
                finally:
                    nursery.cancel_scope.cancel()
            if failure is not None:
                raise failure
        except ValueError as exc:
            raise _Ended(f"ingest worker {worker.pid} wrote what no worker writes: {exc}") from exc
        finally:
            if worker in self._running:
                self._running.remove(worker)
            await worker.end(kill=True)

    @staticmethod
    async def _answers(worker: _Worker) -> None:
        """Hand each answer of ``worker`` to its push, until it ends (raises)."""
        while True:
            number, prepared = decode_reply(await worker.frames())
            push = worker.waiting.pop(number, None)
            if push is not None:  # else its caller gave up on it
                push.prepared = prepared
                push.done.set()

    async def _watch(self, worker: _Worker) -> None:
        """Kill ``worker`` once a push has waited longer than ``answer_timeout`` for an
        answer it has not written (a master too busy to read the answers written is not a
        stuck worker)."""
        while True:
            await trio.sleep(self.answer_timeout / 4)
            oldest = worker.oldest()
            if oldest is None or trio.current_time() - oldest <= self.answer_timeout:
                continue
            if worker.answer_waiting():
                continue
            log.warning(
                "ingest worker %d did not answer within %s",
                worker.pid,
                in_words(self.answer_timeout),
            )
            if worker in self._running:
                self._running.remove(worker)
            worker.release()
            worker.process.kill()  # its end is read as any other's
            return

    async def prepare(self, body: bytes, node: str | None) -> Prepared | None:
        """``body`` (pushed with ``node``'s token) prepared by a worker; ``None`` when none
        is running, or the one sent to ended or did not answer in time: the caller makes
        it itself (:func:`~nodeagent.master._ingest.prepare_push`)."""
        running = self._running
        if not running:
            self.made_here += 1
            return None
        worker = running[0] if len(running) == 1 else min(running, key=lambda w: len(w.waiting))
        worker.next_number = number = worker.next_number % 0xFFFFFFFF + 1
        push = worker.waiting[number] = _Waiting(trio.current_time())
        try:
            worker.send(encode_request(number, node, body))
        except _Ended:
            worker.release()
        try:
            await push.done.wait()
        finally:
            worker.waiting.pop(number, None)
        if push.prepared is None:
            self.made_here += 1
        else:
            self.prepared += 1
        return push.prepared
