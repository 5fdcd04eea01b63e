"""What every ``nodeagent`` command shares: printing a reply, reporting an outcome,
running a daemon.

Standard library only at import (typer inside the two helpers that only the typer
application calls): the entry point's typer-free path imports it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nodeagent._durations import parse_duration
from nodeagent.cli._errors import AgentError, CliError, Interrupted, UsageError

if TYPE_CHECKING:
    from nodeagent.cli._http import Reply

__all__ = [
    "duration",
    "emit_json",
    "emit_text",
    "finish",
    "outcome",
    "run_daemon",
    "version",
]


def emit_text(text: str) -> None:
    """Print one JSON document (or any text) on stdout, ending in one newline, flushed."""
    sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


def emit_json(reply: Reply) -> None:
    """Print a reply's JSON exactly as the server sent it."""
    emit_text(reply.text)


def duration(option: str, value: str | None, *, whole: bool = False) -> float | None:
    """``value`` of ``option`` in seconds (``None`` stays ``None``); a bad one is
    ``cli.bad_duration``, as is a fraction where ``whole`` seconds are asked for."""
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise UsageError("cli.bad_duration", f"{option}: {exc}") from None
    if whole and seconds != int(seconds):
        raise UsageError("cli.bad_duration", f"{option}: {value!r} is not whole seconds")
    return seconds


def version() -> None:
    """``nodeagent version``: print the version."""
    from nodeagent import __version__  # noqa: PLC0415

    sys.stdout.write(__version__ + "\n")


def outcome(action: Callable[[], None], *, json_output: bool) -> int:
    """Run a client command; map its error to ``code: message`` on stderr and an exit status.

    With ``json_output``, an error body the server sent is also printed to stdout, exactly.
    """
    try:
        action()
    except CliError as exc:
        if json_output and isinstance(exc, AgentError) and exc.reply.data is not None:
            emit_json(exc.reply)
        sys.stdout.flush()
        sys.stderr.write(f"{exc.code}: {exc.message}\n")
        return exc.exit_status
    except KeyboardInterrupt:
        sys.stderr.write("\ncli.interrupted: interrupted\n")
        return Interrupted.exit_status
    return 0


def finish(action: Callable[[], None], *, json_output: bool) -> None:
    """:func:`outcome`, raising ``typer.Exit`` with a failure's status (the typer path)."""
    import typer  # noqa: PLC0415

    status = outcome(action, json_output=json_output)
    if status:
        raise typer.Exit(status)


def run_daemon(run: Callable[[Path | None], int], config: Path | None, log_level: str) -> None:
    """Run a daemon in the foreground; a configuration it cannot use exits with status 2."""
    import logging  # noqa: PLC0415

    import typer  # noqa: PLC0415

    from nodeagent._auth import KeyFileError  # noqa: PLC0415
    from nodeagent._settings import ConfigError  # noqa: PLC0415

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        status = run(config)
    except (ConfigError, KeyFileError) as exc:
        typer.echo(f"nodeagent: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(status)
