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
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._benchlib import (
    Pinned,
    become_subreaper,
    expect,
    log_problems,
    stop_daemon,
    summary_ms,
    terminate,
)
from tests.harness import AgentProcess, wait_for

WARMUP = 5


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
    signal.signal(signal.SIGTERM, terminate)
    become_subreaper()
    print(json.dumps(run(args.jobs, args.iterations), indent=2))


if __name__ == "__main__":
    main()
