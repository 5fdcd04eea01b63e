"""Daemons for the tests started by forking a process that has imported the package already.

Most of a daemon's start is its imports: ≈ 1.2 s of a core of the ≈ 1.6 s a master or an
agent takes to serve, and the integration tests start some hundreds of daemons. Each test
process has one launcher (``python -m tests.launcher``, started at its first daemon), which
imports what ``python -m nodeagent`` imports to run a daemon and then, for each daemon,
forks a child that becomes what ``python -m nodeagent ARGS`` would be: its standard streams
those given, its working directory and environment those given, ``sys.argv`` as ``-m`` sets
it, the command run as ``__main__`` and the interpreter's exit made (non-daemon threads
joined, ``atexit`` run, streams flushed). The launcher reports each child's exit status.

A daemon started so is a real process (its own pid, sockets, files and children) that the
test signals and waits for as it would a :class:`subprocess.Popen`
(:class:`LaunchedProcess`). What it does not go through is the interpreter's start and the
imports: the tests of those start the real command (``test_startup_safety``,
``test_cli_startup``, the demo's). A daemon whose environment changes the interpreter's own
start (a ``PYTHON*`` variable other than the launcher's) is started as a real command too,
and so is every daemon when ``NODEAGENT_TEST_EXEC`` is set.

The launcher ends with its test process: when the socket to it closes (or the launcher
fails), it kills (SIGKILL) the children still running and exits.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["LaunchedProcess", "launch"]

#: What a daemon's ``python -m nodeagent`` imports before it serves, imported once here.
_PRELOAD = (
    "nodeagent.cli._main",
    "nodeagent.cli._daemons",
    "nodeagent.master._daemon",
    "nodeagent.agent._daemon",
    "nodeagent.defrag._daemon",
)
_REPO = Path(__file__).resolve().parent.parent
_MESSAGE_MAX = 1 << 20


class LaunchedProcess:
    """A daemon the launcher forked, used as the :class:`subprocess.Popen` of a daemon is:
    ``pid``, ``returncode``, :meth:`poll`, :meth:`wait`, :meth:`send_signal`,
    :meth:`terminate`, :meth:`kill`. Signals go through a pidfd, so that one sent after the
    daemon has ended (and been reaped) never reaches another process given its pid."""

    def __init__(self, launcher: _Launcher, pid: int, args: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self._launcher = launcher
        self._pidfd = os.pidfd_open(pid)
        #: Held by the one caller taking the exit status (as :class:`subprocess.Popen`'s).
        self._waiting = threading.Lock()

    def poll(self) -> int | None:
        if self.returncode is None and self._waiting.acquire(blocking=False):
            try:
                self._ended(self._launcher.status(self.pid, timeout=0.0))
            finally:
                self._waiting.release()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._waiting.acquire(timeout=-1 if timeout is None else timeout):
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            try:
                if self.returncode is None:
                    status = self._launcher.status(self.pid, timeout=timeout)
                    if status is None:
                        raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
                    self._ended(status)
            finally:
                self._waiting.release()
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _ended(self, status: int | None) -> None:
        if status is not None and self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(status)

    def __del__(self) -> None:
        # Closed only with the object: a signal sent through it after the daemon's end
        # finds no process (ESRCH), never another's descriptor.
        with contextlib.suppress(OSError):
            os.close(self._pidfd)


class _Launcher:
    """The test process's end of one launcher: requests sent under a lock, the replies and
    the exits read by a thread of its own."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        #: The environment the launcher's interpreter started with.
        self.environ = dict(os.environ)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.launcher", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            cwd=_REPO,
        )
        theirs.close()
        self._sock = ours
        self._changed = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._statuses: dict[int, int] = {}
        self._next_id = 0
        self._gone = False
        self._send = threading.Lock()
        threading.Thread(target=self._read, name="launcher-reader", daemon=True).start()
        atexit.register(self.close)

    def fork(
        self, args: Sequence[str], *, env: Mapping[str, str], cwd: str, fds: Sequence[int]
    ) -> int:
        with self._send:
            self._next_id += 1
            ident = self._next_id
            request = {"id": ident, "args": list(args), "env": dict(env), "cwd": cwd}
            socket.send_fds(self._sock, [json.dumps(request).encode()], list(fds))
        with self._changed:
            self._changed.wait_for(lambda: ident in self._replies or self._gone, timeout=60)
            reply = self._replies.pop(ident, None)
        if reply is None:
            raise RuntimeError("the test launcher did not answer (it ended?)")
        if "error" in reply:
            raise OSError(reply["error"])
        pid: int = reply["pid"]
        return pid

    def status(self, pid: int, *, timeout: float | None) -> int | None:
        """``pid``'s wait status once it has ended (``None``: not within ``timeout``)."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._statuses or self._gone, timeout=timeout)
            if pid not in self._statuses and self._gone:
                raise RuntimeError("the test launcher ended before its daemon")
            return self._statuses.pop(pid, None)

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(_MESSAGE_MAX)
            except OSError:
                data = b""
            with self._changed:
                if not data:
                    self._gone = True
                    self._changed.notify_all()
                    return
                message = json.loads(data)
                if "exited" in message:
                    self._statuses[message["exited"]] = message["status"]
                else:
                    self._replies[message["id"]] = message
                self._changed.notify_all()

    def close(self) -> None:
        """End the launcher: the children still running are killed with it."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=20)


_launchers: dict[int, _Launcher] = {}  # by the pid of the test process they serve
_launchers_lock = threading.Lock()


def launch(
    args: Sequence[str], *, stdout: int, env: Mapping[str, str]
) -> LaunchedProcess | subprocess.Popen[bytes]:
    """``python -m nodeagent ARGS`` with both output streams to ``stdout`` (a file
    descriptor, which the caller keeps) and the environment ``env``: forked by this test
    process's launcher, or run as a real command when the launcher cannot make it as
    the command would be (see the module's description)."""
    argv = [sys.executable, "-m", "nodeagent", *args]
    launcher = None
    if not os.environ.get("NODEAGENT_TEST_EXEC"):
        with _launchers_lock:
            launcher = _launchers.get(os.getpid())
            if launcher is None:
                launcher = _launchers[os.getpid()] = _Launcher()
    if launcher is None or _interpreter_env(env) != _interpreter_env(launcher.environ):
        return subprocess.Popen(argv, stdout=stdout, stderr=subprocess.STDOUT, env=dict(env))
    pid = launcher.fork(args, env=env, cwd=os.getcwd(), fds=[0, stdout, stdout])
    return LaunchedProcess(launcher, pid, argv)


def _interpreter_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


# The launcher's side.


def _serve(sock: socket.socket) -> None:
    import importlib

    for module in _PRELOAD:
        importlib.import_module(module)
    children: dict[int, int] = {}  # pid: its pidfd
    try:
        _answer(sock, children)
    finally:  # the test process ended (or this one fails): nothing it started outlives it
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def _answer(sock: socket.socket, children: dict[int, int]) -> None:
    """Fork a child for each request on ``sock`` and say when each ends, until ``sock``
    ends."""
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ, None)
        while True:
            for key, _ in selector.select():
                if key.data is None:
                    data, fds, _flags, _addr = socket.recv_fds(sock, _MESSAGE_MAX, 3)
                    if not data:
                        return
                    request = json.loads(data)
                    try:
                        pid = _fork(request, fds, sock, selector)
                    except OSError as exc:
                        sock.send(json.dumps({"id": request["id"], "error": str(exc)}).encode())
                        continue
                    finally:
                        for fd in fds:
                            os.close(fd)
                    pidfd = os.pidfd_open(pid)
                    children[pid] = pidfd
                    selector.register(pidfd, selectors.EVENT_READ, pid)
                    sock.send(json.dumps({"id": request["id"], "pid": pid}).encode())
                else:
                    pid = key.data
                    _, status = os.waitpid(pid, 0)
                    selector.unregister(key.fd)
                    os.close(children.pop(pid))
                    sock.send(json.dumps({"exited": pid, "status": status}).encode())


def _fork(
    request: dict[str, Any],
    fds: list[int],
    sock: socket.socket,
    selector: selectors.BaseSelector,
) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        selector.close()
        sock.detach()  # its descriptor is closed below; nothing may close it again later
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = _run_as_main(request["args"])
    finally:
        os._exit(code)


def _run_as_main(args: list[str]) -> int:
    """``python -m nodeagent ARGS`` from its ``__main__`` on: its exit status."""
    import runpy

    sys.argv = ["-m", *args]
    code = 0
    try:
        runpy.run_module("nodeagent", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    _finish()
    return code


def _finish() -> None:
    """What the interpreter does at its exit before it frees itself: wait for the threads
    that are not daemons, run the ``atexit`` functions, flush the streams."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])))
