"""``nodeagent master plan``'s query and the streamed plan's lines as it prints them."""

from __future__ import annotations

import io
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
