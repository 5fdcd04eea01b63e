"""Fast drain: time from the commit request until every job's process group is dead.

128 jobs (one cpu each, on a 128-cpu machine), each a process group of two processes
(``sh -c 'sleep 3600 & exec sleep 3600'``: the leader and a background child). A
one-shot fast drain (``{"schedule": "fast", "commit": true}``) is sent over the Unix
socket; the benchmark holds a pidfd on every process of every group and waits on all of
them with poll(2), so "dead" means the kernel has ended the process (reaping is the
daemon's business). It then polls ``GET /v1/drain`` until the node shows ``drained``.
The drain is cancelled and new jobs started for the next run.

The same is measured with a single job, to compare "job end → DRAINED visible" with
Slurm's figure for one job.

Prints one JSON document. Usage: ``python tests/bench/fast_drain.py [--jobs N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._benchlib import (
    Pinned,
    become_subreaper,
    log_problems,
    percentile,
    proc_stat,
    stop_daemon,
    terminate,
)
from tests.harness import AgentProcess, wait_for

#: A job whose process group holds two processes.
JOB = ["/bin/sh", "-c", "sleep 3600 & exec sleep 3600"]


# ---------------------------------------------------------------------------- benchmark


def start_jobs(client: httpx.Client, daemon_pid: int, pinned: Pinned, jobs: int) -> None:
    """Start ``jobs`` claims and pin every process of every job's process group."""
    leaders = []
    for _ in range(jobs):
        response = client.post("/v1/claims", json={"command": JOB, "cpus": 1})
        if response.status_code != 201:
            raise RuntimeError(f"claim refused: {response.status_code} {response.text}")
        pid = response.json()["job"]["pid"]
        if not pinned.pin(pid, parent=daemon_pid):
            raise RuntimeError(f"job pid {pid} is not a live child of the daemon")
        leaders.append(pid)

    def comm(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except FileNotFoundError:
            return ""

    # Once a leader has exec'd sleep, the shell has forked its background child.
    wait_for(lambda: all(comm(pid) == "sleep" for pid in leaders), timeout=30)
    groups = set(leaders)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in groups:
            continue
        found = proc_stat(int(entry))
        if found is not None and found[1] in groups:
            pinned.pin(int(entry), pgid=found[1])
    if len(pinned.fds) != 2 * jobs:
        raise RuntimeError(f"expected {2 * jobs} job processes, found {len(pinned.fds)}")


def one_run(client: httpx.Client, daemon_pid: int, pinned: Pinned, jobs: int) -> dict[str, float]:
    start_jobs(client, daemon_pid, pinned, jobs)
    reply: list[tuple[float, httpx.Response]] = []

    def commit() -> None:
        response = client.post(
            "/v1/drain", json={"schedule": "fast", "commit": True, "reason": "bench"}
        )
        reply.append((time.perf_counter(), response))

    # The request goes from another thread so that this one watches the pidfds meanwhile.
    sender = threading.Thread(target=commit)
    started = time.perf_counter()
    sender.start()
    try:
        dead = pinned.wait_all(timeout=30)
    finally:
        sender.join(timeout=30)
    if not reply:
        raise RuntimeError("the drain request got no reply")
    answered, response = reply[0]
    if response.status_code != 201:
        raise RuntimeError(f"drain refused: {response.status_code} {response.text}")
    deadline = time.monotonic() + 30
    while True:
        body = client.get("/v1/drain").json()
        if body["state"] == "drained":
            visible = time.perf_counter()
            break
        if time.monotonic() > deadline:
            raise TimeoutError("the node did not show drained")
    pinned.release()
    cancel = client.delete("/v1/drain")
    if cancel.status_code != 200:
        raise RuntimeError(f"cancel refused: {cancel.status_code} {cancel.text}")
    return {
        "commit_to_all_dead_ms": round((dead - started) * 1000, 3),
        "commit_reply_ms": round((answered - started) * 1000, 3),
        "all_dead_to_drained_visible_ms": round((visible - dead) * 1000, 3),
        "commit_to_drained_visible_ms": round((visible - started) * 1000, 3),
        "daemon_committed_to_drained_ms": round(
            (body["drained_at"] - body["committed_at"]) * 1000, 3
        ),
    }


def series(
    client: httpx.Client, daemon_pid: int, pinned: Pinned, jobs: int, runs: int
) -> dict[str, Any]:
    results = [one_run(client, daemon_pid, pinned, jobs) for _ in range(runs)]
    return {
        "jobs": jobs,
        "processes_per_job": 2,
        "runs": results,
        "p50": {key: round(percentile([r[key] for r in results], 50), 3) for key in results[0]},
    }


def run(jobs: int, runs: int, single_runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as tmp:
        agent = AgentProcess(Path(tmp) / "agent", cpus=jobs)
        pinned = Pinned()
        try:
            agent.start()
            assert agent.proc is not None
            pid = agent.proc.pid
            with agent.client() as client:
                many = series(client, pid, pinned, jobs, runs)
                single = series(client, pid, pinned, 1, single_runs) if single_runs else None
            return {
                "benchmark": "fast_drain",
                "many": many,
                "single": single,
                "daemon_log_problems": log_problems(agent),
            }
        finally:
            stop_daemon(agent)
            pinned.release()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--single-runs", type=int, default=5)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, terminate)
    become_subreaper()
    print(json.dumps(run(args.jobs, args.runs, args.single_runs), indent=2))


if __name__ == "__main__":
    main()
