"""Callers' ClassAd expressions, evaluated within a time budget and off the event loop.

A caller's expression can cost seconds to evaluate while staying short
(``regexp("^(a+)+$", "aaaa…a!")``, a record whose attributes double each other), and
``classad2`` holds the GIL while it evaluates (measured: a spinning thread gets 3 % of
its idle rate during an evaluation, against 97 % during a ``hashlib`` digest), so
neither the event loop nor a worker thread can evaluate one safely, and a runaway
evaluation in a thread could not be abandoned. An :class:`Evaluator` therefore sends
each request — one expression against a list of ads — to a worker process
(:mod:`nodeagent._expressions._worker`) and kills that worker when the answer has not come
within ``budget`` seconds, counted across all the ads of the request. Then the caller
gets :class:`ExpressionTooCostly` (422 ``expression.too_costly``) and the next request
starts a new worker.

* At most ``workers`` evaluations run at once; further requests wait their turn (in
  order). Workers start when first needed (≈ 0.15 s, ≈ 30 MiB each) and are kept; the
  start is not counted in the budget.
* Bounds that need no evaluation are checked first, on the caller's side
  (:func:`slots._classad.check_expression`: length, nesting, control characters), and
  the literals ``true`` and ``false`` need no worker; an expression that does not parse
  comes back as :class:`~slots.InvalidRequest` (422 ``request.invalid``).
* A worker that cannot be started is :class:`EvaluatorUnavailable` (503
  ``expression.unavailable``).

Use ``async with Evaluator() as evaluator:`` or call :meth:`Evaluator.aclose`, which ends
every worker. A worker whose parent is gone ends too: at the end of its stdin when idle, by
its own timer when evaluating (:mod:`nodeagent._expressions._worker`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import orjson
import trio

from nodeagent._children import end_worker
from nodeagent._expressions._worker import HEADER
from slots import InvalidRequest, SlotsError
from slots._classad import AdValue, check_expression

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_WORKERS",
    "Evaluator",
    "EvaluatorUnavailable",
    "ExpressionTooCostly",
]

#: Seconds one request may spend evaluating, across all its ads.
DEFAULT_BUDGET = 2.0
#: Evaluations that may run at once (one worker process each).
DEFAULT_WORKERS = 2
#: Seconds a new worker may take to load the ClassAd library and say it is ready.
START_TIMEOUT = 30.0
#: Seconds an ended worker may take to exit before it is killed.
EXIT_TIMEOUT = 5.0
#: A worker ends itself past twice the budget and this many seconds, should its parent
#: be gone (see :mod:`nodeagent._expressions._worker`); its parent kills it at the budget.
SELF_KILL_MARGIN = 5.0
_LITERALS = {"true": True, "false": False}


class ExpressionTooCostly(SlotsError):
    """The expression's evaluation outlasted the request's budget, or ended its worker
    (the ClassAd library failed on it); nothing else happened."""

    code = "expression.too_costly"
    http_status = 422


class EvaluatorUnavailable(SlotsError):
    """No worker process could be started to evaluate the expression."""

    code = "expression.unavailable"
    http_status = 503


class _WorkerEnded(Exception):
    """The worker's stdout ended (or held garbage) before a whole reply."""


def _encode(value: Any) -> bytes:
    """A frame: the header, then ``value`` as JSON (integers beyond 64 bits included)."""
    try:
        body = orjson.dumps(value)
    except orjson.JSONEncodeError:
        body = json.dumps(value, separators=(",", ":")).encode("utf-8")
    return HEADER.pack(len(body)) + body


class _Worker:
    """One worker process and its pipes."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._buffer = bytearray()

    @property
    def pid(self) -> int:
        return self.process.pid

    async def _read(self, size: int) -> bytes:
        while len(self._buffer) < size:
            chunk = await self._stdout.receive_some(max(65536, size - len(self._buffer)))
            if not chunk:
                raise _WorkerEnded(f"worker {self.pid} ended")
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    async def receive(self) -> dict[str, Any]:
        (length,) = HEADER.unpack(await self._read(HEADER.size))
        try:
            reply = json.loads(await self._read(length))
        except ValueError as exc:
            raise _WorkerEnded(f"worker {self.pid} sent a frame that is not JSON") from exc
        if not isinstance(reply, dict):
            raise _WorkerEnded(f"worker {self.pid} sent a frame that is not an object")
        return reply

    async def exchange(self, frame: bytes) -> dict[str, Any]:
        try:
            await self._stdin.send_all(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise _WorkerEnded(f"worker {self.pid} ended") from exc
        return await self.receive()

    async def end(self, *, kill: bool) -> None:
        """Make the worker exit (at once with ``kill``, else at the end of its stdin)
        and reap it; cannot be cancelled."""
        await end_worker(self.process, kill=kill, exit_within=EXIT_TIMEOUT)


class Evaluator:
    """Evaluates callers' expressions in killable worker processes (module docstring).

    ``budget``: seconds one request may spend evaluating; ``workers``: evaluations at
    once; ``command``: how a worker is started (the default runs
    :mod:`nodeagent._expressions._worker` with this interpreter).
    """

    def __init__(
        self,
        *,
        budget: float = DEFAULT_BUDGET,
        workers: int = DEFAULT_WORKERS,
        command: Sequence[str] | None = None,
    ) -> None:
        if budget <= 0 or workers < 1:
            raise ValueError("an evaluator needs a positive budget and at least one worker")
        self.budget = budget
        self.command = (
            list(command)
            if command is not None
            else [sys.executable, "-m", "nodeagent._expressions._worker"]
        )
        self._limiter = trio.CapacityLimiter(workers)
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        #: Workers started so far, and killed for outlasting their budget.
        self.started = 0
        self.killed = 0
        self._closed = False

    def _closed_meanwhile(self) -> bool:
        # A call, not the attribute: its value may have changed across an await.
        return self._closed

    @property
    def running(self) -> int:
        """Evaluations under way now."""
        return len(self._busy)

    def pids(self) -> list[int]:
        """The worker processes alive now (idle or evaluating)."""
        return sorted(w.pid for w in (*self._idle, *self._busy))

    async def select(
        self,
        text: str,
        ads: Sequence[Mapping[str, AdValue]],
        target: Mapping[str, AdValue] | None = None,
    ) -> list[bool]:
        """Whether ``text`` is true against each of ``ads`` (``target`` as TARGET).

        Raises :class:`~slots.InvalidRequest` for an expression out of bounds or that
        does not parse, :class:`ExpressionTooCostly` past the budget,
        :class:`EvaluatorUnavailable` when no worker starts.
        """
        literal = _LITERALS.get(check_expression(text).strip().lower())
        if literal is not None:
            return [literal] * len(ads)
        results = await self._request(text, ads, target, want="true")
        return [r is True for r in results]

    async def evaluate_each(
        self,
        text: str,
        ads: Sequence[Mapping[str, AdValue]],
        target: Mapping[str, AdValue] | None = None,
    ) -> list[AdValue]:
        """The value of ``text`` against each of ``ads``: plain Python, ``None`` for
        undefined and error (:func:`slots._classad.plain_result`). Raises as
        :meth:`select`."""
        literal = _LITERALS.get(check_expression(text).strip().lower())
        if literal is not None:
            return [literal] * len(ads)
        return await self._request(text, ads, target, want="values")

    async def is_true(
        self, text: str, my: Mapping[str, AdValue], target: Mapping[str, AdValue] | None = None
    ) -> bool:
        """Whether ``text`` is true with ``my`` as MY and ``target`` as TARGET; raises as
        :meth:`select`."""
        return (await self.select(text, [my], target))[0]

    async def evaluate(
        self, text: str, my: Mapping[str, AdValue], target: Mapping[str, AdValue] | None = None
    ) -> AdValue:
        """The value of ``text`` with ``my`` as MY and ``target`` as TARGET; raises as
        :meth:`select`."""
        return (await self.evaluate_each(text, [my], target))[0]

    async def _request(
        self,
        text: str,
        ads: Sequence[Mapping[str, AdValue]],
        target: Mapping[str, AdValue] | None,
        *,
        want: str,
    ) -> list[Any]:
        if not ads:
            return []
        frame = _encode(
            {
                "text": text,
                "ads": list(ads),
                "target": target,
                "want": want,
                "limit": self.budget * 2 + SELF_KILL_MARGIN,
            }
        )
        if self._closed:
            raise EvaluatorUnavailable("the evaluator is closed")
        async with self._limiter:
            worker = self._idle.pop() if self._idle else await self._start()
            self._busy.add(worker)
            reply: dict[str, Any] | None = None
            ended = False
            try:
                with trio.move_on_after(self.budget):
                    reply = await worker.exchange(frame)
            except _WorkerEnded:
                ended = True
            finally:
                self._busy.discard(worker)
                if reply is None:
                    self.killed += 1
                    await worker.end(kill=True)
                elif self._closed_meanwhile():  # no worker is kept after aclose()
                    await worker.end(kill=False)
                else:
                    self._idle.append(worker)
        if reply is None:
            if ended:
                raise ExpressionTooCostly("evaluating the expression ended its worker process")
            raise ExpressionTooCostly(
                f"evaluating the expression took longer than its budget of {self.budget:g} s"
            )
        if "invalid" in reply:
            raise InvalidRequest(str(reply["invalid"]))
        results = reply.get("results")
        if not isinstance(results, list) or len(results) != len(ads):
            raise ExpressionTooCostly("the expression's worker gave no answer for every ad")
        return results

    async def _start(self) -> _Worker:
        try:
            process = await trio.lowlevel.open_process(
                self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        except OSError as exc:
            raise EvaluatorUnavailable(f"cannot start an expression worker: {exc}") from exc
        worker = _Worker(process)
        self.started += 1
        try:
            with trio.fail_after(START_TIMEOUT):
                ready = await worker.receive()
        except (_WorkerEnded, trio.TooSlowError) as exc:
            await worker.end(kill=True)
            raise EvaluatorUnavailable(f"the expression worker did not start: {exc}") from exc
        except BaseException:
            await worker.end(kill=True)
            raise
        if ready != {"ready": True}:
            await worker.end(kill=True)
            raise EvaluatorUnavailable("the expression worker did not say it was ready")
        return worker

    async def aclose(self) -> None:
        """End every idle worker; evaluations under way end theirs when they end, and
        later requests are refused (:class:`EvaluatorUnavailable`)."""
        self._closed = True
        idle, self._idle = self._idle, []
        for worker in idle:
            await worker.end(kill=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
