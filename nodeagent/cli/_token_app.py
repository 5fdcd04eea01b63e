"""``nodeagent token …`` as a typer application: ``token create``.

The command declares its options here and calls :func:`nodeagent.cli._token.create`
(which the entry point also calls without typer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from nodeagent.cli import _token
from nodeagent.cli._common import finish

__all__ = ["token_app"]

token_app = typer.Typer(
    name="token", help="Bearer tokens for the agents' TCP listeners.", no_args_is_help=True
)


@token_app.command("create")
def create(
    *,
    scope: Annotated[
        Literal["READ", "ADMINISTRATOR", "DAEMON"],
        typer.Option(case_sensitive=False, help="What the token allows."),
    ],
    subject: Annotated[str, typer.Option(help="Who holds it (the audit log's subject).")],
    lifetime: Annotated[
        str, typer.Option(metavar="DURATION", help="How long it is valid: 90s, 15m, 2h, 30d.")
    ],
    key_file: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            show_default=False,
            help="The pool key. Default: the daemon's key_file (<state_dir>/pool.key).",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            show_default=False,
            help="Write the token here (mode 0600) instead of to stdout.",
        ),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", help="Print {token, subject, scope, expires_at} as one JSON document."
        ),
    ] = False,
    node: Annotated[
        str | None,
        typer.Option(
            metavar="HOST",
            show_default=False,
            help="DAEMON only, and required: the node whose ads the token may push "
            "(the agent's hostname; defrag-<name> for a defrag daemon).",
        ),
    ] = None,
) -> None:
    """Sign a bearer token with the pool key (for --host / --token)."""
    finish(
        lambda: _token.create(
            scope=scope,
            subject=subject,
            lifetime=lifetime,
            key_file=key_file,
            output=output,
            json_output=json_output,
            node=node,
        ),
        json_output=json_output,
    )
