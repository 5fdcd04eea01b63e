"""Human output of the command line: drain summaries, the status view, progress lines.

Everything here reads the API's JSON (``dict``) and writes to a :class:`rich.console.Console`;
nothing talks to the agent. rich is imported when this module is, so client commands
import this module only when they print for humans (``--json`` never does).

The ``format_*`` helpers are pure: times are epoch seconds, ``now`` is the agent's clock
(``MyCurrentTime``, or the estimate's ``now``) so "in 42m" is right for a remote agent
whose clock differs from ours; ``tz`` defaults to the local time zone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any, TextIO

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

__all__ = [
    "DrainProgress",
    "format_core_hours",
    "format_duration",
    "format_local_time",
    "format_relative",
    "make_console",
    "progress_line",
    "render_ad_table",
    "render_claim",
    "render_drain",
    "render_drain_end",
    "render_status",
    "status_view",
]

_ACTIVITY_STYLES = {
    "Idle": "dim",
    "Busy": "green",
    "Retiring": "yellow",
    "Suspended": "magenta",
    "Vacating": "red",
    "Killing": "bold red",
}
_STATE_STYLES = {
    "Unclaimed": "cyan",
    "Claimed": "green",
    "Preempting": "red",
    "Drained": "yellow",
    "Owner": "dim",
}
_DRAIN_STYLES = {"pending": "yellow", "draining": "yellow", "drained": "bold yellow"}


def make_console(stream: TextIO | None = None) -> Console:
    """A console on ``stream`` (default stdout): colour only on a terminal (and never with
    ``NO_COLOR``); off a terminal, wide enough that tables are not cut (``COLUMNS`` wins)."""
    console = Console(file=stream or sys.stdout, highlight=False, soft_wrap=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 200
    return console


# --- pure formatting ----------------------------------------------------------------------


def format_duration(seconds: float) -> str:
    """A duration in its two largest units: ``45s``, ``2m05s``, ``42m``, ``1h05m``, ``2d3h``."""
    total = max(0, round(seconds))
    if total < 60:
        return f"{total}s"
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    for i, (name, size) in enumerate(units[:-1]):
        if total >= size:
            big, rest = divmod(total, size)
            small_name, small_size = units[i + 1]
            small = rest // small_size
            if small == 0:
                return f"{big}{name}"
            width = 1 if small_name == "h" else 2
            return f"{big}{name}{small:0{width}d}{small_name}"
    raise AssertionError("unreachable")  # pragma: no cover


def format_relative(when: float, now: float) -> str:
    """``in 42m``, ``3m ago``, or ``now`` (within half a second)."""
    delta = when - now
    if abs(delta) < 0.5:
        return "now"
    if delta > 0:
        return f"in {format_duration(delta)}"
    return f"{format_duration(-delta)} ago"


def format_local_time(when: float, now: float, tz: tzinfo | None = None) -> str:
    """``14:05:09 CET`` when ``when`` falls on ``now``'s date, else ``2026-11-23 14:05:09 CET``."""
    moment = datetime.fromtimestamp(when, tz).astimezone(tz)
    today = datetime.fromtimestamp(now, tz).astimezone(tz)
    text = moment.strftime("%H:%M:%S" if moment.date() == today.date() else "%Y-%m-%d %H:%M:%S")
    zone = moment.strftime("%Z")
    return f"{text} {zone}" if zone else text


def format_core_hours(core_seconds: float) -> str:
    """Badput: ``1.25 core-hours (4500 core-seconds)``."""
    return f"{core_seconds / 3600:.2f} core-hours ({round(core_seconds)} core-seconds)"


def _when(value: object, now: float, tz: tzinfo | None) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{format_local_time(value, now, tz)} ({format_relative(value, now)})"


def _num(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


# --- drains -------------------------------------------------------------------------------


def _blockers_table(blockers: Sequence[Mapping[str, Any]], now: float, tz: tzinfo | None) -> Table:
    table = Table(
        title="Blockers (latest first: the first sets the completion)", title_justify="left"
    )
    for header in ("Slot", "Job", "Owner", "Cpus", "Activity", "Run", "Retirement left"):
        table.add_column(header, justify="right" if header in ("Cpus",) else "left")
    table.add_column("Vacate")
    table.add_column("Evict at")
    table.add_column("Gone by")
    for b in blockers:
        activity = str(b.get("activity", ""))
        evict = b.get("evict_at")
        table.add_row(
            str(b.get("slot", "")),
            str(b.get("job_id", "")),
            str(b.get("owner", "")),
            str(b.get("cpus", "")),
            Text(activity, style=_ACTIVITY_STYLES.get(activity, "")),
            format_duration(_num(b.get("run"))),
            format_duration(_num(b.get("retirement_remaining"))),
            format_duration(_num(b.get("vacate"))),
            "evicting" if evict is None else _when(evict, now, tz),
            _when(b.get("gone_by"), now, tz),
        )
    return table


def render_drain(
    console: Console, body: Mapping[str, Any], *, heading: str, tz: tzinfo | None = None
) -> None:
    """A drain request with its estimate: the completion as local time and as "in 42m",
    the badput in core-hours, and the blockers table. ``body`` is a drain reply."""
    state = str(body.get("state", "none"))
    head = Text(f"{heading}: ", style="bold")
    head.append(f"request {body.get('id')} ", style="bold")
    head.append(state, style=_DRAIN_STYLES.get(state, ""))
    head.append(f" ({body.get('schedule')}, on completion {body.get('on_completion')})")
    console.print(head)
    estimate = body.get("estimate") or {}
    now = _num(estimate.get("now"))
    rows: list[tuple[str, str]] = []
    if body.get("reason"):
        rows.append(("reason", str(body["reason"])))
    if estimate:
        rows.append(("completion", _when(estimate.get("completion"), now, tz)))
        rows.append(("badput", format_core_hours(_num(estimate.get("badput")))))
    if body.get("deadline_at") is not None:
        rows.append(("deadline", _when(body["deadline_at"], now, tz)))
    elif body.get("deadline") is not None:
        rows.append(("deadline", f"{format_duration(_num(body['deadline']))} after commit"))
    if body.get("start"):
        rows.append(("start", str(body["start"])))
    if state == "pending" and body.get("expires_at") is not None:
        rows.append(("expires", f"{_when(body['expires_at'], now, tz)} unless committed"))
    for label, value in rows:
        console.print(f"  {label:<11} {value}")
    blockers = estimate.get("blockers") or []
    if blockers:
        console.print(_blockers_table(blockers, now, tz))
    elif estimate:
        console.print("  no jobs are running: the node is empty now")


def progress_line(body: Mapping[str, Any], tz: tzinfo | None = None) -> str:
    """One line of ``drain --wait`` progress: slots still busy, the next eviction, time left."""
    estimate = body.get("estimate") or {}
    now = _num(estimate.get("now"))
    blockers = estimate.get("blockers") or []
    parts = [f"request {body.get('id')} {body.get('state')}"]
    busy = len(blockers)
    parts.append(f"{busy} slot{'' if busy == 1 else 's'} busy")
    upcoming = [b for b in blockers if isinstance(b.get("evict_at"), int | float)]
    upcoming = [b for b in upcoming if b["evict_at"] >= now]
    evicting = [b for b in blockers if b.get("activity") in ("Vacating", "Killing")]
    if upcoming:
        first = min(upcoming, key=lambda b: b["evict_at"])
        parts.append(f"next eviction {first.get('slot')} {format_relative(first['evict_at'], now)}")
    elif evicting:
        parts.append(f"{len(evicting)} being evicted")
    if estimate and busy:
        completion = _num(estimate.get("completion"))
        parts.append(
            f"time left {format_duration(completion - now)} "
            f"(empty by {format_local_time(completion, now, tz)})"
        )
    return " · ".join(parts)


def _progress_key(line: str) -> list[str]:
    """The parts of a progress line that do not tick with the clock."""
    return [part.split(" in ")[0] for part in line.split(" · ")[:3]]


class DrainProgress:
    """``drain --wait`` progress on ``console``: a spinner line on a terminal (updated on
    every poll), otherwise one printed line whenever the state, the number of busy slots
    or the next job to be evicted changes."""

    def __init__(self, console: Console, body: Mapping[str, Any]) -> None:
        self._console = console
        line = progress_line(body)
        self._last = _progress_key(line)
        self._status = console.status(line) if console.is_terminal else None
        if self._status is not None:
            self._status.start()
        else:
            console.print(line)

    def update(self, body: Mapping[str, Any]) -> None:
        if not isinstance(body.get("estimate"), dict):
            return
        line = progress_line(body)
        if self._status is not None:
            self._status.update(line)
            return
        key = _progress_key(line)
        if key != self._last:
            self._console.print(line)
            self._last = key

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()


def render_drain_end(console: Console, body: Mapping[str, Any], request_id: str) -> None:
    """How a waited-for drain ended, from the final ``GET /v1/drain`` reply."""
    if body.get("id") == request_id:
        console.print(Text(f"drained: request {request_id}", style="bold green"))
        return
    last = body.get("last") or {}
    action = last.get("on_completion")
    console.print(
        Text(
            f"drained: request {request_id} completed (on completion {action})",
            style="bold green",
        )
    )


# --- claims -------------------------------------------------------------------------------


def render_claim(console: Console, claim: Mapping[str, Any], *, verb: str) -> None:
    """One line for a claim reply: ``claim 3 slot1_3@host Claimed/Busy pid 1234 (2 cpus)``."""
    job = claim.get("job") or {}
    resources = claim.get("resources") or {}
    line = Text(f"{verb} claim {claim.get('id')} ", style="bold")
    line.append(f"{claim.get('slot')} ")
    state, activity = str(claim.get("state")), str(claim.get("activity"))
    line.append(state, style=_STATE_STYLES.get(state, ""))
    line.append("/")
    line.append(activity, style=_ACTIVITY_STYLES.get(activity, ""))
    if job.get("pid") is not None:
        line.append(f" pid {job['pid']}")
    cpus = resources.get("cpus")
    line.append(f" ({cpus} cpu{'' if cpus == 1 else 's'}, job {job.get('job_id')}")
    line.append(f", owner {job.get('owner')})")
    console.print(line)


# --- status and ads -----------------------------------------------------------------------


def _machine_line(machine: Mapping[str, Any], slots: Sequence[Mapping[str, Any]]) -> Text:
    now = _num(machine.get("MyCurrentTime"))
    dynamic = [s for s in slots if s.get("SlotType") == "Dynamic"]
    busy_cpus = sum(int(_num(s.get("Cpus"))) for s in dynamic)
    line = Text(str(machine.get("Name", "?")), style="bold")
    start = machine.get("Start")
    line.append("  Start=")
    line.append(
        "true" if start is True else "false" if start is False else str(start),
        style="green" if start is True else "yellow",
    )
    drain = str(machine.get("DrainState", "none"))
    line.append("  ")
    if drain == "none":
        line.append("not draining", style="dim")
    else:
        line.append(drain, style=_DRAIN_STYLES.get(drain, "yellow"))
        details = [f"request {machine.get('DrainingRequestId')}"]
        if machine.get("DrainSchedule"):
            details.append(str(machine["DrainSchedule"]))
        if machine.get("DrainReason"):
            details.append(f"reason {machine['DrainReason']!r}")
        if isinstance(machine.get("DrainingDeadline"), int | float):
            details.append(f"deadline {format_relative(machine['DrainingDeadline'], now)}")
        line.append(f" ({', '.join(details)})")
    line.append(f"  cpus {busy_cpus}/{machine.get('TotalCpus')} claimed")
    line.append(f"  {len(dynamic)} job{'' if len(dynamic) == 1 else 's'}")
    return line


def _estimates_line(machine: Mapping[str, Any], tz: tzinfo | None) -> str:
    now = _num(machine.get("MyCurrentTime"))
    drain = str(machine.get("DrainState", "none"))
    schedule = str(machine.get("DrainSchedule") or "")
    if drain in ("draining", "drained") and schedule:
        key = schedule.capitalize()
        completion = machine.get(f"ExpectedMachine{key}DrainingCompletion")
        badput = _num(machine.get(f"ExpectedMachine{key}DrainingBadput"))
        return f"  expected: empty {_when(completion, now, tz)}, badput {format_core_hours(badput)}"
    parts = []
    for name in ("Graceful", "Quick", "Fast"):
        completion = machine.get(f"ExpectedMachine{name}DrainingCompletion")
        badput = _num(machine.get(f"ExpectedMachine{name}DrainingBadput"))
        when = format_relative(_num(completion), now) if completion is not None else "-"
        parts.append(f"{name.lower()} {when} ({badput / 3600:.2f} core-h)")
    return "  a drain now: " + ", ".join(parts)


def _slot_table(slots: Sequence[Mapping[str, Any]]) -> Table:
    """One row per slot; the name says its type (``slot1@…`` partitionable, ``slot1_N@…``
    dynamic). Names, states and activities are never cut; other columns give way."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for header in ("Slot", "State", "Activity"):
        table.add_column(header, no_wrap=True)
    for header in ("Cpus", "Mem"):
        table.add_column(header, justify="right")
    table.add_column("Job")
    table.add_column("Owner")
    table.add_column("Run", justify="right")
    table.add_column("Retire in", justify="right", no_wrap=True)
    for s in slots:
        state, activity = str(s.get("State", "")), str(s.get("Activity", ""))
        dynamic = s.get("SlotType") == "Dynamic"
        table.add_row(
            str(s.get("Name", "")),
            Text(state, style=_STATE_STYLES.get(state, "")),
            Text(activity, style=_ACTIVITY_STYLES.get(activity, "")),
            str(s.get("Cpus", "")),
            str(s.get("Memory", "")),
            str(s.get("JobId", "")) if dynamic else "",
            str(s.get("RemoteOwner", "")) if dynamic else "",
            format_duration(_num(s.get("TotalJobRunTime"))) if dynamic else "",
            format_duration(_num(s.get("RetirementTimeRemaining"))) if dynamic else "",
        )
    return table


def status_view(ad: Mapping[str, Any], *, tz: tzinfo | None = None) -> Group:
    """``nodeagent status``: the machine line, the expected drain figures, the slot table."""
    machine = ad.get("machine") or {}
    slots = ad.get("slots") or []
    return Group(_machine_line(machine, slots), _estimates_line(machine, tz), _slot_table(slots))


def render_status(console: Console, ad: Mapping[str, Any], *, tz: tzinfo | None = None) -> None:
    """Print :func:`status_view`."""
    console.print(status_view(ad, tz=tz))


def render_ad_table(console: Console, ad: Mapping[str, Any]) -> None:
    """``nodeagent ad``: one row per slot, like ``condor_status`` without ``-l``."""
    slots = ad.get("slots") or []
    table = Table(box=None, pad_edge=False, header_style="bold")
    for header in ("Name", "State", "Activity", "Cpus", "Mem", "ActvtyTime"):
        right = header in ("Cpus", "Mem")
        table.add_column(header, justify="right" if right else "left", no_wrap=not right)
    for s in slots:
        now = _num(s.get("MyCurrentTime"))
        since = _num(s.get("EnteredCurrentActivity")) or now
        table.add_row(
            str(s.get("Name", "")),
            str(s.get("State", "")),
            str(s.get("Activity", "")),
            str(s.get("Cpus", "")),
            str(s.get("Memory", "")),
            format_duration(now - since),
        )
    console.print(table)
