"""``nodeagent master``'s pure parts: the plan's timeline (plan JSON + width → text, with an
explicit ``now``; :mod:`nodeagent.cli._render`), machine ids on the command line, and the
master's default socket."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text

from nodeagent._paths import default_master_socket
from nodeagent.cli._errors import UsageError
from nodeagent.cli._http import resolve_master_target
from nodeagent.cli._master import parse_machine, resolve_machines
from nodeagent.cli._render import (
    plan_summary_view,
    plan_text,
    plan_view,
    shutdown_nodes_view,
    verdict_sentence,
)
from nodeagent.master import _config

NOW = 1_800_000_000  # 2027-01-15 08:00:00 UTC
AXIS = 41  # columns of the time axis in the row tests: 100 s per column over 4000 s


def machine(
    host: str = "node1.test",
    *,
    ip: str = "10.0.0.1",
    mode: str = "DRAINING",
    start: float = 3000,
    duration: float | None = 1000,
    node: bool = True,
    lost: bool = False,
    state: str = "none",
    schedule: str | None = None,
    planned: float | None = 2000,
    completion: float = 500,
    quick: float | None = None,
    on_time: bool = True,
    late_by: float = 0,
    empty: bool = False,
    escalated: bool = False,
    blockers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One row of the plan; times are seconds after NOW."""
    row: dict[str, Any] = {
        "machine_id": {"hostname": host, "ip": ip},
        "mode": mode,
        "window": {
            "start": NOW + start,
            "duration": duration,
            "end": None if duration is None else NOW + start + duration,
        },
        "nodes": [],
        "node": None,
        "drain": None,
        "expected": None,
        "on_time": None,
        "late_by": None,
        "planned_drain_start": None,
        "empty": None,
        "blockers": [],
        "started_by_master": False,
        "escalated": escalated,
    }
    if not node:
        return row
    expected = {
        "graceful": {"completion": NOW + completion, "badput": 3600},
        "quick": {"completion": NOW + (completion if quick is None else quick), "badput": 7200},
        "fast": {"completion": NOW, "badput": 10800},
    }
    row.update(
        nodes=[{"name": host, "address": "http://x:9621", "ad_age": 0.5, "lost": lost}],
        node=host,
        drain={"state": state, "request_id": None, "reason": None, "schedule": schedule},
        expected=expected,
        on_time=on_time,
        late_by=late_by,
        planned_drain_start=None if planned is None else NOW + planned,
        empty=empty,
        blockers=blockers or [],
    )
    return row


def plan(*machines: dict[str, Any], **totals: Any) -> dict[str, Any]:
    return {
        "now": NOW,
        "policy": {"drain_policy": "just_in_time", "drain_margin": 60.0, "escalation": "quick"},
        "machines": list(machines),
        "totals": {"machines": len(machines), "modes": {"UP": 0, "DRAINING": 0, "DOWN": 0}}
        | totals,
    }


def text(p: dict[str, Any], width: int) -> list[str]:
    return plan_text(p, width=width, tz=UTC).splitlines()


def axis_of(lines: list[str], label: str) -> str:
    """The time-axis part of ``label``'s row, located by the ruler (``├ … ┤``)."""
    ruler = next(line for line in lines if "├" in line)
    first, last = ruler.index("├"), ruler.index("┤")
    row = next(line for line in lines if line.startswith(label + " "))
    return row[first : last + 1]


def width_for(drain: str, status: str, label: str = "node1.test") -> int:
    """The width that leaves AXIS columns to the axis: the other columns are the machine,
    MODE (8), DRAIN and STATUS (each at least its heading), with two columns between."""
    return max(7, len(label)) + 8 + max(5, len(drain)) + AXIS + max(6, len(status)) + 8


# --- one row per machine ------------------------------------------------------------------

OPEN, CLOSED, WINDOW = "·", "━", "█"

ROWS = [
    pytest.param(
        machine(),
        "none",
        "·····◆··············▷━━━━━━━━━[█████████]",
        "on time",
        id="drain to come: empty if started now, planned start, window",
    ),
    pytest.param(
        machine(planned=-500, completion=3500, on_time=False, late_by=500),
        "none",
        "▷━━━━━━━━━━━━━━━━━━━━━━━━━━━━━[████◆████]",
        "late 8m20s",
        id="late: overdue drain start, empty inside the window",
    ),
    pytest.param(
        machine(state="draining", schedule="graceful", completion=1000),
        "draining",
        "━━━━━━━━━━◆━━━━━━━━━━━━━━━━━━━[█████████]",
        "on time",
        id="draining: closed from now, empty at the expected completion",
    ),
    pytest.param(
        machine(state="draining", schedule="quick", completion=2500, quick=1500),
        "draining",
        "━━━━━━━━━━━━━━━◆━━━━━━━━━━━━━━[█████████]",
        "on time",
        id="a quick drain running: its own completion",
    ),
    pytest.param(
        machine(state="drained", empty=True, completion=0),
        "drained",
        "◆━━━━━━━━━━━━━━━━━━━━━━━━━━━━━[█████████]",
        "empty",
        id="empty now",
    ),
    pytest.param(
        machine(mode="DOWN", start=-1000, duration=5000, state="drained", empty=True),
        "drained",
        "◆███████████████████████████████████████]",
        "DOWN",
        id="DOWN inside its window",
    ),
    pytest.param(
        machine(node=False),
        "-",
        "······························[█████████]",
        "no node",
        id="scheduled before any agent reports",
    ),
    pytest.param(
        machine(lost=True),
        "none",
        "·····◆··············▷━━━━━━━━━[█████████]",
        "lost",
        id="the node's ad expired",
    ),
    pytest.param(
        machine(
            state="draining",
            schedule="quick",
            start=0,
            duration=4000,
            completion=600,
            on_time=False,
            late_by=600,
            escalated=True,
        ),
        "draining",
        "[█████◆█████████████████████████████████]",
        "escalated",
        id="escalated at the window start",
    ),
    pytest.param(
        machine(start=3200, duration=None, planned=2500, completion=300),
        "none",
        "···◆·····················▷━━━━━━[███████»",
        "on time",
        id="an indefinite window runs off the axis",
    ),
]


@pytest.mark.parametrize(("row", "drain", "axis", "status"), ROWS)
def test_each_machine_is_one_row_on_the_time_axis(
    row: dict[str, Any], drain: str, axis: str, status: str
) -> None:
    width = width_for(drain, status)
    lines = text(plan(row), width)
    assert axis_of(lines, "node1.test") == axis
    line = next(x for x in lines if x.startswith("node1.test "))
    assert line.split() == ["node1.test", row["mode"], drain, axis, *status.split()]
    assert len(line) <= width


def test_the_axis_runs_from_now_to_the_last_window_end() -> None:
    early = machine("a.test", start=1000, duration=1000, planned=500, completion=100)
    late = machine("b.test", start=3000, duration=1000, planned=2500, completion=100)
    lines = text(plan(early, late), width_for("none", "on time", "a.test"))
    assert axis_of(lines, "a.test") == "·◆···▷━━━━[█████████]                    "
    assert axis_of(lines, "b.test") == "·◆·······················▷━━━━[█████████]"
    assert lines[0] == "Maintenance plan · now 08:00:00 UTC · axis to 09:06:40 UTC"
    assert lines[1] == "policy: just in time, margin 1m, escalation quick"


def test_rows_are_in_window_order() -> None:
    lines = text(plan(machine("b.test", start=3000), machine("a.test", start=100)), 100)
    rows = [x.split()[0] for x in lines if x.endswith(("on time", "late"))]
    assert rows == ["a.test", "b.test"]


@pytest.mark.parametrize(
    ("span", "labels"),
    [
        (4000, ["now", "+15m", "+30m", "+45m", "+1h"]),
        (120, ["now", "+30s", "+1m", "+1m30s"]),
        (3 * 86400, ["now", "+1d", "+2d"]),
    ],
)
def test_ticks_are_round_and_labelled_from_now(span: float, labels: list[str]) -> None:
    row = machine(start=span / 2, duration=span / 2, planned=None, completion=0)
    lines = text(plan(row), width_for("none", "on time"))
    heading = next(x for x in lines if x.startswith("MACHINE"))
    ruler = next(x for x in lines if "├" in x)
    assert heading.split()[3:-1] == labels
    assert ruler.strip().startswith("├")
    assert ruler.count("┼") >= len(labels) - 2
    for label in labels[1:]:  # each label starts at its tick
        assert ruler[heading.index(label)] == "┼"


def test_a_plan_without_machines() -> None:
    assert text(plan(), 100) == [
        "Maintenance plan · now 08:00:00 UTC",
        "policy: just in time, margin 1m, escalation quick",
        "no machine is scheduled for maintenance",
        "0 machines: 0 DRAINING, 0 DOWN · 0 on time, 0 late, 0 empty",
        "expected badput: graceful 0.00, quick 0.00 core-h · drains 0 started, 0 escalated",
    ]


def test_legend_totals_and_why_late_machines_are_late() -> None:
    blocker = {"slot": "slot1_1@slow.test", "job_id": "7.0", "owner": "alice"}
    slow = machine("slow.test", planned=-500, completion=3500, on_time=False, late_by=500)
    slow["blockers"] = [blocker]
    totals = {
        "modes": {"UP": 0, "DRAINING": 2, "DOWN": 1},
        "on_time": 1,
        "late": 1,
        "empty": 1,
        "without_node": 1,
        "expected_graceful_badput": 5400,
        "expected_quick_badput": 9000,
        "drains_started": 2,
        "drains_escalated": 1,
    }
    lines = text(plan(machine(), slow, machine("ghost.test", node=False), **totals), 100)
    assert lines[-4:] == [
        "▷ drain starts  ━ closed, draining  ◆ expected empty  [█] window  · open",
        "3 machines: 2 DRAINING, 1 DOWN · 1 on time, 1 late, 1 empty, 1 without a node",
        "expected badput: graceful 1.50, quick 2.50 core-h · drains 2 started, 1 escalated",
        "late: slow.test empty 08:58:20 UTC, 8m20s into its window; "
        "last slot1_1@slow.test (job 7.0, alice)",
    ]


@pytest.mark.parametrize("width", [60, 80, 100, 140])
def test_rows_fit_the_width(width: int) -> None:
    rows = [
        machine("a-rather-long-hostname.cluster.example.org"),
        machine("node2.test", planned=-500, completion=3500, on_time=False, late_by=5000),
        machine("node3.test", mode="DOWN", state="drained", empty=True),
    ]
    lines = text(plan(*rows), width)
    table = [x for x in lines if x.startswith(("a-rather", "node2", "node3", "MACHINE"))]
    assert len(table) == 4
    assert all(len(x) <= width for x in table)
    name = table[1].split()[0]  # cut, to at most 24 columns
    assert name.endswith("…")
    assert len(name) <= 24
    assert rows[0]["machine_id"]["hostname"].startswith(name[:-1])


def test_a_hostname_scheduled_twice_is_shown_with_its_ip() -> None:
    rows = [machine("twin.test", ip="10.0.0.1"), machine("twin.test", ip="10.0.0.2")]
    lines = text(plan(*rows), 100)
    assert sum(x.startswith("twin.test/10.0.0.1 ") for x in lines) == 1
    assert sum(x.startswith("twin.test/10.0.0.2 ") for x in lines) == 1


def _row_text(p: dict[str, Any], label: str) -> Text:
    group = plan_view(p, width=100, tz=UTC).__rich__()  # as rich draws it
    rows = [r for r in group.renderables if isinstance(r, Text) and r.plain.startswith(label + " ")]
    assert len(rows) == 1
    return rows[0]


def _style_of(line: Text, word: str) -> str:
    start = line.plain.rindex(word)
    styles = {str(s.style) for s in line.spans if s.start <= start < s.end}
    assert len(styles) == 1, styles
    return styles.pop()


def shutting_down(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its node's machine shutting down: its agent's drain, reason shutdown."""
    row["drain"] = {**row["drain"], "request_id": "9", "reason": "shutdown", "shutting_down": True}
    return row


def rebooting(row: dict[str, Any], age: float = 900) -> dict[str, Any]:
    """``row`` with its node rebooting: no ad for ``age`` s since it was shutting down."""
    row["nodes"] = [{**row["nodes"][0], "ad_age": age, "rebooting": True}]
    return row


@pytest.mark.parametrize(
    ("row", "word", "colour"),
    [
        (machine(), "on time", "green"),
        (machine(on_time=False, late_by=60, completion=3100), "late 1m", "red"),
        (machine(state="drained", empty=True), "empty", "bold green"),
        (machine(mode="DOWN", state="drained"), "DOWN", "magenta"),
        (machine(node=False), "no node", "dim"),
        (shutting_down(machine(state="draining", schedule="quick")), "shutting down", "cyan"),
        (rebooting(shutting_down(machine(state="draining"))), "rebooting", "cyan"),
    ],
)
def test_rows_are_coloured_by_status(row: dict[str, Any], word: str, colour: str) -> None:
    line = _row_text(plan(row), "node1.test")
    assert _style_of(line, word) == colour
    assert _style_of(line, "]") == f"bold {colour}"  # the window takes the row's colour


def test_the_expected_completion_is_red_when_late() -> None:
    late = _row_text(plan(machine(on_time=False, late_by=60, completion=3100)), "node1.test")
    assert _style_of(late, "◆") == "bold red"
    on_time = _row_text(plan(machine()), "node1.test")
    assert _style_of(on_time, "◆") == "bold green"


# --- machine ids on the command line ------------------------------------------------------

SCHEDULE = {
    "windows": [
        {
            "machine_ids": [
                {"hostname": "a.test", "ip": "10.0.0.1"},
                {"hostname": "B.Test", "ip": "10.0.0.2"},
                {"hostname": "solo.test"},
            ],
            "unavailability": {"start": {"nanoseconds": 1}},
        },
        {
            "machine_ids": [{"ip": "10.0.0.3"}, {"hostname": "twin", "ip": "10.0.0.4"}],
            "unavailability": {"start": {"nanoseconds": 2}},
        },
        {
            "machine_ids": [{"hostname": "twin", "ip": "10.0.0.5"}],
            "unavailability": {"start": {"nanoseconds": 3}},
        },
    ]
}


@pytest.mark.parametrize(
    ("arg", "parsed"),
    [
        ("node1", {"hostname": "node1"}),
        ("node1/10.0.0.1", {"hostname": "node1", "ip": "10.0.0.1"}),
        ("10.0.0.1", {"ip": "10.0.0.1"}),
        (" node1 ", {"hostname": "node1"}),
        ("node1/1.2.3", {"hostname": "node1", "ip": "1.2.3"}),  # the master says what is wrong
    ],
)
def test_machine_forms(arg: str, parsed: dict[str, str]) -> None:
    assert parse_machine(arg) == parsed


@pytest.mark.parametrize("arg", ["", "node1/", "/10.0.0.1"])
def test_malformed_machines_are_usage_errors(arg: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_machine(arg)
    assert (info.value.code, info.value.exit_status) == ("cli.usage", 2)


@pytest.mark.parametrize(
    ("args", "resolved"),
    [
        (["a.test"], [{"hostname": "a.test", "ip": "10.0.0.1"}]),
        (["b.test"], [{"hostname": "B.Test", "ip": "10.0.0.2"}]),  # as scheduled
        (["10.0.0.2"], [{"hostname": "B.Test", "ip": "10.0.0.2"}]),
        (["SOLO.test"], [{"hostname": "solo.test"}]),
        (["10.0.0.3"], [{"ip": "10.0.0.3"}]),
        (["x.test/10.9.9.9"], [{"hostname": "x.test", "ip": "10.9.9.9"}]),  # taken as given
        (["unknown.test"], [{"hostname": "unknown.test"}]),  # for the master to refuse
        (["twin/10.0.0.5", "a.test"], [
            {"hostname": "twin", "ip": "10.0.0.5"}, {"hostname": "a.test", "ip": "10.0.0.1"}
        ]),
    ],
)  # fmt: skip
def test_bare_hostnames_and_ips_are_completed_from_the_schedule(
    args: list[str], resolved: list[dict[str, str]]
) -> None:
    assert resolve_machines(args, SCHEDULE) == resolved


def test_a_hostname_scheduled_twice_must_be_given_with_its_ip() -> None:
    with pytest.raises(UsageError) as info:
        resolve_machines(["TWIN"], SCHEDULE)
    assert info.value.code == "cli.ambiguous_machine"
    assert info.value.message == (
        "TWIN matches 2 scheduled machines (twin/10.0.0.4, twin/10.0.0.5): give HOST/IP"
    )


# --- where the master listens -------------------------------------------------------------

ENVS: list[dict[str, str]] = [
    {},
    {"XDG_RUNTIME_DIR": "/run/user/1000"},
    {"RUNTIME_DIRECTORY": "/run/nodeagent-master:/run/other"},
    {"NODEAGENT_RUNTIME_DIR": "/srv/run"},
]


@pytest.mark.parametrize("uid", [0, 1000])
@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("toml", [None, 'runtime_dir = "/from/file"', "drain_margin = 5"])
def test_default_master_socket_is_where_the_master_listens(
    env: dict[str, str], uid: int, toml: str | None, tmp_path: Path
) -> None:
    path = tmp_path / "master.toml"
    if toml is not None:
        path.write_text(toml + "\n")
    daemon = _config.load_master_config(None, env, uid=uid, default_path=path)
    assert default_master_socket(env, uid, config_path=path) == daemon.runtime_dir / "master.sock"


def test_the_master_target_has_its_own_variables_and_port(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc.def.ghi\n")
    env = {
        "NODEAGENT_MASTER_HOST": "master1",
        "NODEAGENT_MASTER_TOKEN_FILE": str(token),
        "NODEAGENT_HOST": "agent1",
    }
    t = resolve_master_target(host=None, token_file=None, socket_path=None, env=env, uid=1000)
    assert (t.host, t.port, t.token, t.peer) == ("master1", 9622, "abc.def.ghi", "master")
    env = {"NODEAGENT_MASTER_SOCKET": "/m.sock", "NODEAGENT_SOCKET": "/a.sock"}
    t = resolve_master_target(host=None, token_file=None, socket_path=None, env=env, uid=1000)
    assert (t.unix, t.peer) == (Path("/m.sock"), "master")
    path = tmp_path / "m.toml"
    path.write_text('runtime_dir = "/elsewhere"\n')
    env = {"NODEAGENT_MASTER_CONFIG": str(path)}
    assert default_master_socket(env, 1000) == Path("/elsewhere/master.sock")


# --- both verdicts ------------------------------------------------------------------------


def with_verdicts(
    row: dict[str, Any],
    *,
    promise: float,
    planned: float,
    cuts: list[dict[str, Any]] = (),  # type: ignore[assignment]
    escalation: str = "quick",
    escalated: bool = False,
) -> dict[str, Any]:
    """``row`` with its two verdicts (times after NOW); the cost from ``cuts``."""
    window = row["window"]["start"]
    late_by = max(0.0, NOW + promise - window)
    cut = [dict(c) for c in cuts]
    row.update(
        on_time=late_by == 0,
        late_by=late_by,
        promises={"completion": NOW + promise, "on_time": late_by == 0, "late_by": late_by},
        as_planned={
            "completion": NOW + planned,
            "badput": 0,
            "escalation": escalation,
            "will_escalate": bool(cut),
            "escalated": escalated,
            "cut_jobs": len(cut),
            "cut_core_seconds": sum(c["cpus"] * c["cut_by"] for c in cut),
            "cut_badput": sum(c["cut_badput"] for c in cut),
            "cuts": cut,
        },
    )
    return row


JOB_7 = {"slot": "slot1_1@n3", "job_id": "7", "owner": "alice", "cpus": 4, "cut_by": 60}
JOB_7["cut_badput"] = 400


@pytest.mark.parametrize(
    ("row", "words"),
    [
        (
            with_verdicts(machine("n3", start=60), promise=120, planned=65, cuts=[JOB_7]),
            "promises end 1m after the window opens; the quick escalation will cut job 7 by "
            "1m; empty 5s after the window opens: 240 core-s of promises, 400 core-s of "
            "work lost",
        ),
        (
            with_verdicts(
                machine("n3", start=60), promise=120, planned=60, cuts=[JOB_7], escalated=True
            ),
            "promises end 1m after the window opens; the quick escalation has cut job 7 by "
            "1m at the window: 240 core-s of promises, 400 core-s of work lost",
        ),
        (
            with_verdicts(machine("n3", start=60), promise=120, planned=120, escalation="none"),
            "promises end 1m after the window opens; every promise is kept",
        ),
        (
            with_verdicts(machine("n3", start=600), promise=120, planned=120),
            "promises end 8m before the window",
        ),
        (with_verdicts(machine("n3", empty=True), promise=0, planned=0), "empty"),
        (machine("n3", node=False), ""),
    ],
    ids=["will cut", "has cut", "kept, late", "on time", "empty", "no node"],
)
def test_a_row_s_verdicts_in_words(row: dict[str, Any], words: str) -> None:
    assert verdict_sentence(row) == words


def test_the_summary_counts_and_lists_the_late_machines_with_their_cost() -> None:
    late = with_verdicts(machine("n3", start=60), promise=120, planned=65, cuts=[JOB_7])
    kept = with_verdicts(machine("n4", start=7200), promise=7300, planned=7300, escalation="none")
    totals = {
        "machines": 10_000,
        "modes": {"UP": 0, "DRAINING": 9990, "DOWN": 10},
        "on_time": 9998,
        "late": 2,
        "empty": 3,
        "escalations": 1,
        "escalations_next_hour": 1,
        "cut_jobs": 1,
        "cut_core_seconds": 240,
        "escalation_badput": 400,
    }
    body = plan(late, kept, **totals) | {"matched": 5}
    out = _summary_text(body)
    assert out[2:] == [
        "10000 machines: 9990 DRAINING, 10 DOWN · 9998 on time, 2 late by their promises, 3 empty",
        "escalations coming: 1 (1 in the next hour) · 1 promise cut, 0.07 core-h of promises, "
        "0.11 core-h of work lost",
        "expected badput: graceful 0.00, quick 0.00 core-h · drains 0 started, 0 escalated",
        "late or to be escalated (2 of 5, window order):",
        "n3  window in 1m       promises end 1m after the window opens; the quick escalation "
        "will cut job 7 by 1m; empty 5s after the window opens: 240 core-s of promises, 400 "
        "core-s of work lost",
        "n4  window in 2h       promises end 1m40s after the window opens; every promise is kept",
        "… 3 more: --all for every row",
    ]
    nothing = _summary_text(plan(**{**totals, "late": 0, "escalations": 0}) | {"matched": 0})
    assert nothing[-1] == "no machine is late by its promises or to be escalated"


def test_the_summary_says_how_many_machines_the_master_has_not_read_yet() -> None:
    """Totals that count some machines as of an older ad, or not at all, say so under the
    counts; an empty list is then not called a clean bill."""
    totals = {"machines": 9_000, "behind": 1_000, "modes": {"DRAINING": 9_000}, "on_time": 9_000}
    out = _summary_text(plan(**totals) | {"matched": 0})
    assert out[3] == (
        "1000 machines not read yet: the master is still taking in their latest ads, and "
        "counts them as of an older ad, or not at all"
    )
    assert out[-1] == "no machine read is late by its promises or to be escalated"
    one = _summary_text(plan(**{**totals, "behind": 1}) | {"matched": 0})
    assert one[3].startswith("1 machine not read yet:")
    whole = _summary_text(plan(**{**totals, "behind": 0}) | {"matched": 0})
    assert not any("not read yet" in line for line in whole)


def _summary_text(body: dict[str, Any]) -> list[str]:
    import io

    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(plan_summary_view(body, tz=UTC))
    return out.getvalue().splitlines()


def test_the_timeline_says_why_late_in_both_verdicts_and_marks_the_planned_end() -> None:
    late = with_verdicts(
        machine("n3", start=2000, planned=-500, completion=3500),
        promise=2120,
        planned=2005,
        cuts=[JOB_7],
    )
    lines = text(plan(late, late=1, escalations=1, cut_jobs=1, cut_core_seconds=240), 100)
    at = next(i for i, line in enumerate(lines) if line.startswith("late: n3: "))
    wrapped = " ".join(line.strip() for line in lines[at:])  # rich wraps it at 100
    assert wrapped.split() == f"late: n3: {verdict_sentence(late)}".split()
    assert any(
        x.startswith("escalations coming: 1 (0 in the next hour) · 1 promise") for x in lines
    )
    # ◆ at the planned end (+2005 s, as the window opens), not the graceful one (+3500 s).
    axis = axis_of(lines, "n3")
    assert axis.index("◆") == round(2005 / 3000 * (len(axis) - 1))
    assert axis.count("◆") == 1


# ---------------------------------------------------------------------- held out of service

HELD = {
    "health failing, twice": (
        {
            "HealthState": "failing",
            "HealthFailures": 2,
            "HealthMessage": "exit status 1",
            "HealthNextCheck": NOW + 30,
        },
        "health check failing: exit status 1 (2 in a row), next check in 30 s",
    ),
    "health pending": (
        {"HealthState": "pending", "HealthPasses": 1, "HealthPassesNeeded": 3},
        "health check pending (1 of 3 passes)",
    ),
    "the hook of the drain in force failed": (
        {
            "DrainHookName": "reboot",
            "DrainHookState": "failed",
            "DrainHookRequestId": "7",
            "DrainingRequestId": "7",
            "DrainHookMessage": "exit status 3",
        },
        "completion hook reboot failed: exit status 3",
    ),
    "the hook of a drain that ended does not hold": (
        {
            "DrainHookName": "reboot",
            "DrainHookState": "failed",
            "DrainHookRequestId": "7",
            "HealthState": "failing",
            "HealthMessage": "exit status 1",
        },
        "health check failing: exit status 1",
    ),
    "a running hook and a closed gate": (
        {
            "DrainHookName": "fw",
            "DrainHookState": "running",
            "DrainHookRequestId": "2",
            "DrainingRequestId": "2",
            "HealthState": "pending",
        },
        "completion hook fw running; health check pending",
    ),
    "nothing known": ({"Start": False}, "closed"),
}


@pytest.mark.parametrize(("ad", "reason"), HELD.values(), ids=list(HELD))
def test_why_a_node_is_held_out_of_service(ad: dict[str, Any], reason: str) -> None:
    from nodeagent.cli._render import held_reason

    assert held_reason(ad, NOW) == reason


def test_up_says_which_nodes_are_not_yet_in_service() -> None:
    from rich.console import Console

    from nodeagent.cli._render import render_up_report

    console = Console(record=True, width=200)
    report = [
        {
            "machine_id": {"hostname": "n1.test"},
            "nodes": [
                {
                    "name": "n1.test",
                    "fresh": True,
                    "in_service": True,
                    "hook_holds": False,
                    "hook": None,
                    "health": {"state": "passing"},
                },
                {
                    "name": "n1b.test",
                    "fresh": False,
                    "in_service": False,
                    "hook_holds": True,
                    "hook": {
                        "request_id": "4",
                        "name": "reboot",
                        "state": "failed",
                        "message": "exit status 3",
                    },
                    "health": {"state": "pending", "passes": 0, "passes_needed": 1},
                },
            ],
        }
    ]
    render_up_report(console, report)
    text = console.export_text()
    assert text.splitlines() == [
        "n1b.test: not yet in service: completion hook reboot failed: exit status 3; health "
        "check pending (0 of 1 passes) (from its last ad: the node did not answer)"
    ]


@pytest.mark.parametrize(
    "row",
    [
        machine(start=-2000, state="drained", empty=True),
        machine(mode="DOWN", start=-2000, state="drained"),
    ],
)
def test_a_machine_out_of_service_after_its_window_is_not_on_time(row: dict[str, Any]) -> None:
    line = _row_text(plan(row), "node1.test")
    assert line.plain.endswith("  window ended")
    assert _style_of(line, "window ended") == "yellow"


def _ended(host: str, ip: str, mode: str, end: float, health: str | None) -> dict[str, Any]:
    """An ``after_window`` entry of the plan: a machine whose window ended at NOW + end."""
    return {
        "machine_id": {"hostname": host, "ip": ip},
        "mode": mode,
        "window": {"start": NOW + end - 600, "duration": 600, "end": NOW + end},
        "node": host,
        "health": health,
    }


@pytest.mark.parametrize(
    ("up_after_window", "expected"),
    [
        (
            False,
            [
                "window ended: 2 machines still out of service",
                "  n1.test/10.0.0.1  DOWN, its window ended 5m ago; health check passing",
                "  n2.test/10.0.0.2  DRAINING, its window ended 1m ago",
                "  bring them back: nodeagent master up n1.test/10.0.0.1",
                "  DRAINING ones go DOWN first: nodeagent master down n2.test/10.0.0.2 && "
                "nodeagent master up n2.test/10.0.0.2",
            ],
        ),
        (
            True,
            [
                "window ended: 2 machines still out of service",
                "  n1.test/10.0.0.1  DOWN, its window ended 5m ago; health check passing",
                "  n2.test/10.0.0.2  DRAINING, its window ended 1m ago",
                "  the master brings the DOWN ones UP once their health check passes "
                "(up_after_window); now: nodeagent master up n1.test/10.0.0.1",
                "  DRAINING ones go DOWN first: nodeagent master down n2.test/10.0.0.2 && "
                "nodeagent master up n2.test/10.0.0.2",
            ],
        ),
    ],
)
def test_the_summary_says_which_machines_are_out_of_service_after_their_window(
    up_after_window: bool, expected: list[str]
) -> None:
    body = plan() | {
        "after_window": [
            _ended("n1.test", "10.0.0.1", "DOWN", -300, "passing"),
            _ended("n2.test", "10.0.0.2", "DRAINING", -60, None),
        ]
    }
    body["policy"] = body["policy"] | {"up_after_window": up_after_window}
    lines = _summary_text(body)
    at = lines.index(expected[0])
    assert lines[at : at + len(expected)] == expected
    timeline = text(body, 200)
    at = timeline.index(expected[0])
    assert timeline[at : at + len(expected)] == expected


def test_no_word_on_the_window_when_none_has_ended() -> None:
    body = plan(machine()) | {"after_window": []}
    assert not any("window ended" in line for line in _summary_text(body) + text(body, 100))


# ---------------------------------------------------------------------- the workloads' side

DECLINE = {
    "verdict": "decline",
    "reason": "month-end run",
    "expected_completion": NOW + 5400,
    "who": "alice",
    "at": NOW - 300,
}


def test_the_plan_says_what_the_windows_close_and_lists_the_declines() -> None:
    row = machine("n3", start=7200) | {
        "notices": [
            {"id": "n-1", "group": "batch/dev/etl", "issued": NOW - 600, "claims": 2,
             "promise_end": NOW + 6000, "answer": DECLINE},
            {"id": "n-2", "group": "web/prod/front", "issued": NOW - 600, "claims": 1,
             "promise_end": None, "answer": {**DECLINE, "verdict": "accept"}},
        ]
    }  # fmt: skip
    totals = {
        "closed_core_hours": {"planned": 1.47, "admit": 9.02, "refuse": 1.47, "shorten": 1.47},
        "notices": {"in_force": 2, "accepted": 1, "declined": 1, "unanswered": 0},
    }
    expected = [
        "closed before the windows: 1.47 core-h as planned (9.02 core-h had every node admitted "
        "any promise)",
        "notices: 2 in force, 1 accepted, 1 declined, 0 unanswered",
        "declined: n3 batch/dev/etl by alice 5m ago: month-end run; done by 09:30:00 UTC, in "
        "1h30m; its promises end 09:40:00 UTC, in 1h40m",
    ]
    summary = _summary_text(plan(row, **totals, late=1) | {"matched": 1})
    assert [line for line in summary if line in expected] == expected
    timeline = " ".join(text(plan(row, **totals), 400))
    assert all(line in timeline for line in expected)


def test_the_summary_says_where_the_declines_it_does_not_list_are() -> None:
    totals = {"notices": {"in_force": 3, "accepted": 0, "declined": 2, "unanswered": 1}}
    summary = _summary_text(plan(**totals, late=0) | {"matched": 0})
    assert summary[-1] == "declines on machines not listed here: --all, or nodeagent master notices"
    quiet = {"notices": {"in_force": 1, "accepted": 1, "declined": 0, "unanswered": 0}}
    assert "declines on" not in " ".join(_summary_text(plan(**quiet) | {"matched": 0}))


def test_a_master_that_does_not_say_adds_no_line() -> None:
    summary = _summary_text(plan(machine("n3"), late=1) | {"matched": 1})
    assert not [line for line in summary if line.startswith(("closed before", "notices:"))]


def test_the_timeline_says_which_nodes_shut_down_and_reboot() -> None:
    lines = text(
        plan(
            shutting_down(machine(state="draining", schedule="quick")),
            rebooting(shutting_down(machine("node2.test", ip="10.0.0.2", state="draining"))),
            machine("node3.test", ip="10.0.0.3"),
        ),
        400,
    )
    said = [line for line in lines if line.startswith(("node1.test:", "node2.test:"))]
    assert said == [
        "node1.test: shutting down: its agent drains it (draining, drain 9, reason shutdown); "
        "the master starts and escalates no drain of its own there while it shuts down",
        "node2.test: rebooting: no ad for 15m since its machine went down after its shutdown "
        "drain; not counted lost within the master's reboot_grace, its node comes back by "
        "itself",
    ]


def test_status_lists_the_nodes_shutting_down_and_rebooting() -> None:
    ads = [
        {"Name": "n1", "ShuttingDown": True, "Rebooting": False, "Lost": False,
         "LastHeardFrom": NOW - 5, "DrainState": "draining", "DrainingRequestId": "9",
         "DrainReason": "shutdown"},
        {"Name": "n2", "ShuttingDown": True, "Rebooting": True, "Lost": False,
         "LastHeardFrom": NOW - 900, "DrainState": "drained"},
        {"Name": "n3", "ShuttingDown": True, "Rebooting": False, "Lost": True,
         "LastHeardFrom": NOW - 9000},
    ]  # fmt: skip
    shown = [" ".join(line.split()) for line in _plain(shutdown_nodes_view(ads, now=NOW))]
    assert shown[2:5] == [
        "n1 shutting down: its agent drains it (draining, drain 9, reason shutdown)",
        "n2 rebooting: its last ad (15m ago) said its machine was shutting down",
        "n3 lost: not back within the reboot grace (last ad 2h30m ago)",
    ]
    assert shown[5].startswith("3 nodes shutting down or rebooting: the master starts no drain")


def _plain(renderable: Any) -> list[str]:
    import io

    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(renderable)
    return out.getvalue().splitlines()


def test_the_ads_table_says_which_nodes_are_lost_or_rebooting() -> None:
    from nodeagent.cli._render import ads_table

    ads = [
        {"Name": "n1", "LastHeardFrom": NOW - 5, "Lost": False, "Rebooting": False},
        {"Name": "n2", "LastHeardFrom": NOW - 900, "Lost": False, "Rebooting": True},
        {"Name": "n3", "LastHeardFrom": NOW - 900, "Lost": True, "Rebooting": False},
    ]
    rows = [
        " ".join(line.split())
        for line in _plain(ads_table(ads, projection=(), slots=False, now=NOW))
    ]
    assert [r.split(" ", 1)[0] for r in rows[1:]] == ["n1", "n2", "n3"]
    assert rows[1].endswith(" 5s ago")
    assert rows[2].endswith(" 15m ago (rebooting)")
    assert rows[3].endswith(" 15m ago (lost)")
