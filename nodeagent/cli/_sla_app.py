"""``nodeagent master sla …`` as a typer application (see :mod:`nodeagent.cli._sla`)."""

from __future__ import annotations

from typing import Annotated

import typer

from nodeagent.cli import _sla
from nodeagent.cli._common import finish
from nodeagent.cli._options import JsonOption, MasterHost, MasterSocket, MasterToken

__all__ = ["sla_app"]

sla_app = typer.Typer(
    name="sla",
    help="Job groups' SLAs: may these hosts go now?",
    no_args_is_help=True,
)


@sla_app.command("probe")
def probe(
    *,
    hosts: Annotated[
        list[str] | None,
        typer.Argument(metavar="HOST...", show_default=False, help="The nodes, by name."),
    ] = None,
    constraint: Annotated[
        str | None,
        typer.Option(
            metavar="EXPR", show_default=False, help="Instead of HOST...: the nodes it matches."
        ),
    ] = None,
    grouping: Annotated[
        str | None,
        typer.Option(
            metavar="ATTR",
            show_default=False,
            help="host, or an ad attribute (Rack, Zone); default: all the hosts at once.",
        ),
    ] = None,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """Whether taking the hosts down now keeps every job group's SLA (GET /v1/sla/probe):
    per host group, the groups it would break and why, and the wait time to SLA."""
    finish(
        lambda: _sla.probe(
            hosts=hosts,
            constraint=constraint,
            grouping=grouping,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )
