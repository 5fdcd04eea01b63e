"""The master's API as the agents and the defrag daemons speak it: one typed call per
operation.

The agent's pusher and the defrag daemon call a master only through this module (the
layout test holds them to it): :class:`MasterCalls` names one master (its base ``url``)
and the caller's bearer token (``credentials``, a :class:`~nodeagent._peer.TokenFile`),
over a :class:`Requester` — the daemons' is a :class:`~nodeagent._peer.PeerClient` of role
``master``, which reads a token file again after a 401 or 403 and never follows a
redirect. Each call states the largest reply it reads (:data:`~nodeagent._peer.MASTER_REPLY_LIMIT`
for a push, :data:`~nodeagent._peer.MASTER_ADS_REPLY_LIMIT` for the pool's slot ads,
:data:`~nodeagent._peer.AGENT_REPLY_LIMIT` for one machine's ads). Whom to ask when there
are several masters is the caller's: the pusher pushes to each on its own, the defrag
daemon reads from the first that answers.

Errors. A call's failure is the transport's :class:`~nodeagent._peer.PeerCallFailed`
(``master.*`` codes, or the master's own); a 2xx reply without what the API promises is
its subclass :class:`UnusableReply`::

    PeerCallFailed          no reply, a refusal, a reply that is not JSON or is too large
    └── UnusableReply       master.bad_reply: JSON, but not the document asked for
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from nodeagent._peer import (
    AGENT_REPLY_LIMIT,
    MASTER_ADS_REPLY_LIMIT,
    MASTER_REPLY_LIMIT,
    Credentials,
    PeerCallFailed,
)

__all__ = [
    "MaintenanceWord",
    "MasterCalls",
    "PushReply",
    "Requester",
    "UnusableReply",
    "unavailability_from_mesos",
]

_NS = 1_000_000_000


class Requester(Protocol):
    """One request to a master at ``url`` (its base and the path): the reply's JSON,
    read up to ``max_reply`` bytes; raises :class:`~nodeagent._peer.PeerCallFailed`. A
    :class:`~nodeagent._peer.PeerClient` is one."""

    async def request(
        self,
        method: str,
        url: str,
        *,
        credentials: Credentials | None = None,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        max_reply: int | None = None,
    ) -> Any: ...


class UnusableReply(PeerCallFailed):
    """A master answered 2xx with JSON that is not the document the call asked for (code
    ``master.bad_reply``, no ``status``). It did answer: a caller with several masters
    does not ask another in its place."""

    def __init__(self, message: str) -> None:
        super().__init__("master.bad_reply", message)


def unavailability_from_mesos(window: Any) -> dict[str, int] | None:
    """``{"start": {"nanoseconds"}, "duration": {"nanoseconds"}}`` → the ad's seconds
    (``{"Start"}`` and, with a duration, ``"Duration"``); ``None`` for anything else."""
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


@dataclass(frozen=True, kw_only=True)
class MaintenanceWord:
    """The master's word on a machine, in its answer to the machine's ad: its maintenance
    ``mode`` (``UP``, ``DRAINING``, ``DOWN``; ``None`` when the reply gives no string)
    and its unavailability window in the ad's seconds (``None``: none)."""

    mode: str | None
    unavailability: dict[str, int] | None

    @classmethod
    def of(cls, reply: Any) -> MaintenanceWord | None:
        """The word a push's reply gives; ``None`` when the reply is not a JSON object."""
        if not isinstance(reply, dict):
            return None
        mode = reply.get("mode")
        return cls(
            mode=mode if isinstance(mode, str) else None,
            unavailability=unavailability_from_mesos(reply.get("unavailability")),
        )


@dataclass(frozen=True)
class PushReply:
    """A master's reply to a pushed ad: its ``word`` on the machine (``None`` when the
    reply is not a JSON object: the push was taken all the same) and the digest of the
    static part of the slot ads it now holds (``slots_digest``, 32 hexadecimal digits;
    ``None`` when the reply gives none): the node's next ad may be pushed with its moving
    values alone for it (:meth:`MasterCalls.push_ad`)."""

    word: MaintenanceWord | None
    slots_digest: str | None = None

    @classmethod
    def of(cls, reply: Any) -> PushReply:
        digest = reply.get("slots_digest") if isinstance(reply, dict) else None
        if not isinstance(digest, str) or not _HEX_DIGEST.fullmatch(digest):
            digest = None
        return cls(MaintenanceWord.of(reply), digest)


_HEX_DIGEST = re.compile("[0-9a-f]{32}")


@dataclass(frozen=True, kw_only=True)
class MasterCalls:
    """The calls to the master at ``url`` (its base, no trailing ``/``), each a typed
    method over ``peer``, with the token of ``credentials`` (``None``: none)."""

    peer: Requester
    url: str
    credentials: Credentials | None = None

    async def push_ad(self, ad: Mapping[str, Any]) -> PushReply:
        """``POST /v1/ads``: push a daemon's ad (``{"machine": {...}, "slots": [...]}``,
        or a node's as ``{"machine": {...}, "moved_on": {"slots_digest": HEX, "moving":
        [...]}}``: its slot ads' moving values alone, for the slot ads of that digest the
        master holds; 409 ``ad.slots_unknown`` when it holds none); the master's reply."""
        reply = await self.peer.request(
            "POST",
            self.url + "/v1/ads",
            credentials=self.credentials,
            json=ad,
            max_reply=MASTER_REPLY_LIMIT,
        )
        return PushReply.of(reply)

    async def slot_ads(self, *, constraint: str | None = None) -> list[dict[str, Any]]:
        """``GET /v1/ads?slots=true``: the slot ads the master holds (those matching
        ``constraint``, a ClassAd expression the master evaluates, when one is given).
        An entry that is not a JSON object is left out; a reply without an ``ads`` list is
        :class:`UnusableReply`."""
        params = {"slots": "true"}
        if constraint is not None:
            params["constraint"] = constraint
        reply = await self.peer.request(
            "GET",
            self.url + "/v1/ads",
            credentials=self.credentials,
            params=params,
            max_reply=MASTER_ADS_REPLY_LIMIT,
        )
        ads = reply.get("ads") if isinstance(reply, dict) else None
        if not isinstance(ads, list):
            raise UnusableReply(f"{self.url}/v1/ads: no 'ads' list")
        return [ad for ad in ads if isinstance(ad, dict)]

    async def machine_ads(self, machine: str) -> list[dict[str, Any]]:
        """``GET /v1/ads/{machine}``: every slot ad of one machine as the master holds it
        (its jobs' included). An entry that is not a JSON object is left out; a reply
        without a ``slots`` list is :class:`UnusableReply`."""
        reply = await self.peer.request(
            "GET",
            self.url + "/v1/ads/" + quote(machine, safe=""),
            credentials=self.credentials,
            max_reply=AGENT_REPLY_LIMIT,
        )
        slots = reply.get("slots") if isinstance(reply, dict) else None
        if not isinstance(slots, list):
            raise UnusableReply(f"{self.url}/v1/ads/{machine}: no 'slots' list")
        return [ad for ad in slots if isinstance(ad, dict)]
