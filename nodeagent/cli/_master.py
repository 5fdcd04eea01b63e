"""``nodeagent master …``: run the master and talk to it.

Every client command talks to one master (its Unix socket by default, ``--host`` for a
remote one) through :mod:`nodeagent.cli._http`, prints the API's JSON with ``--json`` or a
human view, and ends with one of the exit statuses of ``docs/cli.md``: errors print
``code: message`` to stderr. A Mesos endpoint refuses with a plain-text 400; its message
is printed as it is, under the code ``maintenance.refused`` (exit 1).

Mesos answers ``POST /maintenance/schedule``, ``/machine/down`` and ``/machine/up`` with
an empty body, so with ``--json`` ``schedule set`` and ``schedule clear`` print the
schedule as the master then holds it (``GET /maintenance/schedule``), and ``down`` and
``up`` print the machine ids they posted.

Module level imports typer and the standard library only; rich comes with the human
views (:func:`plan_view` and the tables), imported inside the functions that draw them.
"""

from __future__ import annotations

import json
import os
import re
import string
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlencode

import typer

from nodeagent.cli._common import emit_text as _emit
from nodeagent.cli._common import finish as _finish
from nodeagent.cli._common import run_daemon
from nodeagent.cli._http import (
    CliError,
    Refused,
    Reply,
    Target,
    UsageError,
    call,
    check,
    parse_duration,
    request,
    resolve_master_target,
)

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.table import Table
    from rich.text import Text

__all__ = [
    "master_app",
    "parse_machine",
    "plan_text",
    "plan_view",
    "resolve_machines",
]

master_app = typer.Typer(
    name="master",
    help="The cluster master: node ads, the maintenance schedule, the plan.",
    no_args_is_help=True,
)
schedule_app = typer.Typer(
    name="schedule",
    help="The Mesos maintenance schedule: get, set, clear.",
    no_args_is_help=True,
)
master_app.add_typer(schedule_app)

_MODE_STYLES = {"UP": "green", "DRAINING": "yellow", "DOWN": "magenta"}


@master_app.callback()
def _group() -> None:
    """The cluster master: node ads, the maintenance schedule, the plan."""


@master_app.command("run")
def run(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="TOML configuration (default /etc/nodeagent/master.toml when it exists)",
            envvar="NODEAGENT_MASTER_CONFIG",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error")] = "info",
) -> None:
    """Run the master daemon in the foreground."""
    from nodeagent.master._daemon import run_master  # noqa: PLC0415

    run_daemon(run_master, config, log_level)


# --- options every client command takes ---------------------------------------------------

JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print exactly the API's JSON, one document per line."),
]
HostOption = Annotated[
    str | None,
    typer.Option(
        "--host",
        metavar="URL",
        show_default=False,
        help="A remote master: http://HOST:PORT or https://HOST:PORT (port 9622 by default); "
        "needs --token. Env: NODEAGENT_MASTER_HOST. Default: the master's Unix socket.",
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        metavar="FILE",
        show_default=False,
        help="File holding the bearer token for --host. Env: NODEAGENT_MASTER_TOKEN_FILE.",
    ),
]
SocketOption = Annotated[
    str | None,
    typer.Option(
        "--socket",
        metavar="PATH",
        show_default=False,
        help="The master's Unix socket. Env: NODEAGENT_MASTER_SOCKET. Default: the master's "
        "(<runtime_dir>/master.sock).",
    ),
]


def _target(host: str | None, token: str | None, socket_path: str | None) -> Target:
    return resolve_master_target(
        host=host, token_file=token, socket_path=socket_path, env=os.environ, uid=os.geteuid()
    )


def _console() -> Console:
    from nodeagent.cli._render import make_console  # noqa: PLC0415

    return make_console(sys.stdout)


def _mesos(target: Target, method: str, path: str, content: bytes | None = None) -> Reply:
    """One request to a Mesos endpoint: its plain-text 400 becomes :class:`Refused`
    (``maintenance.refused``, Mesos's message as it is); other errors as usual."""
    reply = call(target, method, path, content=content)
    if reply.status == 400 and not reply.content_type.startswith("application/json"):
        raise Refused("maintenance.refused", reply.text.strip(), reply=reply)
    return check(reply, peer=target.peer)


# --- machine ids on the command line ------------------------------------------------------

_IPV4 = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")
_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def parse_machine(text: str) -> dict[str, str]:
    """``HOST/IP`` → both fields, a dotted IPv4 address → ``ip``, anything else →
    ``hostname``. Raises :class:`UsageError` for an empty part."""
    word = text.strip()
    host, slash, ip = word.rpartition("/")
    if slash:
        if not host or not ip:
            raise UsageError("cli.usage", f"invalid machine {text!r}: expected HOST, HOST/IP or IP")
        return {"hostname": host, "ip": ip}
    if not word:
        raise UsageError("cli.usage", "invalid machine '': expected HOST, HOST/IP or IP")
    if _IPV4.fullmatch(word):
        return {"ip": word}
    return {"hostname": word}


def _machine_name(machine_id: Mapping[str, Any]) -> str:
    """A machine id as the command line takes it: ``host/ip``, ``host`` or ``ip``."""
    parts = [str(machine_id[k]) for k in ("hostname", "ip") if machine_id.get(k) is not None]
    return "/".join(parts)


def _scheduled(schedule: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for window in schedule.get("windows") or []:
        out.extend(dict(m) for m in window.get("machine_ids") or [])
    return out


def resolve_machines(
    args: Sequence[str], schedule: Mapping[str, Any] | None
) -> list[dict[str, str]]:
    """The machine ids to post for ``down`` or ``up``.

    ``HOST/IP`` is taken as given. A bare hostname (compared case-insensitively, as Mesos
    does) or a bare ip is replaced by the one machine of ``schedule`` (Mesos JSON) that
    has it, so the operator need not type the other half; one that matches nothing is
    posted as given, for the master to refuse with Mesos's message. Raises
    :class:`UsageError` (``cli.ambiguous_machine``) when it matches several machines.
    """
    scheduled = _scheduled(schedule or {})
    out: list[dict[str, str]] = []
    for arg in args:
        given = parse_machine(arg)
        if len(given) == 2:
            out.append(given)
            continue
        if "hostname" in given:
            host = given["hostname"].translate(_LOWER)
            found = [m for m in scheduled if str(m.get("hostname", "")).translate(_LOWER) == host]
        else:
            found = [m for m in scheduled if m.get("ip") == given["ip"]]
        if len(found) > 1:
            names = ", ".join(_machine_name(m) for m in found)
            raise UsageError(
                "cli.ambiguous_machine",
                f"{arg} matches {len(found)} scheduled machines ({names}): give HOST/IP",
            )
        out.append({k: str(v) for k, v in found[0].items()} if found else given)
    return out


# --- status -------------------------------------------------------------------------------


def _status_view(status: Mapping[str, Any]) -> Group:
    from rich.console import Group  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    rows = [(m.get("id") or {}, "DRAINING") for m in status.get("draining_machines") or []]
    rows += [(m, "DOWN") for m in status.get("down_machines") or []]
    if not rows:
        return Group(Text("no machine is in maintenance: every machine is UP"))
    table = Table(box=None, pad_edge=False, header_style="bold")
    for header in ("MACHINE", "IP", "MODE"):
        table.add_column(header, no_wrap=True)
    for machine_id, mode in rows:
        table.add_row(
            str(machine_id.get("hostname", "")),
            str(machine_id.get("ip", "")),
            Text(mode, style=_MODE_STYLES[mode]),
        )
    draining = sum(mode == "DRAINING" for _, mode in rows)
    summary = Text(f"{draining} DRAINING, {len(rows) - draining} DOWN", style="dim")
    return Group(table, summary)


@master_app.command()
def status(
    *,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """The machines in maintenance and their modes (GET /maintenance/status)."""

    def action() -> None:
        reply = _mesos(_target(host, token, socket_path), "GET", "/maintenance/status")
        if json_output:
            _emit(reply.text)
            return
        _console().print(_status_view(reply.data or {}))

    _finish(action, json_output=json_output)


# --- the schedule -------------------------------------------------------------------------

_NS = 1_000_000_000


def _nanoseconds(value: object) -> float | None:
    if isinstance(value, Mapping) and isinstance(value.get("nanoseconds"), int | float):
        return float(value["nanoseconds"]) / _NS
    return None


def _schedule_view(schedule: Mapping[str, Any], now: float, tz: tzinfo | None = None) -> Group:
    from rich.console import Group  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    from nodeagent.cli._render import (  # noqa: PLC0415
        format_duration,
        format_local_time,
        format_relative,
    )

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
            ", ".join(_machine_name(m) for m in ids),
        )
    summary = f"{len(windows)} window{'' if len(windows) == 1 else 's'}, "
    summary += f"{machines} machine{'' if machines == 1 else 's'}"
    return Group(table, Text(summary, style="dim"))


def _read_input(path: str) -> bytes:
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError("cli.input", f"cannot read {path}: {exc.strerror}") from None


@schedule_app.command("get")
def schedule_get(
    *,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """The maintenance schedule: one row per window (GET /maintenance/schedule)."""

    def action() -> None:
        reply = _mesos(_target(host, token, socket_path), "GET", "/maintenance/schedule")
        if json_output:
            _emit(reply.text)
            return
        _console().print(_schedule_view(reply.data or {}, time.time()))

    _finish(action, json_output=json_output)


def _replace_schedule(target: Target, content: bytes, *, json_output: bool, verb: str) -> None:
    _mesos(target, "POST", "/maintenance/schedule", content)
    reply = _mesos(target, "GET", "/maintenance/schedule")
    if json_output:
        _emit(reply.text)
        return
    windows = (reply.data or {}).get("windows") or []
    machines = len(_scheduled(reply.data or {}))
    if not windows:
        _console().print(f"schedule {verb}: no machine is scheduled")
        return
    _console().print(
        f"schedule {verb}: {len(windows)} window{'' if len(windows) == 1 else 's'}, "
        f"{machines} machine{'' if machines == 1 else 's'}"
    )


@schedule_app.command("set")
def schedule_set(
    *,
    file: Annotated[
        str,
        typer.Argument(metavar="FILE", help="The schedule in Mesos JSON; - reads stdin."),
    ],
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """Replace the schedule (POST /maintenance/schedule, Mesos rules).

    New machines become DRAINING, machines left out go back UP; a DOWN machine cannot be
    left out. An invalid schedule exits 1 with Mesos's message and changes nothing.
    """

    def action() -> None:
        content = _read_input(file)
        target = _target(host, token, socket_path)
        _replace_schedule(target, content, json_output=json_output, verb="replaced")

    _finish(action, json_output=json_output)


@schedule_app.command("clear")
def schedule_clear(
    *,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """Empty the schedule (POST {}): every DRAINING machine goes back UP.

    Refused (exit 1) while a machine is DOWN: bring it up first.
    """

    def action() -> None:
        target = _target(host, token, socket_path)
        _replace_schedule(target, b"{}", json_output=json_output, verb="cleared")

    _finish(action, json_output=json_output)


# --- down and up --------------------------------------------------------------------------

Machines = Annotated[
    list[str],
    typer.Argument(
        metavar="HOST...",
        show_default=False,
        help="HOST, HOST/IP or IP; a bare HOST or IP is completed from the schedule.",
    ),
]


def _transition(
    machines: Sequence[str],
    path: str,
    mode: str,
    *,
    json_output: bool,
    target: Callable[[], Target],
) -> None:
    def action() -> None:
        where = target()
        partial = any(len(parse_machine(m)) == 1 for m in machines)
        schedule = _mesos(where, "GET", "/maintenance/schedule").data if partial else None
        ids = resolve_machines(machines, schedule)
        body = json.dumps(ids, separators=(",", ":"))
        _mesos(where, "POST", path, body.encode())
        if json_output:
            _emit(body)
            return
        from rich.text import Text  # noqa: PLC0415

        line = Text(f"{mode}: ", style=_MODE_STYLES[mode])
        line.append(", ".join(_machine_name(m) for m in ids))
        _console().print(line)

    _finish(action, json_output=json_output)


@master_app.command()
def down(
    *,
    machines: Machines,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """DRAINING machines go DOWN, all or none (POST /machine/down).

    Their nodes stay closed and whatever still runs is fast-drained.
    """
    _transition(
        machines,
        "/machine/down",
        "DOWN",
        json_output=json_output,
        target=lambda: _target(host, token, socket_path),
    )


@master_app.command()
def up(
    *,
    machines: Machines,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """DOWN machines go UP and leave the schedule, all or none (POST /machine/up).

    Their nodes' drains are cancelled and they accept jobs again.
    """
    _transition(
        machines,
        "/machine/up",
        "UP",
        json_output=json_output,
        target=lambda: _target(host, token, socket_path),
    )


# --- ads ----------------------------------------------------------------------------------


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _ads_table(
    ads: Sequence[Mapping[str, Any]], *, projection: Sequence[str], slots: bool, now: float
) -> Table:
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    from nodeagent.cli._render import format_relative  # noqa: PLC0415

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
        table.add_row(
            _cell(ad.get("Name")),
            Text(mode, style=_MODE_STYLES.get(mode, "")),
            _cell(ad.get("DrainState", "none")),
            _cell(ad.get("Start")),
            _cell(ad.get("TotalCpus")),
            when,
        )
    return table


@master_app.command()
def ads(
    *,
    constraint: Annotated[
        str | None,
        typer.Option(metavar="EXPR", show_default=False, help="A ClassAd expression to match."),
    ] = None,
    projection: Annotated[
        str | None,
        typer.Option(metavar="A,B,...", show_default=False, help="Only these attributes."),
    ] = None,
    slots: Annotated[
        bool, typer.Option("--slots", help="Slot ads instead of machine ads.")
    ] = False,
    long: Annotated[
        bool, typer.Option("--long", "-l", help="ClassAd long format, like condor_status -l.")
    ] = False,
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """The nodes' ads as the master holds them (GET /v1/ads): a table, -l, or --json."""

    def action() -> None:
        if long and json_output:
            raise UsageError("cli.usage", "choose one of --long and --json")
        query: dict[str, str] = {}
        if constraint is not None:
            query["constraint"] = constraint
        if projection is not None:
            query["projection"] = projection
        if slots:
            query["slots"] = "true"
        if long:
            query["format"] = "classad"
        path = "/v1/ads" + (f"?{urlencode(query)}" if query else "")
        reply = request(_target(host, token, socket_path), "GET", path)
        if json_output or long:
            _emit(reply.text)
            return
        found = (reply.data or {}).get("ads") or []
        names = [p.strip() for p in (projection or "").split(",") if p.strip()]
        console = _console()
        console.print(_ads_table(found, projection=names, slots=slots, now=time.time()))
        lost = sum(ad.get("Lost") is True for ad in found)
        kind = "slot ad" if slots else "ad"
        summary = f"{len(found)} {kind}{'' if len(found) == 1 else 's'}"
        console.print(summary + (f", {lost} lost" if lost and not names else ""), style="dim")

    _finish(action, json_output=json_output)


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


def _num(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


@dataclass(frozen=True, kw_only=True)
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
        start, end = _num(window.get("start")), _num(window.get("end"))
        if end is not None:
            last = max(last, end)
        elif start is not None:
            last = max(last, start)
            indefinite = True
    span = last - now
    if indefinite:
        span *= 1.25
    return max(span, _MIN_SPAN)


def _row_status(m: Mapping[str, Any], format_duration: Callable[[float], str]) -> tuple[str, str]:
    """The status word and the row's colour."""
    lost = any(n.get("lost") and n.get("name") == m.get("node") for n in m.get("nodes") or [])
    if m.get("mode") == "DOWN":
        return "DOWN", "magenta"
    if m.get("node") is None:
        return "no node", "dim"
    if lost:
        return "lost", "yellow"
    if m.get("empty"):
        return "empty", "bold green"
    if m.get("escalated"):
        return "escalated", "red"
    if m.get("on_time") is False:
        return f"late {format_duration(_num(m.get('late_by')) or 0.0)}", "red"
    return "on time", "green"


def _row_cells(m: Mapping[str, Any], axis: _Axis, style: str) -> list[tuple[str, str]]:
    """The machine's line on the time axis: open, closed, the window, the marks."""
    cells = [(_IDLE, "dim")] * axis.width
    window = m.get("window") or {}
    start, end = _num(window.get("start")), _num(window.get("end"))
    drain = m.get("drain") or {}
    state = str(drain.get("state") or "none")
    planned = _num(m.get("planned_drain_start"))
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
    completion = _num((expected.get(schedule) or {}).get("completion"))
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
            out.append(_machine_name(machine_id))
    return out


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _ticks(axis: _Axis, format_duration: Callable[[float], str]) -> tuple[str, str]:
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
        return int(_num(totals.get(key)) or 0)

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


def _late_lines(
    machines: Sequence[Mapping[str, Any]], labels: Sequence[str], now: float, tz: tzinfo | None
) -> list[str]:
    """Why each late machine is late: when it will be empty, and its last blocker."""
    from nodeagent.cli._render import format_duration, format_local_time  # noqa: PLC0415

    out = []
    for m, label in zip(machines, labels, strict=True):
        if m.get("node") is None or m.get("on_time") is not False or m.get("mode") == "DOWN":
            continue
        completion = _num(((m.get("expected") or {}).get("graceful") or {}).get("completion"))
        line = f"late: {label}"
        if completion is not None:
            line += f" empty {format_local_time(completion, now, tz)}"
        line += f", {format_duration(_num(m.get('late_by')) or 0.0)} into its window"
        blockers = m.get("blockers") or []
        if blockers:
            b = blockers[0]
            line += f"; last {b.get('slot')} (job {b.get('job_id')}, {b.get('owner')})"
        out.append(line)
    if len(out) > 5:
        out = [*out[:5], f"… and {len(out) - 5} more late"]
    return out


def plan_view(plan: Mapping[str, Any], *, width: int = 100, tz: tzinfo | None = None) -> Group:
    """``GET /v1/maintenance/plan`` as a timeline ``width`` columns wide.

    One row per machine (sorted by window start): machine, mode, drain state, the time
    axis from the plan's ``now`` to the last window end, and a status word (``on time``,
    ``late 12m``, ``empty``, ``DOWN``, ``escalated``, ``no node``, ``lost``) in the row's
    colour. On the axis: ``·`` open, ``▷`` the planned drain start, ``━`` closed (the
    drain runs, or will), ``◆`` when the node is empty (the running drain's schedule,
    else a graceful drain started now), ``[█]`` the window, ``»`` beyond the axis. Then a
    legend, the totals, and why late machines are late. Pure: ``now`` is the plan's.
    """
    from rich.console import Group  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    from nodeagent.cli._render import format_duration, format_local_time  # noqa: PLC0415

    now = _num(plan.get("now")) or 0.0
    machines = sorted(
        plan.get("machines") or [],
        key=lambda m: _num((m.get("window") or {}).get("start")) or 0.0,
    )
    policy = plan.get("policy") or {}
    head = Text(f"Maintenance plan · now {format_local_time(now, now, tz)}", style="bold")
    lines: list[Text] = [head]
    if policy:
        lines.append(
            Text(
                f"policy: {str(policy.get('drain_policy', '')).replace('_', ' ')}, "
                f"margin {format_duration(_num(policy.get('drain_margin')) or 0.0)}, "
                f"escalation {policy.get('escalation')}",
                style="dim",
            )
        )
    if not machines:
        lines.append(Text("no machine is scheduled for maintenance"))
        lines.extend(Text(t, style="dim") for t in _totals_lines(plan.get("totals") or {}))
        return Group(*lines)

    labels = _labels(machines)
    statuses = [_row_status(m, format_duration) for m in machines]
    drains = [str((m.get("drain") or {}).get("state") or "-") for m in machines]
    status_w = min(max(len("STATUS"), *(len(s) for s, _ in statuses)), 12)
    mode_w, drain_w = len("DRAINING"), max(len("DRAIN"), *(len(d) for d in drains))
    name_w = min(max(len("MACHINE"), *(len(x) for x in labels)), 24)
    fixed = mode_w + drain_w + status_w + 8  # four gaps of two columns
    axis_w = width - fixed - name_w
    if axis_w < _MIN_AXIS:
        name_w = max(len("MACHINE"), name_w - (_MIN_AXIS - axis_w))
        axis_w = max(_MIN_AXIS, width - fixed - name_w)
    axis = _Axis(now=now, span=_axis_span(machines, now), width=axis_w)
    label_line, ruler = _ticks(axis, format_duration)
    head.append(f" · axis to {format_local_time(now + axis.span, now, tz)}")
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
    lines.extend(Text(t, style="red") for t in _late_lines(machines, labels, now, tz))
    return Group(*lines)


def plan_text(plan: Mapping[str, Any], *, width: int = 100, tz: tzinfo | None = None) -> str:
    """:func:`plan_view` as plain text, without colour."""
    import io  # noqa: PLC0415

    from rich.console import Console  # noqa: PLC0415

    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    console.print(plan_view(plan, width=width, tz=tz))
    return out.getvalue()


def _plan_width(console: Console) -> int:
    """The terminal's width; 100 columns when writing elsewhere (unless ``COLUMNS``)."""
    if console.is_terminal or "COLUMNS" in os.environ:
        return console.width
    return 100


def _watch_plan(target: Target, *, json_output: bool, interval: float) -> None:
    """Refresh the plan every ``interval`` seconds until Ctrl-C (which ends it, 0).

    The first fetch's error ends the command; later ones are shown and retried.
    """
    path = "/v1/maintenance/plan"
    first = request(target, "GET", path)
    try:
        if json_output:
            _emit(first.text)
            while True:
                time.sleep(interval)
                try:
                    _emit(request(target, "GET", path).text)
                except CliError as exc:
                    sys.stderr.write(f"{exc.code}: {exc.message} (retrying)\n")
        from rich.live import Live  # noqa: PLC0415
        from rich.text import Text  # noqa: PLC0415

        console = _console()
        if not console.is_terminal:
            while True:
                console.print(plan_view(first.data, width=_plan_width(console)))
                console.print()
                time.sleep(interval)
                try:
                    first = request(target, "GET", path)
                except CliError as exc:
                    sys.stderr.write(f"{exc.code}: {exc.message} (retrying)\n")
        view = plan_view(first.data, width=console.width)
        with Live(view, console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                try:
                    data = request(target, "GET", path).data
                    live.update(plan_view(data, width=console.width), refresh=True)
                except CliError as exc:
                    live.update(Text(f"{exc.code}: {exc.message} (retrying)", "red"), refresh=True)
    except KeyboardInterrupt:
        return


@master_app.command()
def plan(
    *,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C.")] = False,
    interval: Annotated[
        str, typer.Option(metavar="DURATION", help="Time between refreshes with --watch.")
    ] = "2s",
    json_output: JsonOption = False,
    host: HostOption = None,
    token: TokenOption = None,
    socket_path: SocketOption = None,
) -> None:
    """The maintenance plan as a timeline, and the cluster totals.

    One row per machine: when its drain starts, when it will be empty, its window; on
    time, late, empty or DOWN. --json prints GET /v1/maintenance/plan. With --watch, one
    refresh per --interval until Ctrl-C.
    """

    def action() -> None:
        try:
            seconds = parse_duration(interval)
        except ValueError as exc:
            raise UsageError("cli.bad_duration", f"--interval: {exc}") from None
        target = _target(host, token, socket_path)
        if watch:
            _watch_plan(target, json_output=json_output, interval=seconds or 2.0)
            return
        reply = request(target, "GET", "/v1/maintenance/plan")
        if json_output:
            _emit(reply.text)
            return
        console = _console()
        console.print(plan_view(reply.data, width=_plan_width(console)))

    _finish(action, json_output=json_output)


if __name__ == "__main__":
    master_app()
