"""Eviction lag of a graceful drain: SIGTERM received minus the promised soft-kill instant.

64 jobs (one cpu each, on a 64-cpu machine) each promise a different retirement time
(``max_job_retirement_time`` spread over 2-8 s, machine MaxJobRetirementTime 10 s,
MachineMaxVacateTime 1 s). A graceful drain is committed before the first promise falls
due. Each job records ``time.time()`` in its SIGTERM handler. The promise of job *i* is
computed exactly (DESIGN §3.1, ``slots/_estimates.py``) as

    started_at_i + MJRT_i − V_i        (MJRT_i = min(machine, job), V_i = MachineMaxVacateTime)

from the claim's ``job.started_at`` (published to the millisecond), not from the blocker's
``evict_at``, which is rounded to whole seconds.

Prints one JSON document. Usage: ``python tests/bench/eviction_lag.py [--jobs N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._benchlib import (
    Pinned,
    become_subreaper,
    log_problems,
    stop_daemon,
    summary_ms,
    terminate,
)
from tests.harness import AgentProcess, job_script, wait_for

MACHINE_RETIREMENT = 10
MACHINE_VACATE = 1
SHORTEST, LONGEST = 2, 8


# ---------------------------------------------------------------------------- helpers


_SIGNAL_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*claim (\d+): SIGTERM to process group"
)


def signal_times(agent: AgentProcess) -> dict[str, float]:
    """When the daemon logged each claim's SIGTERM (local time, to the millisecond)."""
    times = {}
    for line in agent.log_path.read_text(errors="replace").splitlines():
        match = _SIGNAL_LINE.match(line)
        if match:
            stamp = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S").timestamp()
            times[match[3]] = stamp + int(match[2]) / 1000
    return times


# ---------------------------------------------------------------------------- benchmark


def retirement_times(jobs: int) -> list[int]:
    """Per-job MaxJobRetirementTime, longest first: claims are made in this order, so the
    jobs that promise least start last and every promise falls after the commit."""
    span = LONGEST - SHORTEST + 1
    return [LONGEST - (i * span) // jobs for i in range(jobs)]


@dataclass
class Run:
    """Raw figures of one run (seconds)."""

    lags: list[float] = field(default_factory=list)
    daemon_lags: list[float] = field(default_factory=list)
    late: int = 0
    unsignalled: int = 0
    first_promise_after_commit: float = math.inf
    drained_after_commit: float = 0.0
    log_problems: list[str] = field(default_factory=list)


def run(jobs: int) -> Run:
    """One daemon, ``jobs`` jobs, one graceful drain."""
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as tmp:
        root = Path(tmp)
        agent = AgentProcess(
            root / "agent",
            cpus=jobs,
            policy={
                "max_job_retirement_time": MACHINE_RETIREMENT,
                "machine_max_vacate_time": MACHINE_VACATE,
            },
        )
        pinned = Pinned()
        try:
            agent.start()
            assert agent.proc is not None
            return measure(agent, agent.proc.pid, pinned, root, jobs)
        finally:
            stop_daemon(agent)
            pinned.release()


def measure(agent: AgentProcess, daemon_pid: int, pinned: Pinned, root: Path, jobs: int) -> Run:
    promises: dict[str, float] = {}
    records: dict[str, Path] = {}
    with agent.client() as client:
        for i, mjrt in enumerate(retirement_times(jobs)):
            argv, record = job_script(root, f"job{i:03d}")
            response = client.post(
                "/v1/claims",
                json={"command": argv, "cpus": 1, "max_job_retirement_time": mjrt},
            )
            if response.status_code != 201:
                raise RuntimeError(f"claim refused: {response.status_code} {response.text}")
            claim = response.json()
            pid = claim["job"]["pid"]
            if not pinned.pin(pid, parent=daemon_pid):
                raise RuntimeError(f"job pid {pid} is not a live child of the daemon")
            effective = min(MACHINE_RETIREMENT, mjrt)
            promises[claim["id"]] = claim["job"]["started_at"] + effective - MACHINE_VACATE
            records[claim["id"]] = record
        # Every job must have installed its SIGTERM handler before the drain starts.
        wait_for(lambda: all(Path(f"{r}.started").exists() for r in records.values()), timeout=30)
        phase1 = client.post("/v1/drain", json={"schedule": "graceful", "reason": "bench"})
        if phase1.status_code != 201:
            raise RuntimeError(f"drain refused: {phase1.status_code} {phase1.text}")
        commit = client.post(f"/v1/drain/{phase1.json()['id']}/commit")
        if commit.status_code != 200:
            raise RuntimeError(f"commit refused: {commit.status_code} {commit.text}")
        committed = float(commit.json()["committed_at"])
        pinned.wait_all(timeout=LONGEST + 20)
        drained = wait_for(
            lambda: (body := client.get("/v1/drain").json())["state"] == "drained" and body,
            timeout=20,
        )
    result = Run(
        first_promise_after_commit=min(promises.values()) - committed,
        drained_after_commit=drained["drained_at"] - drained["committed_at"],
        log_problems=log_problems(agent),
    )
    sent = signal_times(agent)
    for cid, promise in promises.items():
        if promise <= committed:
            # Due at commit: that would measure the commit, not the timers.
            result.late += 1
            continue
        lines = records[cid].read_text().split() if records[cid].exists() else []
        if not lines:
            result.unsignalled += 1
            continue
        result.lags.append(float(lines[0]) - promise)
        if cid in sent:
            result.daemon_lags.append(sent[cid] - promise)
    return result


def report(jobs: int, runs: list[Run]) -> dict[str, Any]:
    lags = [lag for r in runs for lag in r.lags]
    daemon_lags = [lag for r in runs for lag in r.daemon_lags]
    retirements = retirement_times(jobs)
    return {
        "benchmark": "eviction_lag",
        "jobs": jobs,
        "runs": len(runs),
        "schedule": "graceful",
        "machine_max_job_retirement_time_s": MACHINE_RETIREMENT,
        "machine_max_vacate_time_s": MACHINE_VACATE,
        "job_max_job_retirement_time_s": [min(retirements), max(retirements)],
        "measured": len(lags),
        "excluded_due_before_commit": sum(r.late for r in runs),
        "exited_without_sigterm": sum(r.unsignalled for r in runs),
        "first_promise_after_commit_s": round(min(r.first_promise_after_commit for r in runs), 3),
        "lag_ms": summary_ms(lags) if lags else None,
        "lag_ms_per_run": [summary_ms(r.lags) for r in runs if r.lags],
        "before_promise": sum(1 for lag in lags if lag < 0),
        "promise_resolution_ms": 0.5,
        "daemon_signal_lag_ms": summary_ms(daemon_lags) if daemon_lags else None,
        "drained_after_commit_s": [round(r.drained_after_commit, 3) for r in runs],
        "daemon_log_problems": [line for r in runs for line in r.log_problems],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, terminate)
    become_subreaper()
    print(json.dumps(report(args.jobs, [run(args.jobs) for _ in range(args.runs)]), indent=2))


if __name__ == "__main__":
    main()
