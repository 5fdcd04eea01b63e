"""``nodeagent master maintain …`` as a typer application (see :mod:`nodeagent.cli._maintain`)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from nodeagent.cli import _maintain
from nodeagent.cli._common import finish
from nodeagent.cli._options import JsonOption, MasterHost, MasterSocket, MasterToken

__all__ = ["maintain_app"]

maintain_app = typer.Typer(
    name="maintain",
    help="Rolling maintenance: drain, hook, health check and back, batch by batch.",
    no_args_is_help=True,
)

Wait = Annotated[bool, typer.Option("--wait", help="Draw a progress bar until the operation ends.")]
OperationId = Annotated[str, typer.Argument(metavar="ID", help="The operation's id.")]


@maintain_app.command("start")
def start(
    *,
    hosts: Annotated[
        str | None,
        typer.Option(metavar="A,B,...", show_default=False, help="The nodes, by name."),
    ] = None,
    constraint: Annotated[
        str | None,
        typer.Option(
            metavar="EXPR", show_default=False, help="Instead of --hosts: the nodes it matches."
        ),
    ] = None,
    grouping: Annotated[
        str, typer.Option(metavar="ATTR", help="host, or an ad attribute: Rack, Zone.")
    ] = "host",
    batches: Annotated[int, typer.Option(min=1, help="Batches in progress at once.")] = 1,
    hook: Annotated[
        str, typer.Option(metavar="NAME", help="The nodes' hook to run once each is drained.")
    ],
    schedule: Annotated[
        Literal["graceful", "quick", "fast"], typer.Option(help="The drains' schedule.")
    ] = "graceful",
    budget: Annotated[
        str | None,
        typer.Option(
            metavar="CPU-S", show_default=False, help="A batch costing more badput waits."
        ),
    ] = None,
    sla_wait: Annotated[
        str,
        typer.Option(metavar="DURATION", help="How long a held batch waits before it is skipped."),
    ] = "1h",
    wait: Wait = False,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """Start a rolling maintenance operation (POST /v1/maintenance/operations).

    The hosts are drained batch by batch (by host, or by the value of --grouping in
    their ads), at most --batches at once, the next batch the one whose nodes empty
    soonest; each node runs --hook once it is empty and comes back once its health
    check passes. With --wait, follow it as `maintain status --wait` does.
    """
    finish(
        lambda: _maintain.start(
            hosts=hosts,
            constraint=constraint,
            grouping=grouping,
            batches=batches,
            hook=hook,
            schedule=schedule,
            budget=budget,
            sla_wait=sla_wait,
            wait=wait,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@maintain_app.command("status")
def status(
    *,
    operation_id: Annotated[
        str | None,
        typer.Argument(metavar="[ID]", show_default=False, help="The operation (the newest)."),
    ] = None,
    wait: Wait = False,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """An operation's batches and nodes, and why each waits; --wait: until it ends.

    --wait exits 0 when every batch is done, else 1 (paused, cancelled, or batches
    skipped or failed). --json prints the API's document.
    """
    finish(
        lambda: _maintain.status(
            operation_id=operation_id,
            wait=wait,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@maintain_app.command("pause")
def pause(
    *,
    operation_id: OperationId,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """Start no further batch (what is under way goes on)."""
    finish(
        lambda: _maintain.pause(
            operation_id=operation_id,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@maintain_app.command("resume")
def resume(
    *,
    operation_id: OperationId,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """Go on with a paused operation."""
    finish(
        lambda: _maintain.resume(
            operation_id=operation_id,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@maintain_app.command("cancel")
def cancel(
    *,
    operation_id: OperationId,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """Stop: batches not started are left as they were, nodes still draining return."""
    finish(
        lambda: _maintain.cancel(
            operation_id=operation_id,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )
