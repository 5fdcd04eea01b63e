"""Drain transaction round trip over the Unix socket with 128 running jobs.

128 jobs (``sleep``, one cpu each, on a 128-cpu machine; MaxJobRetirementTime 3600 s so
that a graceful drain evicts nobody during the benchmark). Each iteration: phase 1
(``POST /v1/drain``, graceful) and phase 2 (``POST /v1/drain/{id}/commit``) — the round
trip measured — then ``DELETE /v1/drain`` to cancel and reset (the jobs un-retire). One
keep-alive connection, requests in sequence. A few warm-up iterations are not counted.
At the end every job must still run; a fast drain then ends them.

Prints one JSON document. Usage: ``python tests/bench/transaction.py [--iterations N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.harness import AgentProcess, wait_for

WARMUP = 5


# ---------------------------------------------------------------------------- helpers


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


def _stat(pid: int) -> tuple[int, int] | None:
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
        found = _stat(pid)
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
            if entry.isdigit() and (found := _stat(int(entry))) is not None and found[0] == me
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


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def expect(response: httpx.Response, status: int) -> dict[str, Any]:
    if response.status_code != status:
        raise RuntimeError(
            f"{response.request.method} {response.request.url.path}: "
            f"{response.status_code} {response.text}"
        )
    body: dict[str, Any] = response.json()
    return body


# ---------------------------------------------------------------------------- benchmark


def iteration(client: httpx.Client, jobs: int) -> tuple[float, float, float, float]:
    """(phase 1, commit, phase 1 + commit, cancel) in seconds."""
    t0 = time.perf_counter()
    pending = expect(
        client.post("/v1/drain", json={"schedule": "graceful", "reason": "bench"}), 201
    )
    t1 = time.perf_counter()
    expect(client.post(f"/v1/drain/{pending['id']}/commit"), 200)
    t2 = time.perf_counter()
    expect(client.delete("/v1/drain"), 200)
    t3 = time.perf_counter()
    if len(pending["estimate"]["blockers"]) != jobs:
        raise RuntimeError("the estimate does not list every job as a blocker")
    return t1 - t0, t2 - t1, t2 - t0, t3 - t2


def measure(
    agent: AgentProcess, daemon_pid: int, pinned: Pinned, jobs: int, iterations: int
) -> dict[str, Any]:
    sleep = shutil.which("sleep") or "/bin/sleep"
    with agent.client() as client:
        for _ in range(jobs):
            claim = expect(
                client.post("/v1/claims", json={"command": [sleep, "3600"], "cpus": 1}), 201
            )
            pid = claim["job"]["pid"]
            if not pinned.pin(pid, parent=daemon_pid):
                raise RuntimeError(f"job pid {pid} is not a live child of the daemon")
        for _ in range(WARMUP):
            iteration(client, jobs)
        samples = [iteration(client, jobs) for _ in range(iterations)]
        claims = expect(client.get("/v1/claims"), 200)["claims"]
        activities = sorted({c["activity"] for c in claims})
        if len(claims) != jobs or len(pinned.alive()) != jobs:
            raise RuntimeError("a job ended during the benchmark")
        expect(client.post("/v1/drain", json={"schedule": "fast", "commit": True}), 201)
        pinned.wait_all(timeout=30)
        wait_for(lambda: client.get("/v1/drain").json()["state"] == "drained", timeout=30)
        expect(client.delete("/v1/drain"), 200)
    return {
        "benchmark": "transaction",
        "jobs": jobs,
        "iterations": iterations,
        "warmup": WARMUP,
        "transport": "unix socket, one keep-alive connection",
        "round_trip_ms": summary_ms([s[2] for s in samples]),
        "phase1_ms": summary_ms([s[0] for s in samples]),
        "commit_ms": summary_ms([s[1] for s in samples]),
        "cancel_ms": summary_ms([s[3] for s in samples]),
        "activities_after": activities,
        "daemon_log_problems": log_problems(agent),
    }


def run(jobs: int, iterations: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as tmp:
        agent = AgentProcess(
            Path(tmp) / "agent", cpus=jobs, policy={"max_job_retirement_time": 3600}
        )
        pinned = Pinned()
        try:
            agent.start()
            assert agent.proc is not None
            return measure(agent, agent.proc.pid, pinned, jobs, iterations)
        finally:
            stop_daemon(agent)
            pinned.release()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _terminate)
    become_subreaper()
    print(json.dumps(run(args.jobs, args.iterations), indent=2))


if __name__ == "__main__":
    main()
