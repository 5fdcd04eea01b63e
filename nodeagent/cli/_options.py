"""The options the command groups share, written once as ``Annotated`` aliases.

Each daemon is reached the same way (``--host``, ``--token``, ``--socket``, with its own
variables, port and socket) and run the same way (``--config``, ``--log-level``); every
client command prints the API's JSON with ``--json``. The typer applications
(:mod:`nodeagent.cli._app`, ``_agent_app``, ``_token_app``, ``_master_app``,
``_defrag_app``) take them from here; the entry point's parser (:mod:`nodeagent.cli._fast`)
reads the same names, and a test keeps the two in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from nodeagent._paths import (
    DEFAULT_AGENT_CONFIG_PATH,
    DEFAULT_DEFRAG_CONFIG_PATH,
    DEFAULT_MASTER_CONFIG_PATH,
)

__all__ = [
    "AgentConfig",
    "AgentHost",
    "AgentSocket",
    "AgentToken",
    "DefragConfig",
    "DefragHost",
    "DefragSocket",
    "DefragToken",
    "DurationOption",
    "JsonOption",
    "LogLevel",
    "MasterConfig",
    "MasterHost",
    "MasterSocket",
    "MasterToken",
]


def _host(peer: str, port: int, variable: str, default: str) -> Any:
    return typer.Option(
        "--host",
        metavar="URL",
        show_default=False,
        help=f"A remote {peer}: http://HOST:PORT or https://HOST:PORT (port {port} by "
        f"default); needs --token. Env: {variable}. Default: {default}.",
    )


def _token(variable: str) -> Any:
    return typer.Option(
        "--token",
        metavar="FILE",
        show_default=False,
        help=f"File holding the bearer token for --host. Env: {variable}.",
    )


def _socket(peer: str, variable: str, default: str) -> Any:
    return typer.Option(
        "--socket",
        metavar="PATH",
        show_default=False,
        help=f"The {peer}'s Unix socket. Env: {variable}. Default: {default}.",
    )


def _config(default: Path, variable: str) -> Any:
    return typer.Option(
        "--config",
        "-c",
        help=f"TOML configuration (default {default} when it exists)",
        envvar=variable,
    )


JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print exactly the API's JSON, one document per line."),
]
"""``--json``: the reply as the daemon sent it."""

DurationOption = Annotated[str | None, typer.Option(metavar="DURATION", show_default=False)]
"""A duration (``90s``, ``15m``, ``2h``), parsed by the command."""

LogLevel = Annotated[str, typer.Option(help="debug, info, warning or error")]
"""A daemon's ``--log-level``."""

AgentHost = Annotated[str | None, _host("agent", 9621, "NODEAGENT_HOST", "the local Unix socket")]
AgentToken = Annotated[str | None, _token("NODEAGENT_TOKEN_FILE")]
AgentSocket = Annotated[
    str | None,
    _socket("agent", "NODEAGENT_SOCKET", "the daemon's (<runtime_dir>/nodeagent.sock)"),
]
AgentConfig = Annotated[Path | None, _config(DEFAULT_AGENT_CONFIG_PATH, "NODEAGENT_CONFIG")]

MasterHost = Annotated[
    str | None,
    typer.Option(
        "--host",
        metavar="URL[,URL…]",
        show_default=False,
        help="A remote master: http://HOST:PORT or https://HOST:PORT (port 9622 by default); "
        "needs --token. With several masters, list them all, separated by commas: the "
        "command goes to the first and follows a redirect to the leader only to one of "
        "them. Env: NODEAGENT_MASTER_HOST. Default: the master's Unix socket.",
    ),
]
MasterToken = Annotated[str | None, _token("NODEAGENT_MASTER_TOKEN_FILE")]
MasterSocket = Annotated[
    str | None,
    _socket("master", "NODEAGENT_MASTER_SOCKET", "the master's (<runtime_dir>/master.sock)"),
]
MasterConfig = Annotated[
    Path | None, _config(DEFAULT_MASTER_CONFIG_PATH, "NODEAGENT_MASTER_CONFIG")
]

DefragHost = Annotated[
    str | None,
    typer.Option(
        "--host",
        help="The daemon's TCP address (http://HOST[:PORT], port 9623 by default); "
        "default: its Unix socket",
        envvar="NODEAGENT_DEFRAG_HOST",
    ),
]
DefragToken = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="File holding a READ token (with --host)",
        envvar="NODEAGENT_DEFRAG_TOKEN_FILE",
    ),
]
DefragSocket = Annotated[
    str | None,
    typer.Option("--socket", help="The daemon's Unix socket (default from the config)"),
]
DefragConfig = Annotated[
    Path | None, _config(DEFAULT_DEFRAG_CONFIG_PATH, "NODEAGENT_DEFRAG_CONFIG")
]
