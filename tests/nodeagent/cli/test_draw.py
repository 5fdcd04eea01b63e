"""The views drawn without rich (:mod:`nodeagent.cli._draw`) are rich's text to the
character, or left to rich.

Every view a plain command prints is drawn both ways off a terminal, at the width
``make_console`` gives it: :func:`draw` must answer (so the comparison is not empty) and
answer rich's text. Random tables and lines check the same rule on shapes the views have
not shown yet; where :func:`draw` is unsure it must say so (``None``), never guess.
"""

from __future__ import annotations

import io
from datetime import UTC
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from nodeagent.cli._draw import Group, Screen, Table, Text, draw
from nodeagent.cli._render import (
    held_nodes_view,
    master_status_view,
    plan_summary_view,
    plan_view,
    render_claim,
    render_drain,
    render_status,
    status_view,
)
from slots import HealthPolicy, Machine, MachinePolicy, OnCompletion, Resources, Schedule
from tests.nodeagent.cli.test_cli_master_render import machine, plan
from tests.nodeagent.cli.test_cli_units import NOW, PENDING


def rich_text(renderable: object, width: int = 200) -> str:
    """What the commands' rich console printed off a terminal (make_console's options)."""
    out = io.StringIO()
    console = Console(
        file=out,
        width=width,
        color_system=None,
        force_terminal=False,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
    )
    console.print(renderable)
    return out.getvalue()


def screen_text(render: Any, *args: Any, **kwargs: Any) -> str:
    out = io.StringIO()
    render(Screen(out, environ={}), *args, **kwargs)
    return out.getvalue()


def _draining_machine() -> Machine:
    m = Machine(
        host="node17",
        total=Resources(cpus=4),
        policy=MachinePolicy(hooks=frozenset({"reboot"}), health=HealthPolicy(passes=2)),
        now=NOW,
    )
    m.start_draining(
        NOW + 1, schedule=Schedule.FAST, on_completion=OnCompletion.HOOK, hook="reboot", commit=True
    )
    m.hook_started(
        NOW + 2, "1", pid=77, process_start=NOW + 2, boot_id="b", reboots=True, timeout=60
    )
    m.hook_ended(NOW + 9, "1", exit_status=3, output="step 1 ok\nstep 2: device busy\n")
    return m


def _status_ad() -> dict[str, Any]:
    common = {"MyCurrentTime": NOW, "TotalCpus": 8, "Start": False, "DrainState": "draining"}
    machine_ad = {
        "Name": "n1",
        **common,
        "DrainingRequestId": "7",
        "DrainSchedule": "graceful",
        "DrainReason": "kernel update",
        "ExpectedMachineGracefulDrainingCompletion": NOW + 2520,
        "ExpectedMachineGracefulDrainingBadput": 4500,
    }
    slots = [
        {"Name": "slot1@n1", "SlotType": "Partitionable", "State": "Drained"}
        | {"Activity": "Retiring", "Cpus": 4, "Memory": 1024},
        {"Name": "slot1_1@n1", "SlotType": "Dynamic", "State": "Claimed", "Activity": "Retiring"}
        | {"Cpus": 4, "Memory": 512, "JobId": "j1", "RemoteOwner": "alice"}
        | {"TotalJobRunTime": 600, "RetirementTimeRemaining": 2400},
    ]
    return {"machine": machine_ad, "slots": slots}


MASTER_STATUS = {
    "draining_machines": [{"id": {"hostname": "node1.test", "ip": "10.0.0.1"}}],
    "down_machines": [{"hostname": "node2.test", "ip": "10.0.0.2"}],
}
HELD: list[dict[str, Any]] = [
    {"Name": "node3.test", "HealthState": "failing", "HealthMessage": "exit status 1"}
    | {"HealthFailures": 2, "HealthNextCheck": NOW + 30},
    {"Name": "node4.test", "DrainHookName": "reboot", "DrainHookState": "running"}
    | {"DrainHookRequestId": "9", "DrainingRequestId": "9"},
]
CLAIM = {
    "id": "3",
    "slot": "slot1_3@n1",
    "state": "Claimed",
    "activity": "Busy",
    "job": {"pid": 1234, "job_id": "3", "owner": "alice", "group": "www/prod"},
    "resources": {"cpus": 2},
}
LATE = machine(on_time=False, late_by=600, completion=3600, state="draining", schedule="graceful")

VIEWS: dict[str, Any] = {
    "status": status_view(_status_ad(), tz=UTC),
    "status, a failed hook": status_view(_draining_machine().ad(NOW + 20)),
    "status, the model's idle ad": status_view(
        Machine(host="n", total=Resources(cpus=8), policy=MachinePolicy(), now=NOW).ad(NOW)
    ),
    "master status": master_status_view(MASTER_STATUS),
    "master status, none": master_status_view({}),
    "held nodes": held_nodes_view(HELD, now=NOW),
    "plan summary": plan_summary_view(plan(LATE, machine("node2.test")), tz=UTC),
    "plan summary, none late": plan_summary_view(plan(machine()), tz=UTC),
    "plan timeline": plan_view(plan(LATE, machine("node2.test"), machine(mode="DOWN")), tz=UTC),
    "plan timeline, empty": plan_view(plan(), tz=UTC),
}


@pytest.mark.parametrize("name", VIEWS)
def test_each_view_is_drawn_as_rich_draws_it(name: str) -> None:
    view = VIEWS[name]
    drawn = draw(view, 200)
    assert drawn is not None, "the view fell back to rich"
    assert drawn == rich_text(view)


@pytest.mark.parametrize(
    ("render", "args", "kwargs"),
    [
        (render_drain, (PENDING,), {"heading": "Drain committed", "tz": UTC}),
        (render_drain, ({**PENDING, "estimate": {}},), {"heading": "Drain estimate"}),
        (render_claim, (CLAIM,), {"verb": "releasing"}),
        (render_status, (_status_ad(),), {"tz": UTC}),
    ],
    ids=["drain", "drain without an estimate", "claim", "status"],
)
def test_each_command_prints_on_a_screen_what_it_printed_on_rich(
    render: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, highlight=False, markup=False, emoji=False)
    render(console, *args, **kwargs)
    assert screen_text(render, *args, **kwargs) == out.getvalue()


@pytest.mark.parametrize(
    ("view", "width"),
    [
        (Text("x" * 81), 80),  # rich wraps it
        (Text("a\tb"), 200),  # rich expands the tab
        (Text("\x1b[31mred"), 200),  # rich drops the escape
        (Text("日本"), 200),  # two columns a character
        (Text("e\u0301"), 200),  # a combining accent: no column
        (Group(Text("fits"), "x" * 201), 200),
        (Table(box=None, pad_edge=False, header_style="bold", expand=True), 200),
        (Table(title="t", title_justify="center"), 200),
        (Table(show_lines=True), 200),
    ],
)
def test_what_rich_might_draw_otherwise_is_left_to_it(view: Any, width: int) -> None:
    if isinstance(view, Table):
        view.add_column("a")
        view.add_row("1")
    assert draw(view, width) is None


def _table(boxed: bool, title: str | None) -> Table:
    if boxed:
        return Table(title=title, title_justify="left") if title is not None else Table()
    return Table(box=None, pad_edge=False, header_style="bold")


WORDS = st.text(st.sampled_from("ab -_./:1·…━"), max_size=14)


@settings(max_examples=300, deadline=None)
@given(
    boxed=st.booleans(),
    title=st.none() | WORDS,
    columns=st.lists(
        st.tuples(WORDS, st.sampled_from(["left", "right"]), st.booleans()), min_size=1, max_size=6
    ),
    rows=st.lists(st.lists(WORDS, max_size=6), max_size=5),
    width=st.integers(min_value=8, max_value=120),
)
def test_a_table_is_drawn_as_rich_draws_it_or_left_to_it(
    boxed: bool,
    title: str | None,
    columns: list[tuple[str, str, bool]],
    rows: list[list[str]],
    width: int,
) -> None:
    table = _table(boxed, title)
    for header, justify, no_wrap in columns:
        table.add_column(header, justify=justify, no_wrap=no_wrap)
    for row in rows:
        table.add_row(
            *(Text(c, style="red") if i % 2 else c for i, c in enumerate(row[: len(columns)]))
        )
    drawn = draw(table, width)
    if drawn is not None:
        assert drawn == rich_text(table, width)


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.tuples(WORDS, st.sampled_from(["", "bold", "dim red"])), max_size=6),
    width=st.integers(min_value=1, max_value=40),
)
def test_a_line_is_drawn_as_rich_draws_it_or_left_to_it(
    parts: list[tuple[str, str]], width: int
) -> None:
    line = Text("", style="bold")
    for text, style in parts:
        line.append(text, style=style)
    drawn = draw(Group(line, "  plain"), width)
    if drawn is not None:
        assert drawn == rich_text(Group(line, "  plain"), width)


# --- where a screen draws -----------------------------------------------------------------


class _Stream(io.StringIO):
    def __init__(self, *, tty: bool, encoding: str = "utf-8") -> None:
        super().__init__()
        self._tty = tty
        self._encoding = encoding

    def isatty(self) -> bool:
        return self._tty

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding


@pytest.mark.parametrize(
    ("tty", "environ", "encoding", "width"),
    [
        (False, {}, "utf-8", 200),
        (False, {"COLUMNS": "80"}, "utf-8", 80),
        (False, {"COLUMNS": "wide"}, "utf-8", None),
        (False, {"NO_COLOR": "1"}, "utf-8", 200),
        (False, {"FORCE_COLOR": "1"}, "utf-8", None),
        (False, {"FORCE_COLOR": ""}, "utf-8", 200),
        (False, {"TTY_COMPATIBLE": "1"}, "utf-8", None),
        (True, {}, "utf-8", None),
        (True, {"TTY_COMPATIBLE": "0"}, "utf-8", 200),
        (True, {"FORCE_COLOR": ""}, "utf-8", 200),
        (False, {}, "UTF8", 200),
        (False, {}, "ascii", None),
        (False, {}, "iso8859-1", None),
    ],
)
def test_a_screen_draws_only_off_a_terminal_at_the_width_rich_would_take(
    tty: bool, environ: dict[str, str], encoding: str, width: int | None
) -> None:
    stream = _Stream(tty=tty, encoding=encoding)
    screen = Screen(stream, environ=environ)
    rich_terminal = Console(file=stream, _environ=environ).is_terminal
    assert screen._plain_width() == width
    if width is not None:
        assert not rich_terminal
        assert (screen.is_terminal, screen.width) == (False, width)
        screen.print(Text("drawn"))
        assert stream.getvalue() == "drawn\n"


def test_a_screen_on_a_terminal_prints_through_rich_in_colour() -> None:
    stream = _Stream(tty=True)
    screen = Screen(stream, environ={})
    screen.console.width = 200  # what make_console reads from the terminal
    screen.print(Text("ok", style="green"))
    assert "\x1b[32mok" in stream.getvalue()
