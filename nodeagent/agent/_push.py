"""The agent's link to the master: push the ad, learn the maintenance mode and window.

The ad is pushed (``POST /v1/ads`` with a DAEMON token) every ``update_interval``
and, debounced by ``ad_debounce``, at once after any state change. The master's reply
carries this machine's maintenance mode and unavailability window, which the agent
publishes as ``MaintenanceMode`` and ``Unavailability``. Without a master URL the
link does nothing; a master that is down is retried at the next push.

The pushes go through one :class:`~nodeagent._peer.PeerClient`: while :meth:`MasterLink.run`
runs, consecutive pushes share one kept-alive connection (closed when ``run`` ends). The
token file is read at the first push and again only after a reload or a 401.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from nodeagent._clock import Clock
from nodeagent._peer import Credentials, PeerCallFailed, PeerClient, TokenFile
from nodeagent.agent._agent import Agent
from nodeagent.agent._config import MasterLinkConfig

__all__ = ["MasterLink", "unavailability_from_mesos"]

log = logging.getLogger("nodeagent.master_link")

_NS = 1_000_000_000
#: Seconds to connect to the master and for each read and write of a push.
_PUSH_TIMEOUT_S = 10.0


def unavailability_from_mesos(window: Any) -> dict[str, int] | None:
    """``{"start": {"nanoseconds"}, "duration": {"nanoseconds"}}`` → ad seconds."""
    if not isinstance(window, dict):
        return None
    try:
        start = int(window["start"]["nanoseconds"]) // _NS
        duration = window.get("duration")
        seconds = None if duration is None else int(duration["nanoseconds"]) // _NS
    except (KeyError, TypeError, ValueError):
        return None
    result = {"Start": start}
    if seconds is not None:
        result["Duration"] = seconds
    return result


class MasterLink:
    """Pushes the agent's ad to the master; see the module docstring."""

    def __init__(self, agent: Agent, config: MasterLinkConfig, *, clock: Clock) -> None:
        self.agent = agent
        self.config = config
        self.clock = clock
        self.pushes = 0
        self.failures = 0
        self._nudge = trio.Event()
        self._master = PeerClient("master", timeout=_PUSH_TIMEOUT_S, max_idle_peers=1)
        self._credentials = _credentials(config)
        agent.listeners.append(self._on_change)

    def _on_change(self) -> None:
        self._nudge.set()

    def reconfigure(self, config: MasterLinkConfig) -> None:
        """Apply a reloaded ``[master]`` section; the next push comes at once and reads the
        token file again."""
        self.config = config
        self._credentials = _credentials(config)
        self._nudge.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Push now, then after every (debounced) change or ``update_interval``.

        The connection to the master is kept while this runs and closed when it ends.
        """
        async with self._master:
            task_status.started()
            while True:
                self._nudge = trio.Event()
                if self.config.url is not None:
                    await self.push_now()
                with trio.move_on_after(self.config.update_interval):
                    await self._nudge.wait()
                    await trio.sleep(self.config.ad_debounce)

    async def aclose(self) -> None:
        """Close the connection to the master (a later push opens one of its own)."""
        await self._master.aclose()

    async def push_now(self) -> bool:
        """Push the ad once; returns whether the master took it (a failure is logged)."""
        url = self.config.url
        if url is None:
            return False
        try:
            reply = await self._master.request(
                "POST",
                url.rstrip("/") + "/v1/ads",
                json=self.agent.ad(),
                credentials=self._credentials,
            )
        except PeerCallFailed as exc:
            self.failures += 1
            if exc.code == "master.token_file":
                log.error("cannot read the master token: %s", exc.message)
            elif exc.status is None:
                log.warning("cannot push the ad to %s: %s", url, exc)
            else:
                log.warning("the master refused the ad (HTTP %d): %s", exc.status, exc)
            return False
        self.pushes += 1
        if isinstance(reply, dict):
            self.agent.set_maintenance(
                reply.get("mode"), unavailability_from_mesos(reply.get("unavailability"))
            )
        return True


def _credentials(config: MasterLinkConfig) -> Credentials | None:
    return None if config.token_file is None else TokenFile(config.token_file, peer="master")
