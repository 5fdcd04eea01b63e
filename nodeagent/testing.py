"""Fakes of the agent's I/O seams, for tests of code built on :mod:`nodeagent.agent`.

:class:`FakeRunner` implements the process runner with jobs that live on trio's
clock: they react to signals after the delays their :class:`FakeBehaviour` sets,
so a test on virtual time (``autojump_clock``) sees exact instants. Every signal
is logged with the trio time it arrived.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from nodeagent._clock import Clock
from nodeagent.agent._processes import JobProcess, LaunchSpec, NoSuchProcess, ProcessIdentity, Usage

__all__ = ["FakeBehaviour", "FakeProcess", "FakeRunner"]


@dataclass(frozen=True, kw_only=True)
class FakeBehaviour:
    """How a fake job behaves: it ends by itself after ``length`` seconds (``None``:
    never), exits ``term_delay`` seconds after a soft-kill signal (``None``: ignores it).
    """

    length: float | None = None
    term_delay: float | None = 0.0


@dataclass(eq=False)
class FakeProcess:
    """A job process on trio's clock."""

    identity: ProcessIdentity
    behaviour: FakeBehaviour
    signals: list[tuple[float, signal.Signals]] = field(default_factory=list)
    returncode: int | None = None
    #: Whether the agent let the job's program go (:meth:`start`); fake jobs run regardless.
    started: bool = False
    _done: trio.Event = field(default_factory=trio.Event)
    _stopped: bool = False

    async def wait(self) -> int | None:
        await self._done.wait()
        return self.returncode

    def exited(self) -> bool:
        return self._done.is_set()

    def start(self) -> None:
        self.started = True

    def signal_group(self, sig: signal.Signals) -> None:
        if self.exited():
            return
        self.signals.append((trio.current_time(), sig))
        if sig is signal.SIGKILL:
            self._exit(-signal.SIGKILL)
        elif sig is signal.SIGSTOP:
            self._stopped = True
        elif sig is signal.SIGCONT:
            self._stopped = False
        elif self.behaviour.term_delay is not None:
            self._later(self.behaviour.term_delay, -int(sig))

    def _exit(self, code: int) -> None:
        if not self._done.is_set():
            self.returncode = code
            self._done.set()

    def _later(self, delay: float, code: int) -> None:
        async def fire() -> None:
            await trio.sleep(delay)
            self._exit(code)

        self._nursery.start_soon(fire)

    _nursery: trio.Nursery = field(init=False)


class FakeRunner:
    """A :class:`~nodeagent.agent._processes.ProcessRunner` of fake jobs.

    ``behaviour`` picks each launched job's behaviour from its spec (default: exits
    at once on SIGTERM, never ends by itself); a launch takes ``launch_delay`` seconds.
    Run :meth:`run` in a nursery first.
    """

    def __init__(
        self,
        behaviour: Callable[[LaunchSpec], FakeBehaviour] | None = None,
        *,
        clock: Clock | None = None,
        launch_delay: float = 0.0,
    ) -> None:
        self._clock = clock
        self.launch_delay = launch_delay
        self._behaviour = behaviour or (lambda spec: FakeBehaviour())
        self._pids = itertools.count(10_000)
        self.processes: dict[int, FakeProcess] = {}
        self.launched: list[LaunchSpec] = []
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def launch(self, spec: LaunchSpec) -> FakeProcess:
        await trio.sleep(self.launch_delay)
        self.launched.append(spec)
        return self._spawn(self._behaviour(spec))

    def _spawn(self, behaviour: FakeBehaviour) -> FakeProcess:
        assert self._nursery is not None, "FakeRunner.run is not running"
        pid = next(self._pids)
        proc = FakeProcess(
            identity=ProcessIdentity(pid=pid, start_time=self._start_time(), pgid=pid),
            behaviour=behaviour,
        )
        proc._nursery = self._nursery
        self.processes[pid] = proc
        if behaviour.length is not None:
            proc._later(behaviour.length, 0)
        return proc

    def _start_time(self) -> float:
        return self._clock.now() if self._clock is not None else trio.current_time()

    async def adopt(
        self,
        pid: int,
        *,
        start_time: float | None = None,
        boot_start: float | None = None,
        boot_id: str | None = None,
    ) -> FakeProcess:
        await trio.lowlevel.checkpoint()
        proc = self.processes.get(pid)
        if proc is None or proc.exited():
            raise NoSuchProcess(f"no process {pid}")
        return proc

    def usage(self, proc: JobProcess) -> Usage:
        return Usage(cpu_usage=0.5, memory_usage=64)
