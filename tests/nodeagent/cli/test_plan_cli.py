"""``nodeagent master plan``'s query and the streamed plan's lines as it prints them."""

from __future__ import annotations

import io
from datetime import UTC
from typing import Any

import pytest
from rich.console import Console

from nodeagent.cli._master import _plan_path
from nodeagent.cli._render import plan_stream_lines


@pytest.mark.parametrize(
    ("all_rows", "windows", "machines", "path"),
    [
        (False, (), (), "/v1/maintenance/plan?late=true&blockers=false&limit=20"),
        (True, (), (), "/v1/maintenance/plan"),
        (True, ("1800000000",), (), "/v1/maintenance/plan?window=1800000000"),
        (
            False,
            ("1", "2.5"),
            ("a.test", "10.0.0.1"),
            "/v1/maintenance/plan?late=true&blockers=false&limit=20&window=1&window=2.5"
            "&machine=a.test&machine=10.0.0.1",
        ),
    ],
)
def test_the_plan_asks_for_the_rows_and_the_machines_wanted(
    all_rows: bool, windows: tuple[str, ...], machines: tuple[str, ...], path: str
) -> None:
    assert _plan_path(all_rows=all_rows, limit=20, windows=windows, machines=machines) == path


NOW = 1_800_000_000.0
ROW: dict[str, Any] = {
    "machine_id": {"hostname": "n1.test", "ip": "10.0.0.1"},
    "mode": "DRAINING",
    "window": {"start": NOW + 3600, "end": NOW + 7200},
    "node": "n1.test",
    "nodes": [{"name": "n1.test", "lost": False}],
    "drain": {"state": "none"},
    "on_time": False,
    "late_by": 600,
    "planned_drain_start": NOW + 1800,
}


def test_the_streamed_lines_print_a_heading_a_line_a_row_and_the_totals() -> None:
    render = plan_stream_lines()
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None, force_terminal=False)
    for line in (
        {"plan": {"now": NOW, "policy": {"drain_policy": "just_in_time", "escalation": "quick"}}},
        {"row": ROW},
        {"row": {**ROW, "machine_id": {"hostname": "n2.test"}, "node": None, "nodes": []}},
        {"end": {"matched": 2, "totals": {"machines": 2}, "after_window": [], "next": None}},
        {"other": 1},
    ):
        for text in render(line):
            console.print(text)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Maintenance plan · now ")
    assert lines[2].split() == ["MACHINE", "MODE", "DRAIN", "WINDOW", "DRAIN", "START", "STATUS"]
    assert lines[3].split()[:3] == ["n1.test", "DRAINING", "none"]
    assert lines[3].endswith("late 10m")
    assert lines[4].startswith("n2.test ")
    assert lines[4].endswith("no node")
    assert lines[5].startswith("2 machines: ")


@pytest.mark.parametrize(
    ("start", "shown"),
    [
        (NOW + 60, "08:01:00 UTC"),  # NOW is 08:00:00 UTC
        (NOW + 86_400, "01-16 08:00:00"),  # another date: the date, no zone
        (NOW + 400 * 86_400, "2028-02-19 08:00"),  # another year
    ],
)
def test_a_streamed_row_keeps_its_columns_whatever_the_date_of_its_times(
    start: float, shown: str
) -> None:
    """A window on another date (one that crosses midnight) or in another year still fits
    the row's time columns: the row stays within 100 columns and ends with its status."""
    row = {**ROW, "window": {"start": start, "end": start + 3600}, "planned_drain_start": start}
    render = plan_stream_lines(tz=UTC)
    render({"plan": {"now": NOW, "policy": {}}})
    (line,) = render({"row": row})
    assert len(line.plain) <= 100
    assert line.plain.count(shown) == 2  # the window's start and the drain's
    assert line.plain.endswith("late 10m")


def test_master_status_says_when_the_machines_after_their_window_may_be_more(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plan's totals that ``master status`` reads say 40 machines are not read yet:
    the list of machines still out of service after their window may miss some, and the
    command says so (off a terminal, as text)."""
    from nodeagent.cli import _master
    from nodeagent.cli._http import Reply

    status = {"draining_machines": [{"id": {"hostname": "n1.test", "ip": "10.0.0.1"}}]}
    replies: dict[str, dict[str, Any]] = {
        "/v1/maintenance/plan?late=true&blockers=false&limit=0": {
            "totals": {"behind": 40},
            "after_window": [],
        },
        "/v1/leader": {"store": "sqlite"},
    }

    def request(target: Any, method: str, path: str, **_: Any) -> Reply:
        data = replies.get(path, {})
        return Reply(status=200, text="", data=data)

    monkeypatch.setattr(_master, "_mesos", lambda *a, **k: Reply(status=200, text="", data=status))
    monkeypatch.setattr(_master, "request", request)
    _master.status(json_output=False, host=None, token=None, socket_path="/nonexistent")
    out = capsys.readouterr().out
    assert (
        "40 machines not read yet: the master is still taking in their latest ads, and "
        "counts them as of an older ad, or not at all" in " ".join(out.split())
    )
    replies["/v1/maintenance/plan?late=true&blockers=false&limit=0"]["totals"] = {"behind": 0}
    _master.status(json_output=False, host=None, token=None, socket_path="/nonexistent")
    assert "not read yet" not in capsys.readouterr().out
