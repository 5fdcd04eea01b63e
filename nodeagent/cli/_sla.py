"""What ``nodeagent master sla …`` does: ``probe`` (``GET /v1/sla/probe``) as a table, and
the job groups' policies: ``set``, ``get``, ``list``, ``delete`` (``/v1/sla/policies``).

As :mod:`nodeagent.cli._master` does for the other master commands: the parsed command
line as keyword arguments, the API's JSON with ``json_output``, else a human view.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from nodeagent.cli._common import console, duration, emit_json, emit_text, master_target
from nodeagent.cli._errors import UsageError
from nodeagent.cli._http import request

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["delete", "get", "list_policies", "policy_text", "probe", "probe_view", "set_policy"]

_POLICIES = "/v1/sla/policies"


def _group_path(group: str) -> str:
    """``GROUP`` as the path after :data:`_POLICIES` (it may hold ``/``, as ``web/prod``:
    each segment quoted); an empty or dot segment is ``cli.usage``."""
    segments = group.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        raise UsageError("cli.usage", f"not a job group's name: {group!r}")
    return f"{_POLICIES}/" + "/".join(quote(segment, safe="") for segment in segments)


def policy_text(policy: Mapping[str, Any]) -> str:
    """A policy in words: ``web/prod: at least 95% of 40 instances up for 30m (api)``."""
    from nodeagent.cli._render import format_duration  # noqa: PLC0415

    kind = policy.get("kind")
    source = f" ({policy['source']})" if policy.get("source") else ""
    if kind == "coordinator":
        return f"{policy.get('group')}: ask the coordinator {policy.get('url')}{source}"
    size = policy.get("size")
    if kind == "percentage":
        of = f"{size} instances" if size is not None else "the instances"
        want = f"{policy.get('percentage'):g}% of {of}"
    else:
        want = (
            f"{policy.get('count')} of {size} instances"
            if size
            else f"{policy.get('count')} instances"
        )
    up_for = float(policy.get("duration") or 0)
    held = f" up for {format_duration(up_for)}" if up_for else " up"
    return f"{policy.get('group')}: at least {want}{held}{source}"


def set_policy(
    *,
    group: str,
    percentage: str | None,
    count: int | None,
    coordinator: str | None,
    up_for: str | None,
    size: int | None,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent master sla set GROUP (--percentage P | --count N | --coordinator URL)
    [--for DURATION] [--size N]``: ``PUT /v1/sla/policies/GROUP``."""
    given = [v is not None for v in (percentage, count, coordinator)]
    if sum(given) != 1:
        raise UsageError("cli.usage", "give one of --percentage, --count or --coordinator")
    body: dict[str, Any]
    if coordinator is not None:
        if up_for is not None or size is not None:
            raise UsageError("cli.usage", "--for and --size do not apply to --coordinator")
        body = {"kind": "coordinator", "url": coordinator}
    else:
        if percentage is not None:
            try:
                share = float(percentage.rstrip("%"))
            except ValueError:
                raise UsageError(
                    "cli.usage", f"--percentage: {percentage!r} is not a number"
                ) from None
            body = {"kind": "percentage", "percentage": share}
        else:
            body = {"kind": "count", "count": count}
        body["duration"] = duration("--for", up_for) or 0.0
        if size is not None:
            body["size"] = size
    reply = request(master_target(host, token, socket_path), "PUT", _group_path(group), body)
    if json_output:
        emit_json(reply)
        return
    emit_text("set " + policy_text(reply.data or {}))


def get(
    *, group: str, json_output: bool, host: str | None, token: str | None, socket_path: str | None
) -> None:
    """``nodeagent master sla get GROUP``: ``GET /v1/sla/policies/GROUP``."""
    reply = request(master_target(host, token, socket_path), "GET", _group_path(group))
    if json_output:
        emit_json(reply)
        return
    emit_text(policy_text(reply.data or {}))


def list_policies(
    *, json_output: bool, host: str | None, token: str | None, socket_path: str | None
) -> None:
    """``nodeagent master sla list``: ``GET /v1/sla/policies``, one line per group."""
    reply = request(master_target(host, token, socket_path), "GET", _POLICIES)
    if json_output:
        emit_json(reply)
        return
    policies = (reply.data or {}).get("policies") or []
    if not policies:
        emit_text("no SLA policy: every job group may go at any time")
        return
    for policy in policies:
        emit_text(policy_text(policy))


def delete(
    *, group: str, json_output: bool, host: str | None, token: str | None, socket_path: str | None
) -> None:
    """``nodeagent master sla delete GROUP``: ``DELETE /v1/sla/policies/GROUP``; says what
    is in force after (the policy file's, or none)."""
    reply = request(master_target(host, token, socket_path), "DELETE", _group_path(group))
    if json_output:
        emit_json(reply)
        return
    in_force = (reply.data or {}).get("in_force")
    after = policy_text(in_force) if in_force else "no policy now"
    emit_text(f"deleted the API's policy of {group}; in force: {after}")


def probe(
    *,
    hosts: Sequence[str] | None,
    constraint: str | None,
    grouping: str | None,
    json_output: bool,
    host: str | None,
    token: str | None,
    socket_path: str | None,
) -> None:
    """``nodeagent master sla probe HOST... | --constraint EXPR [--grouping ATTR]``."""
    if bool(hosts) == (constraint is not None):
        raise UsageError("cli.usage", "give either HOST... or --constraint EXPR")
    query: dict[str, str] = {}
    if hosts:
        query["hosts"] = ",".join(hosts)
    if constraint is not None:
        query["constraint"] = constraint
    if grouping is not None:
        query["grouping"] = grouping
    reply = request(
        master_target(host, token, socket_path), "GET", f"/v1/sla/probe?{urlencode(query)}"
    )
    if json_output:
        emit_json(reply)
        return
    console().print(probe_view(reply.data or {}))


def _wait(value: Any) -> str:
    from nodeagent.cli._render import format_duration  # noqa: PLC0415

    if value is None:
        return "never (needs new instances)"
    return "now" if value == 0 else f"in {format_duration(math.ceil(float(value)))}"


def probe_view(doc: Mapping[str, Any]) -> RenderableType:
    """The probe as a table: a row per host group and affected job group, then a line."""
    from rich.console import Group  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    table = Table(box=None, pad_edge=False)
    for column in ("HOSTS", "SAFE", "WAIT", "JOB GROUP", "UP/NEEDED", "DOWN", "WHY"):
        table.add_column(column, no_wrap=column != "WHY")
    host_groups = doc.get("host_groups") or []
    for entry in host_groups:
        hosts = ",".join(entry.get("hosts") or [])
        key = str(entry.get("key", ""))
        label = hosts if key in ("*", hosts) else f"{key}: {hosts}"
        safe = "yes" if entry.get("safe") else "NO"
        wait = "-" if entry.get("safe") else _wait(entry.get("wait"))
        groups = entry.get("groups") or []
        if not groups:
            unknown = entry.get("unknown") or []
            why = f"unknown: {', '.join(unknown)}" if unknown else "no job group runs there"
            table.add_row(label, safe, wait, "-", "-", "-", why)
        for i, group in enumerate(groups):
            needed = group.get("needed")
            counts = f"{group.get('up')}/{needed}" if needed else "-"
            table.add_row(
                label if i == 0 else "",
                safe if i == 0 else "",
                wait if i == 0 else "",
                str(group.get("group")),
                counts,
                str(group.get("down")),
                str(group.get("reason", "")),
            )
    unsafe = sum(1 for e in host_groups if not e.get("safe"))
    total = len(host_groups)
    summary = f"{total} host group{'' if total == 1 else 's'}: " + (
        "all safe to take down now" if not unsafe else f"{unsafe} would break an SLA"
    )
    return Group(table, Text(summary, style="dim"))
