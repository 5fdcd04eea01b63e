"""The real ``nodeagent master`` command line, as a subprocess, against a real master."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess, MasterProcess, job_script, wait_for

pytestmark = pytest.mark.integration

NS = 1_000_000_000
TIMEOUT = 60


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NODEAGENT_", "_NODEAGENT"))}
    return base | (extra or {})


def cli(
    master: MasterProcess | None,
    *args: str,
    stdin: str = "",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``nodeagent master ARGS`` against ``master``'s Unix socket (via
    ``NODEAGENT_MASTER_SOCKET``)."""
    extra = {} if master is None else {"NODEAGENT_MASTER_SOCKET": str(master.socket)}
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", "master", *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=_env(extra | (env or {})),
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def window(machines: list[dict[str, str]], start: float, duration: float = 3600) -> Any:
    return {
        "windows": [
            {
                "machine_ids": machines,
                "unavailability": {
                    "start": {"nanoseconds": int(start * NS)},
                    "duration": {"nanoseconds": int(duration * NS)},
                },
            }
        ]
    }


A = {"hostname": "a.test", "ip": "10.0.0.1"}
B = {"hostname": "b.test", "ip": "10.0.0.2"}
FAR = 2_000_000_000.0  # 2033


@pytest.fixture
def master(shared_master: MasterProcess) -> MasterProcess:
    """The module's master, empty when the test begins: nothing scheduled, no machine
    down, no SLA policy (no agent ever reports to it; the tests with one have their own)."""
    shared_master.make_empty()
    assert shared_master.call("GET", "/v1/ads").json()["ads"] == []
    return shared_master


@pytest.fixture
def own_master(tmp_path: Path) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path / "master", settings={"reconcile_interval": 0.2}) as m:
        yield m


def api(master: MasterProcess, path: str) -> str:
    response = master.call("GET", path)
    assert response.status_code == 200, response.text
    return response.text


# --- the schedule -------------------------------------------------------------------------


def test_schedule_set_get_clear(master: MasterProcess, tmp_path: Path) -> None:
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(window([A, B], FAR), indent=2))
    applied = ok(cli(master, "schedule", "set", "--yes", str(path)))
    assert applied.startswith("Schedule preview · now ")
    assert applied.endswith("schedule replaced: 1 window, 2 machines\n")
    assert (
        ok(cli(master, "schedule", "get", "--json")) == api(master, "/maintenance/schedule") + "\n"
    )
    table = ok(cli(master, "schedule", "get"))
    assert "a.test/10.0.0.1, b.test/10.0.0.2" in table
    assert "1h" in table  # the duration
    assert datetime.fromtimestamp(FAR).strftime("%Y-%m-%d ") in table  # not today: with a date

    # The preview shows what a change does: the rows of the machines it adds or moves,
    # the kept ones counted.
    c = {"hostname": "c.test", "ip": "10.0.0.3"}
    grown = tmp_path / "grown.json"
    grown.write_text(json.dumps(window([A, B, c], FAR)))
    shown = json.loads(ok(cli(master, "schedule", "set", "--dry-run", "--json", str(grown))))
    assert (shown["rows"], [m["machine_id"] for m in shown["machines"]]) == ("changed", [c])
    assert (shown["totals"]["machines"], shown["totals"]["kept"]) == (3, 2)
    text = ok(cli(master, "schedule", "set", "--dry-run", str(grown)))
    assert "3 machines scheduled: 1 added, 0 with a new window, 2 kept; 0 dropped" in text
    assert "the 2 machines kept keep their plan as it is" in text

    # From stdin; with --json, the schedule as the master now holds it.
    only_a = json.dumps(window([A], FAR, 60))
    replaced = ok(cli(master, "schedule", "set", "--yes", "-", "--json", stdin=only_a))
    assert replaced == api(master, "/maintenance/schedule") + "\n"
    assert json.loads(replaced) == window([A], FAR, 60)

    assert ok(cli(master, "status", "--json")) == api(master, "/maintenance/status") + "\n"
    assert ok(cli(master, "schedule", "clear")) == "schedule cleared: no machine is scheduled\n"
    assert ok(cli(master, "schedule", "clear", "--json")) == "{}\n"
    assert master.call("GET", "/maintenance/status").json() == {}
    assert "the schedule is empty" in ok(cli(master, "schedule", "get"))


def test_schedule_get_json_is_what_schedule_set_takes(
    master: MasterProcess, tmp_path: Path
) -> None:
    """The migration of docs/high-availability.md: get --json > file, then set --yes file."""
    two = window([A], FAR)
    two["windows"] += window([B], FAR + 7200, 60)["windows"]
    assert master.call("POST", "/maintenance/schedule", json=two).status_code == 200
    saved = tmp_path / "schedule.json"
    saved.write_text(ok(cli(master, "schedule", "get", "--json")))
    assert ok(cli(master, "schedule", "clear")) == "schedule cleared: no machine is scheduled\n"
    applied = ok(cli(master, "schedule", "set", "--yes", str(saved)))
    assert applied.endswith("schedule replaced: 2 windows, 2 machines\n")
    assert master.call("GET", "/maintenance/schedule").json() == two
    assert ok(cli(master, "schedule", "get", "--json")) == saved.read_text()


def test_a_schedule_changed_while_the_prompt_waits_is_not_applied(
    master: MasterProcess, tmp_path: Path
) -> None:
    """The change applied is the one previewed: the preview's version is its precondition."""
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(window([A], FAR)))
    theirs = window([B], FAR + 3600)
    terminal, its_end = pty.openpty()
    argv = [sys.executable, "-m", "nodeagent", "master", "schedule", "set", str(path)]
    env = _env({"NODEAGENT_MASTER_SOCKET": str(master.socket)})
    with subprocess.Popen(
        argv, stdin=its_end, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as proc:
        os.close(its_end)
        try:
            assert proc.stderr is not None
            errors = proc.stderr.fileno()
            asked = bytearray()
            os.set_blocking(errors, False)

            def prompted() -> bool:
                with contextlib.suppress(BlockingIOError):
                    asked.extend(os.read(errors, 4096))
                return b"[y/N] " in asked or proc.poll() is not None

            wait_for(prompted, timeout=TIMEOUT)
            assert asked.endswith(b"Apply this schedule? [y/N] "), bytes(asked)
            # Another administrator replaces the schedule while the question waits.
            assert master.call("POST", "/maintenance/schedule", json=theirs).status_code == 200
            os.write(terminal, b"y\n")
            os.set_blocking(errors, True)
            out, err = proc.communicate(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(terminal)
    assert proc.returncode == 1, err
    assert err.decode().startswith("schedule.changed: the schedule or a machine's mode has changed")
    assert b"schedule replaced" not in out
    assert master.call("GET", "/maintenance/schedule").json() == theirs


MESOS_REFUSALS = [
    ("[]", "Unexpected JSON type parsed"),
    ('{"windows": [{"machine_ids": [], "unavailability": {"start": {"nanoseconds": 1}}}]}',
     "List of machines in the maintenance window is empty"),
    ('{"windows": [{"machine_ids": [{"hostname": "a", "ip": "1.2.3"}],'
     ' "unavailability": {"start": {"nanoseconds": 1}}}]}', "Failed to parse IPv4: 1.2.3"),
    ('{"windows": [{"machine_ids": [{"hostname": "a"}],'
     ' "unavailability": {"start": {"nanoseconds": 1}, "duration": {"nanoseconds": -1}}}]}',
     "Unavailability 'duration' is negative"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "message"), MESOS_REFUSALS)
def test_an_invalid_schedule_exits_1_with_the_mesos_message(
    master: MasterProcess, body: str, message: str
) -> None:
    master.call("POST", "/maintenance/schedule", json=window([A], FAR))
    before = api(master, "/maintenance/schedule")
    variants = (
        ("set", "-"),
        ("set", "-", "--json"),
        ("set", "--yes", "-"),
        ("set", "--dry-run", "-"),
    )
    for args in variants:
        result = cli(master, "schedule", *args, stdin=body)
        assert (result.returncode, result.stderr) == (1, f"maintenance.refused: {message}\n")
        assert result.stdout == ""
    assert api(master, "/maintenance/schedule") == before


def test_an_unreadable_schedule_file_is_a_usage_error(
    master: MasterProcess, tmp_path: Path
) -> None:
    result = cli(master, "schedule", "set", str(tmp_path / "missing.json"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"cli.input: cannot read {tmp_path / 'missing.json'}: ")


# --- down and up --------------------------------------------------------------------------


def test_down_and_up_complete_bare_hostnames_from_the_schedule(master: MasterProcess) -> None:
    twin_a, twin_b = {"hostname": "twin", "ip": "10.0.0.5"}, {"hostname": "twin", "ip": "10.0.0.6"}
    master.call("POST", "/maintenance/schedule", json=window([A, B, twin_a, twin_b], FAR))
    # A bare hostname, in any case: the ip comes from the schedule. No agent reports for
    # it: DOWN in the schedule, pending on its node (exit 10).
    downed = cli(master, "down", "--yes", "A.TEST")
    assert downed.returncode == 10, downed.stderr
    assert downed.stdout.splitlines()[0] == (
        "DOWN evicts now: 0 jobs on 0 cores of 1 machine (a fast drain: no vacate time) · "
        "0 core-s of promises cut, 0 core-s of work lost"
    )
    assert "DOWN: a.test/10.0.0.1\n" in downed.stdout
    assert downed.stderr == (
        "machine.pending: DOWN in the schedule, but not yet on the node of 1 machine: "
        "a.test/10.0.0.1: no node's ad matches it: the node goes DOWN once its agent reports\n"
    )
    # A bare ip, and HOST/IP as given; --json prints the master's report.
    posted = cli(master, "down", "--yes", "10.0.0.2", "twin/10.0.0.5", "--json")
    assert posted.returncode == 10
    assert [m["machine_id"] for m in json.loads(posted.stdout)["machines"]] == [B, twin_a]
    # Without a terminal, and without --yes, nothing is brought down.
    asked = cli(master, "down", "twin/10.0.0.6")
    assert asked.returncode == 6
    assert asked.stderr.startswith("cli.no_terminal: no machine was brought down: ")
    status = master.call("GET", "/maintenance/status").json()
    assert status == {"down_machines": [A, B, twin_a], "draining_machines": [{"id": twin_b}]}
    assert ok(cli(master, "status", "--json")) == api(master, "/maintenance/status") + "\n"
    table = ok(cli(master, "status"))
    # No agent reports for any of them: DOWN in the schedule, never shown plain DOWN.
    lines = table.splitlines()
    assert [line.split() for line in lines[:6]] == [
        ["MACHINE", "IP", "MODE"],
        ["twin", "10.0.0.6", "DRAINING"],
        ["a.test", "10.0.0.1", "DOWN", "(pending)"],
        ["b.test", "10.0.0.2", "DOWN", "(pending)"],
        ["twin", "10.0.0.5", "DOWN", "(pending)"],
        ["1", "DRAINING,", "3", "DOWN", "(3", "not", "yet", "on", "their", "node)"],
    ]
    assert lines[6] == (
        "a.test/10.0.0.1: DOWN pending: no node's ad matches it: the node goes DOWN once "
        "its agent reports"
    )
    # A hostname scheduled twice needs its ip; nothing is posted.
    ambiguous = cli(master, "up", "twin")
    assert ambiguous.returncode == 2
    assert ambiguous.stderr == (
        "cli.ambiguous_machine: twin matches 2 scheduled machines "
        "(twin/10.0.0.5, twin/10.0.0.6): give HOST/IP\n"
    )
    # Mesos's rules, with its messages: up only from DOWN, all or nothing.
    refused = cli(master, "up", "a.test", "twin/10.0.0.6")
    assert refused.returncode == 1
    assert refused.stderr == (
        'maintenance.refused: Machine \'{"hostname":"twin","ip":"10.0.0.6"}\' '
        "is not in DOWN mode and cannot be brought up\n"
    )
    assert master.call("GET", "/maintenance/status").json() == status
    # A short name that is the first label of a scheduled machine: did you mean.
    short = cli(master, "up", "a")
    assert (short.returncode, short.stderr) == (
        2,
        "cli.unknown_machine: a is not part of the maintenance schedule; did you mean "
        "a.test/10.0.0.1? (nothing changed)\n",
    )
    unknown = cli(master, "down", "nobody.test")
    assert (unknown.returncode, unknown.stderr) == (
        1,
        'maintenance.refused: Machine \'{"hostname":"nobody.test"}\' '
        "is not part of a maintenance schedule\n",
    )
    # A DOWN machine cannot be dropped from the schedule.
    stuck = cli(master, "schedule", "clear")
    assert stuck.returncode == 1
    assert "is deactivated and cannot be removed from the schedule" in stuck.stderr
    assert ok(cli(master, "up", "a.test", "b.test", "twin/10.0.0.5")) == (
        "UP: a.test/10.0.0.1, b.test/10.0.0.2, twin/10.0.0.5\n"
    )
    assert master.call("GET", "/maintenance/status").json() == {
        "draining_machines": [{"id": twin_b}]
    }
    assert cli(master, "down").returncode == 2  # HOST... is required


# --- the plan and the ads, with a real agent ---------------------------------------------


@pytest.fixture
def agent(own_master: MasterProcess, tmp_path: Path) -> Iterator[AgentProcess]:
    root = tmp_path / "node1"
    # admitting any promise: drained its retirement time (10 minutes) before a window
    policy = {
        "max_job_retirement_time": 600,
        "machine_max_vacate_time": 1,
        "before_window": "admit",
    }
    settings = own_master.agent_settings(root, node="node1.test", update_interval=0.5)
    with AgentProcess(root, hostname="node1.test", policy=policy, master=settings) as a:
        wait_for(lambda: own_master.call("GET", "/v1/ads").json()["ads"])
        yield a


def test_the_plan_as_a_timeline_and_as_json(
    own_master: MasterProcess, agent: AgentProcess, tmp_path: Path
) -> None:
    argv, _ = job_script(tmp_path, "job")
    agent.claim(argv, cpus=2, max_job_retirement_time=600)
    node1 = {"hostname": "node1.test", "ip": "127.0.0.1"}
    ghost = {"hostname": "ghost.test", "ip": "10.0.0.9"}
    own_master.call(
        "POST", "/maintenance/schedule", json=window([node1, ghost], time.time() + 3600)
    )
    wait_for(lambda: own_master.call("GET", "/v1/maintenance/plan").json()["machines"][0]["node"])

    out = ok(cli(own_master, "plan", "--all", env={"COLUMNS": "100"}))
    lines = out.splitlines()
    assert all(len(line) <= 100 for line in lines), out
    assert lines[0].startswith("Maintenance plan · now ")
    assert lines[1] == "policy: just in time, margin 1m, escalation quick"
    # --all prints the rows as the master streams them, one line each.
    assert lines[2].split() == ["MACHINE", "MODE", "DRAIN", "WINDOW", "DRAIN", "START", "STATUS"]
    row = next(line for line in lines if line.startswith("node1.test "))
    assert row.split()[1:3] == ["DRAINING", "none"]
    assert row.endswith("on time")
    assert next(line for line in lines if line.startswith("ghost.test ")).endswith("no node")
    assert "2 machines: 2 DRAINING, 0 DOWN · 1 on time, 0 late, 0 empty" in out
    only = ok(cli(own_master, "plan", "--all", "--machine", "ghost.test", env={"COLUMNS": "100"}))
    assert [line.split()[0] for line in only.splitlines()[3:4]] == ["ghost.test"]
    assert "1 machine: 1 DRAINING, 0 DOWN" in only  # the totals count the machines selected
    assert "node1.test" not in only

    # --json is the API's document (only the clock moved).
    document = json.loads(ok(cli(own_master, "plan", "--all", "--json")))
    reference = own_master.call("GET", "/v1/maintenance/plan").json()
    for volatile in (document, reference):
        volatile.pop("now")
        for m in volatile["machines"]:
            for n in m["nodes"]:
                n.pop("ad_age")
            m.pop("expected")
            m.pop("late_by")
            m.pop("promises")
            m.pop("as_planned")
            m.pop("blockers")
            m.pop("figures_at")
            m.pop("figures_age")
        for key in (
            "expected_graceful_badput",
            "expected_quick_badput",
            "cut_core_seconds",
            "escalation_badput",
        ):
            volatile["totals"].pop(key)
    assert document == reference


def test_plan_json_is_exactly_the_api(master: MasterProcess) -> None:
    master.call("POST", "/maintenance/schedule", json=window([A, B], FAR))
    printed = json.loads(ok(cli(master, "plan", "--all", "--json")))
    reference = master.call("GET", "/v1/maintenance/plan").json()
    assert printed.pop("now") <= reference.pop("now")
    assert printed == reference


def test_plan_watch_refreshes_until_ctrl_c(master: MasterProcess) -> None:
    master.call("POST", "/maintenance/schedule", json=window([A], FAR))
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeagent", "master", "plan", "--all", "--watch", "--interval",
         "0.1s", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env({"NODEAGENT_MASTER_SOCKET": str(master.socket)}),
    )  # fmt: skip
    assert proc.stdout is not None
    documents = [json.loads(proc.stdout.readline()) for _ in range(3)]
    proc.send_signal(signal.SIGINT)
    # Both pipes are read to their end: a watch that printed more while the test was slow
    # to interrupt it must not block on a full pipe as it exits.
    proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0
    assert [d["machines"][0]["machine_id"] for d in documents] == [A, A, A]
    assert documents[0]["now"] < documents[2]["now"]


def test_ads(own_master: MasterProcess, agent: AgentProcess) -> None:
    table = ok(cli(own_master, "ads"))
    header, row, summary = table.splitlines()
    assert header.split() == ["Name", "Mode", "Drain", "Start", "Cpus", "Heard"]
    assert row.split()[:5] == ["node1.test", "UP", "none", "true", "8"]
    assert summary == "1 ad"
    query = ("--constraint", "TotalCpus >= 8", "--projection", "Name,TotalCpus")
    printed = ok(cli(own_master, "ads", *query, "--json"))
    params = {"constraint": "TotalCpus >= 8", "projection": "Name,TotalCpus"}
    assert printed == own_master.call("GET", "/v1/ads", params=params).text + "\n"
    assert json.loads(printed) == {"ads": [{"Name": "node1.test", "TotalCpus": 8}]}
    assert ok(cli(own_master, "ads", *query)).splitlines()[:2] == [
        "Name        TotalCpus",
        "node1.test  8        ",
    ]
    assert ok(cli(own_master, "ads", "--constraint", "TotalCpus > 8")).splitlines() == [
        "Name  Mode  Drain  Start  Cpus  Heard",
        "0 ads",
    ]
    slots = ok(cli(own_master, "ads", "--slots"))
    assert "slot1@node1.test" in slots
    long = ok(cli(own_master, "ads", "-l"))
    assert 'Machine = "node1.test"' in long
    assert "Lost = false" in long
    assert cli(own_master, "ads", "-l", "--json").returncode == 2
    invalid = cli(own_master, "ads", "--constraint", "Cpus >")
    assert invalid.returncode == 1
    assert invalid.stderr.startswith("request.invalid: ")


# --- targets, auth, reachability ----------------------------------------------------------


def test_the_default_target_is_the_masters_socket(master: MasterProcess) -> None:
    master.call("POST", "/maintenance/schedule", json=window([A], FAR))
    env = {"NODEAGENT_MASTER_CONFIG": str(master.config_path)}
    assert ok(cli(None, "status", "--json", env=env)) == api(master, "/maintenance/status") + "\n"
    given = cli(None, "status", "--json", "--socket", str(master.socket))
    assert ok(given) == api(master, "/maintenance/status") + "\n"


def test_remote_access_needs_a_token_with_the_scope(master: MasterProcess, tmp_path: Path) -> None:
    read, admin = tmp_path / "read.token", tmp_path / "admin.token"
    read.write_text(master.token("READ"))
    admin.write_text(master.token("ADMINISTRATOR"))
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(window([A], FAR)))

    anonymous = cli(None, "status", "--host", master.url)
    assert (anonymous.returncode, anonymous.stderr) == (
        4,
        "auth.unauthenticated: a bearer token is required\n",
    )
    env = {"NODEAGENT_MASTER_HOST": master.url, "NODEAGENT_MASTER_TOKEN_FILE": str(read)}
    assert ok(cli(None, "status", env=env)).startswith("no machine is in maintenance")
    forbidden = cli(None, "schedule", "set", "--yes", str(schedule), env=env)
    assert forbidden.returncode == 4
    assert forbidden.stderr.startswith("auth.forbidden: ")
    assert master.call("GET", "/maintenance/schedule").json() == {}
    remote = ("--host", master.url, "--token", str(admin))
    applied = ok(cli(None, "schedule", "set", "--yes", str(schedule), *remote))
    assert applied.endswith("schedule replaced: 1 window, 1 machine\n")
    # READ may preview a down, not make it.
    as_json = cli(None, "down", "--yes", "a.test/10.0.0.1", "--json", env=env)
    assert as_json.returncode == 4
    assert json.loads(as_json.stdout)["error"]["code"] == "auth.forbidden"
    assert master.call("GET", "/maintenance/status").json()["draining_machines"]
    remote_down = cli(None, "down", "--yes", "a.test", *remote)
    assert remote_down.returncode == 10  # no agent for a.test: pending
    assert "DOWN: a.test/10.0.0.1\n" in remote_down.stdout


def test_an_unreachable_master(tmp_path: Path) -> None:
    with MasterProcess(tmp_path / "master") as master:
        url = master.url
        assert cli(master, "status").returncode == 0
        assert master.stop() == 0
        for args in (
            ("status",),
            ("plan", "--json"),
            ("ads",),
            ("schedule", "get"),
            ("schedule", "clear"),
            ("down", "--yes", "a.test"),
            ("up", "a.test/10.0.0.1"),
        ):
            result = cli(master, *args)
            assert result.returncode == 3, args
            assert result.stderr.startswith(
                f"master.unreachable: cannot reach the master at unix:{master.socket}: "
            ), result.stderr
            assert result.stdout == ""
        tcp = cli(None, "plan", "--host", url)
        assert tcp.returncode == 3
        assert "connection refused (is the master running?)" in tcp.stderr


# --- SLA policies -------------------------------------------------------------------------


def test_sla_policies_set_get_list_delete(master: MasterProcess) -> None:
    assert ok(cli(master, "sla", "list")) == "no SLA policy: every job group may go at any time\n"
    assert ok(cli(master, "sla", "set", "web/prod", "--percentage", "95%", "--for", "30m",
                  "--size", "40")) == (
        "set web/prod: at least 95% of 40 instances up for 30m (api)\n"
    )  # fmt: skip
    assert ok(cli(master, "sla", "set", "db", "--count", "2")) == (
        "set db: at least 2 instances up (api)\n"
    )
    assert ok(cli(master, "sla", "set", "half", "--percentage", "50")) == (
        "set half: at least 50% of the instances up (api)\n"
    )
    assert ok(cli(master, "sla", "delete", "half")).startswith("deleted the API's policy of half")
    url = "https://coordinator.test/may-go"
    assert ok(cli(master, "sla", "set", "svc", "--coordinator", url)) == (
        f"set svc: ask the coordinator {url} (api)\n"
    )
    stored = master.call("GET", "/v1/sla/policies/web/prod").json()
    assert (stored["kind"], stored["percentage"], stored["duration"], stored["size"]) == (
        "percentage",
        95.0,
        1800.0,
        40,
    )
    assert ok(cli(master, "sla", "get", "web/prod")) == (
        "web/prod: at least 95% of 40 instances up for 30m (api)\n"
    )
    assert json.loads(ok(cli(master, "sla", "get", "db", "--json")))["count"] == 2
    assert ok(cli(master, "sla", "list")).splitlines() == [
        "db: at least 2 instances up (api)",
        f"svc: ask the coordinator {url} (api)",
        "web/prod: at least 95% of 40 instances up for 30m (api)",
    ]
    assert ok(cli(master, "sla", "delete", "db")) == (
        "deleted the API's policy of db; in force: no policy now\n"
    )
    missing = cli(master, "sla", "get", "db")
    assert (missing.returncode, missing.stderr) == (
        1,
        "sla.no_such_policy: no policy for 'db'\n",
    )
    # Bad input changes nothing: two kinds, none, a bad number, a bad duration.
    before = master.call("GET", "/v1/sla/policies").json()
    for args, code in (
        (("x", "--count", "1", "--percentage", "5"), "cli.usage"),
        (("x",), "cli.usage"),
        (("x", "--percentage", "lots"), "cli.usage"),
        (("x", "--count", "1", "--for", "soon"), "cli.bad_duration"),
        (("x", "--percentage", "150"), "sla.invalid_policy"),
    ):
        refused = cli(master, "sla", "set", *args)
        assert refused.returncode in (1, 2), (args, refused.stderr)
        assert refused.stderr.startswith(f"{code}: "), (args, refused.stderr)
    assert master.call("GET", "/v1/sla/policies").json() == before
