"""``nodeagent master …`` as a typer application: run the master and talk to it.

Each client command declares its options here and calls its function in
:mod:`nodeagent.cli._master` (which the entry point also calls without typer); errors
print ``code: message`` to stderr and end with the exit statuses of ``docs/cli.md``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from nodeagent.cli import _master
from nodeagent.cli._common import finish, run_daemon
from nodeagent.cli._maintain_app import maintain_app
from nodeagent.cli._options import (
    JsonOption,
    LogLevel,
    MasterConfig,
    MasterHost,
    MasterSocket,
    MasterToken,
)
from nodeagent.cli._sla_app import sla_app

__all__ = ["master_app"]

master_app = typer.Typer(
    name="master",
    help="The cluster master: node ads, the maintenance schedule, the plan.",
    no_args_is_help=True,
)
schedule_app = typer.Typer(
    name="schedule",
    help="The Mesos maintenance schedule: get, set, clear.",
    no_args_is_help=True,
)
master_app.add_typer(schedule_app)
master_app.add_typer(maintain_app)
master_app.add_typer(sla_app)


@master_app.callback()
def _group() -> None:
    """The cluster master: node ads, the maintenance schedule, the plan."""


@master_app.command("run")
def run(config: MasterConfig = None, log_level: LogLevel = "info") -> None:
    """Run the master daemon in the foreground."""
    from nodeagent.master._daemon import run_master  # noqa: PLC0415

    run_daemon(run_master, config, log_level)


@master_app.command()
def status(
    *,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """The machines in maintenance and their modes (GET /maintenance/status)."""
    finish(
        lambda: _master.status(
            json_output=json_output, host=host, token=token, socket_path=socket_path
        ),
        json_output=json_output,
    )


@schedule_app.command("get")
def schedule_get(
    *,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """The maintenance schedule: one row per window (GET /maintenance/schedule)."""
    finish(
        lambda: _master.schedule_get(
            json_output=json_output, host=host, token=token, socket_path=socket_path
        ),
        json_output=json_output,
    )


@schedule_app.command("set")
def schedule_set(
    *,
    file: Annotated[
        str,
        typer.Argument(metavar="FILE", help="The schedule in Mesos JSON; - reads stdin."),
    ],
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """Replace the schedule (POST /maintenance/schedule, Mesos rules).

    New machines become DRAINING, machines left out go back UP; a DOWN machine cannot be
    left out. An invalid schedule exits 1 with Mesos's message and changes nothing.
    """
    finish(
        lambda: _master.schedule_set(
            file=file, json_output=json_output, host=host, token=token, socket_path=socket_path
        ),
        json_output=json_output,
    )


@schedule_app.command("clear")
def schedule_clear(
    *,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """Empty the schedule (POST {}): every DRAINING machine goes back UP.

    Refused (exit 1) while a machine is DOWN: bring it up first.
    """
    finish(
        lambda: _master.schedule_clear(
            json_output=json_output, host=host, token=token, socket_path=socket_path
        ),
        json_output=json_output,
    )


Machines = Annotated[
    list[str],
    typer.Argument(
        metavar="HOST...",
        show_default=False,
        help="HOST, HOST/IP or IP; a bare HOST or IP is completed from the schedule.",
    ),
]


@master_app.command()
def down(
    *,
    machines: Machines,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """DRAINING machines go DOWN, all or none (POST /machine/down).

    Their nodes stay closed and whatever still runs is fast-drained.
    """
    finish(
        lambda: _master.down(
            machines=machines,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@master_app.command()
def up(
    *,
    machines: Machines,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """DOWN machines go UP and leave the schedule, all or none (POST /machine/up).

    Their nodes' drains are cancelled and they accept jobs again.
    """
    finish(
        lambda: _master.up(
            machines=machines,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@master_app.command()
def ads(
    *,
    constraint: Annotated[
        str | None,
        typer.Option(metavar="EXPR", show_default=False, help="A ClassAd expression to match."),
    ] = None,
    projection: Annotated[
        str | None,
        typer.Option(metavar="A,B,...", show_default=False, help="Only these attributes."),
    ] = None,
    slots: Annotated[
        bool, typer.Option("--slots", help="Slot ads instead of machine ads.")
    ] = False,
    long: Annotated[
        bool, typer.Option("--long", "-l", help="ClassAd long format, like condor_status -l.")
    ] = False,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """The nodes' ads as the master holds them (GET /v1/ads): a table, -l, or --json."""
    finish(
        lambda: _master.ads(
            constraint=constraint,
            projection=projection,
            slots=slots,
            long=long,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )


@master_app.command()
def plan(
    *,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C.")] = False,
    interval: Annotated[
        str, typer.Option(metavar="DURATION", help="Time between refreshes with --watch.")
    ] = "2s",
    all_rows: Annotated[
        bool, typer.Option("--all", help="Every machine's row: the whole timeline.")
    ] = False,
    limit: Annotated[
        int, typer.Option(min=0, help="Late machines the summary lists (without --all).")
    ] = 20,
    json_output: JsonOption = False,
    host: MasterHost = None,
    token: MasterToken = None,
    socket_path: MasterSocket = None,
) -> None:
    """The maintenance plan: a summary, or with --all every row as a timeline.

    The summary: counts per mode and verdict, the escalations coming (in the next hour)
    and what they cut, then the machines late by their promises or to be escalated, in
    window order (at most --limit), each with its two verdicts and the cost. With --all,
    one row per machine: when its drain starts, when it will be empty, its window; on
    time, late, empty or DOWN. --json prints what GET /v1/maintenance/plan answered. With
    --watch, one refresh per --interval until Ctrl-C.
    """
    finish(
        lambda: _master.plan(
            watch=watch,
            interval=interval,
            all_rows=all_rows,
            limit=limit,
            json_output=json_output,
            host=host,
            token=token,
            socket_path=socket_path,
        ),
        json_output=json_output,
    )
