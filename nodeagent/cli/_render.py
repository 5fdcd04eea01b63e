"""Every human view of the command line: the agent's, the master's and the defrag daemon's.

Everything here reads the API's JSON (``dict``) and builds a view of
:mod:`nodeagent.cli._draw`'s :class:`~nodeagent.cli._draw.Text`,
:class:`~nodeagent.cli._draw.Table` and :class:`~nodeagent.cli._draw.Group` (or returns
text), printed on a :class:`~nodeagent.cli._draw.Screen` or a
:class:`rich.console.Console`; nothing talks to a daemon. Nothing here imports rich: a
screen draws a view without it off a terminal, so a command imports rich (≈ 15 ms, with
``typing``, ``dataclasses`` and ``inspect``) only to print in colour on a terminal, to
wrap what is too wide, or for a live view (``--watch``, ``drain --wait``).

* the agent's: :func:`render_status` (:func:`status_view`), :func:`render_ad_table`,
  :func:`render_drain` and :class:`DrainProgress` for ``drain``, :func:`render_claim`;
* the master's: :func:`master_status_view`, :func:`schedule_view`, :func:`ads_table`,
  :func:`render_transition`, the plan's summary :func:`plan_summary_view` and timeline
  :func:`plan_view`, each machine's two verdicts in words :func:`verdict_sentence`;
* the defrag daemon's: :func:`render_stats`.

The ``format_*`` helpers are pure: times are epoch seconds, ``now`` is the daemon's clock
(``MyCurrentTime``, or the estimate's ``now``) so "in 42m" is right for a remote agent
whose clock differs from ours; ``tz`` defaults to the local time zone.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, tzinfo
from itertools import groupby

from nodeagent.cli._draw import Group, Screen, Table, Text
from nodeagent.cli._record import record

TYPE_CHECKING = False  # not typing's: a plain command imports neither typing nor rich
if TYPE_CHECKING:
    from typing import Any, TextIO

    from rich.console import Console

__all__ = [
    "DrainProgress",
    "ads_table",
    "behind_line",
    "down_preview_view",
    "format_core_hours",
    "format_duration",
    "format_local_time",
    "format_machine",
    "format_relative",
    "make_console",
    "master_status_view",
    "plan_summary_view",
    "plan_text",
    "plan_view",
    "plan_width",
    "progress_line",
    "render_ad_table",
    "render_claim",
    "render_drain",
    "render_drain_end",
    "render_stats",
    "render_status",
    "render_transition",
    "schedule_preview_view",
    "schedule_view",
    "status_view",
    "verdict_sentence",
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
    ``NO_COLOR``); off a terminal, wide enough that tables are not cut (``COLUMNS`` wins).

    Text is printed as it is: a daemon's strings (a drain reason, a START expression with
    ``[…]``, an owner) are neither rich markup nor ``:emoji:`` codes."""
    from rich.console import Console  # noqa: PLC0415

    console = Console(
        file=stream or sys.stdout, highlight=False, markup=False, emoji=False, soft_wrap=False
    )
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


def column_time(when: float, now: float, tz: tzinfo | None = None) -> str:
    """A time in a column of 16: ``14:05:09 CET`` on ``now``'s date, ``11-30 14:05:09`` on
    another date of its year, ``2027-01-05 14:05`` in another year (the zone is the
    heading's)."""
    moment = datetime.fromtimestamp(when, tz).astimezone(tz)
    today = datetime.fromtimestamp(now, tz).astimezone(tz)
    if moment.date() == today.date():
        text = moment.strftime("%H:%M:%S")
        zone = moment.strftime("%Z")
        return f"{text} {zone}" if zone and len(text) + 1 + len(zone) <= 16 else text
    if moment.year == today.year:
        return moment.strftime("%m-%d %H:%M:%S")
    return moment.strftime("%Y-%m-%d %H:%M")


def format_core_hours(core_seconds: float) -> str:
    """Badput: ``1.25 core-hours (4500 core-seconds)``."""
    return f"{core_seconds / 3600:.2f} core-hours ({round(core_seconds)} core-seconds)"


def _when(value: object, now: float, tz: tzinfo | None) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{format_local_time(value, now, tz)} ({format_relative(value, now)})"


def _declined(
    machine: object, group: object, answer: Mapping[str, Any], now: float, tz: tzinfo | None
) -> str:
    """A declined notice in words: ``node3 batch/etl by alice 5m ago: month-end run; done by
    09:30:00 UTC, in 1h30m`` (the owner's expected completion, when it gave one)."""
    at = _number(answer.get("at"))
    line = (
        f"{machine} {group} by {answer.get('who')}"
        f"{'' if at is None else ' ' + format_relative(at, now)}: {answer.get('reason')}"
    )
    done = _number(answer.get("expected_completion"))
    if done is not None:
        line += f"; done by {_at(done, now, tz)}"
    return line


def _at(when: float, now: float, tz: tzinfo | None) -> str:
    """``09:30:00 UTC, in 1h30m``: a time and how far it is from ``now``."""
    return f"{format_local_time(when, now, tz)}, {format_relative(when, now)}"


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
    console: Console | Screen, body: Mapping[str, Any], *, heading: str, tz: tzinfo | None = None
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
    hook = body.get("hook") or {}
    if hook:
        rows.append(("hook", f"{hook.get('name')} {hook.get('state')}"))
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


def render_drain_end(console: Console | Screen, body: Mapping[str, Any], request_id: str) -> None:
    """How a waited-for drain ended, from the final ``GET /v1/drain`` reply: drained, its
    completion action or hook done (or failed), and whether the node waits for its health
    check."""

    if body.get("id") == request_id:
        hook = body.get("hook") or {}
        if body.get("state") == "hook_failed":
            console.print(
                Text(
                    f"drained: request {request_id}; its hook {hook.get('name')} failed: "
                    f"{hook.get('message')}",
                    style="bold red",
                )
            )
            output = str(hook.get("output") or "").rstrip("\n").split("\n")
            for line in output[-_OUTPUT_LINES:] if any(output) else []:
                console.print(Text(f"    | {line}", style="dim"))
            return
        console.print(Text(f"drained: request {request_id}", style="bold green"))
        return
    last = body.get("last") or {}
    action = last.get("on_completion")
    hook = last.get("hook") or {}
    done = f"completed (on completion {action}"
    done += f": {hook.get('message')})" if hook else ")"
    console.print(Text(f"drained: request {request_id} {done}", style="bold green"))
    health = body.get("health") or {}
    if health and health.get("state") != "passing":
        console.print(
            Text(
                f"the node stays closed until its health check passes ({health.get('state')}; "
                "`nodeagent status` shows it)",
                style="yellow",
            )
        )


# --- claims -------------------------------------------------------------------------------


def render_claim(console: Console | Screen, claim: Mapping[str, Any], *, verb: str) -> None:
    """One line for a claim reply: ``claim 3 slot1_3@host Claimed/Busy pid 1234 (2 cpus,
    job 3, owner alice, group www-data/prod/web)`` (the group only when it names one); a
    second when the machine cut the retirement the job asked for: ``retirement cut from 1h
    to 10m (the machine's max_job_retirement_time)``."""

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
    line.append(f", owner {job.get('owner')}")
    if job.get("group") is not None:
        line.append(f", group {job['group']}")
    line.append(")")
    console.print(line)
    asked, granted = job.get("max_job_retirement_time"), job.get("retirement_granted")
    if isinstance(asked, int | float) and isinstance(granted, int | float) and granted < asked:
        console.print(
            f"  retirement cut from {format_duration(asked)} to {format_duration(granted)} "
            "(the machine's max_job_retirement_time)",
            style="yellow",
        )
    shortened = job.get("retirement_shortened_by")
    if isinstance(shortened, int) and shortened > 0:
        console.print(
            f"  retirement shortened by {format_duration(shortened)} to end when the "
            "machine's maintenance window starts",
            style="yellow",
        )


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
    if machine.get("ShuttingDown") is True:
        line.append("  the machine is shutting down", style="bold yellow")
    return line


_HOOK_STYLES = {
    "pending": "yellow",
    "running": "yellow",
    "succeeded": "green",
    "failed": "bold red",
    "interrupted": "red",
}
_HEALTH_STYLES = {"passing": "green", "pending": "yellow", "failing": "bold red"}

#: Lines of a hook's or health check's output ``status`` shows.
_OUTPUT_LINES = 5


def _output_lines(text: object, dropped: object = None) -> list[str]:
    """The last lines of an ad's output attribute (newlines written ``\\n``), after how
    many bytes before the agent's tail were not kept (``dropped``), when some were."""
    if not isinstance(text, str) or not text:
        return []
    lines = [f"    | {line}" for line in text.split("\\n")[-_OUTPUT_LINES:]]
    if isinstance(dropped, int) and not isinstance(dropped, bool) and dropped > 0:
        lines.insert(0, f"    | [… {dropped:,} earlier bytes not kept]")
    return lines


def _hook_lines(machine: Mapping[str, Any], tz: tzinfo | None) -> list[Text]:
    """The drain's completion hook (``DrainHook*``): its state, when, how it ended, the
    end of its output; what to do about a failed one that holds the node."""

    name = machine.get("DrainHookName")
    if not name:
        return []
    now = _num(machine.get("MyCurrentTime"))
    state = str(machine.get("DrainHookState", ""))
    request = machine.get("DrainHookRequestId")
    in_force = request is not None and request == machine.get("DrainingRequestId")
    line = Text(f"  hook {name} (drain {request}): ")
    line.append(state, style=_HOOK_STYLES.get(state, "") if in_force else "dim")
    started, ended = machine.get("DrainHookStartTime"), machine.get("DrainHookEndTime")
    if state == "running" and started is not None:
        line.append(f" since {_when(started, now, tz)}")
    elif ended is not None:
        line.append(f" {_when(ended, now, tz)}")
    if machine.get("DrainHookMessage"):
        line.append(f": {machine['DrainHookMessage']}")
    lines = [line]
    if in_force and state in ("failed", "interrupted"):
        lines.append(
            Text(
                f"    the node stays closed: fix it, then `nodeagent cancel {request}` "
                "(the health check runs first, when configured)",
                style="red",
            )
        )
    if in_force or state in ("failed", "interrupted"):
        lines.extend(
            Text(out, style="dim")
            for out in _output_lines(
                machine.get("DrainHookOutput"), machine.get("DrainHookOutputDropped")
            )
        )
    return lines


def _health_lines(machine: Mapping[str, Any], tz: tzinfo | None) -> list[Text]:
    """The health gate (``Health*``), while it holds the node closed (or its last word)."""

    state = machine.get("HealthState")
    if state is None:
        return []
    state = str(state)
    now = _num(machine.get("MyCurrentTime"))
    line = Text("  health: ")
    line.append(state, style=_HEALTH_STYLES.get(state, ""))
    if state == "passing":
        if machine.get("HealthLastCheck") is not None:
            line.append(f" (last check {_when(machine['HealthLastCheck'], now, tz)})", style="dim")
        return [line]
    passes, needed = machine.get("HealthPasses", 0), machine.get("HealthPassesNeeded", 1)
    line.append(f" (not yet healthy: {passes}/{needed} passes")
    if machine.get("HealthFailures"):
        line.append(f", {machine['HealthFailures']} failed in a row")
    line.append(")")
    if machine.get("HealthReason"):
        line.append(f" since {machine['HealthReason']}")
    lines = [line]
    detail = []
    if machine.get("HealthLastCheck") is not None:
        detail.append(
            f"last check {_when(machine['HealthLastCheck'], now, tz)}: "
            f"{machine.get('HealthMessage', '')}"
        )
    if machine.get("HealthNextCheck") is not None:
        detail.append(f"next {format_relative(_num(machine['HealthNextCheck']), now)}")
    elif state in ("pending", "failing"):
        detail.append("a check is running")
    lines.append(Text("    " + "; ".join(detail)))
    if state == "failing":
        lines.extend(
            Text(out, style="dim")
            for out in _output_lines(
                machine.get("HealthOutput"), machine.get("HealthOutputDropped")
            )
        )
    return lines


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
        # A drain started now ends now at the earliest: an estimate computed a moment
        # before ``now`` (an idle node's completion is the time of its ad) is never past.
        when = format_relative(max(_num(completion), now), now) if completion is not None else "-"
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
    return Group(
        _machine_line(machine, slots),
        *_hook_lines(machine, tz),
        *_health_lines(machine, tz),
        _estimates_line(machine, tz),
        _slot_table(slots),
    )


def render_status(
    console: Console | Screen, ad: Mapping[str, Any], *, tz: tzinfo | None = None
) -> None:
    """Print :func:`status_view`."""
    console.print(status_view(ad, tz=tz))


def render_ad_table(console: Console | Screen, ad: Mapping[str, Any]) -> None:
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


# --- the master: status, schedule, machines, ads ------------------------------------------

_MODE_STYLES = {"UP": "green", "DRAINING": "yellow", "DOWN": "magenta"}


def format_machine(machine_id: Mapping[str, Any]) -> str:
    """A machine id as the command line takes it: ``host/ip``, ``host`` or ``ip``."""
    parts = [str(machine_id[k]) for k in ("hostname", "ip") if machine_id.get(k) is not None]
    return "/".join(parts)


def master_status_view(
    status: Mapping[str, Any], *, pending: Mapping[str, str] | None = None
) -> Group:
    """``nodeagent master status``: the machines in maintenance and their modes. A DOWN
    machine whose node has not confirmed the master's fast drain (``pending``: why, by
    machine as :func:`format_machine` writes it) reads ``DOWN (pending)``, with why below."""

    pending = pending or {}
    rows = [(m.get("id") or {}, "DRAINING") for m in status.get("draining_machines") or []]
    rows += [(m, "DOWN") for m in status.get("down_machines") or []]
    if not rows:
        return Group(Text("no machine is in maintenance: every machine is UP"))
    table = Table(box=None, pad_edge=False, header_style="bold")
    for header in ("MACHINE", "IP", "MODE"):
        table.add_column(header, no_wrap=True)
    waiting = []
    for machine_id, mode in rows:
        shown = mode
        why = pending.get(format_machine(machine_id)) if mode == "DOWN" else None
        if why is not None:
            shown = "DOWN (pending)"
            waiting.append(f"{format_machine(machine_id)}: DOWN pending: {why}")
        table.add_row(
            str(machine_id.get("hostname", "")),
            str(machine_id.get("ip", "")),
            Text(shown, style=_MODE_STYLES[mode]),
        )
    draining = sum(mode == "DRAINING" for _, mode in rows)
    text = f"{draining} DRAINING, {len(rows) - draining} DOWN"
    if waiting:
        text += f" ({len(waiting)} not yet on their node)"
    lines: list[Any] = [table, Text(text, style="dim")]
    lines.extend(Text(line, style="yellow") for line in waiting)
    return Group(*lines)


_NS = 1_000_000_000


def _nanoseconds(value: object) -> float | None:
    if isinstance(value, Mapping) and isinstance(value.get("nanoseconds"), int | float):
        return float(value["nanoseconds"]) / _NS
    return None


def schedule_view(schedule: Mapping[str, Any], now: float, tz: tzinfo | None = None) -> Group:
    """``nodeagent master schedule get``: one row per window (Mesos JSON)."""

    windows = schedule.get("windows") or []
    if not windows:
        return Group(Text("the schedule is empty: no maintenance planned"))
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("WINDOW", justify="right", no_wrap=True)
    table.add_column("START", no_wrap=True)
    table.add_column("DURATION", justify="right", no_wrap=True)
    table.add_column("MACHINES")
    machines = 0
    for number, window in enumerate(windows, 1):
        unavailability = window.get("unavailability") or {}
        start = _nanoseconds(unavailability.get("start"))
        duration = _nanoseconds(unavailability.get("duration"))
        ids = window.get("machine_ids") or []
        machines += len(ids)
        table.add_row(
            str(number),
            "-"
            if start is None
            else f"{format_local_time(start, now, tz)} ({format_relative(start, now)})",
            "indefinite" if duration is None else format_duration(duration),
            ", ".join(format_machine(m) for m in ids),
        )
    summary = f"{len(windows)} window{'' if len(windows) == 1 else 's'}, "
    summary += f"{machines} machine{'' if machines == 1 else 's'}"
    return Group(table, Text(summary, style="dim"))


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    import json  # noqa: PLC0415

    return json.dumps(value, separators=(",", ":"))


def render_transition(
    console: Console | Screen, mode: str, machine_ids: Sequence[Mapping[str, Any]]
) -> None:
    """``nodeagent master down``/``up``: ``DOWN: node7/10.0.0.7, …`` in the mode's colour."""

    line = Text(f"{mode}: ", style=_MODE_STYLES[mode])
    line.append(", ".join(format_machine(m) for m in machine_ids))
    console.print(line)


def held_reason(node: Mapping[str, Any], now: float | None = None) -> str:
    """Why a node is held out of service, from its ``DrainHook*`` and ``Health*``
    attributes (an ad's, or the master's ``service`` object flattened the same way)."""
    reasons = []
    hook, state = node.get("DrainHookName"), node.get("DrainHookState")
    request_id = node.get("DrainHookRequestId")
    in_force = request_id is not None and request_id == node.get("DrainingRequestId")
    if state in ("pending", "running", "failed") and in_force:
        text = f"completion hook {hook} {state}"
        if state == "failed" and node.get("DrainHookMessage"):
            text += f": {node['DrainHookMessage']}"
        reasons.append(text)
    health = node.get("HealthState")
    if health is not None and health != "passing":
        text = f"health check {health}"
        passes, needed = node.get("HealthPasses"), node.get("HealthPassesNeeded")
        if health == "failing":
            failures = node.get("HealthFailures")
            text += f": {node.get('HealthMessage') or 'failed'}"
            if isinstance(failures, int) and failures > 1:
                text += f" ({failures} in a row)"
        elif isinstance(passes, int) and isinstance(needed, int):
            text += f" ({passes} of {needed} passes)"
        due = node.get("HealthNextCheck")
        if now is not None and isinstance(due, int | float):
            text += f", next check in {max(0, round(due - now))} s"
        reasons.append(text)
    return "; ".join(reasons) or "closed"


def held_nodes_view(ads: Sequence[Mapping[str, Any]], *, now: float) -> Group:
    """``nodeagent master status``: the nodes held out of service, and why."""

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("NODE HELD OUT OF SERVICE", no_wrap=True)
    table.add_column("WHY")
    for ad in ads:
        table.add_row(str(ad.get("Name", "")), Text(held_reason(ad, now), style="yellow"))
    count = len(ads)
    summary = Text(
        f"{count} node{'' if count == 1 else 's'} held out of service: each opens once its "
        "hook has succeeded and its health check has passed",
        style="dim",
    )
    return Group(Text(""), table, summary)


def down_preview_view(preview: Mapping[str, Any], *, rows: int = 20) -> Group:
    """``nodeagent master down``'s preview (``POST /v1/maintenance/down/preview``): what
    the fast drains evict at once, machine by machine, and the totals."""
    totals = preview.get("totals") or {}

    def n(key: str) -> int:
        return int(_number(totals.get(key)) or 0)

    jobs, machines = n("jobs"), n("machines")
    lines = [
        Text(
            f"DOWN evicts now: {jobs} job{'' if jobs == 1 else 's'} on {n('cores')} cores "
            f"of {machines} machine{'' if machines == 1 else 's'} (a fast drain: no "
            f"vacate time) · {n('cut_core_seconds')} core-s of promises cut, "
            f"{n('cut_badput')} core-s of work lost",
            style="bold",
        )
    ]
    for m in (preview.get("machines") or [])[:rows]:
        name = format_machine(m.get("machine_id") or {})
        evicted = m.get("evicted_now") or []
        if m.get("node") is None:
            why = "its node is lost" if m.get("lost") else "no node reports for it"
            lines.append(Text(f"  {name}: {why}: drained once it reports", style="yellow"))
            continue
        if not evicted:
            lines.append(Text(f"  {name}: empty"))
            continue
        lines.append(Text(f"  {name}: {len(evicted)} job{'' if len(evicted) == 1 else 's'}"))
        for job in evicted[:rows]:
            cut = _number(job.get("cut_by")) or 0.0
            promise = f", its promise cut by {format_duration(cut)}" if cut > 0 else ""
            lines.append(
                Text(
                    f"    job {job.get('job_id')} ({job.get('owner')}, {job.get('cpus')} cpus)"
                    f"{promise}",
                    style="yellow",
                )
            )
    return Group(*lines)


def render_confirmations(
    console: Console | Screen, report: Sequence[Mapping[str, Any]], mode: str
) -> None:
    """``nodeagent master down``/``up``: each machine whose node has not confirmed the
    change, and why (the reply's ``pending``)."""
    for machine in report:
        if machine.get("confirmed") is False:
            line = Text(f"{format_machine(machine.get('machine_id') or {})}: ", style="yellow")
            line.append(f"{mode} pending: {machine.get('pending')}")
            console.print(line)


def render_up_report(console: Console | Screen, report: Sequence[Mapping[str, Any]]) -> None:
    """``nodeagent master up``: the nodes not yet back in service, from the reply of
    ``POST /machine/up`` (each node's ``service``)."""

    for machine in report:
        for node in machine.get("nodes") or []:
            if node.get("in_service") is not False:
                continue
            hook = node.get("hook") or {}
            health = node.get("health") or {}
            flat = {
                "DrainHookName": hook.get("name"),
                "DrainHookState": hook.get("state"),
                "DrainHookMessage": hook.get("message"),
                "DrainHookRequestId": hook.get("request_id"),
                "DrainingRequestId": hook.get("request_id") if node.get("hook_holds") else None,
                "HealthState": health.get("state"),
                "HealthFailures": health.get("failures"),
                "HealthPasses": health.get("passes"),
                "HealthPassesNeeded": health.get("passes_needed"),
                "HealthMessage": health.get("message"),
            }
            line = Text(f"{node.get('name')}: not yet in service: ", style="yellow")
            line.append(held_reason(flat))
            if not node.get("fresh", True):
                line.append(" (from its last ad: the node did not answer)", style="dim")
            console.print(line)


def ads_table(
    ads: Sequence[Mapping[str, Any]], *, projection: Sequence[str], slots: bool, now: float
) -> Table:
    """``nodeagent master ads``: one row per node ad (or slot ad, or the projection)."""

    table = Table(box=None, pad_edge=False, header_style="bold")
    if projection:
        for name in projection:
            table.add_column(name)
        for ad in ads:
            table.add_row(*(_cell(ad.get(name)) for name in projection))
        return table
    if slots:
        headers = {"Name": "Name", "State": "State", "Activity": "Activity", "Cpus": "Cpus"}
        headers |= {"Memory": "Mem", "JobId": "Job", "RemoteOwner": "Owner"}
        for attr, header in headers.items():
            table.add_column(header, justify="right" if attr in ("Cpus", "Memory") else "left")
        for ad in ads:
            table.add_row(*(_cell(ad.get(attr)) for attr in headers))
        return table
    for header in ("Name", "Mode", "Drain", "Start", "Cpus", "Heard"):
        table.add_column(header, justify="right" if header == "Cpus" else "left", no_wrap=True)
    for ad in ads:
        mode = str(ad.get("MaintenanceMode", "UP"))
        heard = ad.get("LastHeardFrom")
        when = Text(format_relative(float(heard), now) if isinstance(heard, int | float) else "-")
        if ad.get("Lost") is True:
            when.append(" (lost)", style="bold yellow")
        elif ad.get("Rebooting") is True:
            when.append(" (rebooting)", style="cyan")
        table.add_row(
            _cell(ad.get("Name")),
            Text(mode, style=_MODE_STYLES.get(mode, "")),
            _cell(ad.get("DrainState", "none")),
            _cell(ad.get("Start")),
            _cell(ad.get("TotalCpus")),
            when,
        )
    return table


# --- the plan -----------------------------------------------------------------------------

_MINUTE, _HOUR, _DAY = 60, 3600, 86400
_STEPS: tuple[int, ...] = (
    *(1, 2, 5, 10, 15, 30),
    *(n * _MINUTE for n in (1, 2, 5, 10, 15, 30)),
    *(n * _HOUR for n in (1, 2, 3, 6, 12)),
    *(n * _DAY for n in (1, 2, 7, 14, 28, 91, 364)),
)
"""Tick spacings of the plan's time axis: the first that leaves room for a label."""
_IDLE, _CLOSED, _WINDOW = "·", "━", "█"
_DRAIN_START, _EMPTY, _BEYOND = "▷", "◆", "»"
_LEGEND = (
    f"{_DRAIN_START} drain starts  {_CLOSED} closed, draining  {_EMPTY} expected empty  "
    f"[{_WINDOW}] window  {_IDLE} open"
)
_MIN_SPAN = 60.0
_MIN_AXIS = 12


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


@record
class _Axis:
    """Columns ``0 … width-1`` stand for ``now … now + span`` (seconds)."""

    now: float
    span: float
    width: int

    def column(self, when: float) -> int:
        offset = (when - self.now) / self.span * (self.width - 1)
        return min(self.width - 1, max(0, round(offset)))

    def inside(self, when: float) -> bool:
        return self.now <= when <= self.now + self.span


def _axis_span(machines: Sequence[Mapping[str, Any]], now: float) -> float:
    """From now to the last window end; an indefinite window gets a quarter more room."""
    last = now
    indefinite = False
    for m in machines:
        window = m.get("window") or {}
        start, end = _number(window.get("start")), _number(window.get("end"))
        if end is not None:
            last = max(last, end)
        elif start is not None:
            last = max(last, start)
            indefinite = True
    span = last - now
    if indefinite:
        span *= 1.25
    return max(span, _MIN_SPAN)


def _row_status(m: Mapping[str, Any], now: float | None = None) -> tuple[str, str]:
    """The status word and the row's colour (``window ended``: DRAINING or DOWN after its
    window's end, at the plan's ``now``)."""
    own = [n for n in m.get("nodes") or [] if n.get("name") == m.get("node")]
    lost = any(n.get("lost") for n in own)
    rebooting = any(n.get("rebooting") for n in own)
    shutting_down = (m.get("drain") or {}).get("shutting_down") is True
    end = _number((m.get("window") or {}).get("end"))
    if now is not None and end is not None and now >= end and m.get("mode") in _OUT:
        return "window ended", "yellow"
    if m.get("mode") == "DOWN":
        return "DOWN", "magenta"
    if m.get("node") is None:
        return "no node", "dim"
    if lost:
        return "lost", "yellow"
    if rebooting:  # its machine went down after its shutdown drain: back by itself
        return "rebooting", "cyan"
    if shutting_down:  # its agent drains it for its machine's shutdown: left alone
        return "shutting down", "cyan"
    if m.get("empty"):
        return "empty", "bold green"
    if m.get("escalated"):
        return "escalated", "red"
    if m.get("on_time") is False:
        return f"late {format_duration(_number(m.get('late_by')) or 0.0)}", "red"
    return "on time", "green"


def _row_cells(m: Mapping[str, Any], axis: _Axis, style: str) -> list[tuple[str, str]]:
    """The machine's line on the time axis: open, closed, the window, the marks."""
    cells = [(_IDLE, "dim")] * axis.width
    window = m.get("window") or {}
    start, end = _number(window.get("start")), _number(window.get("end"))
    drain = m.get("drain") or {}
    state = str(drain.get("state") or "none")
    planned = _number(m.get("planned_drain_start"))
    has_node = m.get("node") is not None
    # Closed: from the drain's start (now if it runs already, or for a DOWN machine).
    closed_from: float | None = None
    if has_node and (state != "none" or m.get("mode") == "DOWN"):
        closed_from = axis.now
    elif has_node and planned is not None:
        closed_from = max(planned, axis.now)
    if closed_from is not None and axis.inside(closed_from):
        for c in range(axis.column(closed_from), axis.width):
            cells[c] = (_CLOSED, "dim")
    # The window, with its bounds when they are on the axis.
    if start is not None and (end is None or end >= axis.now) and start <= axis.now + axis.span:
        first = axis.column(start)
        last = axis.width - 1 if end is None or not axis.inside(end) else axis.column(end)
        for c in range(first, last + 1):
            cells[c] = (_WINDOW, style)
        if start >= axis.now:
            cells[first] = ("[", f"bold {style}")
        if end is not None and axis.inside(end):
            cells[last] = ("]", f"bold {style}")
            # What follows the window is up to the operator (machine up): left blank.
            cells[last + 1 :] = [(" ", "")] * (axis.width - last - 1)
        else:
            cells[last] = (_BEYOND, f"bold {style}")
    # The planned drain start, while the drain is still to come.
    to_come = has_node and state == "none" and m.get("mode") == "DRAINING"
    if to_come and planned is not None and planned <= axis.now + axis.span:
        cells[axis.column(planned)] = (_DRAIN_START, f"bold {style}")
    # When the node is empty: now, or when the running (else a graceful) drain ends.
    expected = m.get("expected") or {}
    schedule = str(drain.get("schedule") or "graceful")
    if state not in ("draining", "drained") or schedule not in expected:
        schedule = "graceful"
    completion = _number((expected.get(schedule) or {}).get("completion"))
    planned_end = _number((m.get("as_planned") or {}).get("completion"))
    if planned_end is not None:  # as planned: the drain in force, escalated at the window
        completion = planned_end
    if has_node and m.get("empty"):
        completion = axis.now
    if completion is not None:
        late = m.get("on_time") is False
        mark_style = "bold red" if late else "bold green"
        if completion > axis.now + axis.span:
            cells[-1] = (_BEYOND, mark_style)
        else:
            cells[axis.column(completion)] = (_EMPTY, mark_style)
    return cells


def _labels(machines: Sequence[Mapping[str, Any]]) -> list[str]:
    """Hostnames (or ips); ``host/ip`` where a hostname appears more than once."""
    hosts = [str((m.get("machine_id") or {}).get("hostname", "")).lower() for m in machines]
    counts = Counter(hosts)
    out = []
    for m, host in zip(machines, hosts, strict=True):
        machine_id = m.get("machine_id") or {}
        if host and counts[host] == 1:
            out.append(str(machine_id["hostname"]))
        else:
            out.append(format_machine(machine_id))
    return out


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _ticks(axis: _Axis) -> tuple[str, str]:
    """The label line (``now``, ``+10m``, …) and the ruler (``├───┼───┤``)."""
    room = 8
    step = next((s for s in _STEPS if s / axis.span * (axis.width - 1) >= room), float(_STEPS[-1]))
    labels = [" "] * axis.width
    ruler = ["─"] * axis.width
    ruler[0], ruler[-1] = "├", "┤"
    labels[0:3] = "now"
    free = 4
    k = 1
    while k * step <= axis.span:
        c = axis.column(axis.now + k * step)
        if 0 < c < axis.width - 1:
            ruler[c] = "┼"
        text = "+" + format_duration(k * step)
        if c >= free and c + len(text) <= axis.width:
            labels[c : c + len(text)] = text
            free = c + len(text) + 1
        k += 1
    return "".join(labels)[: axis.width], "".join(ruler)


def _totals_lines(totals: Mapping[str, Any]) -> list[str]:
    """The cluster totals in two lines; counts that are zero and rarely so are left out."""

    def n(key: str) -> int:
        return int(_number(totals.get(key)) or 0)

    modes = totals.get("modes") or {}
    count = n("machines")
    first = f"{count} machine{'' if count == 1 else 's'}: "
    first += f"{int(modes.get('DRAINING', 0))} DRAINING, {int(modes.get('DOWN', 0))} DOWN"
    first += f" · {n('on_time')} on time, {n('late')} late, {n('empty')} empty"
    if n("without_node"):
        first += f", {n('without_node')} without a node"
    if n("lost"):
        first += f", {n('lost')} lost"
    graceful = n("expected_graceful_badput") / 3600
    quick = n("expected_quick_badput") / 3600
    second = f"expected badput: graceful {graceful:.2f}, quick {quick:.2f} core-h"
    second += f" · drains {n('drains_started')} started, {n('drains_escalated')} escalated"
    if n("drain_failures"):
        second += f", {n('drain_failures')} failed"
    return [first, second]


def verdict_sentence(m: Mapping[str, Any]) -> str:
    """A plan row's two verdicts in words, never mixed.

    Promises: ``promises end 60s after the window opens`` (or ``promises end 2m before
    the window``); as planned: ``the quick escalation will cut job 7 by 45s, 90 core-s
    lost`` (the cut promise, ``cpus · cut`` core-seconds), or ``empty 5s after the window
    by escalation`` when the cut jobs are not named, or ``no escalation`` when every
    promise is kept. Empty for a row without a node; ``empty`` for an empty node.
    """
    promises = m.get("promises")
    planned = m.get("as_planned")
    if m.get("node") is None or not isinstance(promises, Mapping):
        return ""
    if m.get("empty"):
        return "empty"
    window = _number((m.get("window") or {}).get("start")) or 0.0
    end = _number(promises.get("completion")) or 0.0
    if end > window:
        words = f"promises end {format_duration(end - window)} after the window opens"
    else:
        words = f"promises end {format_duration(window - end)} before the window"
    if not isinstance(planned, Mapping):
        return words
    escalation = str(planned.get("escalation") or "none")
    if not planned.get("will_escalate"):
        return words + "; every promise is kept" if end > window else words
    told = "has cut" if planned.get("escalated") else "will cut"
    cuts = planned.get("cuts") or []
    named = [
        f"job {c.get('job_id')} by {format_duration(_number(c.get('cut_by')) or 0.0)}"
        for c in cuts[:3]
    ]
    if len(cuts) > 3:
        named.append(f"{len(cuts) - 3} more")
    cost = int(_number(planned.get("cut_core_seconds")) or 0)
    lost = int(_number(planned.get("cut_badput")) or 0)
    what = ", ".join(named) if named else f"{int(_number(planned.get('cut_jobs')) or 0)} jobs"
    completion = _number(planned.get("completion"))
    empty_at = ""
    if completion is not None:
        after = completion - window
        empty_at = (
            f"; empty {format_duration(after)} after the window opens"
            if after > 0
            else " at the window"
        )
    who = "the drain's deadline" if escalation == "none" else f"the {escalation} escalation"
    return (
        f"{words}; {who} {told} {what}{empty_at}: "
        f"{cost} core-s of promises, {lost} core-s of work lost"
    )


def schedule_preview_view(
    preview: Mapping[str, Any], *, tz: tzinfo | None = None, rows: int = 20
) -> Group:
    """``nodeagent master schedule set``'s preview (``POST
    /v1/maintenance/schedule/preview``): what changes in numbers, the warnings, the
    machines whose drain would start at once with each job evicted at once, then the
    other machines whose escalation would cut a promise, the declines the change would
    meet, and the machines dropped (``rows: changed``: of the machines added or moved,
    the kept ones counted).
    At most ``rows`` machines per list."""
    now = _number(preview.get("now")) or time.time()
    totals = preview.get("totals") or {}
    changed = preview.get("rows") == "changed"

    def n(key: str) -> int:
        return int(_number(totals.get(key)) or 0)

    def plural(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 's'}"

    lines = [
        Text(
            f"Schedule preview · now {format_local_time(now, now, tz)} · nothing changed yet",
            style="bold",
        ),
        Text(
            f"{plural(n('machines'), 'machine')} scheduled: {n('added')} added, "
            f"{n('moved')} with a new window, {n('kept')} kept; {n('dropped')} dropped (back UP)"
        ),
        Text(
            ("on the machines added or moved: " if changed else "")
            + f"drains starting at once: {n('drains_now')} · jobs evicted at once: "
            f"{n('evicted_now')} · escalations to come cut {plural(n('cut_jobs'), 'promise')}: "
            f"{n('cut_core_seconds')} core-s of promises, {n('cut_badput')} core-s of work lost"
        ),
    ]
    if changed and n("kept"):
        keep = "keeps its" if n("kept") == 1 else "keep their"
        lines.append(
            Text(
                f"the {plural(n('kept'), 'machine')} kept {keep} plan as it is "
                "(nodeagent master plan)",
                style="dim",
            )
        )
    for warning in preview.get("warnings") or []:
        lines.append(Text(f"warning {warning.get('code')}: {warning.get('message')}", style="red"))
    machines = preview.get("machines") or []
    starting = [m for m in machines if m.get("drain_now")]
    if starting:
        lines.append(Text("drains starting at once:", style="bold"))
    for m in starting[:rows]:
        window = m.get("window") or {}
        start = _number(window.get("start")) or 0.0
        opened = (
            "window"
            if start > now
            else "window ended"
            if m.get("window_ended")
            else ("window open since")
        )
        line = (
            f"  {m.get('node')}  {m.get('drain_now')} drain; {opened} "
            f"{format_local_time(start, now, tz)} ({format_relative(start, now)})"
        )
        lines.append(Text(line))
        for cut in m.get("evicted_now") or []:
            cut_by = _number(cut.get("cut_by"))
            promise = "" if cut_by is None else f", its promise cut by {format_duration(cut_by)}"
            lines.append(
                Text(
                    f"    evicts job {cut.get('job_id')} ({cut.get('owner')}, "
                    f"{cut.get('cpus')} cpus) at once{promise}",
                    style="yellow",
                )
            )
        planned = m.get("as_planned") or {}
        if not m.get("evicted_now") and planned.get("will_escalate"):
            lines.append(Text(f"    {verdict_sentence(m)}", style="yellow"))
    if len(starting) > rows:
        lines.append(Text(f"  … {len(starting) - rows} more (--json for every row)", style="dim"))
    later = [
        m
        for m in machines
        if not m.get("drain_now") and ((m.get("as_planned") or {}).get("will_escalate"))
    ]
    if later:
        lines.append(Text("escalations at their windows:", style="bold"))
    for m in later[:rows]:
        lines.append(Text(f"  {m.get('node')}  {verdict_sentence(m)}"))
    if len(later) > rows:
        lines.append(Text(f"  … {len(later) - rows} more (--json for every row)", style="dim"))
    declines = preview.get("declines")  # every machine's, a kept one's too
    declined = (
        list(declines)
        if isinstance(declines, list)
        else [d for m in machines for d in m.get("declines") or []]
    )
    if declined:
        lines.append(Text("declined by their owners (notices in force):", style="bold"))
    for d in declined[:rows]:
        line = "  " + _declined(d.get("machine"), d.get("group"), d, now, tz)
        if d.get("reissued"):
            line += " — the window moves: rescinded and reissued, to be answered again"
        lines.append(Text(line, style="yellow"))
    if len(declined) > rows:
        lines.append(Text(f"  … {len(declined) - rows} more (--json for every row)", style="dim"))
    dropped = preview.get("dropped") or []
    if dropped:
        names = ", ".join(format_machine(d.get("machine_id") or {}) for d in dropped[:rows])
        more = f" and {len(dropped) - rows} more" if len(dropped) > rows else ""
        cancelled = sum(bool(d.get("drain_cancelled")) for d in dropped)
        why = f"; the master's drain cancelled on {cancelled}" if cancelled else ""
        lines.append(Text(f"back UP{why}: {names}{more}"))
    return Group(*lines)


def _late_lines(
    machines: Sequence[Mapping[str, Any]], labels: Sequence[str], now: float, tz: tzinfo | None
) -> list[str]:
    """Why each late machine is late, in both verdicts (:func:`verdict_sentence`)."""
    out = []
    for m, label in zip(machines, labels, strict=True):
        if m.get("node") is None or m.get("on_time") is not False or m.get("mode") == "DOWN":
            continue
        if isinstance(m.get("promises"), Mapping):
            out.append(f"late: {label}: {verdict_sentence(m)}")
            continue
        completion = _number(((m.get("expected") or {}).get("graceful") or {}).get("completion"))
        line = f"late: {label}"
        if completion is not None:
            line += f" empty {format_local_time(completion, now, tz)}"
        line += f", {format_duration(_number(m.get('late_by')) or 0.0)} into its window"
        blockers = m.get("blockers") or []
        if blockers:
            b = blockers[0]
            line += f"; last {b.get('slot')} (job {b.get('job_id')}, {b.get('owner')})"
        out.append(line)
    if len(out) > 5:
        out = [*out[:5], f"… and {len(out) - 5} more late"]
    return out


def behind_line(behind: int) -> str:
    """What a summary says of the machines whose figures the master has yet to remake."""
    count = f"{behind} machine{'' if behind == 1 else 's'}"
    return (
        f"{count} not read yet: the master is still taking in their latest ads, and counts "
        "them as of an older ad, or not at all"
    )


def _verdict_totals_line(totals: Mapping[str, Any]) -> str:
    """The escalations to come and their cost, from the totals."""

    def n(key: str) -> int:
        return int(_number(totals.get(key)) or 0)

    line = f"escalations coming: {n('escalations')} ({n('escalations_next_hour')} in the next hour)"
    line += f" · {n('cut_jobs')} promise{'' if n('cut_jobs') == 1 else 's'} cut, "
    line += f"{n('cut_core_seconds') / 3600:.2f} core-h of promises, "
    line += f"{n('escalation_badput') / 3600:.2f} core-h of work lost"
    return line


def _workload_lines(totals: Mapping[str, Any]) -> list[str]:
    """What the windows cost in capacity closed before them, as planned and had every
    node admitted any promise, and the owners' answers to their notices; nothing from a
    master that does not say."""
    lines = []
    closed = totals.get("closed_core_hours")
    if isinstance(closed, Mapping):
        planned, admit = _number(closed.get("planned")) or 0.0, _number(closed.get("admit")) or 0.0
        line = f"closed before the windows: {planned:.2f} core-h as planned"
        if admit > planned:
            line += f" ({admit:.2f} core-h had every node admitted any promise)"
        lines.append(line)
    notices = totals.get("notices")
    if isinstance(notices, Mapping) and notices.get("in_force"):

        def n(key: str) -> int:
            return int(_number(notices.get(key)) or 0)

        lines.append(
            f"notices: {n('in_force')} in force, {n('accepted')} accepted, "
            f"{n('declined')} declined, {n('unanswered')} unanswered"
        )
    return lines


def _decline_lines(
    machines: Sequence[Mapping[str, Any]], labels: Sequence[str], now: float, tz: tzinfo | None
) -> list[str]:
    """One line per declined notice of the rows shown: the machine, the group, who
    declined and when, why, and the owner's expected completion beside the promise."""
    lines = []
    for m, label in zip(machines, labels, strict=True):
        for notice in m.get("notices") or []:
            answer = notice.get("answer") if isinstance(notice, Mapping) else None
            if not isinstance(answer, Mapping) or answer.get("verdict") != "decline":
                continue
            line = "declined: " + _declined(label, notice.get("group"), answer, now, tz)
            promise = _number(notice.get("promise_end"))
            if promise is not None and answer.get("expected_completion") is not None:
                line += f"; its promises end {_at(promise, now, tz)}"
            lines.append(line)
    return lines


#: Where the summary sends the operator for the declines of machines it does not list.
_DECLINES_ELSEWHERE = "declines on machines not listed here: --all, or nodeagent master notices"

#: The modes of a machine out of service.
_OUT = ("DRAINING", "DOWN")


def after_window_lines(plan: Mapping[str, Any], *, limit: int = 10) -> list[Text]:
    """The machines still out of service after their window (the plan's ``after_window``,
    at its ``now``), at most ``limit`` named, and the command that brings them back: a
    DOWN machine goes UP with ``nodeagent master up``; a DRAINING one goes DOWN first
    (Mesos brings only DOWN machines up). With the master's ``up_after_window`` a DOWN
    one goes UP by itself once its health check passes. No lines when there are none."""
    after = [m for m in plan.get("after_window") or [] if m.get("mode") in _OUT]
    if not after:
        return []
    now = _number(plan.get("now")) or 0.0
    by_itself = bool((plan.get("policy") or {}).get("up_after_window"))
    count = len(after)
    lines = [
        Text(
            f"window ended: {count} machine{'' if count == 1 else 's'} still out of service",
            style="bold yellow",
        )
    ]
    down: list[str] = []
    draining: list[str] = []
    for m in after:
        name = format_machine(m.get("machine_id") or {})
        (down if m.get("mode") == "DOWN" else draining).append(name)
        if len(down) + len(draining) > limit:
            continue
        end = _number((m.get("window") or {}).get("end"))
        line = f"  {name}  {m.get('mode')}, its window ended "
        line += "-" if end is None else format_relative(end, now)
        if m.get("node") is None:
            line += "; no node"
        elif m.get("health") is not None:
            line += f"; health check {m.get('health')}"
        lines.append(Text(line, style="yellow"))
    if count > limit:
        lines.append(Text(f"  … and {count - limit} more", style="yellow"))
    if down:
        if by_itself:
            lines.append(
                Text(
                    "  the master brings the DOWN ones UP once their health check passes "
                    "(up_after_window); now: nodeagent master up " + " ".join(down)
                )
            )
        else:
            lines.append(Text("  bring them back: nodeagent master up " + " ".join(down)))
    if draining:
        names = " ".join(draining)
        lines.append(
            Text(
                f"  DRAINING ones go DOWN first: nodeagent master down {names} && "
                f"nodeagent master up {names}"
            )
        )
    return lines


def _plan_heading(now: float, policy: Mapping[str, Any], tz: tzinfo | None) -> list[Text]:
    """A plan view's first lines: the time of the plan, then the master's policy (when the
    reply has one)."""
    lines = [Text(f"Maintenance plan · now {format_local_time(now, now, tz)}", style="bold")]
    if policy:
        lines.append(
            Text(
                f"policy: {str(policy.get('drain_policy', '')).replace('_', ' ')}, "
                f"margin {format_duration(_number(policy.get('drain_margin')) or 0.0)}, "
                f"escalation {policy.get('escalation')}",
                style="dim",
            )
        )
    return lines


def plan_summary_view(plan: Mapping[str, Any], *, tz: tzinfo | None = None) -> Group:
    """The plan an operator reads at any size: counts, the late machines, their cost.

    ``plan`` is ``GET /v1/maintenance/plan?late=true&blockers=false&limit=N``: the totals
    count every machine (per mode, on time and late by their promises, escalations to
    come, in the next hour, and their cost), and the rows are the machines late by their
    promises or to be escalated, in window order, one line each: the machine, when its
    window opens, and its two verdicts (:func:`verdict_sentence`). Pure.
    """

    now = _number(plan.get("now")) or 0.0
    policy = plan.get("policy") or {}
    totals = plan.get("totals") or {}
    lines = _plan_heading(now, policy, tz)
    first, second = _totals_lines(totals)
    lines.append(Text(first.replace(" late,", " late by their promises,", 1)))
    behind = int(_number(totals.get("behind")) or 0)
    if behind:
        lines.append(Text(behind_line(behind), style="yellow"))
    lines.append(Text(_verdict_totals_line(totals)))
    lines.append(Text(second, style="dim"))
    lines.extend(Text(t, style="dim") for t in _workload_lines(totals))
    lines.extend(after_window_lines(plan))
    machines = list(plan.get("machines") or [])
    matched = int(_number(plan.get("matched")) or len(machines))
    declined = int(_number((totals.get("notices") or {}).get("declined")) or 0)
    if not machines:
        if behind:
            lines.append(Text("no machine read is late by its promises or to be escalated"))
        else:
            lines.append(Text("no machine is late by its promises or to be escalated", "green"))
        if declined:
            lines.append(Text(_DECLINES_ELSEWHERE, style="dim"))
        return Group(*lines)
    shown = f"{len(machines)} of {matched}" if matched > len(machines) else f"{matched}"
    lines.append(Text(f"late or to be escalated ({shown}, window order):", style="bold"))
    labels = _labels(machines)
    width = min(max(len(label) for label in labels), 24)
    for m, label in zip(machines, labels, strict=True):
        start = _number((m.get("window") or {}).get("start"))
        when = "-" if start is None else format_relative(start, now)
        style = "red" if (m.get("as_planned") or {}).get("will_escalate") else "yellow"
        line = Text(f"{_fit(label, width):<{width}}  window {when:<10}  ")
        line.append(verdict_sentence(m) or "no node", style=style)
        lines.append(line)
    if matched > len(machines):
        lines.append(Text(f"… {matched - len(machines)} more: --all for every row", "dim"))
    listed = _decline_lines(machines, labels, now, tz)
    lines.extend(Text(t, style="yellow") for t in listed)
    if declined > len(listed):
        lines.append(Text(_DECLINES_ELSEWHERE, style="dim"))
    return Group(*lines)


def plan_view(plan: Mapping[str, Any], *, width: int = 100, tz: tzinfo | None = None) -> Group:
    """``GET /v1/maintenance/plan`` as a timeline ``width`` columns wide.

    One row per machine (sorted by window start): machine, mode, drain state, the time
    axis from the plan's ``now`` to the last window end, and a status word (``on time``,
    ``late 12m``, ``empty``, ``DOWN``, ``escalated``, ``no node``, ``lost``, ``shutting
    down``, ``rebooting``) in the row's
    colour. On the axis: ``·`` open, ``▷`` the planned drain start, ``━`` closed (the
    drain runs, or will), ``◆`` when the node will be empty as planned (the drain in force
    or about to start, escalated at the window; from a master without verdicts: the
    running drain's schedule, else a graceful drain started now), ``[█]`` the window,
    ``»`` beyond the axis. The status word ``late`` is the promise verdict. Then a legend,
    the totals, and why late machines are late in both verdicts (:func:`verdict_sentence`).
    Pure: ``now`` is the plan's.
    """

    now = _number(plan.get("now")) or 0.0
    machines = sorted(
        plan.get("machines") or [],
        key=lambda m: _number((m.get("window") or {}).get("start")) or 0.0,
    )
    policy = plan.get("policy") or {}
    lines = _plan_heading(now, policy, tz)
    if not machines:
        lines.append(Text("no machine is scheduled for maintenance"))
        lines.extend(Text(t, style="dim") for t in _totals_lines(plan.get("totals") or {}))
        lines.extend(after_window_lines(plan))
        return Group(*lines)

    labels = _labels(machines)
    statuses = [_row_status(m, now) for m in machines]
    drains = [str((m.get("drain") or {}).get("state") or "-") for m in machines]
    status_w = min(max(len("STATUS"), *(len(s) for s, _ in statuses)), 13)
    mode_w, drain_w = len("DRAINING"), max(len("DRAIN"), *(len(d) for d in drains))
    name_w = min(max(len("MACHINE"), *(len(x) for x in labels)), 24)
    fixed = mode_w + drain_w + status_w + 8  # four gaps of two columns
    axis_w = width - fixed - name_w
    if axis_w < _MIN_AXIS:
        name_w = max(len("MACHINE"), name_w - (_MIN_AXIS - axis_w))
        axis_w = max(_MIN_AXIS, width - fixed - name_w)
    axis = _Axis(now=now, span=_axis_span(machines, now), width=axis_w)
    label_line, ruler = _ticks(axis)
    lines[0].append(f" · axis to {format_local_time(now + axis.span, now, tz)}")
    left = f"{'MACHINE':<{name_w}}  {'MODE':<{mode_w}}  {'DRAIN':<{drain_w}}  "
    lines.append(Text(f"{left}{label_line}  STATUS", style="bold"))
    lines.append(Text(" " * len(left) + ruler, style="dim"))
    for m, label, (word, style), drain in zip(machines, labels, statuses, drains, strict=True):
        mode = str(m.get("mode", ""))
        line = Text(f"{_fit(label, name_w):<{name_w}}  ")
        line.append(f"{mode:<{mode_w}}", style=_MODE_STYLES.get(mode, ""))
        line.append(f"  {drain:<{drain_w}}  ")
        for cell_style, run in groupby(_row_cells(m, axis, style), key=lambda cell: cell[1]):
            line.append("".join(char for char, _ in run), style=cell_style)
        line.append(f"  {_fit(word, status_w)}", style=style)
        lines.append(line)
    lines.append(Text(_fit(_LEGEND, width), style="dim"))
    lines.extend(Text(t) for t in _totals_lines(plan.get("totals") or {}))
    if "escalations" in (plan.get("totals") or {}):
        lines.append(Text(_verdict_totals_line(plan.get("totals") or {})))
    lines.extend(Text(t) for t in _workload_lines(plan.get("totals") or {}))
    lines.extend(Text(t, style="red") for t in _late_lines(machines, labels, now, tz))
    lines.extend(Text(t, style="yellow") for t in _decline_lines(machines, labels, now, tz))
    lines.extend(Text(t, style="cyan") for t in _shutdown_lines(machines, labels))
    lines.extend(after_window_lines(plan))
    return Group(*lines)


def _shutdown_lines(machines: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> list[str]:
    """One line per machine whose node is shutting down (its row's
    ``drain.shutting_down``) or rebooting (its node's ``rebooting``), and what the master
    does about it: nothing, until the node is back."""
    lines = []
    for m, label in zip(machines, labels, strict=True):
        own = [n for n in m.get("nodes") or [] if n.get("name") == m.get("node")]
        drain = m.get("drain") or {}
        if any(n.get("rebooting") for n in own):
            age = _number(own[0].get("ad_age")) or 0.0
            lines.append(
                f"{label}: rebooting: no ad for {format_duration(age)} since its machine went "
                "down after its shutdown drain; not counted lost within the master's "
                "reboot_grace, its node comes back by itself"
            )
        elif drain.get("shutting_down") is True and not any(n.get("lost") for n in own):
            lines.append(
                f"{label}: shutting down: its agent drains it ({drain.get('state')}, drain "
                f"{drain.get('request_id')}, reason {drain.get('reason')}); the master starts "
                "and escalates no drain of its own there while it shuts down"
            )
    return lines


def shutdown_nodes_view(ads: Sequence[Mapping[str, Any]], *, now: float) -> Group:
    """``nodeagent master status``: the nodes whose machine is shutting down or rebooting
    (their ads' ``ShuttingDown``, ``Rebooting``, ``Lost``), in words."""

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("NODE SHUTTING DOWN", no_wrap=True)
    table.add_column("STATE")
    for ad in ads:
        heard = _number(ad.get("LastHeardFrom"))
        ago = "-" if heard is None else format_relative(heard, now)
        if ad.get("Rebooting") is True:
            text = f"rebooting: its last ad ({ago}) said its machine was shutting down"
        elif ad.get("Lost") is True:
            text = f"lost: not back within the reboot grace (last ad {ago})"
        else:
            text = (
                f"shutting down: its agent drains it ({ad.get('DrainState', 'none')}, drain "
                f"{ad.get('DrainingRequestId')}, reason {ad.get('DrainReason')})"
            )
        table.add_row(str(ad.get("Name", "")), Text(text, style="cyan"))
    count = len(ads)
    summary = Text(
        f"{count} node{'' if count == 1 else 's'} shutting down or rebooting: the master "
        "starts no drain there, and counts a node lost only once its reboot grace has run out",
        style="dim",
    )
    return Group(Text(""), table, summary)


def plan_row_line(row: Mapping[str, Any], now: float, *, tz: tzinfo | None = None) -> Text:
    """One row of the streamed plan as one line: machine, mode, drain state, window start,
    the planned drain start, and the status word in the row's colour (as
    :func:`plan_view` words it)."""
    status, style = _row_status(row, now)
    machine = row.get("machine_id") or {}
    name = str(machine.get("hostname") or machine.get("ip") or "-")
    drain = str((row.get("drain") or {}).get("state") or "-")
    start = _number((row.get("window") or {}).get("start"))
    drain_start = _number(row.get("planned_drain_start"))
    when = "-" if start is None else column_time(start, now, tz)
    drains_at = "-" if drain_start is None else column_time(drain_start, now, tz)
    line = Text(f"{name[:32]:<32}  {row.get('mode', '-')!s:<8}  {drain[:10]:<10}  ")
    line.append(f"{when:<16}  {drains_at:<16}  ")
    line.append(status, style=style)
    return line


def plan_stream_lines(*, tz: tzinfo | None = None) -> Callable[[Mapping[str, Any]], list[Text]]:
    """The streamed plan's lines as ``nodeagent master plan --all`` prints them, one line
    of the stream at a time: the heading and the columns for the head, a line a row
    (:func:`plan_row_line`); for the end, the totals and, as :func:`plan_view` says them,
    why each late machine is late, the declined notices, the nodes shutting down or
    rebooting, and the machines still out of service after their window."""
    now = 0.0
    details: list[Text] = []  # the rows' own lines, said after the totals

    def said(row: Mapping[str, Any]) -> None:
        machine = row.get("machine_id") or {}
        label = [str(machine.get("hostname") or machine.get("ip") or "-")]
        details.extend(Text(t, style="red") for t in _late_lines([row], label, now, tz))
        details.extend(Text(t, style="yellow") for t in _decline_lines([row], label, now, tz))
        details.extend(Text(t, style="cyan") for t in _shutdown_lines([row], label))

    def render(line: Mapping[str, Any]) -> list[Text]:
        nonlocal now
        if "plan" in line:
            head = line["plan"]
            now = _number(head.get("now")) or 0.0
            columns = f"{'MACHINE':<32}  {'MODE':<8}  {'DRAIN':<10}  {'WINDOW':<16}  "
            return [
                *_plan_heading(now, head.get("policy") or {}, tz),
                Text(columns + f"{'DRAIN START':<16}  STATUS", style="bold"),
            ]
        if "row" in line:
            said(line["row"])
            return [plan_row_line(line["row"], now, tz=tz)]
        if "end" in line:
            end = line["end"]
            totals = end.get("totals") or {}
            lines = [Text(t, style="dim") for t in _totals_lines(totals)]
            if "escalations" in totals:
                lines.append(Text(_verdict_totals_line(totals)))
            lines.extend(Text(t) for t in _workload_lines(totals))
            return lines + details + after_window_lines(end)
        return []

    return render


def plan_text(plan: Mapping[str, Any], *, width: int = 100, tz: tzinfo | None = None) -> str:
    """:func:`plan_view` as plain text, without colour."""
    import io  # noqa: PLC0415

    from rich.console import Console  # noqa: PLC0415

    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    console.print(plan_view(plan, width=width, tz=tz))
    return out.getvalue()


def plan_width(console: Console | Screen) -> int:
    """The plan's width on ``console``: the terminal's; 100 columns when writing elsewhere
    (unless ``COLUMNS``)."""
    if console.is_terminal or "COLUMNS" in os.environ:
        return console.width
    return 100


# --- the defrag daemon --------------------------------------------------------------------


def _ago(when: Any, now: float) -> str:
    if not isinstance(when, int | float):
        return "never"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    return f"{stamp} ({max(0, round(now - when))} s ago)"


def render_stats(ad: dict[str, Any], *, now: float) -> str:
    """The Defrag ad as a short human summary."""

    def pair(total: str, recent: str) -> str:
        return f"{ad.get(total, 0):<6} last hour {ad.get(recent, 0)}"

    def percent(value: Any) -> str:
        return f"{100 * value:.2f} %" if isinstance(value, int | float) else "-"

    lines = [
        f"{ad.get('Name', 'defrag')}: drains with reason {ad.get('DrainReason', '?')!r}",
        f"  last cycle          {_ago(ad.get('LastPollTime'), now)}",
        f"  machines draining   {ad.get('MachinesDraining', 0):<6} peak "
        f"{ad.get('MachinesDrainingPeak', 0)}",
        f"  whole machines      {ad.get('WholeMachines', 0):<6} peak "
        f"{ad.get('WholeMachinesPeak', 0)}",
        f"  drains started      {pair('DrainSuccesses', 'RecentDrainSuccesses')}",
        f"  drains failed       {pair('DrainFailures', 'RecentDrainFailures')}",
        f"  drains skipped      {pair('DrainSkips', 'RecentDrainSkips')}",
        f"  drains cancelled    {pair('Cancels', 'RecentCancels')}",
        f"  draining badput     {percent(ad.get('AvgDrainingBadput'))} of the pool's core time",
        f"  idle while draining {percent(ad.get('AvgDrainingUnclaimed'))} of the pool's core time",
    ]
    drains = ad.get("RecentDrainsList") or []
    if drains:
        lines.append("recent drains (newest first):")
        for entry in drains:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.get("when", 0)))
            lines.append(
                f"  {stamp}  {entry.get('who', '?')}  {entry.get('what', '')}  "
                f"{entry.get('result', '')}"
            )
    cancels = ad.get("RecentCancelsList") or []
    if cancels:
        lines.append("recent cancels (newest first):")
        for entry in cancels:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.get("when", 0)))
            lines.append(f"  {stamp}  {entry.get('who', '?')}")
    return "\n".join(lines)
