"""What ``nodeagent defrag status`` does: read the defrag daemon's statistics.

Typer-free and without the daemon's configuration model: without ``--host`` or
``--socket``, the daemon's socket is found from its configuration file and environment
with the standard library (:func:`nodeagent.cli._locate.defrag_socket`).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from nodeagent.cli._errors import Unreachable, UsageError
from nodeagent.cli._http import request, resolve_target
from nodeagent.cli._locate import defrag_socket

__all__ = ["DEFAULT_PORT", "status", "with_default_port"]

DEFAULT_PORT = 9623
"""The defrag daemon's default TCP port (``listen = ["127.0.0.1:9623"]``)."""


def with_default_port(host: str) -> str:
    """``host`` with the defrag daemon's port when it names none (``h`` → ``h:9623``)."""
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


def status(
    *,
    config: Path | None,
    host: str | None,
    token: str | None,
    socket_path: str | None,
    json_output: bool,
    long: bool,
) -> None:
    """``nodeagent defrag status``: ``GET /v1/stats`` as a summary, ``long`` the Defrag
    ad in ClassAd long form, ``json_output`` its JSON; both together are ``cli.usage``.

    An unreachable daemon is ``defrag.unreachable`` (or ``defrag.timeout``)."""
    if json_output and long:
        raise UsageError("cli.usage", "choose one of --long and --json")
    if host is None and socket_path is None:
        socket_path = str(defrag_socket(config, os.environ, os.geteuid()))
    target = resolve_target(
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
    if long:
        sys.stdout.write(reply.text)
    elif json_output:
        import json  # noqa: PLC0415

        sys.stdout.write(json.dumps(reply.data, separators=(",", ":")) + "\n")
    else:
        from nodeagent.cli._render import render_stats  # noqa: PLC0415

        sys.stdout.write(render_stats(reply.data, now=time.time()) + "\n")
