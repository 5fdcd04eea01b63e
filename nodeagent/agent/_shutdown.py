"""The machine's own shutdown: logind's delay inhibitor lock, over the system D-Bus.

At start the agent connects to the system bus (``DBUS_SYSTEM_BUS_ADDRESS``, else
``/run/dbus/system_bus_socket``), subscribes to logind's ``PrepareForShutdown`` and takes
a *delay* inhibitor lock for ``shutdown`` (``org.freedesktop.login1.Manager.Inhibit``):
logind then waits for the agent, up to its ``InhibitDelayMaxUSec``, before it shuts the
machine down. The lock is the file descriptor logind hands out; closing it releases it.
The limit is read once at start and logged as a warning when it is shorter than the
longest vacate time the node may need (``MachineMaxVacateTime``, or a running job's own).

On ``PrepareForShutdown(true)`` (sent by logind itself: signals from any other sender are
ignored) the node closes at once and the shutdown drain starts
(:meth:`~nodeagent.agent._agent.Agent.shutdown`). The lock is released once the node is
empty, or, should the limit come first, the jobs left are hard-killed :data:`MARGIN`
(at most a fifth of the limit) before it runs out and the lock released once they are
gone or when the limit is all but spent. On ``PrepareForShutdown(false)`` (the shutdown
was cancelled) the shutdown drain is cancelled and a new lock taken.

Without a bus, or without logind on it, the agent says so once (INFO) and runs without
it; a bus lost later is logged once (WARNING) and not reconnected. The lock goes with the
agent: a stopping agent closes it (its jobs keep running, as on any stop), so only the
machine's shutdown drains the node. :mod:`jeepney` is the D-Bus library: pure Python,
maintained, with a trio integration and file-descriptor passing over Unix sockets.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio
from jeepney import (
    DBusAddress,
    DBusErrorResponse,
    HeaderFields,
    MatchRule,
    Message,
    MessageType,
    new_method_call,
)
from jeepney.auth import AuthenticationError
from jeepney.bus_messages import message_bus
from jeepney.io.common import RouterClosed
from jeepney.io.trio import DBusRouter, open_dbus_connection
from jeepney.wrappers import unwrap_msg

from nodeagent._when import in_words
from nodeagent.agent._agent import Agent
from slots import Schedule

__all__ = ["LOGIND", "MARGIN", "ShutdownWatch", "needed_vacate"]

log = logging.getLogger("nodeagent.shutdown")

#: logind's bus name, object and interface.
LOGIND = "org.freedesktop.login1"
_PATH = "/org/freedesktop/login1"
_MANAGER = "org.freedesktop.login1.Manager"
_LOGIND = DBusAddress(_PATH, bus_name=LOGIND, interface=_MANAGER)
_PROPERTIES = DBusAddress(_PATH, bus_name=LOGIND, interface="org.freedesktop.DBus.Properties")

#: Seconds before logind's limit at which the jobs left are hard-killed (at most a fifth
#: of the limit): time for them to die and the lock to be released before logind stops
#: waiting.
MARGIN = 5.0

_NO_BUS = (OSError, AuthenticationError, trio.BrokenResourceError, ValueError, KeyError)


def needed_vacate(agent: Agent) -> float:
    """The longest vacate time the node may need now: ``MachineMaxVacateTime``, or longer
    when a running job's own vacate time makes a quick drain take longer."""
    machine = agent.machine
    now = agent.now()
    quick = machine.drain_estimate(now, Schedule.QUICK).completion - math.floor(now)
    return float(max(machine.policy.machine_max_vacate_time, quick))


@dataclass
class ShutdownWatch:
    """Holds logind's delay lock for ``agent`` and drains the node when the machine shuts
    down; :meth:`run` until cancelled. ``schedule`` gives the shutdown drain's schedule
    when a shutdown begins (the running ``[shutdown] schedule``); ``bus`` is jeepney's
    bus address (``SYSTEM``: ``DBUS_SYSTEM_BUS_ADDRESS``, else the standard socket)."""

    agent: Agent
    schedule: Callable[[], Schedule]
    bus: str = "SYSTEM"
    #: logind's InhibitDelayMaxUSec in seconds (None: not read).
    limit: float | None = None
    _fd: int | None = None
    _owner: str | None = None
    _drain: trio.CancelScope | None = None
    _changed: trio.Event = field(default_factory=trio.Event)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, take the lock and serve the signals until cancelled; started once the
        lock is taken or found impossible (said once)."""
        try:
            conn = await open_dbus_connection(self.bus, enable_fds=True)
        except _NO_BUS as exc:
            log.info(
                "no system D-Bus (%s): the node is not drained when the machine shuts down",
                _words(exc),
            )
            task_status.started()
            return
        started = False

        def ready() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started()

        try:
            async with conn.router() as router:
                await self._serve(router, ready)
        except (DBusErrorResponse, RouterClosed, trio.BrokenResourceError, OSError) as exc:
            self._lost(exc)
        finally:
            self._release()
            await conn.aclose()
            ready()

    def _lost(self, exc: BaseException | None) -> None:
        log.warning(
            "the system D-Bus connection is lost (%s): the node is no longer drained when "
            "the machine shuts down",
            "the bus closed it" if exc is None else _words(exc),
        )

    async def _serve(self, router: DBusRouter, ready: Callable[[], None]) -> None:
        rule = MatchRule(type="signal", interface=_MANAGER, member="PrepareForShutdown", path=_PATH)
        await _call(router, message_bus.AddMatch(rule))
        async with router.filter(rule, bufsize=16) as signals:
            try:
                await self._take(router)
            except DBusErrorResponse as exc:
                log.info(
                    "no login manager on the system D-Bus (%s): the node is not drained when "
                    "the machine shuts down",
                    exc.name,
                )
                ready()
                return
            self.limit = await self._read_limit(router)
            self._warn_limit()
            self.agent.listeners.append(self._wake)
            ready()
            try:
                async with trio.open_nursery() as nursery:
                    async for message in signals:
                        if not await self._from_logind(router, message):
                            continue
                        (starting,) = message.body
                        if starting:
                            self._begin(nursery)
                        else:
                            await self._cancelled(router)
                    # The router's receiver ended: the bus closed. A drain under way goes
                    # on; its lock (a descriptor logind holds) is released as planned.
                    self._lost(None)
            finally:
                self.agent.listeners.remove(self._wake)

    async def _take(self, router: DBusRouter) -> None:
        """Take the delay lock (raises :class:`DBusErrorResponse` without logind)."""
        body = await _call(
            router,
            new_method_call(
                _LOGIND,
                "Inhibit",
                "ssss",
                ("shutdown", "nodeagent", "draining jobs before shutdown", "delay"),
            ),
        )
        self._fd = body[0].to_raw_fd()
        log.info("took logind's delay lock for shutdown")

    async def _read_limit(self, router: DBusRouter) -> float | None:
        try:
            (variant,) = await _call(
                router,
                new_method_call(_PROPERTIES, "Get", "ss", (_MANAGER, "InhibitDelayMaxUSec")),
            )
        except DBusErrorResponse as exc:
            log.warning("logind's InhibitDelayMaxUSec cannot be read (%s)", exc)
            return None
        _, usec = variant
        return float(usec) / 1e6

    def _warn_limit(self) -> None:
        needed = needed_vacate(self.agent)
        if self.limit is not None and self.limit < needed:
            log.warning(
                "logind's InhibitDelayMaxSec (%s) is shorter than the longest vacate time "
                "this node may need (%s): at a shutdown the jobs still vacating %s before "
                "it runs out are hard-killed. Raise it with a drop-in: "
                "/etc/systemd/logind.conf.d/nodeagent.conf holding `[Login]` and "
                "`InhibitDelayMaxSec=%d`, then `systemctl reload systemd-logind` (see "
                'docs/operator-guide.md, "Shutting a node down")',
                in_words(self.limit),
                in_words(needed),
                in_words(_margin(self.limit)),
                math.ceil(needed + MARGIN),
            )

    async def _from_logind(self, router: DBusRouter, message: Message) -> bool:
        """Whether ``message`` comes from logind's connection (asked again when the
        sender differs: logind may have restarted)."""
        sender = message.header.fields.get(HeaderFields.sender)
        if sender is not None and sender == self._owner:
            return True
        try:
            (owner,) = await _call(router, message_bus.GetNameOwner(LOGIND))
        except DBusErrorResponse:
            return False
        self._owner = owner
        if sender != owner:
            log.warning("ignored a PrepareForShutdown signal from %s, which is not logind", sender)
            return False
        return True

    def _begin(self, nursery: trio.Nursery) -> None:
        if self._drain is not None:
            return
        schedule = self.schedule()
        log.info("logind: the machine is shutting down; draining the node (%s)", schedule)
        self._drain = trio.CancelScope()
        self.agent.shutdown(schedule=schedule)
        nursery.start_soon(self._drain_then_release, self._drain, trio.current_time())

    async def _cancelled(self, router: DBusRouter) -> None:
        log.info("logind: the machine's shutdown was cancelled")
        if self._drain is not None:
            self._drain.cancel()
            self._drain = None
        self.agent.shutdown_cancelled()
        if self._fd is None:
            await self._take(router)

    async def _drain_then_release(self, scope: trio.CancelScope, began: float) -> None:
        with scope:
            limit = self.limit
            if limit is None:
                await self._until_empty()
            else:
                kill_at = began + limit - _margin(limit)
                with trio.move_on_at(kill_at):
                    await self._until_empty()
                if self._jobs():
                    killed = self.agent.kill_all()
                    log.warning(
                        "logind's limit (%s) runs out: %d jobs still running hard-killed "
                        "before the machine goes down",
                        in_words(limit),
                        killed,
                    )
                    with trio.move_on_at(began + limit - _margin(limit) / 4):
                        await self._until_empty()
            left = self._jobs()
            log.info(
                "the node is %s: released logind's delay lock",
                "empty" if not left else f"not empty ({left} jobs left)",
            )
            self._release()

    async def _until_empty(self) -> None:
        while self._jobs():
            self._changed = trio.Event()
            await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()

    def _jobs(self) -> int:
        return len(self.agent.claims())

    def _release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _margin(limit: float) -> float:
    return min(MARGIN, limit / 5)


async def _call(router: DBusRouter, message: Message) -> Any:
    """Send a method call; its reply's body, or :class:`DBusErrorResponse`."""
    reply = await router.send_and_get_reply(message)
    if reply.header.message_type is MessageType.error:
        raise DBusErrorResponse(reply)
    return unwrap_msg(reply)


def _words(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
