"""The reaper: runs one hook or health check and ends whatever it leaves behind.

The agent starts every completion hook and health check under this small program
(:func:`reaper_argv`: ``python -I -S _reaper.py --output FILE --limit BYTES --grace S --
PROGRAM ARG…``), in the session and process group it makes for the run. The reaper:

1. makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): a process the
   program starts is re-parented to the reaper when its parent ends, never to init,
   however it detached itself (``setsid``, a double fork, a daemon);
2. starts the program, its stdin the reaper's (``/dev/null``), its stdout and stderr
   together on a pipe that the reaper reads as the data comes: appended to ``FILE``,
   which is cut back to its last ``BYTES`` bytes whenever it grows past twice that
   (``FILE.dropped`` then holds how many bytes were cut), so the file never holds more
   than ``2 × BYTES`` and a program that writes without end costs nothing more;
3. once the program has exited, or once the reaper is sent SIGTERM (the agent, at the
   run's timeout: the process group gets it, the program with it), sends SIGTERM to
   every process descended from it that still runs, waits until they are all gone, at
   most ``S`` seconds, then stops (SIGSTOP, so that nothing forks any more) and kills
   (SIGKILL) whatever is left, and reaps them all;
4. only then exits, as the program did: with its exit status, or killed by the signal
   that killed it (re-raised on itself, core dumps off), so that the agent sees the
   program's end, and sees it only once nothing the program started still runs.

Limits: a descendant that became another user (a setuid program) cannot be signalled
by a reaper running as a user; one that the kernel holds in uninterruptible sleep keeps
the reaper waiting until it can die (the agent, past its own slack, then SIGKILLs the
process group).

Only the standard library, and few modules of it: the reaper starts for every hook and
health check, with ``-I -S`` (no site, no environment), its cost in
``docs/performance.md``. Errors of its own go into ``FILE``, as the program's output.
(So no ``contextlib``, whose import alone costs more than the rest, ``try``/``except``
standing for ``suppress``; and ``_signal``, the C module, without ``signal``'s enums.)
"""

from __future__ import annotations

import ctypes
import os
import select
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
else:  # the C module: `signal` itself imports enum, a third of the start-up
    import _signal as signal

__all__ = ["DROPPED_SUFFIX", "main", "reaper_argv"]

#: Appended to the output file's name: the file holding how many bytes were cut from it.
DROPPED_SUFFIX = ".dropped"

_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_CHUNK = 65536
#: Seconds between looks while the last processes die after their SIGKILL.
_REAP_PAUSE = 0.005
#: Signals that end the run as the agent's SIGTERM does.
_ENDING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def reaper_argv(
    program: list[str], *, output: str, limit: int, grace: float, python: str | None = None
) -> list[str]:
    """The argv that runs ``program`` (its first word a path) under the reaper."""
    return [
        python or sys.executable,
        "-I",
        "-S",
        os.path.abspath(__file__),
        "--output",
        output,
        "--limit",
        str(limit),
        "--grace",
        repr(float(grace)),
        "--",
        *program,
    ]


class _Output:
    """The program's output file, kept to its last ``limit`` bytes (see the module)."""

    def __init__(self, path: str, limit: int) -> None:
        self.path = path
        self.limit = max(1, limit)
        self.tail = bytearray()
        self.total = 0
        self.size = 0  # bytes in the file
        self.fd: int | None = None
        try:  # noqa: SIM105
            os.unlink(path + DROPPED_SUFFIX)
        except OSError:
            pass
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError:
            self.fd = None

    def add(self, data: bytes) -> None:
        self.total += len(data)
        self.tail += data
        if len(self.tail) > self.limit:
            del self.tail[: len(self.tail) - self.limit]
        if self.fd is None:
            return
        try:
            _write_all(self.fd, data)
            self.size += len(data)
            if self.size > 2 * self.limit:
                self._cut()
        except OSError:
            # A full runtime file system: the file stops here; close() writes the tail.
            self._close_fd()

    def close(self) -> None:
        """Leave the file as readers find it: the tail, and the count of bytes cut."""
        if self.fd is None:
            # Never opened, or a write failed: write the tail afresh.
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
                self.size = -1
            except OSError:
                return
        try:
            if self.size != self.total:
                self._cut()
        except OSError:
            pass
        self._close_fd()

    def _cut(self) -> None:
        assert self.fd is not None
        os.pwrite(self.fd, bytes(self.tail), 0)
        os.ftruncate(self.fd, len(self.tail))
        os.lseek(self.fd, len(self.tail), os.SEEK_SET)
        self.size = len(self.tail)
        fd = os.open(
            self.path + DROPPED_SUFFIX, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600
        )
        try:
            _write_all(fd, b"%d\n" % (self.total - self.size))
        finally:
            os.close(fd)

    def _close_fd(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}): {os.strerror(errno)}")


def _tree() -> list[int]:
    """Every process descended from this one now (from ``/proc``, parents first)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(b")") + 2 :].split(None, 2)[1])
        except (OSError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found: list[int] = []
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _signal_tree(sig: int, skip: set[int] | None = None) -> list[int]:
    """Send ``sig`` to every descendant (but ``skip``); returns the pids signalled.

    Each is pinned by a pidfd and checked to be still a descendant's child before it is
    signalled, so that a pid reused by another process meanwhile is never hit."""
    tree = _tree()
    ours = {os.getpid(), *tree}
    sent = []
    for pid in tree:
        if skip is not None and pid in skip:
            continue
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(b")") + 2 :].split(None, 2)[1])
            if ppid in ours:
                signal.pidfd_send_signal(fd, sig)
                sent.append(pid)
        except (OSError, ValueError):
            pass
        finally:
            os.close(fd)
    return sent


class _Run:
    """The program's run: its pid, its wait status once reaped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.status: int | None = None

    def reap(self) -> bool:
        """Reap every child that has ended; whether any child is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.pid:
                self.status = status

    def end_all(self) -> None:
        """Stop, kill and reap every descendant left."""
        if not self.reap():
            return
        stopped: set[int] = set()
        while new := _signal_tree(signal.SIGSTOP, skip=stopped):
            stopped.update(new)
        _signal_tree(signal.SIGKILL)
        while self.reap():
            time.sleep(_REAP_PAUSE)
            _signal_tree(signal.SIGKILL)


def _drain(fd: int, output: _Output) -> None:
    """What is left in the pipe once every writer is gone (never waits)."""
    os.set_blocking(fd, False)
    while True:
        try:
            data = os.read(fd, _CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        if not data:
            return
        output.add(data)


def _parse(argv: list[str]) -> tuple[str, int, float, list[str]]:
    options: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i] != "--":
        options[argv[i]] = argv[i + 1]
        i += 2
    program = argv[i + 1 :]
    if not program or set(options) != {"--output", "--limit", "--grace"}:
        raise SystemExit("usage: _reaper.py --output FILE --limit BYTES --grace S -- PROGRAM …")
    return options["--output"], int(options["--limit"]), float(options["--grace"]), program


def main(argv: list[str]) -> int:
    """Run the program as the module says; the exit status to exit with (a program killed
    by a signal kills the reaper with the same signal first)."""
    path, limit, grace, program = _parse(argv)
    output = _Output(path, limit)
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    for sig in (*_ENDING, signal.SIGCHLD):
        signal.signal(sig, lambda signum, frame: None)
    try:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    except OSError as exc:
        output.add(f"nodeagent reaper: cannot become a subreaper: {exc}\n".encode())
        output.close()
        return 127
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.posix_spawn(
            program[0],
            program,
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, write_end, 1),
                (os.POSIX_SPAWN_DUP2, write_end, 2),
            ],
            setsigdef=(*_ENDING, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ),
            setsigmask=(),
        )
    except OSError as exc:
        output.add(f"cannot start {program[0]!r}: {exc.strerror or exc}\n".encode())
        output.close()
        return 127
    finally:
        os.close(write_end)
    run = _Run(pid)
    poller = select.poll()
    poller.register(read_end, select.POLLIN)
    poller.register(wake_read, select.POLLIN)
    ending = False
    deadline: float | None = None
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic()) * 1000
        for fd, _ in poller.poll(wait):
            if fd == wake_read:
                try:
                    woken = os.read(wake_read, 256)
                except BlockingIOError:
                    woken = b""
                ending = ending or any(s in woken for s in _ENDING)
            else:
                data = os.read(read_end, _CHUNK)
                if data:
                    output.add(data)
                else:
                    poller.unregister(read_end)
        left = run.reap()
        if deadline is None and (ending or run.status is not None):
            if left:  # no child left: nothing descends from the reaper any more
                _signal_tree(signal.SIGTERM)
            deadline = time.monotonic() + grace
        if deadline is not None and (not left or time.monotonic() >= deadline):
            break
    run.end_all()
    _drain(read_end, output)
    output.close()
    status = run.status if run.status is not None else 0
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return code
    # Killed by a signal: die of it too, without a core of the reaper's own.
    try:  # noqa: SIM105
        _prctl(_PR_SET_DUMPABLE, 0)
    except OSError:
        pass
    signal.set_wakeup_fd(-1)
    try:  # noqa: SIM105
        signal.signal(-code, signal.SIG_DFL)
    except (OSError, ValueError):  # SIGKILL, SIGSTOP: no handler to reset
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
    os.kill(os.getpid(), -code)
    return 128 - code


if __name__ == "__main__":
    try:
        status = main(sys.argv[1:])
    except BaseException:
        # A failure of the reaper's own leaves nothing of the program's behind either.
        _Run(0).end_all()
        raise
    # Nothing to flush or finalize: the interpreter's clean-up would only add time.
    os._exit(status)
