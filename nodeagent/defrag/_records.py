"""The defrag daemon's record of its own drains, and whether an ad is not older than it.

The master's ads reach the daemon late: an agent pushes its ad a moment after a change
(debounced, then a round trip), and a master that was cut off serves what it last heard.
A cycle that came right after the one that drained a machine may therefore read that
machine's ad as it was before the drain: no request, the jobs still there. Acting on it
drains the machine a second time (if the first drain is over by then, the agent accepts).

So the daemon records each drain it starts: the request id phase 1 returned and the
node's ``created_at``, then, once the commit is answered, its ``committed_at`` (both by
the node's clock). The record is written to the store before the commit, with the pacing,
so that a restarted daemon or the next leader has it too. **A cycle never acts on an ad
older than its own record** (:func:`ad_knows`): while the machine's ads do not show they
know the drain, the machine counts as draining for this daemon (the limits see it) and is
neither a candidate nor whole, and its ad is not read for a cancel. An ad that knows the
drain says what became of it, as the ads do for every drain.

A record is kept for :data:`RECORD_LIFETIME` after its instant, as the machine's ads show
the node's clock, even once an ad knew it: a cycle reads the first master that answers,
and another master may still serve an ad older than the one the last cycle saw (a master
marks an ad ``Lost`` once it has not heard it again for its ``ad_lifetime``, 300 s by
default, and the daemon ignores lost ads). A transaction the daemon cancelled itself (a
skip, a failed commit) ends its record at once, and so does a machine the master no
longer lists at all (every ad the master serves for it later arrived after that); a new
drain of the machine replaces its record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slots import request_number

__all__ = [
    "RECORD_LIFETIME",
    "DrainRecord",
    "ad_knows",
    "outlived",
    "records_from_json",
    "records_to_json",
]

#: Seconds a record is kept after its instant (by the node's clock, as its ads show it).
RECORD_LIFETIME = 3600.0


@dataclass(frozen=True, kw_only=True)
class DrainRecord:
    """One drain this daemon started, as it last knew it.

    ``committed``: the commit was answered (else only phase 1 was). ``at``: by the node's
    clock, when the request was made (``created_at``) or, once committed, when it was
    committed (``committed_at``).
    """

    machine: str
    request_id: str
    committed: bool
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "committed": self.committed, "at": self.at}


def ad_knows(record: DrainRecord, ad: Mapping[str, Any]) -> bool:
    """Whether a machine's ad is not older than this daemon's record of its drain.

    True when the ad shows a later request than the record's (``DrainingRequestId``), or
    the record's own past what the record knows (a committed drain's ad still
    ``pending`` was made before the commit), or, failing that, when the ad was made after
    the record's instant: its ``MyCurrentTime`` (whole seconds, the node's clock) is past
    ``at`` (the node's clock too). An ad without ``MyCurrentTime`` knows a record only by
    its request id.
    """
    shown = ad.get("DrainingRequestId")
    own, later = request_number(record.request_id), request_number(shown)
    if own is not None and later is not None and later > own:
        return True
    if (
        shown is not None
        and str(shown) == record.request_id
        and (not record.committed or ad.get("DrainState") != "pending")
    ):
        return True
    made = _made(ad)
    return made is not None and made > record.at


def outlived(record: DrainRecord, ad: Mapping[str, Any]) -> bool:
    """Whether the ad was made :data:`RECORD_LIFETIME` or more after the record's instant
    (the record need not be kept)."""
    made = _made(ad)
    return made is not None and made >= record.at + RECORD_LIFETIME


def _made(ad: Mapping[str, Any]) -> float | None:
    made = ad.get("MyCurrentTime")
    if isinstance(made, bool) or not isinstance(made, int | float):
        return None
    return float(made)


def records_to_json(records: Mapping[str, DrainRecord]) -> dict[str, Any]:
    """The records as the store keeps them: by machine."""
    return {machine: record.to_json() for machine, record in sorted(records.items())}


def records_from_json(doc: Any) -> dict[str, DrainRecord]:
    """The records a store kept (``None`` or anything unreadable: none; an unreadable
    entry is left out)."""
    records: dict[str, DrainRecord] = {}
    if not isinstance(doc, dict):
        return records
    for machine, entry in doc.items():
        if not isinstance(machine, str) or not isinstance(entry, dict):
            continue
        request_id, committed, at = entry.get("request_id"), entry.get("committed"), entry.get("at")
        if (
            not isinstance(request_id, str)
            or not isinstance(committed, bool)
            or isinstance(at, bool)
            or not isinstance(at, int | float)
        ):
            continue
        records[machine] = DrainRecord(
            machine=machine, request_id=request_id, committed=committed, at=float(at)
        )
    return records
