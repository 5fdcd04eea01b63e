"""The agent's link to the master: push the ad, learn the maintenance mode and window.

The ad is pushed (``POST /v1/ads`` with a DAEMON token) every ``update_interval``
and, debounced by ``ad_debounce``, at once after any state change. The master's reply
carries this machine's maintenance mode and unavailability window, which the agent
publishes as ``MaintenanceMode`` and ``Unavailability``. Without a master URL the
link does nothing; a master that is down is retried at the next push.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import trio

from nodeagent._clock import Clock
from nodeagent.agent._agent import Agent
from nodeagent.agent._config import MasterLinkConfig

__all__ = ["MasterLink", "unavailability_from_mesos"]

log = logging.getLogger("nodeagent.master_link")

_NS = 1_000_000_000


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
        agent.listeners.append(self._on_change)

    def _on_change(self) -> None:
        self._nudge.set()

    def reconfigure(self, config: MasterLinkConfig) -> None:
        """Apply a reloaded ``[master]`` section; the next push comes at once."""
        self.config = config
        self._nudge.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Push now, then after every (debounced) change or ``update_interval``."""
        task_status.started()
        while True:
            self._nudge = trio.Event()
            if self.config.url is not None:
                await self.push_now()
            with trio.move_on_after(self.config.update_interval):
                await self._nudge.wait()
                await trio.sleep(self.config.ad_debounce)

    async def push_now(self) -> bool:
        """Push the ad once; returns whether the master took it."""
        url = self.config.url
        if url is None:
            return False
        headers = {}
        if self.config.token_file is not None:
            try:
                token = self.config.token_file.read_text().strip()
            except OSError as exc:
                log.error("cannot read the master token %s: %s", self.config.token_file, exc)
                self.failures += 1
                return False
            headers["Authorization"] = f"Bearer {token}"
        try:
            async with httpx.AsyncClient(timeout=10.0) as client:
                response = await client.post(
                    url.rstrip("/") + "/v1/ads", json=self.agent.ad(), headers=headers
                )
        except httpx.HTTPError as exc:
            self.failures += 1
            log.warning("cannot push the ad to %s: %s", url, exc)
            return False
        if response.status_code >= 300:
            self.failures += 1
            log.warning("the master refused the ad: %s %s", response.status_code, response.text)
            return False
        self.pushes += 1
        try:
            reply = response.json()
        except ValueError:
            return True
        if isinstance(reply, dict):
            self.agent.set_maintenance(
                reply.get("mode"), unavailability_from_mesos(reply.get("unavailability"))
            )
        return True
