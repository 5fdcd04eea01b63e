"""Admission before a maintenance window on real agents, with the window from a real master.

The agents report to the master (their DAEMON tokens are its own) but do not share its
pool key, so the master cannot start its drains on them: the nodes stay open before
their windows, and what they admit is the agent's rule alone.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeagent.client import Refused, SyncAgentClient
from tests.harness import AgentProcess, MasterProcess, wait_for
from tests.integration.test_master import window

REFUSE, SHORTEN, GUARDED = "refuse.test", "shorten.test", "guarded.test"
#: A site's own rule in START: no new work within a day of a window.
GUARD = "MY.UnavailabilityStart is undefined || MY.UnavailabilityStart - time() > 86400"
SLEEP = [sys.executable, "-c", "import time; time.sleep(300)"]
LONGEST = re.compile(r"the longest it can accept now is (\d+) s$")


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("window")
    with ExitStack() as stack:
        master = stack.enter_context(
            MasterProcess(root / "master", settings={"reconcile_interval": 0.2})
        )
        agents = {}
        for host, before_window in ((REFUSE, "refuse"), (SHORTEN, "shorten"), (GUARDED, "admit")):
            settings = master.agent_settings(root / host, node=host, update_interval=0.5)
            (root / host / "state" / "pool.key").unlink()  # the master cannot drain it
            policy = {
                "max_job_retirement_time": "1h",
                "machine_max_vacate_time": 1,
                "before_window": before_window,
            } | ({"start": GUARD} if host == GUARDED else {})
            agents[host] = stack.enter_context(
                AgentProcess(root / host, hostname=host, policy=policy, master=settings)
            )
        yield {"master": master, **agents}


def post_window(master: MasterProcess, host: str, start: int) -> None:
    response = master.call("POST", "/maintenance/schedule", json=window([host], start))
    assert response.status_code == 200, response.text


def ad_shows(agent: AgentProcess, start: int | None) -> dict[str, Any]:
    """The agent's machine ad once it holds the window starting at ``start`` (``None``:
    once it holds none)."""

    def shows() -> dict[str, Any] | None:
        machine: dict[str, Any] = agent.call("GET", "/v1/ad").json()["machine"]
        return machine if machine.get("UnavailabilityStart") == start else None

    found: dict[str, Any] = wait_for(shows)
    return found


def refusal(agent: AgentProcess, promise: int) -> Refused:
    client = SyncAgentClient(socket=agent.socket)
    with pytest.raises(Refused) as caught:
        client.create_claim(SLEEP, max_job_retirement_time=promise)
    return caught.value


def claim_command(agent: AgentProcess, retirement: str) -> subprocess.CompletedProcess[str]:
    """``nodeagent claim --retirement RETIREMENT`` against ``agent``."""
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", "claim", "--retirement", retirement, "--", *SLEEP],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "NODEAGENT_SOCKET": str(agent.socket)},
        timeout=60,
    )


def test_a_promise_that_would_outlive_the_window_is_refused(daemons: dict[str, Any]) -> None:
    master, agent = daemons["master"], daemons[REFUSE]
    start = int(time.time()) + 600
    post_window(master, REFUSE, start)
    machine = ad_shows(agent, start)
    assert machine["Unavailability"] == {"Start": start, "Duration": 3600}
    assert machine["UnavailabilityDuration"] == 3600
    assert machine["Start"] is True

    refused = refusal(agent, 1200)
    assert (refused.status, refused.code) == (409, "machine.window_ahead")
    iso = datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"the machine's maintenance window starts at {iso}: a retirement promise of 1200 s" in (
        refused.message
    )
    found = LONGEST.search(refused.message)
    assert found is not None, refused.message
    assert 0 < int(found.group(1)) <= 600
    assert agent.call("GET", "/v1/claims").json()["claims"] == []  # nothing changed

    # the command line says it and exits 1, as for any refusal
    shown = claim_command(agent, "20m")
    assert shown.returncode == 1, shown.stderr
    assert "machine.window_ahead" in shown.stdout + shown.stderr

    short = agent.claim(SLEEP, max_job_retirement_time=120)
    assert short["job"]["retirement_granted"] == 120
    assert short["job"]["retirement_shortened_by"] is None
    zero = agent.claim(SLEEP, max_job_retirement_time=0)
    assert zero["job"]["retirement_granted"] == 0

    # the window moved 30 minutes later admits what it refused
    post_window(master, REFUSE, start + 1800)
    ad_shows(agent, start + 1800)
    long = agent.claim(SLEEP, max_job_retirement_time=1200)
    assert long["job"]["retirement_granted"] == 1200
    assert refusal(agent, 3600).code == "machine.window_ahead"


def test_shorten_admits_the_claim_with_its_promise_cut(daemons: dict[str, Any]) -> None:
    master, agent = daemons["master"], daemons[SHORTEN]
    start = int(time.time()) + 600
    post_window(master, SHORTEN, start)
    ad_shows(agent, start)

    claim = agent.claim(SLEEP, max_job_retirement_time=1200)
    job = claim["job"]
    kept = job["max_job_retirement_time"]
    assert 0 < kept <= 600
    assert job["retirement_granted"] == kept
    assert job["retirement_shortened_by"] == 1200 - kept
    assert job["started_at"] + kept <= start
    slots = agent.call("GET", "/v1/ad").json()["slots"]
    slot = next(s for s in slots if s.get("ClaimId") == claim["id"])
    assert slot["MaxJobRetirementTime"] == kept
    assert slot["RetirementShortenedBy"] == 1200 - kept

    client = SyncAgentClient(socket=agent.socket)
    decoded = client.create_claim(SLEEP, max_job_retirement_time=1200)
    assert decoded.job.retirement_shortened_by is not None
    assert decoded.job.retirement_shortened_by >= 1200 - kept
    shown = claim_command(agent, "20m")
    assert shown.returncode == 0, shown.stderr
    assert "to end when the machine's maintenance window starts" in shown.stdout

    fits = agent.claim(SLEEP, max_job_retirement_time=60)
    assert fits["job"]["retirement_shortened_by"] is None
    assert fits["job"]["retirement_granted"] == 60


def test_start_reads_the_window(daemons: dict[str, Any]) -> None:
    master, agent = daemons["master"], daemons[GUARDED]
    start = int(time.time()) + 600
    post_window(master, GUARDED, start)
    assert ad_shows(agent, start)["Start"] is False
    refused = refusal(agent, 0)
    assert (refused.status, refused.code) == (409, "machine.not_accepting")
    assert master.call("POST", "/maintenance/schedule", json={}).status_code == 200
    assert ad_shows(agent, None)["Start"] is True
    agent.claim(SLEEP, max_job_retirement_time=1200)
