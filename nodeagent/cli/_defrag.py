"""``nodeagent defrag …``: run the defrag daemon and read its statistics."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from nodeagent.cli._common import run_daemon

__all__ = ["DEFAULT_PORT", "defrag_app", "render_stats", "with_default_port"]

defrag_app = typer.Typer(
    name="defrag",
    help="The defrag daemon: drain fragmented machines so whole machines become free.",
    no_args_is_help=True,
)

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="TOML configuration (default /etc/nodeagent/defrag.toml when it exists)",
        envvar="NODEAGENT_DEFRAG_CONFIG",
    ),
]


@defrag_app.callback()
def _group() -> None:
    """The defrag daemon: drain fragmented machines so whole machines become free."""


@defrag_app.command("run")
def run(
    config: ConfigOption = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error")] = "info",
) -> None:
    """Run the defrag daemon in the foreground."""
    from nodeagent.defrag._daemon import run_defrag  # noqa: PLC0415

    run_daemon(run_defrag, config, log_level)


DEFAULT_PORT = 9623
"""The defrag daemon's default TCP port (``listen = ["127.0.0.1:9623"]``)."""


def with_default_port(host: str) -> str:
    """``host`` with the defrag daemon's port when it names none (``h`` → ``h:9623``)."""
    from urllib.parse import urlsplit  # noqa: PLC0415

    text = host.strip()
    url = text if "://" in text else "http://" + text
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return text  # resolve_target reports it
    if port is not None or not parts.hostname:
        return text
    netloc = parts.netloc + f":{DEFAULT_PORT}"
    return parts._replace(netloc=netloc).geturl()


def _ago(when: Any, now: float) -> str:
    if not isinstance(when, int | float):
        return "never"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    return f"{stamp} ({max(0, round(now - when))} s ago)"


def render_stats(ad: dict[str, Any], *, now: float) -> str:
    """The Defrag ad as a short human summary."""

    def pair(total: str, recent: str) -> str:
        return f"{ad.get(total, 0):<6} last hour {ad.get(recent, 0)}"

    def percent(value: Any) -> str:
        return f"{100 * value:.2f} %" if isinstance(value, int | float) else "-"

    lines = [
        f"{ad.get('Name', 'defrag')}: drains with reason {ad.get('DrainReason', '?')!r}",
        f"  last cycle          {_ago(ad.get('LastPollTime'), now)}",
        f"  machines draining   {ad.get('MachinesDraining', 0):<6} peak "
        f"{ad.get('MachinesDrainingPeak', 0)}",
        f"  whole machines      {ad.get('WholeMachines', 0):<6} peak "
        f"{ad.get('WholeMachinesPeak', 0)}",
        f"  drains started      {pair('DrainSuccesses', 'RecentDrainSuccesses')}",
        f"  drains failed       {pair('DrainFailures', 'RecentDrainFailures')}",
        f"  drains skipped      {pair('DrainSkips', 'RecentDrainSkips')}",
        f"  drains cancelled    {pair('Cancels', 'RecentCancels')}",
        f"  draining badput     {percent(ad.get('AvgDrainingBadput'))} of the pool's core time",
        f"  idle while draining {percent(ad.get('AvgDrainingUnclaimed'))} of the pool's core time",
    ]
    drains = ad.get("RecentDrainsList") or []
    if drains:
        lines.append("recent drains (newest first):")
        for entry in drains:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.get("when", 0)))
            lines.append(
                f"  {stamp}  {entry.get('who', '?')}  {entry.get('what', '')}  "
                f"{entry.get('result', '')}"
            )
    cancels = ad.get("RecentCancelsList") or []
    if cancels:
        lines.append("recent cancels (newest first):")
        for entry in cancels:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.get("when", 0)))
            lines.append(f"  {stamp}  {entry.get('who', '?')}")
    return "\n".join(lines)


@defrag_app.command("status")
def status(
    *,
    config: ConfigOption = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="The daemon's TCP address (http://HOST[:PORT], port 9623 by default); "
            "default: its Unix socket",
            envvar="NODEAGENT_DEFRAG_HOST",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="File holding a READ token (with --host)",
            envvar="NODEAGENT_DEFRAG_TOKEN_FILE",
        ),
    ] = None,
    socket_path: Annotated[
        str | None,
        typer.Option("--socket", help="The daemon's Unix socket (default from the config)"),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print exactly the API's JSON.")
    ] = False,
    long: Annotated[
        bool, typer.Option("--long", "-l", help="Print the Defrag ad in ClassAd long form.")
    ] = False,
) -> None:
    """Show the defrag daemon's statistics (GET /v1/stats)."""
    from nodeagent.cli._http import (  # noqa: PLC0415
        CliError,
        Target,
        Unreachable,
        UsageError,
        request,
        resolve_target,
    )

    try:
        if json_output and long:
            raise UsageError("cli.usage", "choose one of --long and --json")
        if host is None and socket_path is None:
            from nodeagent._settings import ConfigError  # noqa: PLC0415
            from nodeagent.defrag._config import load_defrag_config  # noqa: PLC0415

            try:
                loaded = load_defrag_config(config)
            except ConfigError as exc:
                raise UsageError("cli.config", str(exc)) from None
            socket_path = str(loaded.runtime_dir / "defrag.sock")
        target: Target = resolve_target(
            host=None if host is None else with_default_port(host),
            token_file=token,
            socket_path=socket_path,
            env={},
            uid=os.geteuid(),
        )
        path = "/v1/stats?format=classad" if long else "/v1/stats"
        try:
            reply = request(target, "GET", path)
        except Unreachable as exc:
            raise Unreachable(
                exc.code.replace("agent.", "defrag."),
                exc.message.replace("the agent", "the defrag daemon"),
            ) from None
    except CliError as exc:
        typer.echo(f"{exc.code}: {exc.message}", err=True)
        raise typer.Exit(exc.exit_status) from None
    if long:
        typer.echo(reply.text, nl=False)
    elif json_output:
        typer.echo(json.dumps(reply.data, separators=(",", ":")))
    else:
        typer.echo(render_stats(reply.data, now=time.time()))


if __name__ == "__main__":
    defrag_app()
