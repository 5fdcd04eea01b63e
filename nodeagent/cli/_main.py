"""The console script's entry point, and ``status`` and ``ad`` without typer.

``nodeagent status`` is what an admin runs in a loop, so its plain forms (and ``ad``'s)
are recognised here and run with the standard library's HTTP client, importing neither
typer nor the rest of the command line. Anything else, including every malformed
command line, goes to the typer application in :mod:`nodeagent.cli._app`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nodeagent.cli._common import emit_json, outcome
from nodeagent.cli._http import UsageError, request, resolve_target

__all__ = ["ShowCommand", "fast_parse", "main", "show"]


@dataclass(frozen=True, kw_only=True)
class ShowCommand:
    """A read-only ``status`` or ``ad`` command line (without ``--watch``)."""

    command: Literal["status", "ad"]
    json_output: bool = False
    long: bool = False
    host: str | None = None
    token: str | None = None
    socket_path: str | None = None


_SHOW_FLAGS: Mapping[str, Mapping[str, str]] = {
    "status": {"--json": "json_output"},
    "ad": {"--json": "json_output", "--long": "long", "-l": "long"},
}
_SHOW_VALUES = {"--host": "host", "--token": "token", "--socket": "socket_path"}


def fast_parse(argv: Sequence[str]) -> ShowCommand | None:
    """Recognise a plain ``status`` or ``ad`` command line; ``None`` for anything else.

    Plain means: only the flags and options those commands declare, each at most once,
    values given as ``--opt VALUE`` or ``--opt=VALUE`` and not starting with ``-``.
    Whatever is not plain (``--help``, ``--watch``, a typo, a repeated option) is left to
    typer, which then parses it, or reports the usage error, itself.
    """
    if not argv or argv[0] not in _SHOW_FLAGS:
        return None
    command: Literal["status", "ad"] = "status" if argv[0] == "status" else "ad"
    flags = _SHOW_FLAGS[command]
    fields: dict[str, Any] = {}
    rest = iter(argv[1:])
    for arg in rest:
        name, eq, value = arg.partition("=")
        if name in _SHOW_VALUES:
            if not eq:
                value = next(rest, "")
            key = _SHOW_VALUES[name]
            if not value or value.startswith("-") or key in fields:
                return None
            fields[key] = value
        elif arg in flags and not eq:
            key = flags[arg]
            if key in fields:
                return None
            fields[key] = True
        else:
            return None
    return ShowCommand(command=command, **fields)


def show(cmd: ShowCommand) -> None:
    """Run a ``status`` or ``ad`` command: the JSON, the long ClassAd form or a table."""
    if cmd.json_output and cmd.long:
        raise UsageError("cli.usage", "choose one of --long and --json")
    target = resolve_target(
        host=cmd.host,
        token_file=cmd.token,
        socket_path=cmd.socket_path,
        env=os.environ,
        uid=os.geteuid(),
    )
    if cmd.long:
        reply = request(target, "GET", "/v1/ad?format=classad")
        sys.stdout.write(reply.text if reply.text.endswith("\n") else reply.text + "\n")
        return
    reply = request(target, "GET", "/v1/ad")
    if cmd.json_output:
        emit_json(reply)
        return
    from nodeagent.cli._render import (  # noqa: PLC0415
        make_console,
        render_ad_table,
        render_status,
    )

    if cmd.command == "status":
        render_status(make_console(sys.stdout), reply.data)
    else:
        render_ad_table(make_console(sys.stdout), reply.data)


def main() -> None:
    """Run a plain ``status``/``ad`` here, anything else through typer."""
    fast = None if "_NODEAGENT_COMPLETE" in os.environ else fast_parse(sys.argv[1:])
    if fast is not None:
        sys.exit(outcome(lambda: show(fast), json_output=fast.json_output))
    from nodeagent.cli._app import app  # noqa: PLC0415

    app()
