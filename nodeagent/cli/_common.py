"""What every ``nodeagent`` command shares: printing a reply, reporting an outcome, how a
daemon is reached, the console, the watch loop, running a daemon.

Standard library only at import (typer inside :func:`run_daemon`, which only the typer
application calls): the entry point's typer-free path imports it.
"""

from __future__ import annotations

import os
import sys
import time

from nodeagent._durations import parse_duration
from nodeagent.cli._errors import AgentError, CliError, Declined, Interrupted, UsageError

TYPE_CHECKING = False  # not typing's: the plain commands import neither typing nor rich
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from rich.console import RenderableType

    from nodeagent.cli._draw import Screen
    from nodeagent.cli._http import Reply, Target

__all__ = [
    "agent_target",
    "confirm",
    "console",
    "duration",
    "emit_json",
    "emit_text",
    "master_target",
    "outcome",
    "run_daemon",
    "version",
    "watch_loop",
]


def emit_text(text: str) -> None:
    """Print one JSON document (or any text) on stdout, ending in one newline, flushed."""
    sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


def emit_json(reply: Reply) -> None:
    """Print a reply's JSON exactly as the server sent it."""
    emit_text(reply.text)


def confirm(question: str, *, yes: bool, what: str) -> None:
    """Go on only if the operator agrees: with ``yes``, at once; else ``question`` is
    asked on stderr and answered on the terminal (``y`` or ``yes``). Raises
    :class:`~nodeagent.cli._errors.Declined` (exit 6) otherwise, saying ``what`` was not
    done: ``cli.declined`` for another answer or end of input, ``cli.no_terminal`` when
    stdin is not a terminal (a script must say ``--yes``: a cluster-wide change is never
    confirmed by whatever a pipe happens to hold)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise Declined(
            "cli.no_terminal", f"{what}: no terminal to ask on; --yes confirms (nothing changed)"
        )
    sys.stderr.write(question)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        sys.stderr.write("\n")
    if line.strip().lower() not in ("y", "yes"):
        raise Declined("cli.declined", f"{what}: not confirmed (nothing changed)")


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


def agent_target(host: str | None, token: str | None, socket_path: str | None) -> Target:
    """The agent a command talks to: ``--host``, ``--token`` and ``--socket`` (or their
    ``NODEAGENT_*`` variables; by default the local Unix socket), as
    :func:`~nodeagent.cli._http.resolve_target` resolves them."""
    from nodeagent.cli._http import resolve_target  # noqa: PLC0415

    return resolve_target(
        host=host, token_file=token, socket_path=socket_path, env=os.environ, uid=os.geteuid()
    )


def master_target(host: str | None, token: str | None, socket_path: str | None) -> Target:
    """The master a ``nodeagent master …`` command talks to, as :func:`agent_target` (the
    ``NODEAGENT_MASTER_*`` variables, the master's socket:
    :func:`~nodeagent.cli._http.resolve_master_target`)."""
    from nodeagent.cli._http import resolve_master_target  # noqa: PLC0415

    return resolve_master_target(
        host=host, token_file=token, socket_path=socket_path, env=os.environ, uid=os.geteuid()
    )


def console(*, err: bool = False) -> Screen:
    """Where a human view is printed, on stdout (``err``: stderr): a
    :class:`~nodeagent.cli._draw.Screen`, which draws the view without rich off a terminal
    and otherwise prints it on the console :func:`~nodeagent.cli._render.make_console`
    makes (its ``console``, which a live view or a progress bar takes; importing rich)."""
    from nodeagent.cli._draw import Screen  # noqa: PLC0415

    return Screen(sys.stderr if err else sys.stdout)


def watch_loop(
    fetch: Callable[[], Reply],
    view: Callable[[Any, Screen], RenderableType],
    *,
    json_output: bool,
    interval: float,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Show ``fetch()``'s reply, then again every ``interval`` seconds until Ctrl-C (which
    ends it, 0): with ``json_output`` each reply's JSON on a line of its own; else
    ``view(data, console)``, redrawn in place on a terminal, printed again (then a blank
    line) elsewhere.

    The first fetch's error ends the command; a later one is shown (``code: message
    (retrying)``: on stderr, or in place of the view on a terminal) and the next fetch
    comes ``interval`` later.
    """
    first = fetch()
    try:
        if json_output:
            emit_json(first)
            while True:
                sleep(interval)
                try:
                    emit_json(fetch())
                except CliError as exc:
                    sys.stderr.write(f"{exc.code}: {exc.message} (retrying)\n")
        out = console()
        if not out.is_terminal:
            while True:
                out.print(view(first.data, out))
                out.print()
                sleep(interval)
                try:
                    first = fetch()
                except CliError as exc:
                    sys.stderr.write(f"{exc.code}: {exc.message} (retrying)\n")
        from rich.live import Live  # noqa: PLC0415
        from rich.text import Text  # noqa: PLC0415

        with Live(view(first.data, out), console=out.console, auto_refresh=False) as live:
            while True:
                sleep(interval)
                try:
                    live.update(view(fetch().data, out), refresh=True)
                except CliError as exc:
                    live.update(Text(f"{exc.code}: {exc.message} (retrying)", "red"), refresh=True)
    except KeyboardInterrupt:
        return


def run_daemon(run: Callable[[Path | None], int], config: Path | None, log_level: str) -> None:
    """Run a daemon in the foreground, its log lines escaped one record per line
    (:class:`~nodeagent._logsafe.SafeFormatter`).

    A daemon that cannot start (or stops on an unusable configuration or state) prints one
    line, ``nodeagent: <what, where, what to do>``, on stderr, sends it as the service
    manager's ``STATUS=``, and exits with the status of
    :func:`~nodeagent._lifecycle.start_failure`: 2 configuration, 7 state, 8 state lost
    after a previous life, 9 an address. Any other error is a bug and shows its traceback.
    """
    import logging  # noqa: PLC0415

    import typer  # noqa: PLC0415

    from nodeagent import _logsafe, _sdnotify  # noqa: PLC0415
    from nodeagent._lifecycle import start_failure  # noqa: PLC0415

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # httpx logs every request at INFO: a daemon's calls (ad pushes, etcd's keep-alives
    # every few seconds) would fill its log. Their failures are logged by the daemon.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    _logsafe.install()
    try:
        status = run(config)
    except Exception as exc:
        failure = start_failure(exc)
        if failure is None:
            raise
        status, line = failure
        line = _logsafe.escape_controls(line)
        _sdnotify.status(f"failed: {line}")
        typer.echo(f"nodeagent: {line}", err=True)
        raise typer.Exit(status) from None
    raise typer.Exit(status)
