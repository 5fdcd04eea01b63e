"""Schemathesis over the agent's and the master's OpenAPI documents, against real daemons
on loopback TCP.

Every operation gets a bounded number of schema-valid and schema-invalid requests
(:mod:`tests.fuzzing`): no reply is a 5xx, every reply matches the document, and a 4xx
changes nothing. The master is fuzzed alone (SQLite), and as a follower of another on
etcd (its writes go to the leader: 307). ``FUZZ_SEED`` replays a run; ``FUZZ_EXAMPLES``
sets the examples per operation and mode. The longer run is ``tests/bench/fuzz.py``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.etcd import EtcdServer, etcd_server
from tests.fuzzing import AgentTarget, MasterTarget, Report, fuzz
from tests.ha import masters_on
from tests.harness import AgentProcess, MasterProcess

__all__ = ["etcd_server"]

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "10"))
BUDGET_S = 45.0


def _seed() -> int:
    return int(os.environ.get("FUZZ_SEED") or random.randrange(2**32))


@pytest.mark.parametrize(
    ("command", "runs_sleep"),
    [
        (["/usr/bin/make", "all"], True),
        (["x"], True),
        (["", "x"], False),  # an empty argument: the API refuses it, so must the case
        (["a\x00b"], False),  # a NUL: likewise
        ([], False),
        (["a", 1], False),
        ("echo hi", False),
    ],
)
def test_the_agent_target_runs_sleep_only_for_a_command_the_api_takes(
    command: Any, runs_sleep: bool
) -> None:
    """The fuzzing target runs ``sleep`` in place of a generated command, but only of one
    the API would take: a case made to be refused must reach the agent as made (a
    command made valid by the rewrite was accepted, and counted a schema violation)."""
    target = AgentTarget.__new__(AgentTarget)
    target._sleep = "/bin/sleep"
    case = SimpleNamespace(body={"command": command})
    target.rewrite("POST", "/v1/claims", case)
    assert (case.body["command"] == ["/bin/sleep", "600"]) is runs_sleep
    if not runs_sleep:
        assert case.body["command"] == command


def test_agent_api_under_fuzz(tmp_path: Path) -> None:
    seed = _seed()
    with AgentProcess(tmp_path / "agent") as agent:
        target = AgentTarget(agent)
        try:
            report = fuzz(target, max_examples=EXAMPLES, seed=seed, time_budget_s=BUDGET_S)
        finally:
            target.close()
    _assert_clean(report, seed, operations=14)


def test_master_api_under_fuzz(tmp_path: Path) -> None:
    seed = _seed()
    # Fuzzed ads carry any Name: a pool-wide DAEMON token lets them reach the ad's checks
    # (with a node's token, all but that node's are refused before them, 403).
    settings = {"allow_pool_daemon_tokens": True}
    with MasterProcess(tmp_path / "master", settings=settings) as master:
        target = MasterTarget(master)
        try:
            report = fuzz(target, max_examples=EXAMPLES, seed=seed, time_budget_s=BUDGET_S)
        finally:
            target.close()
    _assert_clean(report, seed, operations=24)


def test_a_followers_api_under_fuzz(tmp_path: Path, etcd_server: EtcdServer) -> None:
    """A master that does not lead (two on etcd): every write is redirected to the leader
    (307, documented, changing nothing) before its body is read, whatever the path or
    query; reads are answered from the shared state."""
    seed = _seed()
    with masters_on(tmp_path / "masters", etcd_server, count=2) as masters:
        leader = masters.leader()
        [follower] = masters.followers()
        target = MasterTarget(follower, writer=leader)
        try:
            report = fuzz(
                target, max_examples=max(EXAMPLES // 3, 2), seed=seed, time_budget_s=BUDGET_S / 2
            )
        finally:
            target.close()
    _assert_clean(report, seed, operations=24)
    assert report.by_status.get("307", 0) > 0, report.figures()


def _assert_clean(report: Report, seed: int, *, operations: int) -> None:
    assert report.operations >= operations, report.figures()
    assert report.examples >= report.operations * 2, report.figures()
    unanswered = sorted(name for name, count in report.by_operation.items() if not count)
    assert not unanswered, f"operations that got no request: {unanswered}"
    findings = "\n".join(
        f"{f.operation} -> {f.status}: {f.problem}\n  {f.request}" for f in report.findings
    )
    assert not report.findings, f"FUZZ_SEED={seed}\n{findings}"
