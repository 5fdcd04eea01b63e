"""What the agent benchmarks share: percentiles, pinned job processes, clean-up.

Not a benchmark itself (``run_all`` runs only the scripts whose names do not start
with an underscore).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.harness import AgentProcess

__all__ = [
    "Pinned",
    "become_subreaper",
    "cpu_seconds",
    "end_children",
    "expect",
    "log_problems",
    "percentile",
    "proc_stat",
    "stop_daemon",
    "summary_ms",
    "terminate",
]


def cpu_seconds(process: psutil.Process) -> float:
    """The CPU time ``process`` has used: user and system, seconds."""
    times = process.cpu_times()
    return float(times.user + times.system)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear interpolation between closest ranks."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary_ms(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        "p50": round(percentile(ms, 50), 3),
        "p99": round(percentile(ms, 99), 3),
        "max": round(max(ms), 3),
        "min": round(min(ms), 3),
    }


def _exited(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def proc_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, pgid) of ``pid``, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[2])


class Pinned:
    """Job processes to watch, each held by a pidfd (which names one process for good)."""

    def __init__(self) -> None:
        self.fds: dict[int, int] = {}

    def pin(self, pid: int, *, parent: int | None = None, pgid: int | None = None) -> bool:
        """Hold ``pid`` if it is alive and still the child of ``parent`` / in group ``pgid``."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        found = proc_stat(pid)
        if (
            found is None
            or (parent is not None and found[0] != parent)
            or (pgid is not None and found[1] != pgid)
            or _exited(fd)
        ):
            os.close(fd)
            return False
        self.fds[pid] = fd
        return True

    def alive(self) -> list[int]:
        return [pid for pid, fd in self.fds.items() if not _exited(fd)]

    def wait_all(self, timeout: float) -> float:
        """Wait until every pinned process has ended; returns that instant (perf_counter)."""
        deadline = time.monotonic() + timeout
        poller = select.poll()
        pending = {fd for fd in self.fds.values() if not _exited(fd)}
        for fd in pending:
            poller.register(fd, select.POLLIN)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{len(pending)} job processes still alive")
            for fd, _ in poller.poll(left * 1000):
                poller.unregister(fd)
                pending.discard(fd)
        return time.perf_counter()

    def release(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Adopt the orphans of every process started from here (prctl PR_SET_CHILD_SUBREAPER).

    Jobs outlive their daemon by design. Once the daemon has stopped, the jobs it left
    are children of this process, so ending them can never hit another program's process.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def end_children(timeout: float = 10.0) -> None:
    """SIGKILL and reap every child still here (what a stopped daemon left behind)."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while True:
        children = [
            int(entry)
            for entry in os.listdir("/proc")
            if entry.isdigit() and (found := proc_stat(int(entry))) is not None and found[0] == me
        ]
        if not children:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes left behind: {children}")
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
                    time.sleep(0.01)


def stop_daemon(agent: AgentProcess) -> None:
    """SIGTERM the daemon and wait for it (SIGKILL if it hangs); then end its jobs."""
    proc = agent.proc
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
    end_children()


def log_problems(agent: AgentProcess) -> list[str]:
    """WARNING, ERROR and traceback lines of the daemon's log."""
    try:
        lines = agent.log_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    return [
        line for line in lines if " WARNING " in line or " ERROR " in line or "Traceback" in line
    ][:20]


def terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def expect(response: httpx.Response, status: int) -> dict[str, Any]:
    if response.status_code != status:
        raise RuntimeError(
            f"{response.request.method} {response.request.url.path}: "
            f"{response.status_code} {response.text}"
        )
    body: dict[str, Any] = response.json()
    return body
