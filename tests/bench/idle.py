"""Idle daemon: resident memory after start-up and CPU consumed while idle.

Starts a daemon with no jobs (8 cpus configured, no master), lets it settle, reads its
RSS and USS (psutil), then measures the CPU time (user + system) it consumes over an idle
interval (30 s by default) and its RSS at the end.

Prints one JSON document. Usage: ``python tests/bench/idle.py [--seconds S]``.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._benchlib import cpu_seconds
from tests.harness import AgentProcess

MIB = 1024 * 1024
SETTLE = 2.0


def stop_daemon(agent: AgentProcess) -> None:
    """SIGTERM the daemon this benchmark started and wait for it (SIGKILL if it hangs)."""
    proc = agent.proc
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)


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


def measure(agent: AgentProcess, seconds: float) -> dict[str, Any]:
    started = time.perf_counter()
    agent.start()
    ready = time.perf_counter() - started
    assert agent.proc is not None
    process = psutil.Process(agent.proc.pid)
    time.sleep(SETTLE)
    memory = process.memory_full_info()
    with agent.client() as client:
        if client.get("/healthz").status_code != 200:
            raise RuntimeError("the daemon does not answer")
    cpu0, wall0 = cpu_seconds(process), time.perf_counter()
    time.sleep(seconds)
    cpu1, wall1 = cpu_seconds(process), time.perf_counter()
    rss_end = process.memory_info().rss
    return {
        "benchmark": "idle",
        "start_to_ready_s": round(ready, 3),
        "rss_after_start_mib": round(memory.rss / MIB, 1),
        "uss_after_start_mib": round(memory.uss / MIB, 1),
        "rss_after_idle_mib": round(rss_end / MIB, 1),
        "threads": process.num_threads(),
        "idle_seconds": round(wall1 - wall0, 1),
        "idle_cpu_seconds": round(cpu1 - cpu0, 3),
        "idle_cpu_percent": round(100 * (cpu1 - cpu0) / (wall1 - wall0), 3),
        "daemon_log_problems": log_problems(agent),
    }


def run(seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as tmp:
        agent = AgentProcess(Path(tmp) / "agent")
        try:
            return measure(agent, seconds)
        finally:
            stop_daemon(agent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _terminate)
    print(json.dumps(run(args.seconds), indent=2))


if __name__ == "__main__":
    main()
