"""The master's events, pure: what one is, the log of the last ones kept, the filters a
subscriber asks for, and how an event is written on the wire.

Every change the master sees or makes is an :class:`Event`: a pool-wide increasing id, a
time, a dotted type (``schedule.*``, ``mode.*``, ``drain.*``, ``node.*``, ``hook.*``,
``health.*``, ``operation.*``, ``leader.*``), the machines and job groups it concerns,
its facts and a sentence for people (``text``). Events are made as :class:`Draft`\\ s
(:mod:`nodeagent.master._event_drafts` derives them from the changes), given their ids
and time when they are written (:meth:`EventLog.assign`) with the state they describe,
in the same store transaction, and kept (:meth:`EventLog.commit`) once the store holds
them. Ids have no holes: an id is taken only by an event written.

**The log.** :class:`EventLog` keeps the last ``keep`` events (10,000 by default), in
memory and in the store (collection ``events``, one member per event, keyed by its id
written on 16 digits so that the keys sort as the ids). A subscriber reads from it by
id (:meth:`EventLog.after`); one whose id is older than the oldest kept event is told
how many it missed (:class:`Gap`). The log is the subscribers' only buffer: a slow
subscriber holds nothing but its position in it, and never slows the master.

No I/O, no trio, no clock here: ``now`` is an argument.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from slots import InvalidRequest

__all__ = [
    "DEFAULT_KEEP",
    "EVENT_TYPES",
    "MAX_PER_WRITE",
    "Draft",
    "Event",
    "EventFilter",
    "EventLog",
    "Gap",
    "member_key",
]

#: Events kept by default (``[master] events_kept``).
DEFAULT_KEEP = 10_000
#: Events written by one store transaction at most, besides those of the change it
#: writes: etcd bounds the operations of a transaction (128 by default).
MAX_PER_WRITE = 24

#: Every type of event the master writes, and what it means (docs/master-api.md).
EVENT_TYPES: Mapping[str, str] = {
    "schedule.changed": "the maintenance schedule was replaced",
    "mode.changed": "machines changed mode (UP, DRAINING, DOWN)",
    "drain.recorded": "the master recorded a drain it is starting (before its commit)",
    "drain.committed": "a drain the master started was committed on its node",
    "drain.escalated": "a window opened on a node not empty: its drain evicts now",
    "drain.cancelled": "the master cancelled its drain (the machine left its window)",
    "drain.down": "a DOWN machine's node got the master's fast drain",
    "drain.started": "a node began draining (any drain: the master's, an administrator's…)",
    "drain.completed": "a node's drain completed: the node is empty",
    "drain.ended": "a node left its drain: it takes work again",
    "node.lost": "no ad from a node for its ad lifetime (plus its reboot grace after a shutdown)",
    "node.back": "a lost node sent its ad again",
    "node.shutting_down": "a node's machine is shutting down: its agent drains it (ShuttingDown)",
    "node.rebooted": "a node that was shutting down is back after its machine's reboot",
    "node.shutdown_cancelled": "a node's machine's shutdown was cancelled before it went down",
    "hook.started": "a node's completion hook started",
    "hook.succeeded": "a node's completion hook succeeded",
    "hook.failed": "a node's completion hook failed (the node stays closed)",
    "health.failing": "a node's health check failed (the node stays closed)",
    "health.passing": "a node's health check passed (the node takes work again)",
    "operation.started": "a rolling maintenance operation started",
    "operation.batch_held": "a batch of an operation is held (SLA, budget, a node unheard)",
    "operation.batch_started": "a batch of an operation started draining",
    "operation.batch_done": "a batch of an operation ended (done or failed)",
    "operation.batch_skipped": "a batch of an operation was skipped",
    "operation.paused": "an operation was paused",
    "operation.resumed": "an operation was resumed",
    "operation.ended": "an operation ended (completed, with skips, failed or cancelled)",
    "notice.issued": "a job group was given notice of its machine's window (an inverse offer)",
    "notice.rescinded": "a notice was withdrawn (machine unscheduled, group gone, window moved)",
    "notice.answered": "a job group's owner accepted or declined a notice",
    "leader.elected": "a master began leading the pool (and writing its events)",
}


def member_key(event_id: int) -> str:
    """The store's key of an event: its id on 16 digits (the keys sort as the ids)."""
    return f"{event_id:016d}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Draft:
    """An event before it is written: no id, no time yet."""

    type: str
    text: str
    machines: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)


class Event:
    """One event as written: its JSON (``data``) is made once, for every subscriber."""

    __slots__ = ("_names", "data", "groups", "id", "machines", "time", "type")

    def __init__(
        self,
        *,
        id: int,
        time: float,
        type: str,
        machines: tuple[str, ...],
        groups: tuple[str, ...],
        data: bytes,
    ) -> None:
        self.id = id
        self.time = time
        self.type = type
        self.machines = machines
        self.groups = groups
        self.data = data
        self._names: frozenset[str] | None = None

    @classmethod
    def made(cls, draft: Draft, *, event_id: int, now: float) -> Event:
        time = round(now, 3)
        value = {
            "id": event_id,
            "time": time,
            "type": draft.type,
            "machines": list(draft.machines),
            "groups": list(draft.groups),
            "text": draft.text,
            "facts": dict(draft.facts),
        }
        return cls(
            id=event_id,
            time=time,
            type=draft.type,
            machines=draft.machines,
            groups=draft.groups,
            data=orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS),
        )

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Event:
        """An event as the store holds it (:meth:`to_json`); raises ``KeyError`` or
        ``TypeError`` for one that is not."""
        return cls(
            id=int(value["id"]),
            time=float(value["time"]),
            type=str(value["type"]),
            machines=tuple(value.get("machines", ())),
            groups=tuple(value.get("groups", ())),
            data=orjson.dumps(dict(value), option=orjson.OPT_NON_STR_KEYS),
        )

    def names(self) -> frozenset[str]:
        """Every machine's name in lower case, and its first label: what a ``machine``
        filter matches (a whole name or a short one). Made once, when a filter first asks:
        an event of many machines (a schedule of 100,000 moves them in one
        ``mode.changed``) is matched by each subscriber with a filter, which compared every
        name in turn (≈ 25 ms each)."""
        names = self._names
        if names is None:
            lowered = [machine.lower() for machine in self.machines]
            names = frozenset(lowered).union([host.partition(".")[0] for host in lowered])
            self._names = names
        return names

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = orjson.loads(self.data)
        return value

    def sse(self) -> bytes:
        """The event as Server-Sent Events write it."""
        return b"id: %d\nevent: %s\ndata: %s\n\n" % (self.id, self.type.encode(), self.data)

    def jsonl(self) -> bytes:
        return self.data + b"\n"


@dataclass(frozen=True, kw_only=True, slots=True)
class Gap:
    """Events a subscriber asked for that are no longer kept: those after ``after`` up to
    ``resume`` (inclusive), ``missed`` of them. It goes on from ``resume``."""

    after: int
    resume: int

    @property
    def missed(self) -> int:
        return self.resume - self.after

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "gap",
            "after": self.after,
            "resume": self.resume,
            "missed": self.missed,
            "text": (
                f"{self.missed} events after {self.after} are no longer kept (the master "
                f"keeps the last ones only): going on after {self.resume}"
            ),
        }

    def sse(self) -> bytes:
        return b"id: %d\nevent: gap\ndata: %s\n\n" % (self.resume, orjson.dumps(self.to_json()))

    def jsonl(self) -> bytes:
        return orjson.dumps(self.to_json()) + b"\n"


_TYPE = re.compile(r"[a-z_]+(\.([a-z_]+|\*))?|\*")
_GROUP = re.compile(r"[^/\s]+/[^/\s]+/[^/\s]+")


@dataclass(frozen=True, kw_only=True, slots=True)
class EventFilter:
    """Which events a subscriber wants: ``types`` (exact types or ``drain.*``), any of
    ``machines`` (a hostname, case-insensitive, or its first label), any of ``groups``
    (``ROLE/ENV/NAME``). Empty: all."""

    types: tuple[str, ...] = ()
    machines: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    @classmethod
    def parse(
        cls, *, types: str | None = None, machines: str | None = None, groups: str | None = None
    ) -> EventFilter:
        """The filter of the query's ``type``, ``machine`` and ``group`` (each a
        comma-separated list); raises :class:`InvalidRequest` naming a bad one."""
        wanted_types = _items(types)
        for pattern in wanted_types:
            if not _TYPE.fullmatch(pattern):
                raise InvalidRequest(
                    f"type {pattern!r} is not an event type or a pattern such as drain.*"
                )
            categories = {t.partition(".")[0] for t in EVENT_TYPES}
            known = pattern in EVENT_TYPES or pattern == "*"
            if pattern.endswith(".*"):
                known = pattern.removesuffix(".*") in categories
            if not known:
                listed = ", ".join(sorted(f"{c}.*" for c in categories))
                hint = _meant(pattern, categories)
                raise InvalidRequest(f"no event type {pattern!r}: {hint}the types are {listed}")
        wanted_groups = _items(groups)
        for group in wanted_groups:
            if not _GROUP.fullmatch(group):
                raise InvalidRequest(f"group {group!r} is not ROLE/ENV/NAME")
        return cls(
            types=wanted_types,
            machines=tuple(m.lower() for m in _items(machines)),
            groups=wanted_groups,
        )

    def matches(self, event: Event) -> bool:
        if self.types and not any(fnmatch.fnmatchcase(event.type, t) for t in self.types):
            return False
        if self.machines and not any(wanted in event.names() for wanted in self.machines):
            return False
        return not self.groups or any(g in self.groups for g in event.groups)

    def __bool__(self) -> bool:
        return bool(self.types or self.machines or self.groups)


def _meant(pattern: str, categories: set[str]) -> str:
    """``did you mean …? `` for a type that is none: the close type, else the category."""
    head, dot, tail = pattern.partition(".")
    if dot and tail != "*":
        close = difflib.get_close_matches(pattern, EVENT_TYPES, n=1, cutoff=0.8)
        if close:
            return f"did you mean {close[0]}? "
    near = difflib.get_close_matches(head, categories, n=1)
    return f"did you mean {near[0]}.*? " if near else ""


def _items(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    return tuple(item.strip() for item in text.split(",") if item.strip())


class EventLog:
    """The last ``keep`` events, in order of their ids, and the next id (see the module
    docstring). Events are written in two steps: :meth:`assign` makes them (ids from
    :attr:`next_id`, changing nothing), :meth:`members` says what to write, and once the
    store holds them :meth:`commit` keeps them."""

    def __init__(self, *, keep: int = DEFAULT_KEEP) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.keep = keep
        #: The kept events are ``_events[_start:]`` (a list, not a deque: reading from
        #: an id is an index, and a slice); the dead prefix is cut once it is ``keep`` long.
        self._events: list[Event] = []
        self._start = 0
        self.next_id = 1

    def __len__(self) -> int:
        return len(self._events) - self._start

    @property
    def last_id(self) -> int:
        """The id of the last event written (0: none yet)."""
        return self.next_id - 1

    @property
    def oldest_id(self) -> int | None:
        return self._events[self._start].id if len(self) else None

    def load(self, stored: Mapping[str, Any] | None) -> None:
        """Take the events the store holds (its ``events`` collection): the last ``keep``
        of them; raises :class:`ValueError` for one that is not an event."""
        events: list[Event] = []
        for value in (stored or {}).values():
            try:
                events.append(Event.from_json(value))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"a stored event is not one: {exc}") from exc
        events.sort(key=lambda e: e.id)
        self._events, self._start = events[-self.keep :], 0
        self.next_id = (events[-1].id + 1) if events else 1

    def extend(self, stored: Iterable[Mapping[str, Any]]) -> list[Event]:
        """Keep the events written by another master (a follower's copy of the store):
        those after :attr:`last_id`, in order; returns them. A hole (an event the copy
        has not seen yet) stops at it."""
        fresh = sorted((Event.from_json(value) for value in stored), key=lambda e: e.id)
        taken = []
        for event in fresh:
            if event.id <= self.last_id:
                continue
            if len(self) and event.id != self.last_id + 1:
                break
            taken.append(event)
            self._keep(event)
        return taken

    def assign(self, drafts: Sequence[Draft], now: float) -> list[Event]:
        """The events of ``drafts``, with the ids that follow :attr:`next_id`; nothing
        is kept until :meth:`commit`."""
        return [
            Event.made(draft, event_id=self.next_id + n, now=now) for n, draft in enumerate(drafts)
        ]

    def members(self, events: Sequence[Event]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """What to write to the store for ``events``: the members to put, and those of
        the kept events they push out."""
        put = {member_key(event.id): event.to_json() for event in events}
        over = max(0, min(len(self) + len(events) - self.keep, len(self)))
        gone = tuple(member_key(e.id) for e in self._events[self._start : self._start + over])
        return put, gone

    def commit(self, events: Sequence[Event]) -> None:
        """Keep ``events`` (written): the oldest go beyond ``keep``."""
        for event in events:
            if event.id != self.next_id:
                raise ValueError(f"event {event.id} is not the next one ({self.next_id})")
            self._keep(event)

    def _keep(self, event: Event) -> None:
        self._events.append(event)
        self.next_id = event.id + 1
        if len(self) > self.keep:
            self._start += 1
            if self._start >= self.keep:
                del self._events[: self._start]
                self._start = 0

    def after(self, since: int, *, limit: int | None = None) -> tuple[Gap | None, list[Event]]:
        """The events after id ``since`` (at most ``limit``): a :class:`Gap` first when
        some of them are no longer kept, then those kept, in order."""
        if not len(self) or since >= self.last_id:
            return None, []
        oldest = self._events[self._start].id
        gap = Gap(after=since, resume=oldest - 1) if since < oldest - 1 else None
        first = self._start + max(0, since + 1 - oldest)
        end = len(self._events) if limit is None else min(len(self._events), first + limit)
        return gap, self._events[first:end]

    def last(self, count: int, wanted: EventFilter) -> list[Event]:
        """The last ``count`` kept events ``wanted`` matches, in order."""
        found: list[Event] = []
        for event in reversed(self._events[self._start :]):
            if len(found) >= count:
                break
            if wanted.matches(event):
                found.append(event)
        found.reverse()
        return found
