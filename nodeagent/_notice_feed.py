"""The notices in force as an owner follows them: a listing (``GET /v1/notices``), then the
``notice.*`` events after it, turned into changes that are neither repeated nor missed.

Pure, standard library only and without ``typing``: the Python client
(:meth:`nodeagent.client.MasterClient.notices`) and the command line (``nodeagent master
notices --follow``) both feed a :class:`NoticeFeed` and print or yield what it returns.
Notices are the API's JSON documents (:meth:`nodeagent.master._notices.Notice.to_json`).

How the two are put together: the follower opens the event stream first (it starts after
the last event the master kept, ``X-Nodeagent-Last-Event-Id``), lists the notices, gives
the listing to :meth:`NoticeFeed.listed` and each later event to :meth:`NoticeFeed.event`.
An event already reflected in the listing (it came between the stream's start and the
listing) changes nothing and returns no change: a notice issued twice, an answer not newer
than the one known, a notice rescinded that was never known. After a ``gap`` (events no
longer kept) the follower lists again, and :meth:`NoticeFeed.listed` returns what differs
from what it knew: new notices (``listed``), answers that changed (``answered``) and
notices gone (``rescinded``, their ``rescinded`` time unknown: ``None``).

``groups`` and ``machines`` keep the notices of those exact names, as ``GET /v1/notices``
filters (the event stream matches a machine's first label too: the feed drops what the
listing would not show).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the command line's plain commands import it
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

__all__ = ["ANSWERED", "ISSUED", "KINDS", "LISTED", "RESCINDED", "NoticeFeed"]

LISTED = "listed"
"""A notice in force found by a listing (the first, or one after a gap)."""
ISSUED = "issued"
RESCINDED = "rescinded"
ANSWERED = "answered"
KINDS = (LISTED, ISSUED, RESCINDED, ANSWERED)
"""Every kind of change, in the order a notice can go through them."""


def _answer_at(notice: Any) -> float:
    answer = notice.get("answer")
    if not isinstance(answer, dict):
        return float("-inf")
    at = answer.get("at")
    return float(at) if isinstance(at, int | float) else float("-inf")


class NoticeFeed:
    """The notices known, by id, and the exact ``groups`` and ``machines`` wanted (empty:
    any). Not thread-safe; one per follower."""

    __slots__ = ("groups", "known", "machines")

    def __init__(self, *, groups: Iterable[str] = (), machines: Iterable[str] = ()) -> None:
        self.groups = frozenset(groups)
        self.machines = frozenset(machines)
        self.known: dict[str, Any] = {}

    def wanted(self, notice: Any) -> bool:
        """Whether ``notice`` (a document) is of a group and a machine asked for."""
        return (not self.groups or notice.get("group") in self.groups) and (
            not self.machines or notice.get("machine") in self.machines
        )

    def listed(self, notices: Iterable[Any]) -> list[tuple[str, Any]]:
        """The changes a listing makes to what is known, in the listing's order, then the
        notices gone (by id); the listing becomes what is known."""
        found = {n["id"]: n for n in notices if isinstance(n, dict) and self.wanted(n)}
        changes: list[tuple[str, Any]] = []
        for notice_id, notice in found.items():
            before = self.known.get(notice_id)
            if before is None:
                changes.append((LISTED, notice))
            elif notice.get("answer") != before.get("answer"):
                changes.append((ANSWERED, notice))
        for notice_id in sorted(set(self.known) - set(found)):
            changes.append((RESCINDED, {**self.known[notice_id], "rescinded": None}))
        self.known = found
        return changes

    def event(self, event: Any) -> tuple[str, Any] | None:
        """The change one event of the stream makes (``None``: none, or not a notice's
        event); what is known follows it."""
        kind = str(event.get("type", ""))
        facts = event.get("facts")
        if not kind.startswith("notice.") or not isinstance(facts, dict):
            return None
        if kind == "notice.issued":
            notice = facts.get("notice")
            if not isinstance(notice, dict) or not isinstance(notice.get("id"), str):
                return None
            if notice["id"] in self.known or not self.wanted(notice):
                return None
            self.known[notice["id"]] = notice
            return ISSUED, notice
        known = self.known.get(str(facts.get("id")))
        if known is None:
            return None  # rescinded or answered before the listing, or not asked for
        if kind == "notice.rescinded":
            del self.known[known["id"]]
            when = event.get("time")
            return RESCINDED, {
                **known,
                "rescinded": when if isinstance(when, int | float) else None,
            }
        if kind == "notice.answered":
            answer = facts.get("answer")
            if not isinstance(answer, dict):
                return None
            after = {**known, "answer": answer}
            if _answer_at(after) <= _answer_at(known):
                return None  # the listing showed it, or a later one
            self.known[known["id"]] = after
            return ANSWERED, after
        return None
