"""The agent's link to its masters: push the ad, learn the maintenance mode and window.

The ad is pushed (``POST /v1/ads`` with its node's DAEMON token) to every master the ``[master]``
section names (``url``, or ``urls`` for several masters sharing one state), every
``update_interval`` and, debounced by ``ad_debounce``, at once after any state change,
as HTCondor's startd sends its ad to every collector. Without a master the link does
nothing.

Each master is pushed to by a task of its own, with a kept-alive connection of its own
(a :class:`~nodeagent._peer.PeerClient` opened while :meth:`MasterLink.run` runs and
closed when it ends) and a retry of its own: a push that fails is tried again after
:data:`RETRY_MIN_S`, doubling up to ``update_interval`` while the master stays down, and
at once after a state change. So a master that is down, or slow to answer (up to
:data:`PUSH_TIMEOUT_S`), delays no push to the others. Every master takes the ad, leader
or not (ads are soft state in each); a push is never redirected.

Each push is :meth:`~nodeagent._master_calls.MasterCalls.push_ad`. The masters' replies
carry this machine's maintenance mode and unavailability window,
which the agent publishes as ``MaintenanceMode`` and ``Unavailability``: masters share
one state, so they say the same, and while they disagree (a follower a moment behind) the
most recent reply wins. A change a reply brings is pushed again (the masters' ads then
show it) only when that master's word changed since its previous reply: two masters that
disagree cannot set off a loop of pushes.

A master's reply gives the digest of the static part of the slot ads it now holds
(``slots_digest``: their JSON with the values that move with the clock null,
:mod:`nodeagent._moving_values`). While the agent's slot ads keep the static part they had
at the last push that master took, the next push sends their moving values alone
(``{"machine": {...}, "moved_on": {"slots_digest": …, "moving": [...]}}``: ≈ 5 kB against
≈ 14 kB for 8 claims); a claim started or ended, a state changed, sends the whole ad. A
master that no longer holds those slot ads (restarted, or the node forgotten) answers 409
``ad.slots_unknown``, and the whole ad goes to it at once in the same push.

The token file is read at the first push and again when it was replaced (the next push
takes the new token), after a reload, a 401 or a 403. The
link logs each master's first failure, a change of its error and its recovery, naming
the master's URL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import orjson
import trio

from nodeagent._clock import Clock
from nodeagent._master_calls import MaintenanceWord, MasterCalls, Requester
from nodeagent._moving_values import split_slots, static_digest
from nodeagent._peer import MASTER_REPLY_LIMIT, Credentials, PeerCallFailed, PeerClient, TokenFile
from nodeagent.agent._agent import Agent
from nodeagent.agent._config import MasterLinkConfig

__all__ = [
    "PUSH_TIMEOUT_S",
    "RETRY_MIN_S",
    "MasterLink",
    "MasterPeer",
    "MasterPush",
]

log = logging.getLogger("nodeagent.master_link")

#: Seconds to connect to a master and for each read and write of a push.
PUSH_TIMEOUT_S = 10.0
#: Seconds before a failed push to a master is tried again (doubling while it fails).
RETRY_MIN_S = 1.0


class MasterPeer(Requester, Protocol):
    """One master's connection as the link uses it: a :class:`~nodeagent._peer.PeerClient`
    (tests give fakes). Connections are kept while a session (``async with``) is open."""

    async def __aenter__(self) -> object: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def aclose(self) -> None: ...


def _peer_client(url: str) -> MasterPeer:
    """The link to one master; its answer to a push (the machine's mode and window) is read
    up to :data:`~nodeagent._peer.MASTER_REPLY_LIMIT` bytes."""
    return PeerClient(
        "master", timeout=PUSH_TIMEOUT_S, max_idle_peers=1, max_reply=MASTER_REPLY_LIMIT
    )


@dataclass(eq=False)
class MasterPush:
    """One master's pushes: its connection, its counters, its last word.

    ``failing`` counts the failures since its last success (0: it took the last push).
    """

    url: str
    peer: MasterPeer
    pushes: int = 0
    failures: int = 0
    failing: int = 0
    last_error: str | None = None
    said: MaintenanceWord | None = None
    #: The digest of the static part of the slot ads last pushed whole and taken, and the
    #: master's (its reply's ``slots_digest``): while the ad's static part is the same,
    #: a push sends the moving values alone (module docstring).
    slots_held: tuple[bytes, str] | None = None
    nudge: trio.Event = field(default_factory=trio.Event)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    started: bool = False


class MasterLink:
    """Pushes the agent's ad to its masters; see the module docstring.

    ``connect(url)`` makes the connection to one master (default: a
    :class:`~nodeagent._peer.PeerClient`). ``pushes`` and ``failures`` count every
    master's; :attr:`masters` holds each master's own, by URL.
    """

    def __init__(
        self,
        agent: Agent,
        config: MasterLinkConfig,
        *,
        clock: Clock,
        connect: Callable[[str], MasterPeer] = _peer_client,
    ) -> None:
        self.agent = agent
        self.config = config
        self.clock = clock
        self.pushes = 0
        self.failures = 0
        #: Each master's pushes, in the order of the configuration.
        self.masters: dict[str, MasterPush] = {}
        self._connect = connect
        self._credentials = _credentials(config)
        self._nursery: trio.Nursery | None = None
        self._quiet = False
        self._sync()
        agent.listeners.append(self._on_change)

    def _on_change(self) -> None:
        if self._quiet:
            return
        for master in self.masters.values():
            master.nudge.set()

    def reconfigure(self, config: MasterLinkConfig) -> None:
        """Apply a reloaded ``[master]`` section: a master no longer named is left (its
        connection closed), a new one gets a task of its own; the next push to each comes
        at once and reads the token file again."""
        self.config = config
        self._credentials = _credentials(config)
        self._sync()
        for master in self.masters.values():
            master.nudge.set()

    def _sync(self) -> None:
        """Make :attr:`masters` the configured ones; start or stop their tasks while
        :meth:`run` runs."""
        wanted = self.config.masters
        for url in list(self.masters):
            if url not in wanted:
                self.masters.pop(url).scope.cancel()
                log.info("no longer pushing the ad to %s", url)
        kept = self.masters
        self.masters = {url: kept.get(url) or MasterPush(url, self._connect(url)) for url in wanted}
        if self._nursery is not None:
            for master in self.masters.values():
                if not master.started:
                    master.started = True
                    self._nursery.start_soon(self._pushing, master)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Push to every master now, then after every (debounced) change or
        ``update_interval``, each master on its own (see the module docstring).

        Each master's connection is kept while this runs and closed when it ends.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._sync()
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            for master in self.masters.values():
                master.started = False
                master.scope = trio.CancelScope()

    async def _pushing(self, master: MasterPush) -> None:
        with master.scope:
            async with master.peer:
                while True:
                    master.nudge = trio.Event()
                    if await self._push(master):
                        delay = self.config.update_interval
                    else:
                        delay = min(
                            RETRY_MIN_S * 2 ** min(master.failing - 1, 30),
                            self.config.update_interval,
                        )
                    with trio.move_on_after(delay):
                        await master.nudge.wait()
                        await trio.sleep(self.config.ad_debounce)

    async def aclose(self) -> None:
        """Close every master's connection (a later push opens one of its own)."""
        for master in list(self.masters.values()):
            await master.peer.aclose()

    async def push_now(self) -> int:
        """Push the ad once to every master at the same time; returns how many took it
        (a failure is logged and counted)."""
        took = 0

        async def one(master: MasterPush) -> None:
            nonlocal took
            if await self._push(master):
                took += 1

        async with trio.open_nursery() as nursery:
            for master in list(self.masters.values()):
                nursery.start_soon(one, master)
        return took

    async def _push(self, master: MasterPush) -> bool:
        """Push the ad to ``master`` once; whether it took it."""
        calls = MasterCalls(peer=master.peer, url=master.url, credentials=self._credentials)
        ad = self.agent.ad()
        static, moving = _parts(ad)
        held, master.slots_held = master.slots_held, None
        try:
            if static is not None and held is not None and held[0] == static:
                moved = {"slots_digest": held[1], "moving": moving}
                try:
                    reply = await calls.push_ad({"machine": ad["machine"], "moved_on": moved})
                except PeerCallFailed as exc:
                    if (exc.status, exc.code) != (409, "ad.slots_unknown"):
                        raise
                    log.debug("%s holds other slot ads: pushing the whole ad", master.url)
                    reply = await calls.push_ad(ad)
            else:
                reply = await calls.push_ad(ad)
        except PeerCallFailed as exc:
            self._failed(master, exc)
            return False
        if static is not None and reply.slots_digest is not None:
            master.slots_held = (static, reply.slots_digest)
        said = reply.word
        master.pushes += 1
        self.pushes += 1
        if master.failing:
            log.info("%s took the ad again (after %d failed pushes)", master.url, master.failing)
        master.failing, master.last_error = 0, None
        if said is not None:
            repeated, master.said = said == master.said, said
            self._quiet = repeated
            try:
                self.agent.set_maintenance(said.mode, said.unavailability)
            finally:
                self._quiet = False
        return True

    def _failed(self, master: MasterPush, exc: PeerCallFailed) -> None:
        master.failures += 1
        master.failing += 1
        self.failures += 1
        error = str(exc)
        level = logging.DEBUG if error == master.last_error else logging.WARNING
        master.last_error = error
        if exc.code == "master.token_file":
            log.log(level, "cannot read the master token: %s", exc.message)
        elif exc.status is None:
            log.log(level, "cannot push the ad to %s: %s", master.url, exc)
        else:
            log.log(level, "%s refused the ad (HTTP %d): %s", master.url, exc.status, exc)


def _parts(ad: Mapping[str, Any]) -> tuple[bytes | None, list[dict[str, Any]]]:
    """The digest of the static part of the ad's slot ads and their moving values
    (:func:`~nodeagent._moving_values.split_slots`); ``None`` and no values for slot ads
    that orjson cannot write (then the ad is always pushed whole)."""
    try:
        static, moving = split_slots(ad["slots"])
    except orjson.JSONEncodeError:
        return None, []
    return static_digest(static), moving


def _credentials(config: MasterLinkConfig) -> Credentials | None:
    return None if config.token_file is None else TokenFile(config.token_file, peer="master")
