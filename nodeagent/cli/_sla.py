"""What ``nodeagent master sla …`` does: ``probe`` (``GET /v1/sla/probe``) as a table.

As :mod:`nodeagent.cli._master` does for the other master commands: the parsed command
line as keyword arguments, the API's JSON with ``json_output``, else a human view.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from nodeagent.cli._common import console, emit_json, master_target
from nodeagent.cli._errors import UsageError
from nodeagent.cli._http import request

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["probe", "probe_view"]


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
