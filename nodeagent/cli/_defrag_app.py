"""``nodeagent defrag …`` as a typer application: ``defrag run`` and ``defrag status``.

``status`` declares its options here and calls :func:`nodeagent.cli._defrag.status`
(which the entry point also calls without typer).
"""

from __future__ import annotations

from typing import Annotated

import typer

from nodeagent.cli import _defrag
from nodeagent.cli._common import finish, run_daemon
from nodeagent.cli._options import (
    DefragConfig,
    DefragHost,
    DefragSocket,
    DefragToken,
    LogLevel,
)

__all__ = ["defrag_app"]

defrag_app = typer.Typer(
    name="defrag",
    help="The defrag daemon: drain fragmented machines so whole machines become free.",
    no_args_is_help=True,
)


@defrag_app.callback()
def _group() -> None:
    """The defrag daemon: drain fragmented machines so whole machines become free."""


@defrag_app.command("run")
def run(config: DefragConfig = None, log_level: LogLevel = "info") -> None:
    """Run the defrag daemon in the foreground."""
    from nodeagent.defrag._daemon import run_defrag  # noqa: PLC0415

    run_daemon(run_defrag, config, log_level)


@defrag_app.command("status")
def status(
    *,
    config: DefragConfig = None,
    host: DefragHost = None,
    token: DefragToken = None,
    socket_path: DefragSocket = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print exactly the API's JSON.")
    ] = False,
    long: Annotated[
        bool, typer.Option("--long", "-l", help="Print the Defrag ad in ClassAd long form.")
    ] = False,
) -> None:
    """Show the defrag daemon's statistics (GET /v1/stats)."""
    # json_output=False: an error body is not printed (--json re-encodes the reply).
    finish(
        lambda: _defrag.status(
            config=config,
            host=host,
            token=token,
            socket_path=socket_path,
            json_output=json_output,
            long=long,
        ),
        json_output=False,
    )
