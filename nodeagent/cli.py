"""The ``nodeagent`` command line.

Imports stay lazy: the hot paths (``status``, ``ad``) must not import the server stack.
"""

from __future__ import annotations

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


def main() -> None:
    """Entry point of the console script."""
    app()
