"""``nodeagent master …``: run the master and talk to it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["master_app"]

master_app = typer.Typer(
    name="master",
    help="The cluster master: node ads, the maintenance schedule, the plan.",
    no_args_is_help=True,
)


@master_app.callback()
def _group() -> None:
    """The cluster master: node ads, the maintenance schedule, the plan."""


@master_app.command("run")
def run(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="TOML configuration (default /etc/nodeagent/master.toml when it exists)",
            envvar="NODEAGENT_MASTER_CONFIG",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error")] = "info",
) -> None:
    """Run the master daemon in the foreground."""
    import logging  # noqa: PLC0415

    from nodeagent._config import ConfigError  # noqa: PLC0415
    from nodeagent._master_daemon import run_master  # noqa: PLC0415

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        status = run_master(config)
    except ConfigError as exc:
        typer.echo(f"nodeagent: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(status)


if __name__ == "__main__":
    master_app()
