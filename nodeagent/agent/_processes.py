"""Job processes: launch, adopt, wait for, signal and measure real OS processes.

A job is one OS process, the *leader*, in a process group of its own, plus whatever it starts
in that group. The daemon talks to jobs only through :class:`ProcessRunner`; the real
implementation is :class:`OsProcessRunner`, and tests may substitute a fake.

Contract:

* **Launch** starts the leader in a new session (so also a new process group whose id is the
  leader's pid), stdin from ``/dev/null``, stdout and stderr appended to ``stdout`` and
  ``stderr`` in the job's execute directory, every other descriptor closed. Nothing ties the
  job's life to the daemon's: jobs outlive a daemon that exits or is killed, and a restarted
  daemon re-adopts them.
* **Adopt** takes an existing pid, optionally checked against the start time recorded when the
  job was launched (:data:`START_TIME_TOLERANCE`), and pins it with a pidfd, so that a pid
  recycled after the check is never mistaken for the job.
* **Exits** are noticed at once, without polling: the leader's pidfd becomes readable when it
  exits and :meth:`JobProcess.wait` sleeps on it in trio's I/O loop. The daemon's own children
  are reaped by ``wait`` (or :meth:`JobProcess.exited`), so they leave no zombies.
* **Held launch** (``LaunchSpec.held``): the leader is started as a tiny ``/bin/sh`` that
  waits on a pipe before it execs the job's program. :meth:`JobProcess.start` lets it
  go; if the pipe closes first (the daemon refused the claim, or died), the holder exits 125
  and the program never runs. So the daemon can record a job's pid *before* its program
  runs, and no crash can leave a program running that the daemon does not know about.
* **Reaped launch** (``LaunchSpec.reaped``, the agent's hooks and health checks): the
  leader is the agent's reaper (:mod:`nodeagent.agent._reaper`), which runs the program,
  keeps a bounded tail of its output and, when the program ends or the reaper gets
  SIGTERM, ends every process the program left, however detached, before it exits as the
  program did. Jobs are never reaped: what a job starts is the job's.
* **Signals** (soft kill, hard kill, suspend, continue) all go to the whole process group,
  never to group 0, group 1 or the daemon's own group (:meth:`JobProcess.signal_group`
  refuses those, whatever the identity says).
* **Adoption guards**: pid 1, kernel threads, the daemon itself and its ancestors, and any
  process whose group is 0, 1, the daemon's or one of its ancestors' are never adopted.

Errors::

    ProcessError                   code "job.error"               HTTP 500
    ├── LaunchFailed               code "job.launch_failed"       HTTP 422
    ├── NotAdoptable               code "job.not_adoptable"       HTTP 422
    ├── AlreadyClaimed             code "job.already_claimed"     HTTP 409
    ├── NoSuchProcess              code "job.no_such_process"     HTTP 404
    └── PermissionRefused          code "job.permission_refused"  HTTP 403

An operation that raises leaves nothing behind: no process, no open descriptor.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import math
import os
import posixpath
import pwd
import select
import signal
import subprocess
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

import psutil
import trio

from nodeagent.agent._reaper import reaper_argv

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "PID_MAX_LIMIT",
    "START_TIME_TOLERANCE",
    "AlreadyClaimed",
    "JobProcess",
    "LaunchFailed",
    "LaunchSpec",
    "NoSuchProcess",
    "NotAdoptable",
    "OsProcessRunner",
    "PermissionRefused",
    "ProcessError",
    "ProcessIdentity",
    "ProcessRunner",
    "Reaped",
    "Usage",
    "boot_start_of",
    "current_boot_id",
    "cwd_problem",
    "daemon_environment",
    "same_process",
]

START_TIME_TOLERANCE = 1.5
"""How far (seconds) a process's start time may differ from the recorded one and still match,
for a record that holds no start since boot (see :func:`same_process`).

psutil computes ``create_time`` as the kernel's start tick (10 ms resolution, fixed for the
life of the process) plus the boot time from ``/proc/stat``, which is a whole number of
seconds and moves by one second whenever the wall clock is corrected across a second
boundary. A tolerance a little above one second absorbs both, so a running job is still
recognised after such a correction. A different process could only match if the kernel
handed out every other pid and came back to this one within that window, since Linux
allocates pids cyclically.
"""

PID_MAX_LIMIT = 2**22
"""The largest pid Linux can hand out (``PID_MAX_LIMIT``; ``kernel.pid_max`` is at most this)."""

_OUTPUT_MODE = 0o600
_EXECUTE_DIR_MODE = 0o700
_PF_KTHREAD = 0x00200000  # task flag of kernel threads (include/linux/sched.h)
_HELD_EXIT = 125
#: The holder of a held launch: waits for "go" on stdin, then runs the program with stdin
#: from /dev/null; EOF or anything else on the pipe ends it (status 125) before the program.
_HOLDER = 'IFS= read -r go || exit 125; [ "$go" = go ] || exit 125; exec "$@" </dev/null'


# --------------------------------------------------------------------------------------------
# Errors


class ProcessError(Exception):
    """Base class of the errors this module raises; never raised itself."""

    code: ClassVar[str] = "job.error"
    http_status: ClassVar[int] = 500


class LaunchFailed(ProcessError):
    """The job could not be started: bad argv, unknown user, missing cwd, exec failure.

    No process is left running and no descriptor is left open; the execute directory and its
    output files may have been created.
    """

    code: ClassVar[str] = "job.launch_failed"
    http_status: ClassVar[int] = 422


class NoSuchProcess(ProcessError):
    """Adopt: no process has this pid, or the one that has it started at another time."""

    code: ClassVar[str] = "job.no_such_process"
    http_status: ClassVar[int] = 404


class PermissionRefused(ProcessError):
    """The daemon may not do this to the process: switch to another user without being root,
    signal a process it has no permission to signal, or signal process group 0, 1 or its own
    (which would signal the daemon or init)."""

    code: ClassVar[str] = "job.permission_refused"
    http_status: ClassVar[int] = 403


class NotAdoptable(ProcessError):
    """Adopt: the process may never be a job: pid 1, a kernel thread, the daemon itself or
    one of its ancestors, or a process whose group is 0, 1, the daemon's or an ancestor's
    (signalling that group would reach the daemon, init or the kernel)."""

    code: ClassVar[str] = "job.not_adoptable"
    http_status: ClassVar[int] = 422


class AlreadyClaimed(ProcessError):
    """Adopt: the process already runs a claim's job, or is in such a job's process group.

    Raised by the daemon, which knows its claims; a runner cannot tell."""

    code: ClassVar[str] = "job.already_claimed"
    http_status: ClassVar[int] = 409


# --------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True, kw_only=True)
class Reaped:
    """How a program is run under the reaper (:attr:`LaunchSpec.reaped`).

    ``output`` is the file that keeps the last ``output_limit`` bytes of its output (at
    most twice that while it runs; ``output.dropped`` counts the bytes cut); ``grace`` is
    how long the processes it left (or all of them, once the reaper is sent SIGTERM) have
    between SIGTERM and SIGKILL.
    """

    output: Path
    output_limit: int
    grace: float


@dataclass(frozen=True, kw_only=True)
class LaunchSpec:
    """What to run and where.

    * ``argv``: the program and its arguments; a program name without a slash is looked up
      in the ``PATH`` of the job's environment (``os.defpath`` when it has none).
    * ``env``: ``None`` inherits the daemon's environment, less what only the daemon may use
      (the service manager's ``NOTIFY_SOCKET``, ``WATCHDOG_*``, ``LISTEN_*`` and the
      ``NODEAGENT_*`` configuration); otherwise the job gets exactly this mapping, nothing
      merged in (an empty mapping gives an empty environment).
    * ``cwd``: ``None`` means the execute directory; otherwise a relative path inside it
      (absolute paths, and ``..`` leading out of it, are refused; so is a directory that a
      symbolic link takes out of it, at launch).
    * ``user``: run as this user. Switching users needs root; without root, naming any user
      but the current one raises :class:`PermissionRefused`. When the daemon switches users,
      the execute directory and the output files are given to that user.
    * ``execute_dir``: created with mode 0o700 (and any missing parents) if absent; the job's
      stdout and stderr are appended to ``stdout`` and ``stderr`` there (mode 0o600).
    * ``held``: start the process but hold its program until :meth:`JobProcess.start` (see
      the module docstring). The program is then looked up before the launch, so a missing
      or non-executable program still raises :class:`LaunchFailed`.
    * ``reaped``: run the program under the agent's reaper (:class:`Reaped`,
      :mod:`nodeagent.agent._reaper`), which ends whatever the program leaves running and
      keeps its output (stdout and stderr together) to a bounded tail in a file of its
      own; the reaper is then the leader (its pid the process's), and the program is
      looked up before the launch, as for a held one.

    Raises :class:`LaunchFailed` when built with an empty ``argv``, a NUL byte in any string,
    an environment name that is empty or holds ``=``, or a ``cwd`` outside the execute
    directory.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    user: str | None = None
    execute_dir: Path
    held: bool = False
    reaped: Reaped | None = None

    def __post_init__(self) -> None:
        if not self.argv:
            raise LaunchFailed("argv must name a program")
        if any("\0" in arg for arg in self.argv):
            raise LaunchFailed("argv must not contain NUL bytes")
        if self.env is not None:
            for name, value in self.env.items():
                if not name or "=" in name or "\0" in name:
                    raise LaunchFailed(f"invalid environment variable name {name!r}")
                if "\0" in value:
                    raise LaunchFailed(f"environment variable {name} holds a NUL byte")
        if self.user is not None and (not self.user or "\0" in self.user):
            raise LaunchFailed("user must be a user name")
        if self.cwd is not None:
            problem = cwd_problem(self.cwd)
            if problem is not None:
                raise LaunchFailed(problem)


def cwd_problem(cwd: str) -> str | None:
    """Why ``cwd`` is not a directory inside the execute directory, or ``None`` if it is.

    A job's working directory is a relative path that stays inside the execute directory
    after ``..`` components are resolved; absolute paths and NUL bytes are refused.
    """
    if "\0" in cwd:
        return "cwd must not contain NUL bytes"
    if cwd.startswith("/"):
        return f"cwd must be relative to the job's execute directory, not {cwd!r}"
    normal = posixpath.normpath(cwd) if cwd else "."
    if normal == ".." or normal.startswith("../"):
        return f"cwd {cwd!r} leads out of the job's execute directory"
    return None


@dataclass(frozen=True, kw_only=True)
class ProcessIdentity:
    """Which process a job is: enough to find it again after a daemon restart.

    ``start_time`` is psutil's ``create_time`` (epoch seconds). ``boot_start`` is when the
    process started in seconds since boot, as the kernel stamped it (``/proc/<pid>/stat``'s
    start time in clock ticks, fixed for the process's life), and ``boot_id`` the boot it
    is counted on: with the pid they tell a job from a later process that got the same pid,
    whatever the wall clock did meanwhile (``start_time`` moves with every step of it, see
    :func:`same_process`). ``pgid`` is the group that signals go to.
    """

    pid: int
    start_time: float
    pgid: int
    boot_start: float | None = None
    boot_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Resource use of a job's process tree, in the units of the ad attributes.

    ``cpu_usage`` (``CpuUsage``): cores busy on average over the interval, 1.0 = one core.
    ``memory_usage`` (``MemoryUsage``): resident set size summed over the tree, MiB rounded up.
    """

    cpu_usage: float = 0.0
    memory_usage: int = 0


_DAEMON_ONLY = ("NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", "LISTEN_", "NODEAGENT_")


def daemon_environment() -> dict[str, str]:
    """The daemon's environment without what would let a job speak for the daemon (the
    service manager's ``NOTIFY_SOCKET``, ``WATCHDOG_*``, ``LISTEN_*``, and ``NODEAGENT_*``)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_DAEMON_ONLY)}


def same_process(
    recorded: ProcessIdentity | None,
    *,
    start_time: float | None,
    observed_start_time: float,
    observed_boot_start: float | None,
    boot_start: float | None = None,
    boot_id: str | None = None,
) -> bool:
    """Whether the process observed now (its ``create_time`` and start since boot) is the
    one recorded (``recorded``'s times, or the ones given).

    On the boot it was recorded on, a process is recognised by its start tick since boot,
    which no step of the wall clock moves: exactly. A record without one (written before
    it was kept, or on another boot's kernel) falls back to ``create_time`` within
    :data:`START_TIME_TOLERANCE`, which a wall clock step past that tolerance defeats.
    """
    if recorded is not None:
        start_time, boot_start, boot_id = (
            recorded.start_time,
            recorded.boot_start,
            recorded.boot_id,
        )
    if (
        boot_start is not None
        and observed_boot_start is not None
        and boot_id is not None
        and boot_id == current_boot_id()
    ):
        return abs(observed_boot_start - boot_start) < 0.5 / _CLK_TCK
    if start_time is None:
        return True
    return abs(observed_start_time - start_time) <= START_TIME_TOLERANCE


@functools.cache
def current_boot_id() -> str | None:
    """The kernel's boot id (``/proc/sys/kernel/random/boot_id``), ``None`` if unreadable."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


_CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------------------------
# Handles


class JobProcess(Protocol):
    """A handle on one job process, launched by the daemon or adopted."""

    @property
    def identity(self) -> ProcessIdentity: ...

    async def wait(self) -> int | None:
        """Return once the leader has exited.

        The result is the exit status when the daemon could reap the process (its own
        children): ``subprocess`` returncode semantics, negative = killed by that signal.
        It is ``None`` for processes whose status the daemon cannot read. Any number of tasks
        may wait at once and wait again later. Cancelling a wait leaves the handle as it was.
        """
        ...

    def signal_group(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the job's process group; a group that is already gone is ignored.

        Raises :class:`PermissionRefused` when the daemon may not signal the group, and
        for group 0, group 1 and the daemon's own group, which are never signalled.
        """
        ...

    def exited(self) -> bool:
        """Whether the leader has exited, without blocking."""
        ...

    def start(self) -> None:
        """Let a held job's program run (see :attr:`LaunchSpec.held`).

        A no-op for a job that was not held (or was already started) and for adopted
        processes. If the holder is already gone the call does nothing: the exit is seen
        by :meth:`wait`.
        """
        ...


class _OsJobProcess(abc.ABC):
    """What both kinds of real handle share: identity and group signalling."""

    def __init__(self, identity: ProcessIdentity) -> None:
        self.identity = identity

    def __repr__(self) -> str:
        i = self.identity
        state = "exited" if self.exited() else "running"
        return f"<{type(self).__name__} pid={i.pid} pgid={i.pgid} {state}>"

    @abc.abstractmethod
    def exited(self) -> bool:
        """Whether the leader has exited (reaping it when it is the daemon's child)."""

    def signal_group(self, sig: signal.Signals) -> None:
        # The one place that sends group signals: never to group 0 (killpg(0) is our own
        # group), init's group or our own, whatever the identity claims.
        pgid = self.identity.pgid
        if pgid <= 1 or pgid == os.getpgrp():
            raise PermissionRefused(f"never signals process group {pgid}")
        if not self._group_is_ours():
            return
        try:
            os.killpg(self.identity.pgid, sig)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            raise PermissionRefused(
                f"may not send {sig.name} to process group {self.identity.pgid}"
            ) from exc

    def _group_is_ours(self) -> bool:
        """False when the group id provably belongs to a later process.

        The kernel keeps a group's id reserved while any member lives, so the id can only have
        been recycled once the group is empty and its leader reaped. For a group led by the
        job, a live process with the leader's pid but another start time proves that. For a
        job that is not its group's leader nothing can be proved and the group is signalled.
        """
        ident = self.identity
        if ident.pgid != ident.pid:
            return True
        try:
            started = float(psutil.Process(ident.pid).create_time())
            boot_start = _stat_fields(ident.pid)[2]
        except (psutil.Error, OSError):
            return True
        return same_process(
            ident, start_time=None, observed_start_time=started, observed_boot_start=boot_start
        )


class _ChildProcess(_OsJobProcess):
    """A job this daemon launched; trio watches its pidfd and reaps it.

    ``gate`` is the write end of a held launch's pipe: writing ``go`` lets the program run;
    closing it unwritten (explicitly, on exit, or when the handle is collected) ends the
    holder before the program starts.
    """

    def __init__(
        self, identity: ProcessIdentity, process: trio.Process, gate: int | None = None
    ) -> None:
        super().__init__(identity)
        self._process = process
        self._gate = gate
        self._close_gate = (
            weakref.finalize(self, _close_quietly, gate) if gate is not None else None
        )

    def start(self) -> None:
        gate, self._gate = self._gate, None
        if gate is None:
            return
        with contextlib.suppress(OSError):  # the holder is gone: wait() reports it
            os.write(gate, b"go\n")
        assert self._close_gate is not None
        self._close_gate()

    async def wait(self) -> int | None:
        try:
            return await self._process.wait()
        finally:
            if self._process.returncode is not None and self._close_gate is not None:
                self._gate = None
                self._close_gate()

    def exited(self) -> bool:
        return self._process.returncode is not None


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


class _AdoptedProcess(_OsJobProcess):
    """A process found by pid, pinned by a pidfd from the moment it was validated.

    The pidfd is closed as soon as the exit is seen (or when the handle is garbage collected).
    If the process turns out to be a child of this daemon, it is reaped and its status
    reported; anything else holding it (a ``subprocess.Popen``) then finds it already reaped.
    """

    def __init__(self, identity: ProcessIdentity, pidfd: int) -> None:
        super().__init__(identity)
        self._pidfd: int | None = pidfd
        self._close_pidfd = weakref.finalize(self, os.close, pidfd)
        self._lock = trio.Lock()
        self._status: int | None = None

    def start(self) -> None:
        """Nothing to let go: an adopted process runs already."""

    async def wait(self) -> int | None:
        async with self._lock:
            fd = self._pidfd
            if fd is None:
                await trio.lowlevel.checkpoint()
            else:
                with contextlib.suppress(trio.ClosedResourceError):
                    await trio.lowlevel.wait_readable(fd)
                self._finish()
        return self._status

    def exited(self) -> bool:
        fd = self._pidfd
        if fd is None:
            return True
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if poller.poll(0):
            self._finish()
            return True
        return False

    def _finish(self) -> None:
        """The leader has exited: reap it if it is ours, then let go of the pidfd."""
        fd = self._pidfd
        if fd is None:
            return
        try:
            result = os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            result = None
        if result is not None:
            self._status = _returncode(result)
        self._pidfd = None
        with contextlib.suppress(RuntimeError):  # outside trio nobody can be waiting on it
            trio.lowlevel.notify_closing(fd)
        self._close_pidfd()


def _returncode(result: os.waitid_result) -> int:
    if result.si_code == os.CLD_EXITED:
        return result.si_status
    return -result.si_status


# --------------------------------------------------------------------------------------------
# Runners


class ProcessRunner(Protocol):
    """How the daemon starts, finds and measures jobs."""

    async def launch(self, spec: LaunchSpec) -> JobProcess:
        """Start a job; raises :class:`LaunchFailed` or :class:`PermissionRefused`."""
        ...

    async def adopt(
        self,
        pid: int,
        *,
        start_time: float | None = None,
        boot_start: float | None = None,
        boot_id: str | None = None,
    ) -> JobProcess:
        """Take over a running process; raises :class:`NoSuchProcess` when ``pid`` does not
        exist or, given its recorded start (``start_time``; ``boot_start`` on ``boot_id``:
        :func:`same_process`), belongs to a process started at another time, and
        :class:`PermissionRefused` when the daemon may not signal it."""
        ...

    def usage(self, proc: JobProcess) -> Usage:
        """CPU and memory of the job's process tree; zeros once the job has gone."""
        ...


@dataclass(frozen=True, kw_only=True)
class _CpuSample:
    at: float  # CLOCK_BOOTTIME seconds
    cpu_seconds: float
    cpu_usage: float


@dataclass(frozen=True, kw_only=True)
class _User:
    name: str
    uid: int
    gid: int


class OsProcessRunner:
    """Real jobs: ``fork``/``exec`` through trio, pidfds for exits, psutil for usage.

    ``usage`` reads ``/proc`` synchronously (a scan of all processes to find the tree); with
    many jobs, call it from a worker thread. It keeps the previous CPU sample per handle, for
    as long as the handle lives; handles must be weak-referenceable (this runner's are).
    """

    def __init__(self) -> None:
        self._samples: weakref.WeakKeyDictionary[JobProcess, _CpuSample] = (
            weakref.WeakKeyDictionary()
        )

    async def launch(self, spec: LaunchSpec) -> JobProcess:
        user = _resolve_user(spec.user)
        cwd = spec.execute_dir / spec.cwd if spec.cwd is not None else spec.execute_dir
        env = daemon_environment() if spec.env is None else dict(spec.env)
        argv = list(spec.argv)
        if spec.reaped is not None:
            # The reaper spawns the program by path: look it up now, as exec would.
            program = _find_program(spec.argv[0], env, cwd)
            reaped = spec.reaped
            argv = reaper_argv(
                [program, *spec.argv[1:]],
                output=str(reaped.output),
                limit=reaped.output_limit,
                grace=reaped.grace,
            )
        if spec.held:
            # The holder execs the program by path: look it up now, as exec would, so a
            # missing program is refused here and not by a job that dies at once.
            program = _find_program(argv[0], env, cwd)
            argv = ["/bin/sh", "-c", _HOLDER, "nodeagent-job", program, *argv[1:]]
        stdout, stderr = await trio.to_thread.run_sync(
            _prepare_execute_dir, spec.execute_dir, user, cwd, spec.reaped is None
        )
        options: dict[str, Any] = {}
        if user is not None:
            options.update(
                user=user.uid, group=user.gid, extra_groups=os.getgrouplist(user.name, user.gid)
            )
        gate_read, gate = os.pipe2(os.O_CLOEXEC) if spec.held else (subprocess.DEVNULL, None)
        try:
            process = await trio.lowlevel.open_process(
                argv,
                stdin=gate_read,
                stdout=stdout,
                stderr=stderr,
                cwd=cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
                **options,
            )
        except OSError as exc:
            if gate is not None:
                os.close(gate)
            what = exc.strerror or str(exc)
            where = f" ({exc.filename})" if exc.filename else ""
            raise LaunchFailed(f"cannot start {spec.argv[0]!r}: {what}{where}") from exc
        finally:
            for fd in (stdout, stderr):
                if fd >= 0:
                    os.close(fd)
            if gate is not None:
                os.close(gate_read)
        # Not reaped before someone waits, so psutil can read the start time even if the
        # job has already exited.
        start_time = float(psutil.Process(process.pid).create_time())
        identity = ProcessIdentity(
            pid=process.pid,
            start_time=start_time,
            pgid=process.pid,
            boot_start=_stat_fields(process.pid)[2],
            boot_id=current_boot_id(),
        )
        return _ChildProcess(identity, process, gate)

    async def adopt(
        self,
        pid: int,
        *,
        start_time: float | None = None,
        boot_start: float | None = None,
        boot_id: str | None = None,
    ) -> JobProcess:
        await trio.lowlevel.checkpoint()
        if not 0 < pid <= PID_MAX_LIMIT:
            raise NoSuchProcess(f"no process {pid}")
        if pid == 1:
            raise NotAdoptable("pid 1 (init) is never a job")
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError as exc:
            raise NoSuchProcess(f"no process {pid}") from exc
        try:
            identity = _validate(pid, start_time, boot_start, boot_id)
        except BaseException:
            os.close(pidfd)
            raise
        return _AdoptedProcess(identity, pidfd)

    def usage(self, proc: JobProcess) -> Usage:
        measured = _measure(proc.identity)
        if measured is None:
            self._samples.pop(proc, None)
            return Usage()
        cpu_seconds, rss, age = measured
        now = time.clock_gettime(time.CLOCK_BOOTTIME)
        previous = self._samples.get(proc)
        if previous is None:
            cpu_usage = cpu_seconds / age if age > 0 else 0.0
        elif now > previous.at:
            # A process that leaves the tree unreaped takes its time along: never go negative.
            cpu_usage = max(0.0, cpu_seconds - previous.cpu_seconds) / (now - previous.at)
        else:
            cpu_usage = previous.cpu_usage
        self._samples[proc] = _CpuSample(at=now, cpu_seconds=cpu_seconds, cpu_usage=cpu_usage)
        return Usage(cpu_usage=cpu_usage, memory_usage=math.ceil(rss / 2**20))


def _measure(ident: ProcessIdentity) -> tuple[float, int, float] | None:
    """CPU seconds and RSS bytes of the tree led by ``ident``, and the leader's age.

    CPU seconds count each live member's own time plus the time of the descendants it has
    reaped, so work done by short-lived helpers is not lost. ``None`` once the leader has
    exited (zombies included) or its pid names another process.
    """
    try:
        leader = psutil.Process(ident.pid)
        if leader.status() == psutil.STATUS_ZOMBIE:
            return None
        if not same_process(
            ident,
            start_time=None,
            observed_start_time=float(leader.create_time()),
            observed_boot_start=_stat_fields(ident.pid)[2],
        ):
            return None
        tree = [leader, *leader.children(recursive=True)]
        age = _age(leader)
    except (psutil.Error, OSError):
        return None
    cpu_seconds = 0.0
    rss = 0
    for member in tree:
        try:
            with member.oneshot():
                times = member.cpu_times()
                memory = member.memory_info()
        except psutil.Error:
            continue
        cpu_seconds += times.user + times.system + times.children_user + times.children_system
        rss += int(memory.rss)
    return float(cpu_seconds), rss, age


def _validate(
    pid: int, start_time: float | None, boot_start: float | None, boot_id: str | None
) -> ProcessIdentity:
    """Check the process that ``pid`` names now (the caller holds its pidfd)."""
    try:
        started = float(psutil.Process(pid).create_time())
        pgid, flags, observed_boot_start = _stat_fields(pid)
    except (psutil.NoSuchProcess, ProcessLookupError, FileNotFoundError) as exc:
        raise NoSuchProcess(f"no process {pid}") from exc
    if not same_process(
        None,
        start_time=start_time,
        observed_start_time=started,
        observed_boot_start=observed_boot_start,
        boot_start=boot_start,
        boot_id=boot_id,
    ):
        raise NoSuchProcess(
            f"process {pid} started at {started:.2f}, not at {start_time or 0:.2f}: "
            "the pid was reused"
        )
    if flags & _PF_KTHREAD:
        raise NotAdoptable(f"process {pid} is a kernel thread")
    ancestors = _daemon_and_ancestors()
    if pid in ancestors:
        raise NotAdoptable(f"process {pid} is this daemon or one of its ancestors")
    if pgid <= 1 or pgid in _groups_of(ancestors):
        raise NotAdoptable(
            f"process {pid} is in process group {pgid}, which holds this daemon, one of its "
            "ancestors or init; signalling that group would signal them"
        )
    try:
        os.kill(pid, 0)
    except PermissionError as exc:
        raise PermissionRefused(f"may not signal process {pid}") from exc
    except ProcessLookupError as exc:
        raise NoSuchProcess(f"no process {pid}") from exc
    return ProcessIdentity(
        pid=pid,
        start_time=started,
        pgid=pgid,
        boot_start=observed_boot_start,
        boot_id=current_boot_id(),
    )


def boot_start_of(pid: int) -> float:
    """When ``pid`` started, in seconds since boot (raises :class:`OSError` once it is gone)."""
    return _stat_fields(pid)[2]


def _stat_fields(pid: int) -> tuple[int, int, float]:
    """The process group, the kernel task flags and the start (seconds since boot) of
    ``pid``, from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        text = f.read()
    # The command name may hold spaces and parentheses: fields follow the last ")"
    # (fields[0] is the third field, the state; the start time in ticks is the 22nd).
    fields = text[text.rindex(b")") + 2 :].split()
    return int(fields[2]), int(fields[6]), int(fields[19]) / _CLK_TCK


def _daemon_and_ancestors() -> set[int]:
    """This process and every ancestor up to pid 1."""
    pids = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        pids.update(p.pid for p in psutil.Process().parents())
    return pids


def _groups_of(pids: set[int]) -> set[int]:
    groups = {os.getpgrp()}
    for pid in pids:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    return groups


def _find_program(name: str, env: Mapping[str, str], cwd: Path) -> str:
    """The path ``exec`` would run for ``name``, as the holder of a held launch must name it.

    A name with a slash is taken as is (relative to ``cwd``); any other is looked up in the
    ``PATH`` of ``env`` (``os.defpath`` without one), as ``subprocess`` does. A relative
    result starts with ``./``, so the holder never reads it as an option. Raises
    :class:`LaunchFailed` when no executable file is found.
    """
    if "/" in name:
        candidates = [name]
    else:
        candidates = [os.path.join(d, name) for d in os.get_exec_path(dict(env))]
    denied = False
    for candidate in candidates:
        on_disk = cwd / candidate  # an absolute candidate replaces cwd
        if on_disk.is_file():
            if os.access(on_disk, os.X_OK):
                if candidate.startswith(("/", "./", "../")):
                    return candidate
                return f"./{candidate}"
            denied = True
    what = "Permission denied" if denied else "No such file or directory"
    raise LaunchFailed(f"cannot start {name!r}: {what}")


def _age(proc: psutil.Process) -> float:
    """Seconds since ``proc`` started, on the boot clock the kernel stamps processes with."""
    since_boot = float(proc.create_time()) - float(psutil.boot_time())
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot)


def _resolve_user(name: str | None) -> _User | None:
    """The user to switch to, or ``None`` to stay the daemon's user."""
    if name is None:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError as exc:
        raise LaunchFailed(f"no such user {name!r}") from exc
    euid = os.geteuid()
    if entry.pw_uid == euid:
        return None
    if euid != 0:
        raise PermissionRefused(f"only root may run jobs as another user ({name!r})")
    return _User(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid)


def _prepare_execute_dir(
    execute_dir: Path, user: _User | None, cwd: Path, files: bool = True
) -> tuple[int, int]:
    """Create the execute directory if needed, check that ``cwd`` resolves inside it (no
    symbolic link leads out), and open the output files ``stdout`` and ``stderr`` (without
    ``files``: ``/dev/null`` for both, whose descriptor is ``subprocess.DEVNULL``;
    blocking)."""
    opened: list[int] = []
    try:
        execute_dir.mkdir(mode=_EXECUTE_DIR_MODE, parents=True, exist_ok=True)
        inside = execute_dir.resolve()
        if not cwd.resolve().is_relative_to(inside):
            raise LaunchFailed(f"cwd {cwd} leads out of the job's execute directory")
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        for name in ("stdout", "stderr") if files else ():
            opened.append(os.open(execute_dir / name, flags, _OUTPUT_MODE))
        if user is not None:
            os.chown(execute_dir, user.uid, user.gid)
            for fd in opened:
                os.fchown(fd, user.uid, user.gid)
    except OSError as exc:
        for fd in opened:
            os.close(fd)
        raise LaunchFailed(f"cannot prepare execute directory {execute_dir}: {exc}") from exc
    if not files:
        return subprocess.DEVNULL, subprocess.DEVNULL
    return opened[0], opened[1]
