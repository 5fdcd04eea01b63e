"""What every ``nodeagent`` command group shares: running a daemon, reporting an outcome.

Light on purpose (the standard library; typer only where it is needed): the hot path
imports it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from nodeagent.cli._http import AgentError, CliError, Interrupted, Reply

__all__ = ["emit_json", "emit_text", "finish", "outcome", "run_daemon"]


def emit_text(text: str) -> None:
    """Print one JSON document (or any text) on stdout, ending in one newline, flushed."""
    sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


def emit_json(reply: Reply) -> None:
    """Print a reply's JSON exactly as the server sent it."""
    emit_text(reply.text)


def outcome(action: Callable[[], None], *, json_output: bool) -> int:
    """Run a client command; map its error to ``code: message`` on stderr and an exit status.

    With ``--json``, an error the server sent is also printed to stdout, exactly.
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
    """:func:`outcome`, raising ``typer.Exit`` with a failure's status."""
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
