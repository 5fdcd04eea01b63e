"""Serving an ASGI app on hypercorn's trio worker, shared by every daemon."""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import trio

from nodeagent._settings import READ_TIMEOUT

if TYPE_CHECKING:
    from hypercorn.typing import ASGIFramework

__all__ = ["SHUTDOWN_GRACE", "advertised_url", "free_stale_socket", "serve", "write_runtime_info"]

#: How long in-flight requests get to finish when a daemon stops.
SHUTDOWN_GRACE = 5.0


def free_stale_socket(path: Path) -> None:
    """Remove a socket file left by a previous run; refuse if a daemon still answers."""
    if not path.exists():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()
        return
    finally:
        probe.close()
    raise RuntimeError(f"another daemon is listening on {path}")


async def serve(
    nursery: trio.Nursery,
    app: Any,
    binds: list[str],
    *,
    shutdown: Callable[[], Awaitable[None]],
    unix: bool = False,
    tls: tuple[Path, Path] | None = None,
    read_timeout: float = READ_TIMEOUT,
) -> list[str]:
    """Start serving ``app`` on ``binds`` in ``nursery``; returns the bound URLs.

    A Unix socket gets mode 0660 (whoever may open it is ADMINISTRATOR). ``tls`` is
    (certificate, key) for TCP listeners. A connection whose client sends nothing for
    ``read_timeout`` seconds while the server waits for it (a request's head or body) is
    closed (hypercorn's ``read_timeout``; an idle kept-alive one after 5 s). No binds
    (``listen = []``): nothing is started and the list is empty (trio's
    ``serve_listeners`` refuses an empty list of listeners).
    Serving ends ``SHUTDOWN_GRACE`` at most after ``shutdown`` returns, once the requests
    in flight are answered.
    """
    if not binds:
        return []
    import hypercorn.trio  # noqa: PLC0415  (server stack: daemons only)
    from hypercorn.config import Config  # noqa: PLC0415

    config = Config()
    config.bind = binds
    config.accesslog = None
    config.errorlog = logging.getLogger("nodeagent.http")
    config.graceful_timeout = SHUTDOWN_GRACE
    config.include_server_header = False
    config.read_timeout = read_timeout  # type: ignore[assignment]  # seconds; a float works
    if unix:
        config.umask = 0o117
    elif tls is not None:
        config.certfile, config.keyfile = str(tls[0]), str(tls[1])
    umask = os.umask(0o077)
    os.umask(umask)
    try:
        urls: list[str] = await nursery.start(
            functools.partial(
                hypercorn.trio.serve,
                cast("ASGIFramework", app),
                config,
                shutdown_trigger=shutdown,
            )
        )
    finally:  # hypercorn leaves its umask set when a Unix socket cannot be bound
        os.umask(umask)
    return urls


def advertised_url(tcp_urls: list[str], ip: str) -> str | None:
    """The first TCP URL, with a wildcard host replaced by ``ip``."""
    if not tcp_urls:
        return None
    scheme, _, hostport = tcp_urls[0].partition("://")
    host, _, port = hostport.rpartition(":")
    if host in ("0.0.0.0", "[::]"):
        host = ip if ":" not in ip else f"[{ip}]"
    return f"{scheme}://{host}:{port}"


def write_runtime_info(path: Path, urls: list[str], **extra: Any) -> None:
    """Write ``{"pid", "urls", ...}`` atomically: how tools find a running daemon."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "urls": urls, **extra}))
    tmp.replace(path)
