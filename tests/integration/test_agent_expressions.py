"""A real agent evaluates callers' expressions off its event loop, within a budget."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness import AgentProcess, costly_expression, wait_for

#: Some 25 s of evaluation on a quiet machine against the agent's budget of 2 s. (40
#: backtracking regexps joined by ``||`` took 1.94 s on a quiet machine: under the budget.)
COSTLY = costly_expression(9)
WORKER = b"nodeagent._expressions._worker"


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    with AgentProcess(tmp_path / "agent") as a:
        yield a


def workers(a: AgentProcess) -> list[int]:
    """The agent's expression worker processes alive now (children of its process)."""
    assert a.proc is not None
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == a.proc.pid and fields[0] not in ("Z", "X") and WORKER in cmdline:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def post_drain(a: AgentProcess, body: dict[str, object]) -> httpx.Response:
    return a.call("POST", "/v1/drain", json=body)


def test_a_costly_check_is_refused_while_the_agent_keeps_answering(
    agent: AgentProcess,
) -> None:
    assert workers(agent) == []  # none before the first expression
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        costly = pool.submit(post_drain, agent, {"check": COSTLY, "commit": True})
        (worker,) = wait_for(lambda: workers(agent))
        # The evaluation runs in the worker; the agent answers meanwhile.
        assert agent.call("GET", "/healthz").status_code == 200
        ad = agent.call("GET", "/v1/ad")
        assert ad.status_code == 200
        assert ad.json()["machine"]["DrainState"] == "none"
        assert not costly.done()
        response = costly.result(timeout=30)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "expression.too_costly"
    assert not alive(worker)  # killed at the budget
    drain = agent.call("GET", "/v1/drain").json()
    assert drain["state"] == "none", drain
    assert agent.call("GET", "/v1/ad").json()["machine"]["DrainState"] == "none"
    audited = [
        (r["action"], r["result"])
        for r in map(json.loads, (agent.root / "state" / "audit.log").read_text().splitlines())
    ]
    assert audited == [("drain.start", "expression.too_costly")]


def test_cheap_checks_still_decide_and_the_workers_end_with_the_agent(
    agent: AgentProcess,
) -> None:
    response = post_drain(agent, {"check": "TotalCpus == 7", "commit": True})
    assert response.status_code == 412, response.text
    assert response.json()["error"]["code"] == "drain.check_failed"
    response = post_drain(agent, {"check": "NoSuchAttribute > 0", "commit": True})
    assert response.status_code == 412, response.text  # undefined is not true
    response = post_drain(agent, {"check": "TotalCpus == 8 && Start", "commit": True})
    assert response.status_code == 201, response.text
    assert response.json()["state"] == "drained"
    started = workers(agent)
    assert len(started) == 1  # one worker, kept between requests
    assert agent.stop() == 0
    assert [pid for pid in started if alive(pid)] == []
