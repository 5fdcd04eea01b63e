"""The master's notices (Mesos's inverse offers), pure: one :class:`Notice` per (scheduled
machine, job group with instances on its node), the owners' answers, and what a reconcile
pass does with them (:func:`reconcile_notices`).

No I/O, no trio and no clock here: the master passes ``now`` and the facts it holds (the
schedule's windows, the groups' claims read from the nodes' dynamic slot ads) and saves
what :func:`reconcile_notices` returns. A notice never changes in place: an answer makes a
new :class:`Notice` (:meth:`Notice.answered`), a rescinded notice is a copy with its
``rescinded`` time set, and the master forgets it once saved with its event.

The rules of a pass, for each scheduled machine and each group with claims there:

- no notice in force → one is **issued** (a new id);
- a notice in force for another window (moved, or its duration changed) → it is
  **rescinded** and a new one is **issued** (a new id: an answer was given about the old
  window and is not carried over);
- a notice in force for the same window → **kept**, with its answer, its claims refreshed
  (and saved again, **refreshed**, when :func:`claims_changed` says their jobs or their
  verdicts changed).

A notice whose machine left the schedule, or whose group has no claim left on the machine,
is **rescinded**, and its answer goes with it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from nodeagent._when import iso_time

__all__ = [
    "CLAIM_SLACK",
    "MAX_REASON_BYTES",
    "PLAUSIBLE_YEARS",
    "Answer",
    "BadAnswer",
    "Notice",
    "NoticeClaim",
    "NoticeWindow",
    "NoticesPass",
    "Verdict",
    "accepted_machines",
    "check_answer",
    "claims_changed",
    "claims_of_slots",
    "every_claim_grouped",
    "group_claim",
    "group_claimed",
    "mesos_statuses",
    "notice_from_json",
    "notice_id",
    "reconcile_notices",
]

MAX_REASON_BYTES = 1024
"""The longest ``reason`` an answer may carry, in UTF-8 bytes."""

PLAUSIBLE_YEARS = 10
"""How far ahead of now (years) an ``expected_completion`` may be: further, and it reads as
a plausible time in a smaller unit, it was written in that unit (refused, saying so)."""
_YEAR = 365.25 * 86400
#: The units a time is mistaken in, by how many of them make a second.
_UNITS = ((1e3, "milliseconds"), (1e6, "microseconds"), (1e9, "nanoseconds"))

CLAIM_SLACK = 2.0
"""How far (s) a cut claim's ``evict_at`` or ``cut_by`` may move before its notice is
saved again: an ad carries whole seconds (a job's run time is up to a second short), so
the same promise read from two ads may differ by a second."""


class Verdict(StrEnum):
    """An owner's answer to a notice."""

    ACCEPT = "accept"
    DECLINE = "decline"


@dataclass(frozen=True, kw_only=True)
class NoticeWindow:
    """A machine's window as the schedule holds it: ``start`` (epoch s) and ``duration`` (s,
    ``None`` for an open-ended window)."""

    start: float
    duration: float | None = None

    @property
    def end(self) -> float | None:
        """When the window ends (epoch s; ``None`` for an open-ended one)."""
        return None if self.duration is None else self.start + self.duration

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "duration": self.duration}


@dataclass(frozen=True, kw_only=True)
class NoticeClaim:
    """One of a group's claims on the machine, with both of the plan's verdicts on it:
    its slot and job; ``promise_end``, when the job would be gone had it kept its
    retirement promise (epoch s); ``evict_at``, when the drain as planned for the window
    evicts it (the escalation at the window start included, epoch s); ``cut_by``, the
    seconds of the promise the escalation cuts (``promise_end − evict_at``; 0: the
    promise is kept). ``None`` where the master has no plan of the node (then
    ``promise_end`` is read from the ad's ``RetirementTimeRemaining`` when it has one)."""

    slot: str
    job_id: str | None = None
    promise_end: float | None = None
    evict_at: float | None = None
    cut_by: float | None = None

    @property
    def kept(self) -> bool | None:
        """Whether the plan keeps this claim's promise (``None``: not known)."""
        return None if self.cut_by is None else self.cut_by <= 0

    def to_json(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "job_id": self.job_id,
            "promise_end": self.promise_end,
            "evict_at": self.evict_at,
            "cut_by": self.cut_by,
        }


@dataclass(frozen=True, kw_only=True)
class Answer:
    """An owner's latest answer: the verdict, why, when it expects its instances to be gone
    (epoch s, optional: the owner's word, it never relaxes an eviction), who answered
    (the token's subject) and when (epoch s)."""

    verdict: Verdict
    reason: str
    who: str
    at: float
    expected_completion: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "reason": self.reason,
            "expected_completion": self.expected_completion,
            "who": self.who,
            "at": self.at,
        }


@dataclass(frozen=True, kw_only=True)
class Notice:
    """One notice: the machine, the group, the window it is about, the group's claims there,
    when it was issued (and rescinded, once it is), and the latest answer if any."""

    id: str
    machine: str
    group: str
    window: NoticeWindow
    claims: tuple[NoticeClaim, ...]
    issued: float
    rescinded: float | None = None
    answer: Answer | None = None

    def answered(self, answer: Answer) -> Notice:
        """This notice with ``answer`` as its latest (an earlier one no longer counts)."""
        return replace(self, answer=answer)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "machine": self.machine,
            "group": self.group,
            "window": self.window.to_json(),
            "claims": [c.to_json() for c in self.claims],
            "issued": self.issued,
            "rescinded": self.rescinded,
            "answer": None if self.answer is None else self.answer.to_json(),
        }


@dataclass(frozen=True, kw_only=True)
class NoticesPass:
    """What a pass decided: the notices to issue (new), to rescind (their ``rescinded`` time
    set; forget them once saved), the kept ones to save again (``refreshed``: their claims'
    jobs or verdicts changed, :func:`claims_changed`; no event) and every notice in force
    afterwards, by id (the issued ones included, answers of the kept ones kept)."""

    issued: tuple[Notice, ...]
    rescinded: tuple[Notice, ...]
    held: Mapping[str, Notice]
    refreshed: tuple[Notice, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether a notice was issued or rescinded (each has its event)."""
        return bool(self.issued or self.rescinded)


class BadAnswer(ValueError):
    """An answer's body is refused (the API's 422); ``code`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _num(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def notice_from_json(doc: Mapping[str, Any]) -> Notice:
    """The :class:`Notice` that :meth:`Notice.to_json` wrote (as the store keeps it).

    Raises ``KeyError``, ``TypeError`` or ``ValueError`` for a document it did not write.
    """
    window = doc["window"]
    answer = doc.get("answer")
    start = _num(window["start"])
    issued = _num(doc["issued"])
    if start is None or issued is None:
        raise TypeError("a notice's window start and issue time are numbers")
    return Notice(
        id=str(doc["id"]),
        machine=str(doc["machine"]),
        group=str(doc["group"]),
        window=NoticeWindow(start=start, duration=_num(window.get("duration"))),
        claims=tuple(
            NoticeClaim(
                slot=str(c["slot"]),
                job_id=c["job_id"] if isinstance(c.get("job_id"), str) else None,
                promise_end=_num(c.get("promise_end")),
                evict_at=_num(c.get("evict_at")),
                cut_by=_num(c.get("cut_by")),
            )
            for c in doc.get("claims", ())
        ),
        issued=issued,
        rescinded=_num(doc.get("rescinded")),
        answer=None
        if answer is None
        else Answer(
            verdict=Verdict(answer["verdict"]),
            reason=str(answer["reason"]),
            who=str(answer["who"]),
            at=float(answer["at"]),
            expected_completion=_num(answer.get("expected_completion")),
        ),
    )


def notice_id(machine: str, group: str, window: NoticeWindow, issued: float) -> str:
    """A notice's id: stable for one (machine, group, window, issue time), a new one when
    the window moves or the notice is issued again later."""
    key = f"{machine}\0{group}\0{window.start!r}\0{window.duration!r}\0{issued!r}"
    return "n-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def check_answer(body: object, *, window: NoticeWindow, now: float) -> tuple[str, float | None]:
    """The ``reason`` and ``expected_completion`` of an answer's JSON body, about a notice
    of ``window``, at ``now`` (epoch s).

    Raises :class:`BadAnswer` (``notice.bad_body``: not an object or an unknown field;
    ``notice.bad_reason``: missing, not a string, empty, over :data:`MAX_REASON_BYTES` or
    with a control character; ``notice.bad_expected_completion``: not a finite number,
    more than :data:`PLAUSIBLE_YEARS` ahead of ``now`` (the message names the unit it was
    written in when it reads as a plausible time in milliseconds, microseconds or
    nanoseconds), or after
    the window ends: an answer says when the group will be gone, and later than the end is
    no use to anyone; an open-ended window sets no bound).
    """
    if not isinstance(body, Mapping):
        raise BadAnswer("notice.bad_body", "the body must be a JSON object")
    unknown = sorted(set(body) - {"reason", "expected_completion"})
    if unknown:
        raise BadAnswer("notice.bad_body", f"unknown fields: {', '.join(map(str, unknown))}")
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise BadAnswer("notice.bad_reason", "reason is required (a non-empty string)")
    if len(reason.encode()) > MAX_REASON_BYTES:
        raise BadAnswer("notice.bad_reason", f"reason is longer than {MAX_REASON_BYTES} bytes")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in reason):
        raise BadAnswer("notice.bad_reason", "reason has a control character")
    expected = body.get("expected_completion")
    if expected is None:
        return reason, None
    if isinstance(expected, bool) or not isinstance(expected, int | float):
        raise BadAnswer("notice.bad_expected_completion", "expected_completion must be a number")
    if not math.isfinite(expected):
        raise BadAnswer("notice.bad_expected_completion", "expected_completion must be finite")
    if expected > now + PLAUSIBLE_YEARS * _YEAR:
        for factor, unit in _UNITS:
            if abs(expected / factor - now) <= PLAUSIBLE_YEARS * _YEAR:
                raise BadAnswer(
                    "notice.bad_expected_completion",
                    f"expected_completion is seconds since the epoch; {expected!r} reads as "
                    f"{iso_time(expected)} — {unit}? ({iso_time(expected / factor)})",
                )
        raise BadAnswer(
            "notice.bad_expected_completion",
            f"expected_completion {iso_time(expected)} is more than {PLAUSIBLE_YEARS} years ahead",
        )
    end = window.end
    if end is not None and expected > end:
        raise BadAnswer(
            "notice.bad_expected_completion",
            f"expected_completion {iso_time(expected)} is after the window ends "
            f"({iso_time(end)}): say when the group will be gone, by the window's end",
        )
    return reason, float(expected)


def group_claim(ad: object) -> bool:
    """Whether a slot ad is a claim of a job group, as :func:`claims_of_slots` reads one:
    a string ``JobGroup`` and a string ``Name``."""
    if not isinstance(ad, Mapping):
        return False
    group = ad.get("JobGroup")
    return isinstance(group, str) and bool(group) and isinstance(ad.get("Name"), str)


def group_claimed(slots: object) -> bool:
    """Whether a node's slot ads hold a claim of a job group (:func:`group_claim`): without
    one, :func:`claims_of_slots` finds none, whatever else it is given."""
    if not isinstance(slots, Sequence) or isinstance(slots, str | bytes):
        return False
    return any(group_claim(ad) for ad in slots)


def claims_of_slots(
    slots: object, *, now: float, planned: Iterable[Mapping[str, Any]] = ()
) -> dict[str, tuple[NoticeClaim, ...]]:
    """The claims per job group from a node's slot ads: each dynamic slot with a string
    ``JobGroup``, with the verdicts of its entry in ``planned`` (by slot name: the node's
    blockers as the plan reads them for the window and the escalation the master will
    apply, :meth:`slots.DrainForecast.blockers`; their ``promise_end``, ``evict_at`` and
    ``cut_by``). A slot ``planned`` does not list gets its promise end ``now +
    RetirementTimeRemaining`` when the ad has it, and no verdict."""
    found: dict[str, list[NoticeClaim]] = {}
    if not isinstance(slots, Sequence) or isinstance(slots, str | bytes):
        return {}
    verdicts = {entry.get("slot"): entry for entry in planned if isinstance(entry, Mapping)}
    for ad in slots:
        if not group_claim(ad):
            continue
        group, name = ad["JobGroup"], ad["Name"]
        job = ad.get("JobId")
        claim = NoticeClaim(slot=name, job_id=job if isinstance(job, str) else None)
        verdict = verdicts.get(name)
        if verdict is not None:
            claim = replace(
                claim,
                promise_end=_num(verdict.get("promise_end")),
                evict_at=_num(verdict.get("evict_at")),
                cut_by=_num(verdict.get("cut_by")),
            )
        else:
            remaining = _num(ad.get("RetirementTimeRemaining"))
            if remaining is not None:
                claim = replace(claim, promise_end=now + remaining)
        found.setdefault(group, []).append(claim)
    return {g: tuple(sorted(c, key=lambda c: c.slot)) for g, c in sorted(found.items())}


def _moved(before: float | None, after: float | None) -> bool:
    if before is None or after is None:
        return before is not after
    return abs(before - after) > CLAIM_SLACK


def claims_changed(before: Iterable[NoticeClaim], after: Iterable[NoticeClaim]) -> bool:
    """Whether a kept notice's claims changed enough to be saved again: a slot or a job
    came or went, a claim's verdict turned (kept, cut or not known), or a cut claim's
    ``evict_at`` or ``cut_by`` moved by more than :data:`CLAIM_SLACK`. A kept claim's times
    read again from a newer ad are not (they move with the ads' whole seconds, and the end
    of a job past its promise moves with the clock); the claims served are the newest."""
    old = {(c.slot, c.job_id): c for c in before}
    new = {(c.slot, c.job_id): c for c in after}
    if old.keys() != new.keys():
        return True
    for key, claim in new.items():
        was = old[key]
        if was.kept is not claim.kept:
            return True
        if claim.kept is False and (
            _moved(was.evict_at, claim.evict_at) or _moved(was.cut_by, claim.cut_by)
        ):
            return True
    return False


def reconcile_notices(
    held: Mapping[str, Notice],
    windows: Mapping[str, NoticeWindow],
    claims: Mapping[str, Mapping[str, tuple[NoticeClaim, ...]]],
    *,
    now: float,
    machines: Collection[str] | None = None,
) -> NoticesPass:
    """The notices to issue, to rescind and to save again (``refreshed``: kept, their
    claims changed by :func:`claims_changed`), from the notices ``held`` (in force, by id),
    the schedule's ``windows`` (by machine) and each machine's ``claims`` by group now.

    A machine missing from ``claims`` (its ad not known) keeps its groups' claims as its
    notices held say: only a known ad with no claim of the group rescinds (a moved window
    still rescinds and reissues).

    ``machines``: only these machines' notices are reconciled, the others' kept as ``held``
    has them, which is what the whole reconcile decides for a machine whose window and
    claims have not changed since ``held`` was reconciled (a machine's notices depend on
    nothing but its own window, claims and notices held). A pass whose ads changed a few
    machines then costs those machines, not the pool.
    """
    if machines is not None:
        wanted = set(machines)
        part = reconcile_notices(
            {i: n for i, n in held.items() if n.machine in wanted},
            {m: w for m in wanted if (w := windows.get(m)) is not None},
            {m: c for m in wanted if (c := claims.get(m)) is not None},
            now=now,
        )
        others = {i: n for i, n in held.items() if n.machine not in wanted}
        return replace(part, held=others | dict(part.held))
    known: dict[str, dict[str, tuple[NoticeClaim, ...]]] = {
        machine: dict(groups) for machine, groups in claims.items()
    }
    for notice in held.values():
        if notice.machine not in claims:
            known.setdefault(notice.machine, {})[notice.group] = notice.claims
    issued: list[Notice] = []
    rescinded: list[Notice] = []
    refreshed: list[Notice] = []
    after: dict[str, Notice] = {}
    by_key = {(n.machine, n.group): n for n in held.values()}
    for (machine, group), notice in sorted(by_key.items()):
        window = windows.get(machine)
        group_claims = known[machine].get(group)
        if window is None or not group_claims or window != notice.window:
            rescinded.append(replace(notice, rescinded=now))
        else:
            fresh = after[notice.id] = replace(notice, claims=group_claims)
            if claims_changed(notice.claims, group_claims):
                refreshed.append(fresh)
    kept = {(n.machine, n.group) for n in after.values()}
    for machine, window in sorted(windows.items()):
        for group, group_claims in sorted(known.get(machine, {}).items()):
            if not group_claims or (machine, group) in kept:
                continue
            new = Notice(
                id=notice_id(machine, group, window, now),
                machine=machine,
                group=group,
                window=window,
                claims=group_claims,
                issued=now,
            )
            issued.append(new)
            after[new.id] = new
    return NoticesPass(
        issued=tuple(issued), rescinded=tuple(rescinded), held=after, refreshed=tuple(refreshed)
    )


def mesos_statuses(notices: Iterable[Notice], names: Iterable[str | None]) -> list[dict[str, Any]]:
    """Mesos's ``InverseOfferStatus`` of each notice in force on the machine spelled
    ``names`` (its hostname, its IP), sorted by group: ``framework_id.value`` the group,
    ``status`` ``ACCEPT``, ``DECLINE`` or ``UNKNOWN`` (not answered yet), ``timestamp`` the
    answer's time (else the notice's issue time) in nanoseconds."""
    wanted = {n for n in names if n}
    found = []
    for notice in sorted(notices, key=lambda n: n.group):
        if notice.machine not in wanted or notice.rescinded is not None:
            continue
        answer = notice.answer
        status = "UNKNOWN" if answer is None else answer.verdict.value.upper()
        at = notice.issued if answer is None else answer.at
        found.append(
            {
                "status": status,
                "framework_id": {"value": notice.group},
                "timestamp": {"nanoseconds": round(at * 1e9)},
            }
        )
    return found


def accepted_machines(notices: Iterable[Notice]) -> frozenset[str]:
    """The machines whose every notice in force is accepted (their latest answer), with
    at least one: the machines whose owners all said yes (``[master] on_all_accepted``)."""
    accepted: set[str] = set()
    refused: set[str] = set()
    for notice in notices:
        if notice.rescinded is not None:
            continue
        answer = notice.answer
        if answer is not None and answer.verdict is Verdict.ACCEPT:
            accepted.add(notice.machine)
        else:
            refused.add(notice.machine)
    return frozenset(accepted - refused)


def every_claim_grouped(slots: object) -> bool:
    """Whether every claim on a node (its dynamic slot ads) names its job group: only then
    do the notices of its groups speak for all of its work."""
    if not isinstance(slots, Sequence) or isinstance(slots, str | bytes):
        return False
    for ad in slots:
        if isinstance(ad, Mapping) and ad.get("SlotType") == "Dynamic":
            group = ad.get("JobGroup")
            if not isinstance(group, str) or not group:
                return False
    return True
