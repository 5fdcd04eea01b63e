"""``nodeagent demo`` tells the whole story and leaves no process behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def _demo_jobs() -> list[int]:
    alive = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if b"nodeagent-demo-job" in cmdline and state not in ("Z", "X"):
            alive.append(int(proc.name))
    return alive


def _demo(tmp_path: Path, option: str, lines: tuple[str, ...]) -> str:
    """Run ``nodeagent demo OPTION``: exit 0, every line told, no job left behind."""
    assert _demo_jobs() == []
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent", "demo", option],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in lines:
        assert line in out, f"{line!r} missing from:\n{out}"
    assert _demo_jobs() == []
    return out


def test_fast_demo_runs_the_maintenance_story(tmp_path: Path) -> None:
    lines = (
        "maintenance window posted",
        "node1.demo: master committed a graceful drain",
        "s promise, to be gone by its end",
        # new work that fits before the window is still taken until the drain
        "node1.demo: a web job asking a 30s promise refused (409 machine.window_ahead); the "
        "scheduler asks for the",
        "(just in time, 2s before the window: it refuses promises that would outlive it)",
        "node1.demo: empty, Drained/Idle",
        "LATE by",
        "(escalated)",
        "machines DOWN",
        "node3.demo: Start=False DrainState=drained",
        "machines UP",
        "node3.demo: resumed, Start=True",
        "3 drains started just in time, 1 escalated at the window, 3 machines downed",
        "job process groups ended",
        # the workloads' side: two groups' notices, answered, and a claim refused
        "node1.demo: jobs started, retirement promises 2s (www-data), 4s (batch)",
        "web scheduler: notice of node1.demo (promise ends in",
        "web scheduler: notice of node2.demo (promise ends in",
        "batch scheduler: notice of node3.demo (promise ends in",
        "batch scheduler: a new 60s job refused by node3.demo (409 machine.window_ahead)",
        "operator: notices: node3.demo batch/dev/etl declined by batch-scheduler: "
        "'month-end ETL, each run keeps its promise'",
        "operator: /maintenance/status: node1.demo: batch/dev/etl DECLINE, "
        "www-data/prod/web ACCEPT",
        "operator: /maintenance/status: node3.demo: batch/dev/etl DECLINE",
        "notice.answered 5, notice.issued 5",
        "batch/dev/etl answered decline to notice n-",
    )
    out = _demo(tmp_path, "--fast", lines)
    assert "NOT empty" not in out
    # every job the story started is ended at its end: five from the first wave, and the
    # second wave's work that fitted (none on a node whose drain had started first)
    started = sum(
        len(line.split("retirement promises ", 1)[1].split(", "))
        for line in out.splitlines()
        if ": jobs started, retirement promises " in line
    )
    assert started >= 5
    assert f"cleaned up: {started} job process groups ended" in out
    assert "(unexpected)" not in out
    # each group's scheduler answers only its own group's notices: web accepts 2, batch
    # declines 3
    assert out.count("web scheduler: notice of") == 2
    assert out.count("batch scheduler: notice of") == 3
    assert out.count(") accepted") == 2
    # the late job's notice carries the plan's cut (its promise outlasts the window)
    assert re.search(
        r"notice of node3\.demo \(promise ends in \d+s, cut by \d+s at the window\)", out
    )
    # The story comes in the order things happen: the window starts, then its escalation
    # evicts; the machines come back when the window ends, and the demo says so.
    assert out.index("the window starts now") < out.index("(escalated)")
    assert out.index("machines DOWN") < out.index("the window ends (6s after it started)")
    assert "the window ends (6s after it started): maintenance done, machines UP" in out


def test_rolling_demo_reboots_rack_by_rack_under_the_sla(tmp_path: Path) -> None:
    lines = (
        "six agents in three racks",
        "SLA of www-data/prod/web: at least 50% (3 of 6) up",
        "rolling maintenance 1 posted",
        "rack r1: draining",
        "rack r2: draining",
        "rack r3: draining",
        "waits: taking it now would break the SLA of www-data/prod/web",
        # Either of its two failing checks: the story tells the failure it sees when it
        # looks (every 0.25 s), and on a loaded machine both may come between two looks.
        "node4: health check failing: exit status 1: uplink not ready (check ",
        "node4: healthy, back in service",
        "scheduler: an instance of www-data/prod/web evicted by the drain starts again",
        "completed in",
        "the service never had fewer than 3 of 6 instances running (its SLA asks 3)",
        "every node is back in service",
        "each node's reboot hook ran exactly once",
        "cleaned up:",
    )
    out = _demo(tmp_path, "--rolling", lines)
    # node4's failing check is told once it is told waiting for its check, not before.
    assert out.index("node4: rebooted; waiting for its health check") < out.index(
        "node4: health check failing"
    )
    # Every node's story has each of its steps, in their order, however short the hook.
    for node in range(1, 7):
        told = [
            line.split(f"node{node}: ", 1)[1]
            for line in out.splitlines()
            if f"] node{node}: " in line and "health check failing" not in line
        ]
        assert told == [
            "draining (graceful: its instance keeps its promise)",
            "empty; its reboot hook runs",
            "rebooted; waiting for its health check",
            "healthy, back in service",
        ], (node, out)
