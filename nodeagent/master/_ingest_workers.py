"""The master's ingest worker processes: the ad pushes taken on other cores.

An ad push's HTTP (its connection accepted, its request read and answered), its token's
check and its body's parse, checks and packing (:func:`~nodeagent.master._ingest.prepare_push`)
are most of what it costs and need none of the master's state. With ``ingest_workers = N``
the master starts ``N`` worker processes (:mod:`nodeagent.master._ingest_worker`) that accept
on its TCP listening sockets themselves (:class:`~nodeagent._serving._http11.ListenerShare`);
each hands the master its pushes made ready over a socket pair (the link), and the master
stores them and answers (:func:`~nodeagent.master._api.push_answer`); its own core is left
the store, the plans, the passes and the other requests, which the workers relay to it on
its relay socket. A push is answered byte for byte as the master answers it alone.

* While no worker runs (they start in ≈ 0.3 s; one that ended is started again after 1 s,
  then after up to 30 s while it keeps ending), the master accepts every connection itself:
  none waits for a worker. Once one runs, a connection the master accepted meanwhile and
  kept alive is closed after its next reply, so that the agent's next push (on a new
  connection) goes to a worker.
* A worker that says nothing for :data:`SILENCE_TIMEOUT` (it writes ``ALIVE`` every second)
  is deemed stuck and killed. The connections a worker held when it ended are closed; an
  agent pushes again at its next interval.
* The workers are ended when the master stops (at the end of their stdin, killed past
  :data:`EXIT_TIMEOUT`), and end by themselves when it dies.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from nodeagent._children import end_worker
from nodeagent._serving._http11 import ListenerShare
from nodeagent._when import in_words
from nodeagent.master._ingest import (
    FAILED,
    AdReply,
    Push,
    WorkerRefusal,
    decode_worker_frame,
    encode_answer,
    split_frames,
)
from nodeagent.master._ingest_worker import WorkerSettings

__all__ = ["EXIT_TIMEOUT", "SILENCE_TIMEOUT", "IngestWorkers"]

log = logging.getLogger("nodeagent.master")

#: Seconds a worker may say nothing (it says ``ALIVE`` every second) before it is deemed
#: stuck and killed.
SILENCE_TIMEOUT = 10.0
#: Seconds a new worker may take to say it is ready.
START_TIMEOUT = 30.0
#: Seconds an ended worker may take to exit before it is killed.
EXIT_TIMEOUT = 5.0
#: Seconds before a worker that ended is started again: the first, then doubled while it
#: keeps ending within a minute of its start, up to the last.
RESTART_DELAYS = (1.0, 30.0)
#: Seconds of the loop the master spends on a worker's pushes in one turn, at most (then
#: the others run): it takes every frame already there meanwhile, not only one read's.
ANSWER_SLICE = 0.005
_READ_SIZE = 1 << 18
#: The link's socket buffers asked for (the kernel may give less: ``net.core.wmem_max``):
#: room for the pushes a worker makes ready while the master's loop serves the others.
_LINK_BUFFER = 4 << 20

Answer = Callable[[Push | WorkerRefusal], AdReply | None]


class _Ended(Exception):
    """The worker's link ended, or held what no worker writes."""


class IngestWorkers:
    """``count`` ingest worker processes taking the pushes of ``share``'s listeners, kept
    running by :meth:`run` (module docstring). ``answer`` stores a push and makes its reply
    (:func:`~nodeagent.master._api.push_answer`); ``key`` is the pool key the workers check
    tokens with.

    ``command``: how a worker is started (the default runs
    :mod:`nodeagent.master._ingest_worker` with this interpreter); ``silence_timeout``:
    seconds a worker may say nothing before it is killed; ``answer_slice``: seconds of
    ``work_clock`` the master answers one worker's pushes in a turn of its loop, at most
    (:meth:`_answer`).
    """

    def __init__(
        self,
        count: int,
        *,
        share: ListenerShare,
        answer: Answer,
        key: bytes | None,
        read_timeout: float,
        nice: int = 0,
        command: Sequence[str] | None = None,
        silence_timeout: float = SILENCE_TIMEOUT,
        answer_slice: float = ANSWER_SLICE,
        work_clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if count < 1:
            raise ValueError("ingest workers: at least one")
        self.count = count
        self.share = share
        self.answer = answer
        self.key = key
        self.read_timeout = read_timeout
        self.nice = nice
        self.silence_timeout = silence_timeout
        self.answer_slice = answer_slice
        self.work_clock = work_clock
        self.command = (
            list(command)
            if command is not None
            else [sys.executable, "-m", "nodeagent.master._ingest_worker"]
        )
        self._running: list[trio.Process] = []
        #: Workers started, and those that ended other than by the master's stop.
        self.started = 0
        self.ended = 0
        #: Pushes the workers took (answered by the master), and those they made ready.
        self.taken = 0
        self.prepared = 0

    @property
    def running(self) -> int:
        """The workers taking pushes now."""
        return len(self._running)

    def pids(self) -> list[int]:
        return sorted(process.pid for process in self._running)

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
            except (OSError, _Ended, trio.TooSlowError, trio.BrokenResourceError) as exc:
                self.ended += 1
                what = "said nothing for too long" if isinstance(exc, trio.TooSlowError) else exc
                log.warning("ingest worker: %s (started again in %s)", what, in_words(delay))
            await trio.sleep(delay)
            if trio.current_time() - started_at > 60.0:
                delay = RESTART_DELAYS[0]
            else:
                delay = min(delay * 2, RESTART_DELAYS[1])

    def _settings(self, link: int) -> WorkerSettings:
        share = self.share
        return WorkerSettings(
            listeners=tuple(sock.fileno() for sock in share.sockets),
            link=link,
            relay=str(share.relay),
            key=None if self.key is None else self.key.hex(),
            tls=None if share.tls is None else (str(share.tls[0]), str(share.tls[1])),
            read_timeout=self.read_timeout,
            nice=self.nice,
        )

    async def _serve_one(self) -> None:
        """Start one worker, then answer its pushes until it ends (raises) or the master
        stops (cancelled: the worker is ended)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _LINK_BUFFER)
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _LINK_BUFFER)
        try:
            settings = self._settings(theirs.fileno())
            process = await trio.lowlevel.open_process(
                self.command,
                stdin=subprocess.PIPE,
                pass_fds=(*settings.listeners, settings.link),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.started += 1
        assert process.stdin is not None
        link = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
        try:
            await process.stdin.send_all(settings.line())
            buffer = bytearray()
            with trio.fail_after(START_TIMEOUT):
                while not (frames := split_frames(buffer)):
                    buffer += await self._receive(link, process)
            if decode_worker_frame(frames[0]) is not True:
                raise _Ended(f"ingest worker {process.pid} did not say it was ready")
            with self.share.taking():
                self._running.append(process)
                try:
                    await self._answer(link, ours, process, buffer, frames[1:])
                finally:
                    self._running.remove(process)
        except ValueError as exc:
            raise _Ended(f"ingest worker {process.pid} wrote what no worker writes: {exc}") from exc
        finally:
            await end_worker(process, kill=True, exit_within=EXIT_TIMEOUT)
            with trio.CancelScope(shield=True):
                await link.aclose()

    @staticmethod
    async def _receive(link: trio.SocketStream, process: trio.Process) -> bytes:
        data = await link.receive_some(_READ_SIZE)
        if not data:
            raise _Ended(f"ingest worker {process.pid} ended")
        return bytes(data)

    async def _answer(
        self,
        link: trio.SocketStream,
        sock: socket.socket,
        process: trio.Process,
        buffer: bytearray,
        frames: list[memoryview],
    ) -> None:
        """Answer the worker's pushes, those read with its first frame then the rest,
        until it ends (raises); a silence past the timeout raises
        :class:`trio.TooSlowError`.

        A turn of the loop answers the frames read, then those already waiting on the link
        (read from ``sock``, the link's socket, without waiting), for :attr:`answer_slice`
        at most (one frame at least); then the answers go out and the others run, and the
        frames left wait for the next turn. So the pushes answered in a turn are bounded by
        the time they take, not by what one read holds: a push made ready is ≈ 15–25 kB,
        and a read of the link's buffer holds a dozen of them, or a hundred pushes of
        moving values alone."""
        while True:
            answers: list[bytes] = []
            began = self.work_clock()
            while True:
                frames = self._take(frames, answers, began)
                if frames or self.work_clock() - began >= self.answer_slice:
                    break
                waiting = self._read_now(sock, process)
                if waiting is None:
                    break
                buffer += waiting
                frames = split_frames(buffer)
            if answers:
                await link.send_all(b"".join(answers))
            if frames:
                await trio.lowlevel.checkpoint()
                continue
            with trio.fail_after(self.silence_timeout):
                buffer += await self._receive(link, process)
            frames = split_frames(buffer)

    def _take(
        self, frames: list[memoryview], answers: list[bytes], began: float
    ) -> list[memoryview]:
        """Store the pushes of ``frames`` and add their answers to ``answers``, until
        :attr:`answer_slice` has passed since ``began`` (the first frame taken whatever
        the time): the frames left."""
        for i, frame in enumerate(frames):
            if i and self.work_clock() - began >= self.answer_slice:
                return frames[i:]
            push = decode_worker_frame(frame)
            if isinstance(push, bool):
                continue  # ALIVE
            try:
                reply = self.answer(push)
            except Exception:  # a bug: the push's connection is closed unanswered
                log.exception("an ad push an ingest worker took could not be stored")
                reply = FAILED
            if isinstance(push, Push) and reply is not None:
                self.taken += 1
                self.prepared += push.prepared is not None
                answers.append(encode_answer(push.number, reply))
        return []

    @staticmethod
    def _read_now(sock: socket.socket, process: trio.Process) -> bytes | None:
        """What the link holds now (``None``: nothing yet), read without waiting."""
        try:
            data = sock.recv(_READ_SIZE)
        except BlockingIOError:
            return None
        if not data:
            raise _Ended(f"ingest worker {process.pid} ended")
        return data


def relay_path(runtime_dir: Path) -> Path:
    """Where a master listens for the connections its ingest workers relay."""
    return runtime_dir / "master-relay.sock"
