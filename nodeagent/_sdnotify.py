"""The systemd notification protocol (``sd_notify(3)``), without libsystemd.

A service of ``Type=notify`` tells the service manager how it is doing by sending
newline-separated ``KEY=value`` assignments in one datagram to the Unix socket named by
``$NOTIFY_SOCKET`` (a path, or an abstract address written with a leading ``@``).

Every function takes an optional ``env`` mapping (default :data:`os.environ`) so that tests
and embedders can point it elsewhere. A message is sent without blocking: when the manager
does not read its queue, the message is dropped and logged rather than stalling the daemon.

The daemon's lifecycle: :func:`ready` once it serves, :func:`reloading` when a reload
starts and :func:`ready` again when it ends, :func:`stopping` when shutdown begins, and
:func:`run_watchdog` in the root nursery when the unit sets ``WatchdogSec``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "notify",
    "ready",
    "reloading",
    "run_watchdog",
    "status",
    "stopping",
    "watchdog",
    "watchdog_interval",
]

_log = logging.getLogger(__name__)


def _address(raw: str) -> str | None:
    if raw.startswith("/"):
        return raw
    if raw.startswith("@") and len(raw) > 1:
        return "\0" + raw[1:]
    return None


def notify(state: str, *, env: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (e.g. ``"READY=1"``) to the service manager.

    Returns True when the datagram was sent; False when ``$NOTIFY_SOCKET`` is unset or empty
    (not running under a notify-aware manager), names an unsupported address kind, or the
    send failed (logged as a warning; a full queue counts as a failure). Raises ValueError
    for an empty ``state``.
    """
    if not state:
        raise ValueError("an sd_notify message cannot be empty")
    raw = (os.environ if env is None else env).get("NOTIFY_SOCKET", "")
    if not raw:
        return False
    address = _address(raw)
    if address is None:
        _log.warning("NOTIFY_SOCKET=%r is not a Unix socket address; not notifying", raw)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode("utf-8"), socket.MSG_DONTWAIT, address)
    except OSError as exc:
        _log.warning("sd_notify to %r failed: %s", raw, exc)
        return False
    return True


def ready(*, env: Mapping[str, str] | None = None) -> bool:
    """``READY=1``: start-up (or a reload) is complete and the service serves."""
    return notify("READY=1", env=env)


def stopping(*, env: Mapping[str, str] | None = None) -> bool:
    """``STOPPING=1``: shutdown has begun."""
    return notify("STOPPING=1", env=env)


def reloading(*, env: Mapping[str, str] | None = None) -> bool:
    """``RELOADING=1`` with ``MONOTONIC_USEC`` (as ``Type=notify-reload`` requires).

    Send :func:`ready` when the reload is done.
    """
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify(f"RELOADING=1\nMONOTONIC_USEC={usec}", env=env)


def watchdog(*, env: Mapping[str, str] | None = None) -> bool:
    """``WATCHDOG=1``: the keep-alive ping."""
    return notify("WATCHDOG=1", env=env)


def status(text: str, *, env: Mapping[str, str] | None = None) -> bool:
    """``STATUS=<text>``: a one-line status shown by ``systemctl status``.

    Raises ValueError if ``text`` contains a newline.
    """
    if "\n" in text:
        raise ValueError("an sd_notify status must be a single line")
    return notify(f"STATUS={text}", env=env)


def watchdog_interval(*, env: Mapping[str, str] | None = None) -> float | None:
    """The watchdog timeout in seconds, or None when this process has no watchdog.

    From ``$WATCHDOG_USEC`` (a positive integer); ``$WATCHDOG_PID``, when set, must be this
    process's pid. Malformed values mean no watchdog.
    """
    env = os.environ if env is None else env
    raw_usec = env.get("WATCHDOG_USEC", "")
    raw_pid = env.get("WATCHDOG_PID", "")
    try:
        usec = int(raw_usec)
        if raw_pid and int(raw_pid) != os.getpid():
            return None
    except ValueError:
        return None
    if usec <= 0:
        return None
    return usec / 1_000_000


async def run_watchdog(
    *,
    env: Mapping[str, str] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Ping the watchdog at once and then every half :func:`watchdog_interval`, forever.

    Reports started immediately. Returns at once when there is no watchdog. The schedule
    is kept on absolute deadlines, so pings do not drift; a failed ping is logged and the
    next one is tried on schedule.
    """
    interval = watchdog_interval(env=env)
    task_status.started()
    if interval is None:
        return
    period = interval / 2
    deadline = trio.current_time()
    while True:
        watchdog(env=env)
        deadline += period
        await trio.sleep_until(deadline)
