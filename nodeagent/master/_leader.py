"""Which master leads, as this one knows it, and what a follower does with a write.

With the embedded SQLite store there is one master: it always leads. With ``store =
"etcd"`` the masters elect one leader (:class:`~nodeagent._ha._leadership.Election`); the
others follow: they answer reads from the shared state and their own ads, and send every
write back to the leader (:class:`NotLeader`: ``307 Temporary Redirect`` to the same path
on the leader, as Mesos's masters do, or ``503 master.no_leader`` while nobody leads).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from nodeagent._ha._leadership import Election

__all__ = ["LeaderView", "NotLeader"]


class NotLeader(Exception):
    """A write asked of a master that does not lead; ``leader`` is the one that does
    (``None``: nobody leads at the moment)."""

    def __init__(self, leader: str | None) -> None:
        self.leader = leader
        if leader is None:
            self.code = "master.no_leader"
            message = "no master leads at the moment: try again in a few seconds"
        else:
            self.code = "master.not_leader"
            message = f"this master does not lead: send writes to {leader}"
        super().__init__(message)


@dataclass
class LeaderView:
    """This master's URL, its store's kind, and its election (``None``: the one master).

    A master that won the election leads once its term holds the store (``holding()``:
    the state its predecessors wrote taken, its writes fenced), not before: from the
    moment it won until then, and from the moment a write of its term is fenced out or of
    unknown outcome until the election says the term is over, it says that nobody leads
    (a write is ``503 master.no_leader``, to send again, not a store's error), and
    ``GET /v1/leader`` does not show it leading before it can take a write."""

    url: str = ""
    store: str = "sqlite"
    election: Election | None = None
    ttl: float | None = None
    holding: Callable[[], bool] | None = None

    @property
    def leading(self) -> bool:
        if self.election is None:
            return True
        return self.election.leading and (self.holding is None or self.holding())

    @property
    def leader(self) -> str | None:
        """The leader's URL (this master's when it leads), ``None`` when nobody leads."""
        if self.leading:
            return self.url
        if self.election is None or self.election.leading:  # won, the store not yet held
            return None
        known = self.election.leader
        url = None if known is None else known.get("url")
        return url if isinstance(url, str) else None

    def check(self) -> None:
        """Raise :class:`NotLeader` unless this master leads."""
        if not self.leading:
            raise NotLeader(self.leader)

    def to_json(self) -> dict[str, Any]:
        """``GET /v1/leader``."""
        election = self.election
        since = None
        if election is not None and election.since is not None:
            since = round(trio.current_time() - election.since, 3)
        return {
            "leader": self.leader,
            "self": self.url,
            "leading": self.leading,
            "store": self.store,
            "lease_ttl": self.ttl,
            "leading_for": since if self.election is not None else None,
            "terms": 0 if election is None else election.terms,
            "term": None if election is None else election.term,
        }
