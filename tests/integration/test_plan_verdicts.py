"""A real master and two agents: the plan's two verdicts before and after the master acts.

The late node runs a job promised 60 s while its window is 15 s away; the other node's
jobs are promised 3 s. The master (just in time, escalation ``quick``) starts the late
node's drain at once, with its deadline at the window. Read before and after that, the
plan says the same of the late node's promises (late by more than 40 s, job 7), and as
planned: empty just after the window by escalation, at the cost of job 7's cut promise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import MasterProcess, job_script, wait_for
from tests.integration.test_master import agents_for, drain_of, plan_for, window


@pytest.fixture
def jit_master(tmp_path: Path) -> Iterator[MasterProcess]:
    settings = {"reconcile_interval": 0.2, "drain_margin": 1, "escalation": "quick"}
    with MasterProcess(tmp_path / "master", settings=settings) as m:
        yield m


def check_late(row: dict[str, Any], start: float, claimed: float) -> None:
    """The late node's row: both verdicts and the cost of its escalation."""
    promises, planned = row["promises"], row["as_planned"]
    assert promises["on_time"] is False
    assert promises["late_by"] > 40
    assert promises["completion"] == pytest.approx(claimed + 60, abs=2)
    assert (row["on_time"], row["late_by"]) == (False, promises["late_by"])
    # As planned: soft-killed at the window's second, gone within its vacate time (1 s).
    assert planned["escalation"] == "quick"
    assert planned["will_escalate"] is True
    assert math.floor(start) <= planned["completion"] <= start + 2
    (cut,) = planned["cuts"]
    assert (cut["job_id"], cut["owner"], cut["cpus"]) == ("7", "alice", 2)
    assert cut["evict_at"] == math.floor(start)
    assert cut["promise_end"] == promises["completion"]
    assert cut["cut_by"] == promises["completion"] - math.floor(start)
    assert planned["cut_jobs"] == 1
    assert planned["cut_core_seconds"] == 2 * cut["cut_by"]
    assert planned["cut_badput"] == cut["cut_badput"] > 0
    # The blockers say which promise the escalation breaks.
    (blocker,) = row["blockers"]
    assert (blocker["job_id"], blocker["cut_by"]) == ("7", cut["cut_by"])


def test_the_late_node_s_verdicts_hold_before_and_after_the_master_starts_its_drain(
    jit_master: MasterProcess, tmp_path: Path
) -> None:
    master = jit_master
    policy = {"max_job_retirement_time": 60, "machine_max_vacate_time": 1}
    names = ["late.test", "ontime.test"]
    with agents_for(master, tmp_path, names, policy) as (late, on_time):
        argv, record = job_script(tmp_path, "long", term_delay=0)
        late.claim(argv, cpus=2, max_job_retirement_time=60, job_id="7", owner="alice")
        claimed = time.time()
        argv, _ = job_script(tmp_path, "short")
        on_time.claim(argv, max_job_retirement_time=3)
        start = time.time() + 15
        master.call("POST", "/maintenance/schedule", json=window(names, start))

        def row_when(host: str, ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
            def found() -> dict[str, Any] | None:
                row = plan_for(master, host)
                return row if row["node"] == host and row["empty"] is False and ready(row) else None

            result: dict[str, Any] = wait_for(found)
            return result

        before = row_when("late.test", lambda row: True)
        check_late(before, start, claimed)
        # The master has started its drain (deadline at the window) and the ad shows it.
        after = row_when("late.test", lambda row: row["drain"]["state"] == "draining")
        assert after["started_by_master"] is True
        check_late(after, start, claimed)
        # The same verdict (each ad reckons in its own whole seconds: ±1 s).
        assert after["promises"]["completion"] == pytest.approx(
            before["promises"]["completion"], abs=1
        )

        other = plan_for(master, "ontime.test")
        assert other["promises"]["on_time"] is True
        assert other["as_planned"]["will_escalate"] is False
        assert other["as_planned"]["cuts"] == []

        summary = master.call(
            "GET", "/v1/maintenance/plan", params={"late": "true", "blockers": "false"}
        ).json()
        assert [m["node"] for m in summary["machines"]] == ["late.test"]
        totals = summary["totals"]
        assert (totals["late"], totals["escalations"], totals["escalations_next_hour"]) == (1, 1, 1)
        (row,) = summary["machines"]
        assert totals["cut_core_seconds"] == row["as_planned"]["cut_core_seconds"]
        assert totals["escalation_badput"] == row["as_planned"]["cut_badput"]

        # And so it goes: job 7 is evicted at the window.
        wait_for(lambda: drain_of(late)["state"] == "drained", timeout=30)
        (received,) = [float(x) for x in record.read_text().split()]
        assert start - 0.01 <= received < start + 2
