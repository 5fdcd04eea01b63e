"""The preview of a schedule, against a real master and real agents running real jobs.

Two agents report to one master (just in time, escalation ``quick``): ``late.test`` runs
job 7, promised 80 s on 2 cpus; ``short.test`` runs a job promised 3 s. A schedule written
in seconds where Mesos wants nanoseconds puts their window in 1970: its preview warns of
it, names job 7 as evicted at once, and changes nothing (the schedule, the modes, no
drain in any agent's audit log); ``schedule set`` refuses it without ``--force``, and
without a terminal or ``--yes``. A window opened a second ago, applied with ``--yes
--force``, does what its preview said: one quick drain on ``late.test``, job 7 evicted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess, MasterProcess, job_script, wait_for
from tests.integration.test_cli_master import cli
from tests.integration.test_master import agents_for, audited, drain_of, window

pytestmark = pytest.mark.integration

#: Nodes that admit any promise: a window within their retirement time drains them at once.
POLICY = {"max_job_retirement_time": 80, "machine_max_vacate_time": 1, "before_window": "admit"}
NAMES = ["late.test", "short.test"]


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[tuple[MasterProcess, list[AgentProcess], Path]]:
    settings = {"reconcile_interval": 0.2, "drain_margin": 1, "escalation": "quick"}
    with (
        MasterProcess(tmp_path / "master", settings=settings) as master,
        agents_for(master, tmp_path, NAMES, POLICY) as nodes,
    ):
        late, short = nodes
        argv, record = job_script(tmp_path, "long", term_delay=0)
        late.claim(argv, cpus=2, max_job_retirement_time=80, job_id="7", owner="alice")
        argv, _ = job_script(tmp_path, "short")
        short.claim(argv, max_job_retirement_time=3, job_id="8", owner="bob")
        # Both nodes' ads, with their jobs, have reached the master.
        later = window(NAMES, time.time() + 3600)
        wait_for(
            lambda: [row["empty"] for row in preview(master, later)["machines"]] == [False, False]
        )
        yield master, nodes, record


def preview(master: MasterProcess, schedule: Any) -> dict[str, Any]:
    response = master.call("POST", "/v1/maintenance/schedule/preview", json=schedule)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def in_seconds(schedule: Any) -> Any:
    """The same schedule with its times written in seconds, as a hurried admin would."""
    for w in schedule["windows"]:
        for field in ("start", "duration"):
            w["unavailability"][field]["nanoseconds"] //= 1_000_000_000
    return schedule


def test_a_schedule_in_seconds_is_previewed_as_1970_and_refused_without_force(
    pool: tuple[MasterProcess, list[AgentProcess], Path], tmp_path: Path
) -> None:
    master, nodes, _ = pool
    schedule = in_seconds(window(NAMES, time.time() + 600, 60))
    before = (
        master.call("GET", "/maintenance/schedule").text,
        master.call("GET", "/maintenance/status").text,
    )
    seen = preview(master, schedule)
    codes = [w["code"] for w in seen["warnings"]]
    assert codes.count("schedule.suspicious_time") == 2  # the start, and the 60 ns duration
    (start_warning, duration_warning) = [
        w for w in seen["warnings"] if w["code"] == "schedule.suspicious_time"
    ]
    assert "reads as 1970-01-" in start_warning["message"]
    assert start_warning["message"].endswith("— seconds?")
    assert "60 ns" in duration_warning["message"]
    assert "schedule.window_open" in codes
    rows = {row["node"]: row for row in seen["machines"]}
    assert rows["late.test"]["window_open"] is True
    assert rows["late.test"]["drain_now"] == "quick"
    # Every job running on either node is evicted at once: job 7's promise is cut, job 8's
    # (3 s) has run out or nearly.
    assert [(c["job_id"], c["owner"], c["cpus"]) for c in rows["late.test"]["evicted_now"]] == [
        ("7", "alice", 2)
    ]
    assert [c["job_id"] for c in rows["short.test"]["evicted_now"]] == ["8"]
    assert rows["late.test"]["evicted_now"][0]["cut_by"] > 60
    assert rows["late.test"]["mode_now"] == "UP"
    assert rows["late.test"]["mode_after"] == "DRAINING"
    assert seen["totals"]["drains_now"] == 2
    assert seen["totals"]["evicted_now"] == 2

    path = tmp_path / "windows.json"
    path.write_text(json.dumps(schedule))
    refused = cli(master, "schedule", "set", "--yes", str(path))
    assert refused.returncode == 6, refused.stderr
    assert refused.stderr.startswith("schedule.needs_force: not applied: ")
    assert "evicts job 7 (alice, 2 cpus) at once" in refused.stdout
    no_terminal = cli(master, "schedule", "set", str(path))
    assert no_terminal.returncode == 6
    assert no_terminal.stderr.startswith("schedule.needs_force: ")
    dry = cli(master, "schedule", "set", "--dry-run", "--json", str(path))
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["warnings"] == seen["warnings"]

    # Nothing changed anywhere.
    after = (
        master.call("GET", "/maintenance/schedule").text,
        master.call("GET", "/maintenance/status").text,
    )
    assert after == before
    for node in nodes:
        assert audited(node, "drain.start") == []
        assert drain_of(node)["state"] == "none"


def test_a_plain_schedule_needs_yes_without_a_terminal(
    pool: tuple[MasterProcess, list[AgentProcess], Path], tmp_path: Path
) -> None:
    master, _, _ = pool
    path = tmp_path / "later.json"
    path.write_text(json.dumps(window(NAMES, time.time() + 30)))
    refused = cli(master, "schedule", "set", str(path))
    assert refused.returncode == 6
    assert refused.stderr.startswith("cli.no_terminal: the schedule was not applied: ")
    assert master.call("GET", "/maintenance/schedule").json() == {}
    shown = cli(master, "schedule", "set", "--dry-run", str(path))
    assert shown.returncode == 0, shown.stderr
    # The text says what the preview's JSON says: late.test's drain is due now (just in
    # time, for its 80 s promise), and the escalation at the window would cut job 7.
    seen = preview(master, json.loads(path.read_text()))
    totals = seen["totals"]
    assert (
        f"drains starting at once: {totals['drains_now']} · jobs evicted at once: 0" in shown.stdout
    )
    rows = {row["node"]: row for row in seen["machines"]}
    assert rows["late.test"]["drain_now"] == "graceful"
    assert "late.test  graceful drain; window " in shown.stdout
    assert rows["late.test"]["as_planned"]["cut_jobs"] == 1
    assert "the quick escalation will cut job 7 by " in shown.stdout
    assert shown.stdout.endswith("dry run: the schedule was not applied\n")


def test_what_happens_is_what_the_preview_said(
    pool: tuple[MasterProcess, list[AgentProcess], Path], tmp_path: Path
) -> None:
    master, (late, short), record = pool
    schedule = window(NAMES, time.time() - 1, 3600)
    seen = preview(master, schedule)
    assert [w["code"] for w in seen["warnings"]] == ["schedule.window_open"]
    rows = {row["node"]: row for row in seen["machines"]}
    evicted = [c["job_id"] for row in seen["machines"] for c in row["evicted_now"]]
    path = tmp_path / "now.json"
    path.write_text(json.dumps(schedule))
    applied = cli(master, "schedule", "set", "--yes", "--force", str(path))
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.endswith("schedule replaced: 1 window, 2 machines\n")

    # The drains the preview said would start at once started, with its schedules.
    for node in (late, short):
        row = rows[node.hostname]
        if row["drain_now"] is None:
            continue
        wait_for(lambda node=node: drain_of(node)["state"] in ("draining", "drained"))
        (started,) = audited(node, "drain.start")
        assert started["result"] == "ok"
        ad = node.call("GET", "/v1/ad").json()["machine"]
        assert ad["DrainSchedule"] == row["drain_now"]
    assert evicted == ["7", "8"]
    # Job 7 got its soft-kill signal at once (its script records when): its promise was
    # cut by what the preview said, to within the time the change took to apply.
    wait_for(lambda: record.exists() and record.read_text().strip() != "")
    received = float(record.read_text().split()[0])
    (cut,) = rows["late.test"]["evicted_now"]
    actual_cut = cut["promise_end"] - received
    assert actual_cut <= cut["cut_by"] + 1, (actual_cut, cut)
    assert actual_cut >= cut["cut_by"] - (received - seen["now"]) - 1, (actual_cut, cut)
    assert (
        sum(row["drain_now"] is not None for row in rows.values()) == seen["totals"]["drains_now"]
    )
    # The cost the preview put on it is the promises those evictions cut (Σ cpus · cut),
    # and job 7's share of it is what its eviction at once did cost.
    cuts = [c for row in seen["machines"] for c in row["evicted_now"]]
    # (each cut_by is rounded to the second: a job's share may differ by its cpus)
    summed = sum(c["cpus"] * c["cut_by"] for c in cuts)
    assert abs(seen["totals"]["cut_core_seconds"] - summed) <= sum(c["cpus"] for c in cuts)
    assert sum(c["cut_by"] > 0 for c in cuts) <= seen["totals"]["cut_jobs"] <= len(cuts)
    assert abs(cut["cpus"] * actual_cut - cut["cpus"] * cut["cut_by"]) <= cut["cpus"] * (
        received - seen["now"] + 1
    )
