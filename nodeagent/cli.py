"""The ``nodeagent`` command line.

Imports stay lazy: the hot paths (``status``, ``ad``) must not import the server stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nodeagent import __version__

__all__ = ["app", "main"]

app = typer.Typer(
    name="nodeagent",
    help="Drain a node, plan cluster maintenance, defragment a pool.",
    no_args_is_help=True,
)


@app.callback()
def _root() -> None:
    """Drain a node, plan cluster maintenance, defragment a pool."""


@app.command()
def version() -> None:
    """Print the version and exit."""
    typer.echo(__version__)


@app.command()
def run(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="TOML configuration (default /etc/nodeagent/nodeagent.toml when it exists)",
            envvar="NODEAGENT_CONFIG",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error")] = "info",
) -> None:
    """Run the node agent daemon in the foreground."""
    import logging  # noqa: PLC0415

    from nodeagent._config import ConfigError  # noqa: PLC0415
    from nodeagent._daemon import run_agent  # noqa: PLC0415

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        status = run_agent(config)
    except ConfigError as exc:
        typer.echo(f"nodeagent: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(status)


def main() -> None:
    """Entry point of the console script."""
    app()
