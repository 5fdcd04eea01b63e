"""What ``nodeagent master maintain …`` does: rolling maintenance operations.

``start`` posts an operation (``POST /v1/maintenance/operations``) and prints its batches
(or, with ``--wait``, follows it as ``status --wait`` does); ``status`` shows one operation
(the newest without an id) or, with ``--json``, prints the API's document; ``--wait``
draws a progress bar of the batches finished until the operation ends; ``pause``,
``resume`` and ``cancel`` act at once. ``status`` (and ``--wait``, once the operation has
ended or paused) exits 0 only when every batch is done (``completed``): 10 while it runs
(``operation.running``), else 1 (``operation.paused`` with the reason,
``operation.cancelled``, ``operation.failed``, ``operation.incomplete``: batches
skipped). Off a terminal ``--wait`` prints one line per change.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from nodeagent.cli._common import confirm, console, duration, emit_text, master_target
from nodeagent.cli._errors import CliError, Pending, UsageError
from nodeagent.cli._http import Target, path_segment, request

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = [
    "cancel",
    "list_operations",
    "operation_view",
    "pause",
    "preview_text",
    "resume",
    "start",
    "status",
]

_PATH = "/v1/maintenance/operations"
_POLL_S = 1.0


def start(
    *,
    hosts: str | None,
    constraint: str | None,
    grouping: str,
    batches: int,
    hook: str,
    schedule: str,
    budget: str | None,
    sla_wait: str,
    wait: bool,
    yes: bool,
    dry_run: bool,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent master maintain start``: the operation's preview (``POST
    /v1/maintenance/operations/preview``: its batches in order, their SLA now, when it will
    be done), a question (``--yes``: none; no terminal: refused), then ``POST
    /v1/maintenance/operations``."""
    if (hosts is None) == (constraint is None):
        raise UsageError("cli.usage", "give either --hosts or --constraint")
    body: dict[str, Any] = {
        "grouping": grouping,
        "batches": batches,
        "hook": hook,
        "schedule": schedule,
        "sla_wait": duration("--sla-wait", sla_wait),
    }
    if hosts is not None:
        body["hosts"] = [h.strip() for h in hosts.split(",") if h.strip()]
    else:
        body["constraint"] = constraint
    if budget is not None:
        try:
            body["budget"] = float(budget)
        except ValueError:
            raise UsageError("cli.usage", f"--budget: {budget!r} is not a number") from None
    if dry_run and (yes or wait):
        raise UsageError("cli.usage", "--dry-run shows the preview only: not with --yes or --wait")
    target = master_target(host, token, socket_path)
    shown = request(target, "POST", f"{_PATH}/preview", body)
    if json_output and dry_run:
        emit_text(shown.text)
        return
    if not json_output:
        emit_text(preview_text(shown.data or {}))
    if dry_run:
        emit_text("dry run: no operation was started")
        return
    confirm("Start this operation? [y/N] ", yes=yes, what="no operation was started")
    reply = request(target, "POST", _PATH, body)
    if json_output and not wait:
        emit_text(reply.text)
        return
    doc = reply.data or {}
    if wait:
        _wait(master_target(host, token, socket_path), str(doc["id"]), json_output=json_output)
        return
    console().print(operation_view(doc, now=time.time()))


def _clock(when: Any) -> str:
    return time.strftime("%H:%M:%S", time.localtime(when)) if isinstance(when, int | float) else "?"


def preview_text(doc: Mapping[str, Any]) -> str:
    """An operation's preview for people: when it will be done, then its batches in the
    order they would go, each with its SLA verdict now, its nodes' expected times, and
    when it would run, and the declines in force on its machines; the batches that can
    never go by waiting; what the estimate does not know."""
    batches = doc.get("batches") or []
    spec = doc.get("spec") or {}
    at_once = spec.get("batches") or 1
    seconds = doc.get("seconds")
    head = f"Preview · {len(batches)} batch{'' if len(batches) == 1 else 'es'}, {at_once} at once: "
    if seconds is None:
        head += "when it will be done is not known (below)"
    else:
        head += f"done in {_span(seconds)} (at {_clock(doc.get('eta'))}) · nothing started yet"
    lines = [head]
    for batch in batches:
        sla = batch.get("sla") or {}
        if sla.get("safe", True):
            verdict = "SLA safe now"
        elif sla.get("never"):
            verdict = (
                "SLA can never be met by waiting: held until new instances start, skipped "
                f"after --sla-wait ({sla.get('message')})"
            )
        elif sla.get("until") is not None:
            verdict = f"SLA holds it until {_clock(sla['until'])} ({sla.get('message')})"
        else:
            verdict = f"held: {sla.get('message')}"
        nodes = batch.get("nodes") or []
        slowest: Mapping[str, Any] = max(
            nodes,
            key=lambda n: (
                (n.get("drain_seconds") or 0)
                + (n.get("hook_seconds") or 0)
                + (n.get("health_seconds") or 0)
            ),
            default={},
        )

        def part(value: Any, what: str) -> str:
            return f"{what} ?" if value is None else f"{what} {_span(value)}"

        times = ", ".join(
            (
                part(slowest.get("drain_seconds"), "drain"),
                part(slowest.get("hook_seconds"), f"hook {spec.get('hook')}")
                + (f" ({slowest['hook_source']})" if slowest.get("hook_source") else ""),
                part(slowest.get("health_seconds"), "health"),
            )
        )
        when = (
            f"{_clock(batch['starts_at'])}–{_clock(batch['ends_at'])}"
            if batch.get("starts_at") is not None
            else "-"
        )
        lines.append(
            f"  {batch.get('order')}. {batch.get('name')}: {', '.join(batch.get('hosts') or [])}"
            f" · {verdict} · slowest node {slowest.get('name', '-')}: {times} · {when}"
        )
        for d in batch.get("declines") or []:
            lines.append(
                f"     declined by {d.get('group')} on {d.get('machine')}: {d.get('reason')} "
                f"({d.get('who')}, at {_clock(d.get('at'))}): held until accepted, at most "
                "--sla-wait"
            )
    for reason in doc.get("unknown") or []:
        lines.append(f"  not known: {reason}")
    return "\n".join(lines)


def status(
    *,
    operation_id: str | None,
    wait: bool,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent master maintain status [ID]``: one operation (the newest without an
    ID); with ``--wait``, a progress bar until it ends."""
    target = master_target(host, token, socket_path)
    if operation_id is None:
        listed = request(target, "GET", _PATH).data or {}
        ops = listed.get("operations") or []
        if not ops:
            if json_output:
                emit_text('{"operations":[]}')
                return
            raise CliError("operation.none", "no maintenance operation")
        operation_id = str(ops[0]["id"])
    if wait:
        _wait(target, operation_id, json_output=json_output)
        return
    reply = request(target, "GET", f"{_PATH}/{path_segment(operation_id)}")
    if json_output:
        emit_text(reply.text)
    else:
        console().print(operation_view(reply.data or {}, now=time.time()))
    _verdict(reply.data or {})


def list_operations(
    *, json_output: bool, host: str | None, token: str | None, socket_path: str | None
) -> None:
    """``nodeagent master maintain list``: every operation, newest first (``GET
    /v1/maintenance/operations``)."""
    reply = request(master_target(host, token, socket_path), "GET", _PATH)
    if json_output:
        emit_text(reply.text)
        return
    ops = (reply.data or {}).get("operations") or []
    if not ops:
        emit_text("no maintenance operation")
        return
    from rich.table import Table  # noqa: PLC0415

    now = time.time()
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("id", "state", "batches", "hook", "started", "ended", "by"):
        table.add_column(column)
    for op in ops:
        table.add_row(
            str(op.get("id")),
            str(op.get("state")),
            _counted(op),
            str((op.get("spec") or {}).get("hook")),
            _when(op.get("created_at"), now),
            _when(op.get("ended_at"), now),
            str(op.get("actor")),
        )
    console().print(table)


def _change(verb: str, doc: str) -> Callable[..., None]:
    """``pause``, ``resume`` or ``cancel``: ``POST …/operations/{id}/{verb}``, then the
    operation as it is now."""

    def command(
        *,
        operation_id: str,
        json_output: bool,
        host: str | None,
        token: str | None,
        socket_path: str | None,
    ) -> None:
        target = master_target(host, token, socket_path)
        reply = request(target, "POST", f"{_PATH}/{path_segment(operation_id)}/{verb}")
        if json_output:
            emit_text(reply.text)
        else:
            console().print(operation_view(reply.data or {}, now=time.time()))

    command.__doc__ = doc
    return command


pause = _change("pause", "``nodeagent master maintain pause ID``.")
resume = _change("resume", "``nodeagent master maintain resume ID``.")
cancel = _change("cancel", "``nodeagent master maintain cancel ID``.")


# --- waiting ---------------------------------------------------------------------------------


def _ended(doc: Mapping[str, Any]) -> bool:
    """Whether a wait ends here: the operation ended, or was paused (by an operator or
    at a failed node: nothing goes on by itself)."""
    return doc.get("ended_at") is not None or doc.get("state") == "paused"


def _verdict(doc: Mapping[str, Any]) -> None:
    """Return only when every batch is done (``completed``); else raise what the
    operation's state says: ``operation.running`` (exit 10: not ended yet),
    ``operation.paused``, ``operation.cancelled``, ``operation.failed`` or
    ``operation.incomplete`` (``completed_with_skips``), exit 1."""
    state = doc.get("state")
    op = doc.get("id")
    states = [b.get("state") for b in doc.get("batches") or []]
    done = states.count("done")
    tally = f"{done}/{len(states)} batches done"
    if state == "running":
        raise Pending("operation.running", f"operation {op} is running: {tally}")
    if state == "paused":
        raise CliError("operation.paused", f"{doc.get('reason') or 'paused'} ({tally})")
    if state == "cancelled":
        raise CliError("operation.cancelled", f"operation {op} was cancelled ({tally})")
    if state == "failed":
        failed = [
            str(b.get("name")) for b in doc.get("batches") or [] if b.get("state") == "failed"
        ]
        raise CliError(
            "operation.failed",
            f"operation {op} failed: batch{'' if len(failed) == 1 else 'es'} "
            f"{', '.join(failed)} failed ({tally})",
        )
    left = [s for s in states if s != "done"]
    if left:
        raise CliError(
            "operation.incomplete",
            f"operation {op} ended {state}: {len(left)} of {len(states)} batches not done "
            f"({', '.join(sorted({str(s) for s in left}))})",
        )


def _wait(target: Target, operation_id: str, *, json_output: bool) -> None:
    """Poll the operation until it ends or is paused: on a terminal a progress bar of the
    batches done, else one line per change (a batch's state, a node's phase, and why);
    with ``json_output``, the last document only. Then :func:`_verdict`."""
    path = f"{_PATH}/{path_segment(operation_id)}"
    if json_output:
        while True:
            reply = request(target, "GET", path)
            doc = reply.data or {}
            if _ended(doc):
                emit_text(reply.text)
                _verdict(doc)
                return
            time.sleep(_POLL_S)
    if not sys.stdout.isatty():
        doc = request(target, "GET", path).data or {}
        seen: dict[str, str] = {}
        while True:
            for line in _changes(doc, seen, now=time.time()):
                emit_text(line)
            if _ended(doc):
                break
            time.sleep(_POLL_S)
            doc = request(target, "GET", path).data or {}
        emit_text(_tally(doc))
        _verdict(doc)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn  # noqa: PLC0415

    out = console().console
    doc = request(target, "GET", path).data or {}
    total = len(doc.get("batches") or [])
    with Progress(
        TextColumn("[bold]operation {task.fields[op]}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("batches done  {task.description}"),
        console=out,
        transient=False,
    ) as bar:
        task = bar.add_task(_doing(doc), total=total, op=operation_id)
        while True:
            by_state = (doc.get("counts") or {}).get("by_state") or {}
            bar.update(task, completed=by_state.get("done", 0), description=_doing(doc))
            if _ended(doc):
                break
            time.sleep(_POLL_S)
            doc = request(target, "GET", path).data or {}
    out.print(operation_view(doc, now=time.time()))
    _verdict(doc)


def _changes(doc: Mapping[str, Any], seen: dict[str, str], *, now: float) -> list[str]:
    """The lines ``--wait`` prints off a terminal for what changed since ``seen`` (which
    it updates): the operation's state, each batch's state (and why it waits), each
    node's phase (and why)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(now))
    lines = []

    def note(key: str, text: str, line: str) -> None:
        if seen.get(key) != text:
            seen[key] = text
            lines.append(f"{stamp} {line}")

    note("op", str(doc.get("state")), f"operation {doc.get('id')}: {doc.get('state')}")
    for batch in doc.get("batches") or []:
        held = batch.get("state") in ("waiting", "skipped")
        why = _reason(batch.get("reason"), now) if held else ""
        # a held batch's reason changes with the clock (its SLA wait): its code only
        code = (
            (batch.get("reason") or {}).get("code")
            if isinstance(batch.get("reason"), Mapping)
            else None
        )
        text = f"{batch.get('state')} {code or ''}"
        shown = f"batch {batch.get('name')}: {batch.get('state')}" + (f" ({why})" if why else "")
        note(f"b/{batch.get('name')}", text, shown)
        for node in batch.get("nodes") or []:
            phase, reason = node.get("phase"), node.get("reason")
            shown = f"  {node.get('name')}: {phase}" + (f" ({reason})" if reason else "")
            note(f"n/{node.get('name')}", f"{phase} {reason}", shown)
    return lines


def _tally(doc: Mapping[str, Any]) -> str:
    """``operation 3 completed_with_skips: 2 done, 1 skipped, 0 failed of 3 batches``."""
    states = [b.get("state") for b in doc.get("batches") or []]
    return (
        f"operation {doc.get('id')} {doc.get('state')}: {states.count('done')} done, "
        f"{states.count('skipped')} skipped, {states.count('failed')} failed of "
        f"{len(states)} batches"
    )


def _doing(doc: Mapping[str, Any]) -> str:
    """What the operation is doing, in one line: its batches in progress and waiting."""
    busy = [
        f"{b['name']} {b['state']}"
        for b in doc.get("batches") or []
        if b.get("state") in ("draining", "hook", "health", "returning")
    ]
    text = ", ".join(busy) if busy else str(doc.get("state"))
    return text[:60]


# --- the view ---------------------------------------------------------------------------------


def _when(value: Any, now: float) -> str:
    if not isinstance(value, int | float):
        return ""
    ago = now - value
    clock = time.strftime("%H:%M:%S", time.localtime(value))
    if ago >= 0:
        return f"{clock} ({_span(ago)} ago)"
    return f"{clock} (in {_span(-ago)})"


def _span(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _reason(reason: Any, now: float) -> str:
    """A batch's reason for people: why it waits, or why it was skipped."""
    if not isinstance(reason, Mapping):
        return "" if reason is None else str(reason)
    code = reason.get("code")
    if code == "sla":
        groups = ", ".join(reason.get("groups") or []) or "a group"
        until = reason.get("until")
        if until is not None:
            text = f"SLA of {groups} until {_when(until, now)}"
        elif reason.get("never"):
            text = (
                f"SLA of {groups} can never be met by waiting, only by new instances: "
                f"{reason.get('message')}"
            )
        else:
            text = f"SLA of {groups}, not by waiting: {reason.get('message') or 'no answer'}"
    elif code == "badput_budget":
        text = f"badput {reason.get('badput', 0):.0f} core-s over the budget {reason.get('budget')}"
    elif code == "node_unheard":
        text = "not heard from: " + ", ".join(reason.get("nodes") or [])
    elif code == "declined":
        text = "; ".join(
            f"{d.get('group')} declined on {d.get('machine')}: {d.get('reason')} "
            f"({d.get('who')}, {_when(d.get('at'), now)})"
            for d in reason.get("declines") or []
        )
        if not reason.get("went_ahead"):
            text = f"notice declined, until accepted or --sla-wait: {text}"
    else:
        text = str(code)
    if reason.get("skipped"):
        text = f"skipped after {_span(reason.get('held_for', 0))}: {text}"
    if reason.get("went_ahead"):
        text = f"went ahead after {_span(reason.get('held_for', 0))} despite: {text}"
    return text


def _counted(doc: Mapping[str, Any]) -> str:
    """``2/3 batches done, 1 skipped`` (failed, skipped and cancelled ones named apart:
    a batch that was not done never counts as done)."""
    states = [b.get("state") for b in doc.get("batches") or []]
    text = f"{states.count('done')}/{len(states)} batches done"
    for state in ("failed", "skipped", "cancelled"):
        if states.count(state):
            text += f", {states.count(state)} {state}"
    return text


def operation_view(doc: Mapping[str, Any], *, now: float) -> RenderableType:
    """An operation for people: its state and spec, then one row per node by batch, with
    the phase and why it waits (a batch's reason on its first row)."""
    from rich.console import Group  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    spec = doc.get("spec") or {}
    what = ", ".join(spec.get("hosts") or []) if not spec.get("constraint") else spec["constraint"]
    head = Text.assemble(
        (f"operation {doc.get('id')}  ", "bold"),
        (str(doc.get("state")), "bold"),
        f"  hook {spec.get('hook')}, {spec.get('schedule')}, by {spec.get('grouping')},"
        f" {spec.get('batches')} at once",
        f", budget {spec['budget']} core-s" if spec.get("budget") is not None else "",
        f"\n  {_counted(doc)};"
        f" started {_when(doc.get('created_at'), now)} by {doc.get('actor')}; hosts: {what}",
    )
    parts: list[Any] = [head]
    if doc.get("reason"):
        parts.append(Text(f"  {doc['reason']}", style="yellow"))
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("batch", "state", "node", "phase", "drain", "why"):
        table.add_column(column)
    active = ("draining", "hook", "health", "returning")
    busy = sum(1 for b in doc.get("batches") or [] if b.get("state") in active)
    for batch in doc.get("batches") or []:
        why = _reason(batch.get("reason"), now)
        if not why and batch.get("state") == "waiting" and doc.get("state") == "running":
            full = busy >= (spec.get("batches") or 1)
            why = f"waits for a place ({spec.get('batches')} at once)" if full else "next"
        for i, node in enumerate(batch.get("nodes") or []):
            table.add_row(
                batch["name"] if i == 0 else "",
                batch["state"] if i == 0 else "",
                node["name"],
                node["phase"],
                node.get("request_id") or "",
                node.get("reason") or (why if i == 0 else ""),
            )
    parts.append(table)
    return Group(*parts)
