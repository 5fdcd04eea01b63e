"""What ``nodeagent master …``'s client commands do, and machine ids on the command line.

One function per command (``status``, ``plan``, ``ads``, ``schedule get|set|clear``,
``down``, ``up``), taking the parsed command line as keyword arguments, as
:mod:`nodeagent.cli._agent` does for the agent's. Each talks to one master (its Unix
socket by default, ``--host`` for a remote one) through :mod:`nodeagent.cli._http`, prints
the API's JSON with ``json_output`` or a human view (:mod:`nodeagent.cli._render`), and
raises a :class:`~nodeagent.cli._errors.CliError`. A Mesos endpoint refuses with a
plain-text 400; its message becomes the code ``maintenance.refused`` (exit 1).

Mesos answers ``POST /maintenance/schedule``, ``/machine/down`` and ``/machine/up`` with
an empty body, so with ``--json`` ``schedule set`` and ``schedule clear`` print the
schedule as the master then holds it (``GET /maintenance/schedule``), and ``down`` and
``up`` print the machine ids they posted.
"""

from __future__ import annotations

import json
import re
import string
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlencode

from nodeagent.cli._common import (
    confirm,
    console,
    duration,
    emit_text,
    master_target,
    watch_loop,
)
from nodeagent.cli._errors import CliError, Declined, Interrupted, Pending, Refused, UsageError
from nodeagent.cli._http import Reply, Target, call, check, request, stream
from nodeagent.cli._render import format_machine

TYPE_CHECKING = False  # not typing's: the plain commands import neither typing nor rich
if TYPE_CHECKING:
    from typing import Any

    from rich.console import RenderableType

    from nodeagent.cli._draw import Screen

__all__ = [
    "ads",
    "down",
    "parse_machine",
    "plan",
    "resolve_machines",
    "schedule_clear",
    "schedule_get",
    "schedule_set",
    "status",
    "up",
]


def _mesos(target: Target, method: str, path: str, content: bytes | None = None) -> Reply:
    """One request to a Mesos endpoint: its plain-text 400 becomes
    :class:`~nodeagent.cli._errors.Refused` (``maintenance.refused``, Mesos's message as it
    is); other errors as usual."""
    reply = call(target, method, path, content=content)
    if reply.status == 400 and not reply.content_type.startswith("application/json"):
        raise Refused("maintenance.refused", reply.text.strip(), reply=reply)
    return check(reply, peer=target.peer)


#: Nodes held out of service: the completion hook of the drain in force is due, running or
#: failed, or the health gate is closed (docs/attributes.md).
HELD_CONSTRAINT = (
    '(HealthState isnt undefined && HealthState != "passing")'
    " || (DrainHookState isnt undefined && DrainHookRequestId =?= DrainingRequestId"
    ' && (DrainHookState == "pending" || DrainHookState == "running"'
    ' || DrainHookState == "failed"))'
)
#: The nodes ``master status`` shows shutting down or rebooting, and what it reads of them.
SHUTDOWN_CONSTRAINT = "ShuttingDown =?= true || Rebooting =?= true"
SHUTDOWN_PROJECTION = (
    "Name",
    "ShuttingDown",
    "Rebooting",
    "Lost",
    "LastHeardFrom",
    "DrainState",
    "DrainingRequestId",
    "DrainReason",
)
HELD_PROJECTION = (
    "Name",
    "DrainingRequestId",
    "DrainHookRequestId",
    "DrainHookName",
    "DrainHookState",
    "DrainHookMessage",
    "HealthState",
    "HealthFailures",
    "HealthPasses",
    "HealthPassesNeeded",
    "HealthMessage",
    "HealthNextCheck",
)


# --- machine ids on the command line ------------------------------------------------------

_IPV4 = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")
_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def parse_machine(text: str) -> dict[str, str]:
    """``HOST/IP`` → both fields, a dotted IPv4 address → ``ip``, anything else →
    ``hostname``. Raises :class:`~nodeagent.cli._errors.UsageError` for an empty part."""
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
    :class:`~nodeagent.cli._errors.UsageError` ``cli.ambiguous_machine`` when it matches
    several machines, and ``cli.unknown_machine`` for a short hostname (``node1``) that
    matches none but is the first label of scheduled ones (``node1.test``): did you mean.
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
            names = ", ".join(format_machine(m) for m in found)
            raise UsageError(
                "cli.ambiguous_machine",
                f"{arg} matches {len(found)} scheduled machines ({names}): give HOST/IP",
            )
        if not found and "hostname" in given:
            meant = sorted(
                format_machine(m)
                for m in scheduled
                if str(m.get("hostname", "")).translate(_LOWER).split(".", 1)[0] == host
            )
            if meant:
                raise UsageError(
                    "cli.unknown_machine",
                    f"{arg} is not part of the maintenance schedule; did you mean "
                    f"{' or '.join(meant[:3])}? (nothing changed)",
                )
        out.append({k: str(v) for k, v in found[0].items()} if found else given)
    return out


# --- status and the schedule --------------------------------------------------------------


def status(
    *, json_output: bool, host: str | None, token: str | None, socket_path: str | None
) -> None:
    """``nodeagent master status``: ``GET /maintenance/status``; the DOWN machines whose
    node has not confirmed its drain (``GET /v1/maintenance/down``); the machines still out
    of service after their window (the plan's ``after_window``), with the command that
    brings them back; the nodes held out of service; those shutting down or rebooting."""
    target = master_target(host, token, socket_path)
    reply = _mesos(target, "GET", "/maintenance/status")
    if json_output:
        emit_text(reply.text)
        return
    from nodeagent.cli._render import held_nodes_view, master_status_view  # noqa: PLC0415

    out = console()
    data = reply.data or {}
    pending: dict[str, str] = {}
    if data.get("down_machines"):  # whether each DOWN machine's node holds its drain
        down = request(target, "GET", "/v1/maintenance/down").data or {}
        pending = {
            format_machine(m.get("machine_id") or {}): str(m.get("pending"))
            for m in down.get("machines") or []
            if m.get("confirmed") is False
        }
    out.print(master_status_view(data, pending=pending))
    if data.get("draining_machines") or data.get("down_machines"):
        # which of them are still out of service after their window, and how back
        from nodeagent.cli._draw import Group  # noqa: PLC0415
        from nodeagent.cli._render import after_window_lines, behind_line  # noqa: PLC0415

        plan = request(target, "GET", _plan_path(all_rows=False, limit=0)).data or {}
        ended = after_window_lines(plan)
        if ended:
            out.print(Group(*ended))
        behind = (plan.get("totals") or {}).get("behind")
        if isinstance(behind, int) and behind > 0:  # the list may miss some of them
            out.print(behind_line(behind))
    query = urlencode({"constraint": HELD_CONSTRAINT, "projection": ",".join(HELD_PROJECTION)})
    held = (request(target, "GET", f"/v1/ads?{query}").data or {}).get("ads") or []
    if held:
        out.print(held_nodes_view(held, now=time.time()))
    query = urlencode(
        {"constraint": SHUTDOWN_CONSTRAINT, "projection": ",".join(SHUTDOWN_PROJECTION)}
    )
    going = (request(target, "GET", f"/v1/ads?{query}").data or {}).get("ads") or []
    if going:
        from nodeagent.cli._render import shutdown_nodes_view  # noqa: PLC0415

        out.print(shutdown_nodes_view(going, now=time.time()))
    leadership = request(target, "GET", "/v1/leader").data or {}
    if leadership.get("store") == "etcd":  # several masters: say which one leads
        leader = leadership.get("leader")
        term = leadership.get("term")
        of_term = f", the pool's term {term}" if term is not None else ""
        if leader is None:
            out.print("no master leads at the moment (writes are refused until one does)")
        elif leadership.get("leading"):
            out.print(f"this master leads ({leader}{of_term})")
        else:
            out.print(
                f"the leader is {leader}{of_term}; this master ({leadership.get('self')}) follows"
            )


def schedule_get(
    *, json_output: bool, host: str | None, token: str | None, socket_path: str | None
) -> None:
    """``nodeagent master schedule get``: ``GET /maintenance/schedule``."""
    reply = _mesos(master_target(host, token, socket_path), "GET", "/maintenance/schedule")
    if json_output:
        emit_text(reply.text)
        return
    from nodeagent.cli._render import schedule_view  # noqa: PLC0415

    console().print(schedule_view(reply.data or {}, time.time()))


def _read_input(path: str) -> bytes:
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError("cli.input", f"cannot read {path}: {exc.strerror}") from None


def _replace_schedule(
    target: Target,
    content: bytes,
    *,
    json_output: bool,
    verb: str,
    if_version: str | None = None,
) -> None:
    """Replace the schedule with ``content``: ``POST /maintenance/schedule``, or, given
    ``if_version`` (a preview's ``schedule_version``), ``PUT /v1/maintenance/schedule``,
    applied only while the master still holds the state the preview was made from (else
    :class:`~nodeagent.cli._errors.Refused` ``schedule.changed``, nothing applied). Then
    the schedule the master holds, printed."""
    if if_version is None:
        _mesos(target, "POST", "/maintenance/schedule", content)
    else:
        query = urlencode({"if_version": if_version})
        _mesos(target, "PUT", f"/v1/maintenance/schedule?{query}", content)
    reply = _mesos(target, "GET", "/maintenance/schedule")
    if json_output:
        emit_text(reply.text)
        return
    windows = (reply.data or {}).get("windows") or []
    machines = len(_scheduled(reply.data or {}))
    if not windows:
        emit_text(f"schedule {verb}: no machine is scheduled")
        return
    emit_text(
        f"schedule {verb}: {len(windows)} window{'' if len(windows) == 1 else 's'}, "
        f"{machines} machine{'' if machines == 1 else 's'}"
    )


#: Warnings of a schedule preview that ``--yes`` alone does not override: times that look
#: written in the wrong unit, a window that has started already.
_FORCED = ("schedule.suspicious_time", "schedule.window_open")


def schedule_set(
    *,
    file: str,
    yes: bool,
    dry_run: bool,
    force: bool,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent master schedule set FILE``: the preview of the file's schedule (``POST
    /v1/maintenance/schedule/preview``), shown, then asked; once confirmed, the file
    (``-``: stdin) as it is, with the preview's ``schedule_version`` as precondition
    (``PUT /v1/maintenance/schedule``: a schedule or mode changed since the preview
    refuses it, ``schedule.changed``, nothing applied), then the schedule the master
    holds. ``--dry-run`` shows the preview only; a warning of :data:`_FORCED` needs
    ``--force`` besides the answer."""
    if dry_run and (yes or force):
        raise UsageError("cli.usage", "--dry-run shows the preview only: not with --yes or --force")
    content = _read_input(file)
    target = master_target(host, token, socket_path)
    # The rows of the machines the change adds or moves: what it does (a kept machine's
    # drain and cuts are the plan's already), at a cost that of the change.
    reply = _mesos(target, "POST", "/v1/maintenance/schedule/preview?rows=changed", content)
    preview = reply.data if isinstance(reply.data, dict) else {}
    forced = sorted({w.get("code") for w in preview.get("warnings") or []} & set(_FORCED))
    if json_output and dry_run:
        emit_text(reply.text)
        return
    if not json_output:
        from nodeagent.cli._render import schedule_preview_view  # noqa: PLC0415

        console().print(schedule_preview_view(preview))
    if dry_run:
        emit_text("dry run: the schedule was not applied")
        return
    if forced and not force and (yes or not sys.stdin.isatty()):
        raise Declined(
            "schedule.needs_force",
            f"not applied: {', '.join(forced)} (see the preview): check the times, or "
            "give --force with --yes",
        )
    question = "Apply this schedule anyway? [y/N] " if forced else "Apply this schedule? [y/N] "
    confirm(question, yes=yes, what="the schedule was not applied")
    version = preview.get("schedule_version")
    _replace_schedule(
        target,
        content,
        json_output=json_output,
        verb="replaced",
        if_version=version if isinstance(version, str) else None,
    )


def schedule_clear(
    *, json_output: bool, host: str | None, token: str | None, socket_path: str | None
) -> None:
    """``nodeagent master schedule clear``: ``POST /maintenance/schedule`` with ``{}``."""
    target = master_target(host, token, socket_path)
    _replace_schedule(target, b"{}", json_output=json_output, verb="cleared")


# --- down and up --------------------------------------------------------------------------


def _resolved(target: Target, machines: Sequence[str]) -> list[dict[str, str]]:
    """The machine ids to post (:func:`resolve_machines`), the schedule fetched when a
    bare HOST or IP needs completing."""
    partial = any(len(parse_machine(m)) == 1 for m in machines)
    schedule = _mesos(target, "GET", "/maintenance/schedule").data if partial else None
    return resolve_machines(machines, schedule)


def _check_confirmed(report: Sequence[Mapping[str, Any]], mode: str) -> None:
    """Raise :class:`~nodeagent.cli._errors.Pending` naming each machine whose node has
    not confirmed the change (the master's reply to ``/machine/down`` or ``/machine/up``)."""
    pending = [m for m in report if m.get("confirmed") is False]
    if pending:
        names = "; ".join(
            f"{format_machine(m.get('machine_id') or {})}: {m.get('pending')}" for m in pending
        )
        count = f"{len(pending)} machine{'' if len(pending) == 1 else 's'}"
        raise Pending(
            "machine.pending",
            f"{mode} in the schedule, but not yet on the node of {count}: {names}",
        )


def _post_change(
    target: Target,
    path: str,
    mode: str,
    ids: Sequence[Mapping[str, str]],
    body: bytes,
    *,
    json_output: bool,
) -> list[Mapping[str, Any]]:
    """``POST path`` (``/machine/down`` or ``/machine/up``) with ``body``; prints the
    reply (``json_output``) or ``mode`` and each machine not confirmed by its node; returns
    the reply's per-machine report."""
    reply = _mesos(target, "POST", path, body)
    data = reply.data if isinstance(reply.data, dict) else {}
    report: list[Mapping[str, Any]] = list(data.get("machines") or [])
    if json_output:
        emit_text(reply.text)
        return report
    from nodeagent.cli._render import render_confirmations, render_transition  # noqa: PLC0415

    out = console()
    render_transition(out, mode, ids)
    render_confirmations(out, report, mode)
    return report


def down(
    *,
    machines: list[str],
    yes: bool,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
    wait: bool = False,
) -> None:
    """``nodeagent master down HOST...``: what the fast drains would evict now (``POST
    /v1/maintenance/down/preview``), asked, then ``POST /machine/down``; exits
    :class:`~nodeagent.cli._errors.Pending` (10) unless every node confirmed its drain.
    With ``wait``, a machine pending is waited for (:func:`_wait_down`) instead."""
    target = master_target(host, token, socket_path)
    ids = _resolved(target, machines)
    body = json.dumps(ids, separators=(",", ":")).encode()
    preview = _mesos(target, "POST", "/v1/maintenance/down/preview", body).data or {}
    if not json_output:
        from nodeagent.cli._render import down_preview_view  # noqa: PLC0415

        console().print(down_preview_view(preview))
    confirm("Bring these machines DOWN? [y/N] ", yes=yes, what="no machine was brought down")
    report = _post_change(target, "/machine/down", "DOWN", ids, body, json_output=json_output)
    if wait and any(m.get("confirmed") is False for m in report):
        report = _wait_down(target, report, json_output=json_output)
    _check_confirmed(report, "DOWN")


#: Seconds between two looks at the DOWN machines while ``master down --wait`` waits.
_DOWN_POLL_S = 1.0


def _wait_down(
    target: Target, report: Sequence[Mapping[str, Any]], *, json_output: bool
) -> list[Mapping[str, Any]]:
    """Wait until the node of every machine of ``report`` (``/machine/down``'s reply)
    confirms its fast drain, from ``GET /v1/maintenance/down`` once a second: one line
    per change (still pending, and why; confirmed, with the drain's request id), and with
    ``json_output`` the last report as ``{"machines": [...]}``. A machine no longer DOWN
    (brought up meanwhile) is left out. Ctrl-C stops waiting:
    :class:`~nodeagent.cli._errors.Interrupted`, the machines DOWN all the same."""
    names = [format_machine(m.get("machine_id") or {}) for m in report]
    seen = {
        name: str(m.get("pending"))
        for name, m in zip(names, report, strict=True)
        if m.get("confirmed") is False
    }
    rows: list[Mapping[str, Any]] = list(report)
    try:
        while any(m.get("confirmed") is False for m in rows):
            time.sleep(_DOWN_POLL_S)
            now = request(target, "GET", "/v1/maintenance/down").data or {}
            by_name = {
                format_machine(m.get("machine_id") or {}): m for m in now.get("machines") or []
            }
            rows = [by_name[name] for name in names if name in by_name]
            for name in names:
                row = by_name.get(name)
                if json_output or name not in seen or row is None:
                    continue
                if row.get("confirmed"):
                    emit_text(f"{name}: DOWN confirmed (drain {row.get('request_id')})")
                    del seen[name]
                elif str(row.get("pending")) != seen[name]:
                    seen[name] = str(row.get("pending"))
                    emit_text(f"{name}: DOWN pending: {seen[name]}")
    except KeyboardInterrupt:
        waiting = sum(m.get("confirmed") is False for m in rows)
        raise Interrupted(
            "cli.interrupted",
            f"stopped waiting: {waiting} machine{'' if waiting == 1 else 's'} DOWN in the "
            "schedule, not yet on the node; the master keeps trying",
        ) from None
    if json_output:
        emit_text(json.dumps({"machines": rows}, separators=(",", ":")))
    return rows


def up(
    *,
    machines: list[str],
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent master up HOST...``: ``POST /machine/up``, then the nodes not yet back
    in service; exits :class:`~nodeagent.cli._errors.Pending` (10) unless the master's
    drain was cancelled on every node."""
    target = master_target(host, token, socket_path)
    ids = _resolved(target, machines)
    body = json.dumps(ids, separators=(",", ":")).encode()
    report = _post_change(target, "/machine/up", "UP", ids, body, json_output=json_output)
    if not json_output:
        from nodeagent.cli._render import render_up_report  # noqa: PLC0415

        render_up_report(console(), report)
    _check_confirmed(report, "UP")


# --- ads ----------------------------------------------------------------------------------


def ads(
    *,
    constraint: str | None,
    projection: str | None,
    slots: bool,
    long: bool,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent master ads``: ``GET /v1/ads`` as a table, ``long`` (ClassAd long
    format) or ``json_output``; both together are ``cli.usage``."""
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
    reply = request(master_target(host, token, socket_path), "GET", path)
    if json_output or long:
        emit_text(reply.text)
        return
    from nodeagent.cli._render import ads_table  # noqa: PLC0415

    found = (reply.data or {}).get("ads") or []
    names = [p.strip() for p in (projection or "").split(",") if p.strip()]
    out = console()
    out.print(ads_table(found, projection=names, slots=slots, now=time.time()))
    lost = sum(ad.get("Lost") is True for ad in found)
    kind = "slot ad" if slots else "ad"
    summary = f"{len(found)} {kind}{'' if len(found) == 1 else 's'}"
    out.print(summary + (f", {lost} lost" if lost and not names else ""), style="dim")


# --- the plan -----------------------------------------------------------------------------


def _plan_path(
    *, all_rows: bool, limit: int, windows: Sequence[str] = (), machines: Sequence[str] = ()
) -> str:
    """What the plan command asks the master for: every row, or only what the summary
    draws (the late machines, at most ``limit``, without their blockers); of the machines
    of ``windows`` (their starts) and ``machines`` (hostnames or IPs) when given."""
    query = [] if all_rows else [("late", "true"), ("blockers", "false"), ("limit", str(limit))]
    query += [("window", start) for start in windows]
    query += [("machine", name) for name in machines]
    return "/v1/maintenance/plan" + (f"?{urlencode(query)}" if query else "")


def _stream_plan(target: Target, path: str) -> None:
    """Print the streamed plan (``format=jsonl``) as its lines come: the heading, one
    line a row (:func:`~nodeagent.cli._render.plan_row_line`), then the totals and the
    machines still out of service after their window. A plan that fails midway is a
    ``plan.failed`` error (exit status 5) after the rows printed."""
    from nodeagent.cli._render import plan_stream_lines  # noqa: PLC0415

    joined = "&" if "?" in path else "?"
    out = console()
    with stream(target, f"{path}{joined}format=jsonl", idle=_PLAN_IDLE_S) as streamed:
        ended = False
        render = plan_stream_lines()
        for raw in streamed.lines():
            line = json.loads(raw)
            if "error" in line:
                error = line["error"]
                raise PlanFailed("plan.failed", str(error.get("message", error)))
            ended = ended or "end" in line
            for text in render(line):
                out.print(text)
        if not ended:
            raise PlanFailed("plan.failed", "the plan ended before its end line")


#: How long the streamed plan may send nothing (its late rows are sent once all are made).
_PLAN_IDLE_S = 120.0


class PlanFailed(CliError):
    """The master's plan failed after its first line (``plan.failed``)."""

    exit_status = 5


def _plan_view(data: Any, out: Screen, *, all_rows: bool) -> RenderableType:
    """One plan reply as ``out`` draws it: the timeline, or the summary."""
    from nodeagent.cli._render import plan_summary_view, plan_view, plan_width  # noqa: PLC0415

    if all_rows:
        return plan_view(data, width=plan_width(out))
    return plan_summary_view(data)


def plan(
    *,
    watch: bool,
    interval: str,
    all_rows: bool = False,
    limit: int = 20,
    windows: Sequence[str] | None = None,
    machines: Sequence[str] | None = None,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent master plan``: the summary (``GET /v1/maintenance/plan?late=true&
    blockers=false&limit=N``) or with ``all_rows`` every row, printed as the master
    streams them (``format=jsonl``; with ``watch``, the timeline of the whole plan);
    ``windows`` and ``machines``: the plan of those machines only; with ``watch``, one
    refresh per ``interval`` until Ctrl-C."""
    seconds = duration("--interval", interval)
    assert seconds is not None
    target = master_target(host, token, socket_path)
    path = _plan_path(
        all_rows=all_rows, limit=limit, windows=windows or (), machines=machines or ()
    )
    if watch:
        watch_loop(
            lambda: request(target, "GET", path),
            lambda data, out: _plan_view(data, out, all_rows=all_rows),
            json_output=json_output,
            interval=seconds or 2.0,
        )
        return
    if all_rows and not json_output:
        _stream_plan(target, path)
        return
    reply = request(target, "GET", path)
    if json_output:
        emit_text(reply.text)
        return
    out = console()
    out.print(_plan_view(reply.data, out, all_rows=all_rows))
