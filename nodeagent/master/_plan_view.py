"""The plan view: ``GET /v1/maintenance/plan``'s reply, made from what the master holds.

Pure (no trio, no I/O, ``now`` an argument). :class:`PlanInputs` is what a plan is made
of, read from the master at one instant: the schedule's machines, the ad store's lookups,
the drain records and the drains being started, when each machine entered its window, the
policy and the counters. :class:`PlanView` keeps the plan's caches from one reply to the
next — the scheduled machines of the schedule, each machine's plan and row state
(:mod:`._plan`) while what they are made of holds, each row's JSON text
(:mod:`._row_json`) — and assembles the reply: the totals over every machine (or the
machines a :class:`PlanSelect` selects), the ``late`` rows in window-start order, the rows
after a cursor, ``limit`` and ``matched``, as data (:meth:`PlanView.reply`), or as the
text the API sends, made a chunk at a time: one JSON document (:meth:`PlanView.document`,
:meth:`PlanView.body` in one go) or JSON lines (:meth:`PlanView.stream`).

**The encoding.** The rows are written from their templates and joined with the rest as
orjson writes it (:class:`~fastapi.responses.JSONResponse`'s JSON, several times faster:
the plan of 10,000 machines is ≈ 34 MB). orjson refuses integers beyond 64 bits, which an
agent's ad could carry: such a row (or the totals holding one) is written by :mod:`json`
as the response class would.

**A drain record** is read here only by :func:`_record_of` and :func:`_escalated` (which
record a machine has, and whether it says the node was told of its escalation); the plan
(:mod:`._plan`) reads it further.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import heapq
import itertools
import json
import math
import operator
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from nodeagent.master._adstore import AdEntry
from nodeagent.master._drains import STARTING, DrainRecord
from nodeagent.master._fleet import ScheduleFigures, ledger_figures, schedule_figures
from nodeagent.master._maintenance import MachineStatus, suggestions
from nodeagent.master._notices import Notice
from nodeagent.master._pass_index import changed_machines
from nodeagent.master._plan import (
    MachinePlan,
    PlanPolicy,
    PlanTotals,
    RowFigures,
    RowState,
    ScheduledMachine,
    machine_plan,
    row_dict,
    row_figures,
    row_state,
)
from nodeagent.master._plan_ledger import AdChanges, PlanLedger
from nodeagent.master._row_json import RowJson
from slots import Escalation

__all__ = [
    "CHUNK",
    "PlanInputs",
    "PlanQueryError",
    "PlanSelect",
    "PlanView",
    "Record",
    "chunk_starts",
    "cursor_of",
    "reads_totals_kept",
]

#: A drain record of the master's, as the view reads it (:func:`_record_of`, :func:`_escalated`).
Record = DrainRecord


def _record_of(drains: Mapping[str, Record], starting: Collection[str], key: str) -> Record | None:
    """The machine's drain record, :data:`STARTING` while the master starts its drain."""
    return drains.get(key) or (STARTING if key in starting else None)


def _escalated(record: Record | None) -> bool:
    """Whether the record says the node was told of the escalation at its window."""
    return record is not None and record.escalated


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanInputs:
    """What a plan is made of, read from the master at one instant (``now``).

    ``statuses``: the schedule's machines in schedule order
    (:meth:`~nodeagent.master._maintenance.MaintenanceState.machines`; one without a
    window has no row). ``find``: the ads matching a machine id's hostname and ip
    (:meth:`~nodeagent.master._adstore.AdStore.find`, which hands out the same list until
    one of them changes). ``is_lost``: whether an ad is lost at ``now``
    (:meth:`~nodeagent.master._adstore.AdStore.lost_at`). ``drains``: the master's drain
    records by machine key; ``starting``: the machines whose drain the master is starting
    (phase 1 sent, no record yet). ``window_since``: when each machine entered its window,
    by key. ``counters`` (the master's, by name) and ``nodes`` (the ads held) are shown in
    the totals. ``notices``: the notices in force by machine name
    (:attr:`~nodeagent.master._plan.ScheduledMachine.name`), each machine's by group.
    ``is_rebooting``: whether an ad's node is rebooting at ``now``
    (:meth:`~nodeagent.master._adstore.AdStore.rebooting_at`; ``None``: none is).
    ``changes``: what the view is told of the ads that arrived or went, for the totals it
    keeps between replies (:mod:`._plan_ledger`; ``None``: a ``late`` reply and
    :meth:`PlanView.schedule_figures` read every machine's row); with them, ``policy``
    and ``window_since`` are compared by identity (the master replaces them, never
    changes them in place), and ``drains`` and ``starting`` are read at every reply.
    """

    statuses: tuple[MachineStatus, ...]
    find: Callable[[str | None, str | None], list[AdEntry]]
    is_lost: Callable[[AdEntry], bool]
    drains: Mapping[str, Record]
    starting: Collection[str]
    window_since: Mapping[str, float]
    policy: PlanPolicy
    counters: Mapping[str, int]
    nodes: int
    notices: Mapping[str, tuple[Notice, ...]] = field(default_factory=dict)
    is_rebooting: Callable[[AdEntry], bool] | None = None
    changes: AdChanges | None = None


#: Machines a chunk of the streamed plan is made of; the first chunk, of at most
#: :data:`FIRST_CHUNK`, so that the first rows leave at once, and each next one twice the
#: one before, up to :data:`CHUNK` (:func:`chunk_starts`): a reply's slice, which ends
#: once a chunk ends past its time, then overruns it by twice what it made at most. A
#: chunk is made in one go, and the rows a reply does not find made (their nodes'
#: blockers read back) take ≈ 1–1.5 ms each on a loaded master: 32 of them hold the loop
#: for tens of ms, where 256 held it for a third of a second.
CHUNK = 32
FIRST_CHUNK = 16


def chunk_starts(count: int, chunk: int) -> list[int]:
    """Where each chunk of ``count`` machines after the first starts, then ``count``: the
    first of ``min(chunk, FIRST_CHUNK)`` machines, each next twice the one before, at most
    ``chunk``."""
    starts: list[int] = []
    most = max(1, chunk)
    at, size = 0, min(most, FIRST_CHUNK)
    while at + size < count:
        at += size
        starts.append(at)
        size = min(most, 2 * size)
    starts.append(count)
    return starts


#: How long after a reply wrote a machine's row the reconcile passes keep its template
#: current (seconds; :meth:`PlanView.keeps_row`), as the totals are kept for a while
#: after a summary read them.
ROWS_KEPT_FOR = 300.0

#: The most rows a reply keeps (:meth:`PlanView.keeps_row`), the first it writes: the
#: others (of the whole plan of a large pool) it makes for itself and lets go of once
#: written, their templates and their nodes' blockers (≈ 3.5–5.5 KiB a machine, kept
#: current by the passes for :data:`ROWS_KEPT_FOR` at ≈ 0.4 ms a machine whose piece ends:
#: 350–550 MiB at 100,000); the next such reply makes them again (≈ 0.2–0.6 ms a row).
ROWS_KEPT_MOST = 30_000


class PlanView:
    """The plan's caches, and the replies made with them (see the module docstring).

    One call at a time (the master's event loop; nothing here is thread-safe). A streamed
    reply (:meth:`stream`) is made a chunk at a time, and reconcile passes and other
    replies may use the view between two of its chunks: every cached row is checked
    against what it is made of before it is used, and a stream whose schedule was replaced
    meanwhile finishes with caches of its own.
    """

    def __init__(
        self,
        *,
        answer_limit: int | None = None,
        answer_seconds: float | None = None,
        work_clock: Callable[[], float] = time.perf_counter,
        rows_kept_most: int = ROWS_KEPT_MOST,
    ) -> None:
        #: The schedule's statuses and the scheduled machines made of them.
        self._scheduled: tuple[tuple[MachineStatus, ...], tuple[ScheduledMachine, ...]]
        self._scheduled = ((), ())
        #: Each scheduled machine's row as JSON text, by key.
        self._row_texts: dict[str, RowJson] = {}
        #: Each scheduled machine's plan and row state, and what they were made of, by key,
        #: with and without blockers (a summary and a scrape between two whole plans).
        self._plan_cache: dict[bool, dict[str, tuple[Any, ...]]] = {True: {}, False: {}}
        #: The totals and late rows kept between replies (:meth:`ledger`).
        self._ledger: PlanLedger | None = None
        #: The most shares a reply of the totals kept remakes (those of the machines that
        #: changed or came due; ``None``: all of them): the others are counted as they
        #: were, and the reply says how many (``behind``).
        self.answer_limit = answer_limit
        #: And the longest it spends remaking them, by ``work_clock`` (``None``: no bound
        #: but the count): a share whose forecast must be made costs ≈ 1 ms on a loaded
        #: master, one whose forecast is made a tenth of that.
        self.answer_seconds = answer_seconds
        self.work_clock = work_clock
        #: The most rows a reply keeps (:data:`ROWS_KEPT_MOST`).
        self.rows_kept_most = rows_kept_most
        #: Where each scheduled machine is, for a filtered or paged reply (:meth:`_catalog`).
        self._catalog_of: _Catalog | None = None

    @property
    def row_texts(self) -> Mapping[str, RowJson]:
        """Each scheduled machine's row as JSON text (its templates), by key."""
        return self._row_texts

    def scheduled(self, statuses: tuple[MachineStatus, ...]) -> tuple[ScheduledMachine, ...]:
        """The machines with a window, in schedule order; made again when ``statuses``
        change, which lets go of the cached rows of the machines no longer scheduled. A
        machine whose status is kept, or whose window, mode and id are, keeps its object
        (:func:`_carried`): what is cached of it (its plan, row, share) is then still
        found, and a change costs the machines it changes, not the pool."""
        held, before = self._scheduled
        if statuses is held:
            return before
        machines = _carried(before, statuses)
        if len(machines) == len(before) and all(map(operator.is_, machines, before)):
            machines = before  # the same machines (a mode that changed and came back)
        self._scheduled = (statuses, machines)
        if machines is before:
            return machines
        keys = {machine.key for machine in machines}
        if not keys.issuperset([machine.key for machine in before]):  # some left the schedule
            self._row_texts = {k: v for k, v in self._row_texts.items() if k in keys}
            self._plan_cache = {
                blockers: {k: v for k, v in cache.items() if k in keys}
                for blockers, cache in self._plan_cache.items()
            }
        return machines

    def _catalog(self, scheduled: tuple[ScheduledMachine, ...]) -> _Catalog:
        """Where each of ``scheduled`` is (:class:`_Catalog`), made once per schedule."""
        catalog = self._catalog_of
        if catalog is None or catalog.machines is not scheduled:
            catalog = self._catalog_of = _Catalog(scheduled)
        return catalog

    @property
    def kept(self) -> PlanLedger | None:
        """The ledger as the last reply left it (``None``: none kept)."""
        return self._ledger

    def ledger(
        self,
        inputs: PlanInputs,
        now: float,
        *,
        limit: int | None = None,
        reread: bool = True,
        enough: Callable[[], bool] | None = None,
    ) -> PlanLedger | None:
        """The totals and late rows kept between replies, brought to ``now``
        (:class:`~nodeagent.master._plan_ledger.PlanLedger`: every machine's share the
        first time, then those of the machines that changed or came due; with ``limit``,
        at most that many of those remade, or fewer once ``enough`` says so, and with
        ``reread=False`` none of the machines read at every call); ``None`` without
        ``inputs.changes``, and under the ``immediate`` drain policy (no row is kept: the
        drain start is ``now``)."""
        changes, policy = inputs.changes, inputs.policy
        if changes is None or policy.drain_policy == "immediate":
            self._ledger = None
            return None
        scheduled = self.scheduled(inputs.statuses)
        world = (
            scheduled,
            policy,
            inputs.window_since,
            inputs.is_rebooting is None,
            changes.lifetime,
            changes.reboot_grace,
        )
        ledger = self._ledger
        if ledger is not None and not ledger.holds(world, now) and now >= ledger.now:
            # the schedule, a mode or a window's entry changed: the others' shares kept
            changed = changed_machines(ledger.world, world, by_machine=(2,))
            if changed is not None:
                ledger = self._ledger = ledger.carried(world, scheduled, changed)
        if ledger is None or not ledger.holds(world, now):
            ledger = self._ledger = PlanLedger(world, scheduled)
        escalation = Escalation(policy.escalation)
        ledger.bring_to(
            now,
            changes=changes,
            held={*inputs.drains, *inputs.starting},
            notices=inputs.notices,
            rows=lambda machines: self.rows(
                inputs, now, with_blockers=False, escalation=escalation, only=machines
            ),
            after_window=lambda plan: _after_window(plan, now),
            limit=limit,
            reread=reread,
            enough=enough,
            forget=self._forget_plan,
        )
        return ledger

    def _forget_plan(self, key: str) -> None:
        """Drop the plans kept (:meth:`rows`) of machine ``key``, whose nodes' ads arrived,
        went or moved on since the ledger last heard of the ads: the store no longer
        finds the nodes they were made of, so all they could still do is keep the replaced
        ads alive (100,000 of them after a whole plan, as the pool pushes); the ledger
        remakes or swaps what it keeps of them."""
        for cache in self._plan_cache.values():
            cache.pop(key, None)

    def _answer_ledger(self, inputs: PlanInputs, now: float) -> PlanLedger | None:
        """:meth:`ledger` as a reply reads it: at most :attr:`answer_limit` shares remade,
        for at most :attr:`answer_seconds`."""
        enough = self._within(self.answer_seconds)
        return self.ledger(inputs, now, limit=self.answer_limit, enough=enough)

    def _within(self, seconds: float | None) -> Callable[[], bool] | None:
        """Whether ``seconds`` of :attr:`work_clock` have passed since this call, as
        :meth:`ledger` asks it (``None``: no bound)."""
        if seconds is None:
            return None
        clock, until = self.work_clock, self.work_clock() + seconds
        return lambda: clock() >= until

    def warm(
        self, inputs: PlanInputs, now: float, *, limit: int, seconds: float | None = None
    ) -> bool:
        """Bring the ledger (:meth:`ledger`) to ``now`` by at most ``limit`` shares (made
        within about ``seconds`` of :attr:`work_clock`, if given), so that a caller may do
        it in steps before a reply that reads it; whether it is whole now (the reply then
        remakes only what changes meanwhile). True at once when no ledger is kept."""
        ledger = self.ledger(inputs, now, limit=limit, reread=False, enough=self._within(seconds))
        return ledger is None or ledger.complete

    def schedule_figures(self, inputs: PlanInputs, now: float) -> ScheduleFigures:
        """The scheduled machines' figures at ``now`` (what the metrics count:
        :func:`~nodeagent.master._fleet.schedule_figures`), from the ledger
        (:meth:`ledger`, at most :attr:`answer_limit` shares remade: ``behind`` says how
        many it left) and the rows of its volatile machines, or from every row."""
        ledger = self._answer_ledger(inputs, now)
        if ledger is None:
            return schedule_figures(self.rows(inputs, now, with_blockers=True), now)
        volatile = self.rows(
            inputs,
            now,
            with_blockers=False,
            escalation=Escalation(inputs.policy.escalation),
            only=_in_order(ledger, ledger.volatile),
        )
        return ledger_figures(ledger, volatile, now)

    def plans(self, inputs: PlanInputs, now: float) -> list[MachinePlan]:
        """Every scheduled machine's plan (:func:`~nodeagent.master._plan.machine_plan`),
        made anew: what a reconcile pass acts on."""
        is_lost, find, policy = inputs.is_lost, inputs.find, inputs.policy
        drains, starting, since = inputs.drains, inputs.starting, inputs.window_since
        return [
            machine_plan(
                machine,
                find(machine.id.hostname, machine.id.ip),
                is_lost=is_lost,
                now=now,
                policy=policy,
                drain_record=_record_of(drains, starting, machine.key),
                window_since=since.get(machine.key),
            )
            for machine in self.scheduled(inputs.statuses)
        ]

    def rows(
        self,
        inputs: PlanInputs,
        now: float,
        *,
        with_blockers: bool,
        escalation: Escalation | None = None,
        only: Sequence[ScheduledMachine] | None = None,
        remember: bool = True,
    ) -> list[tuple[MachinePlan, RowState]]:
        """Every scheduled machine's plan and row state at ``now`` (schedule order), or
        those of the machines ``only`` (scheduled machines of ``inputs.statuses``).
        ``remember=False``: those made now are not kept (a reply that keeps no row).

        Both are kept from the previous call while what they are made of holds: the
        machine, its nodes' ads (the same list) and whether each is lost, the drain record
        (the same object) and whether it is escalated, when the machine entered its window,
        ``with_blockers``, the policy (the same object) and ``escalation`` (the policy's by
        default). A plan of 10,000 machines then makes anew only those of the machines that
        changed. Under the ``immediate`` drain policy the drain start is ``now``: nothing is
        kept.
        """
        scheduled = self.scheduled(inputs.statuses)  # first: a new schedule prunes the cache
        is_lost, find = inputs.is_lost, inputs.find
        drains, starting, window_since = inputs.drains, inputs.starting, inputs.window_since
        policy = inputs.policy
        if escalation is None:
            escalation = Escalation(policy.escalation)
        cache = self._plan_cache[with_blockers]
        keep = policy.drain_policy != "immediate"
        out = []
        for machine in scheduled if only is None else only:
            key = machine.key
            nodes = find(machine.id.hostname, machine.id.ip)
            record = _record_of(drains, starting, key)
            lost = tuple([is_lost(n) for n in nodes])
            if inputs.is_rebooting is not None:
                lost += tuple([inputs.is_rebooting(n) for n in nodes])
            since = window_since.get(key)
            escalated = _escalated(record)
            notices = inputs.notices.get(machine.name, ())
            cached = cache.get(key)
            if (
                keep
                and cached is not None
                and cached[0] is machine
                and cached[1] is nodes
                and cached[2] is record
                and cached[3] == (escalated, lost, since, notices)
                and cached[4] is policy
                and cached[5] is escalation
                and now < cached[7]
            ):
                out.append(cached[6])
                continue
            plan = machine_plan(
                machine,
                nodes,
                is_lost=is_lost,
                now=now,
                policy=policy,
                drain_record=record,
                window_since=since,
            )
            state = row_state(
                plan,
                is_lost=is_lost,
                with_blockers=with_blockers,
                window_since=since,
                escalation=escalation,
                notices=notices,
                is_rebooting=inputs.is_rebooting,
            )
            if remember:
                cache[key] = (
                    machine,
                    nodes,
                    record,
                    (escalated, lost, since, notices),
                    policy,
                    escalation,
                    (plan, state),
                    math.inf if plan.closing is None else plan.closing.until,
                )
            out.append((plan, state))
        return out

    def keeps_row(self, key: str, now: float) -> bool:
        """Whether a reply wrote the machine's row within :data:`ROWS_KEPT_FOR` of
        ``now``: a reconcile pass then makes its template with its forecast
        (:meth:`prepare_row`), blockers and all, so that the next such reply finds it made.
        The others' forecasts are made without their blockers (about half the cost), and
        the reply that first writes their rows makes the rest."""
        text = self._row_texts.get(key)
        return text is not None and now - text.read_at <= ROWS_KEPT_FOR

    def prepare_row(self, plan: MachinePlan, inputs: PlanInputs, now: float) -> None:
        """Make the template of the machine's row of the whole plan (with blockers), so
        that a reply finds it made (a reconcile pass calls this for the nodes whose
        forecast it made and whose rows were read lately: :meth:`keeps_row`). A row
        orjson cannot write is left to the reply."""
        state = row_state(
            plan,
            is_lost=inputs.is_lost,
            with_blockers=True,
            window_since=inputs.window_since.get(plan.key),
            escalation=inputs.policy.escalation,
            notices=inputs.notices.get(plan.machine.name, ()),
            is_rebooting=inputs.is_rebooting,
        )
        text = self._row_texts.get(plan.key)
        if text is None:
            text = self._row_texts[plan.key] = RowJson()
        with contextlib.suppress(orjson.JSONEncodeError):  # written by json (see body)
            if text.fast(plan, state, now) is None:  # a row with a cut: the other template
                text.prepare(plan, state)

    def reply(
        self,
        inputs: PlanInputs,
        now: float,
        *,
        with_blockers: bool = True,
        late: bool = False,
        limit: int | None = None,
        select: PlanSelect | None = None,
    ) -> dict[str, Any]:
        """The plan at ``now`` as data (``GET /v1/maintenance/plan``'s JSON).

        ``totals`` count every scheduled machine, or with ``select`` the machines it
        selects (:class:`PlanSelect`: by window, by name), whose rows alone are made.
        ``machines`` holds every row (schedule order) or, with ``late``, only the rows of
        machines late by their promises or that the plan will escalate (window-start
        order); those after ``select``'s cursor; ``limit`` keeps the first ``limit`` of
        them. ``matched`` is how many rows there were before ``limit``. ``after_window``
        lists every (selected) machine still out of service after its window (DRAINING or
        DOWN past its end; schedule order), whatever ``late`` and ``limit``. With a
        ``select`` that says anything, ``next`` is the cursor of the next page (``None``:
        no rows after these).

        Raises :class:`PlanQueryError` (409 ``plan.cursor_stale``) for a cursor whose
        machine is no longer scheduled, or no longer at the window it had.
        """
        made = self._made(inputs, now, late=late, select=select)
        policy = inputs.policy
        kept = self._kept_page(
            inputs, now, made, with_blockers=with_blockers, late=late, limit=limit
        )
        if kept is not None:
            rows, acc = kept
            matched = acc.matched
        else:
            acc = _Acc(now, Escalation(policy.escalation))
            rows = self._rows_of(
                inputs,
                now,
                made.machines,
                at=0,
                made=made,
                acc=acc,
                with_blockers=with_blockers,
                late=late,
                encoded=False,
            )
            if late:
                rows.sort(key=_order)
            matched = len(rows)
            if limit is not None:
                del rows[limit:]
        reply = {
            "now": now,
            "policy": _policy(policy),
            "machines": [self._write(row, now, encoded=False) for row in rows],
            "matched": matched,
            "totals": _totals(acc.added, inputs),
            "after_window": acc.ended,
        }
        if made.paged:
            reply["next"] = _next(rows[-1] if rows else None, matched, limit)
        return reply

    def body(
        self,
        inputs: PlanInputs,
        now: float,
        *,
        with_blockers: bool = True,
        late: bool = False,
        limit: int | None = None,
        select: PlanSelect | None = None,
    ) -> bytes:
        """:meth:`reply` as the JSON text the API sends: :meth:`document`'s chunks, made in
        one go. Raises :class:`PlanQueryError` as :meth:`reply` does."""
        return b"".join(
            self.document(
                inputs, now, with_blockers=with_blockers, late=late, limit=limit, select=select
            )
        )

    def document(
        self,
        inputs: PlanInputs,
        now: float,
        *,
        with_blockers: bool = True,
        late: bool = False,
        limit: int | None = None,
        select: PlanSelect | None = None,
        chunk: int = CHUNK,
    ) -> Iterator[bytes]:
        """:meth:`reply` as one JSON document (``GET /v1/maintenance/plan``), made as
        :meth:`stream` makes its lines, a chunk at a time: ``now`` and ``policy`` first,
        then ``machines``, a chunk's rows at a time, then ``matched``, ``totals``,
        ``after_window`` and, with a ``select`` that says anything, ``next``. Joined, the
        chunks are the document (see the module docstring for its encoding). Raises
        :class:`PlanQueryError` (as :meth:`reply`) before the first item."""
        made = self._made(inputs, now, late=late, select=select)
        return self._chunks(
            _Document(paged=made.paged),
            inputs,
            now,
            made,
            with_blockers=with_blockers,
            late=late,
            limit=limit,
            chunk=chunk,
        )

    def stream(
        self,
        inputs: PlanInputs,
        now: float,
        *,
        with_blockers: bool = True,
        late: bool = False,
        limit: int | None = None,
        select: PlanSelect | None = None,
        chunk: int = CHUNK,
    ) -> Iterator[bytes]:
        """:meth:`reply` as JSON lines (``format=jsonl``), made ``chunk`` machines at a
        time (the first chunk at most :data:`FIRST_CHUNK`, each next twice the one before:
        :func:`chunk_starts`): the first line ``{"plan":
        {"now", "policy"}}``, a line ``{"row": …}`` a row, the last ``{"end": {"matched",
        "totals", "after_window", "next"}}``; a row orjson cannot write is written by
        :mod:`json`. Each item is the text of one chunk (empty while ``late`` rows are
        being made: they are sent in window-start order once all are made), so that the
        caller serves others between two chunks.

        Between two chunks a reconcile pass or another reply may use the view: each row
        is taken from the caches only while what it is made of holds (as in :meth:`rows`),
        and a stream whose schedule was replaced meanwhile makes the rest of its rows with
        caches of its own, leaving the view's to the new schedule. ``inputs`` and ``now``
        stay those of the first chunk.

        Raises :class:`PlanQueryError` (as :meth:`reply`) before the first item.
        """
        made = self._made(inputs, now, late=late, select=select)
        return self._chunks(
            _JsonLines(),
            inputs,
            now,
            made,
            with_blockers=with_blockers,
            late=late,
            limit=limit,
            chunk=chunk,
        )

    def _made(
        self, inputs: PlanInputs, now: float, *, late: bool, select: PlanSelect | None
    ) -> _Selected:
        """The machines the plan is made of and, with a cursor, where its rows start.
        Raises :class:`PlanQueryError` for a stale cursor, a window or a machine that
        is not scheduled (:meth:`PlanSelect.check_known`)."""
        scheduled = self.scheduled(inputs.statuses)
        machines: Sequence[ScheduledMachine] = scheduled
        index: dict[int, int] | None = None
        if select is not None and (select.windows is not None or select.names is not None):
            chosen = self._catalog(scheduled).select(select)
            machines = [scheduled[i] for i in chosen]
            index = {id(scheduled[i]): i for i in chosen}
        start: tuple[float, int] | None = None
        if select is not None and select.cursor is not None:
            key, window_start = select.cursor
            found = self._catalog(scheduled).position.get(key)
            if found is None or scheduled[found].window_start != window_start:
                raise PlanQueryError(
                    "plan.cursor_stale",
                    "the cursor's machine is no longer scheduled at that window: "
                    "ask the first page again",
                    status=409,
                )
            start = (window_start if late else 0.0, found)
        return _Selected(
            statuses=inputs.statuses,
            machines=machines,
            index=index,
            start=start,
            paged=select is not None and select.given,
        )

    def _chunks(
        self,
        framing: _Framing,
        inputs: PlanInputs,
        now: float,
        made: _Selected,
        *,
        with_blockers: bool,
        late: bool,
        limit: int | None,
        chunk: int,
    ) -> Iterator[bytes]:
        """The chunks of :meth:`stream` or :meth:`document`, as ``framing`` writes them.

        A ``late`` reply or a page of every machine reads the ledger (:func:`_from_ledger`),
        which is brought to ``now`` here, before the first chunk is asked for: meanwhile
        the ledger may be brought further (:meth:`warm`), and a ledger read at an instant
        before its own is made anew (every machine's share)."""
        kept = self._kept_page(
            inputs, now, made, with_blockers=with_blockers, late=late, limit=limit
        )
        return self._chunks_made(
            framing,
            inputs,
            now,
            made,
            kept,
            with_blockers=with_blockers,
            late=late,
            limit=limit,
            chunk=chunk,
        )

    def _chunks_made(
        self,
        framing: _Framing,
        inputs: PlanInputs,
        now: float,
        made: _Selected,
        kept: tuple[list[_Row], _Acc] | None,
        *,
        with_blockers: bool,
        late: bool,
        limit: int | None,
        chunk: int,
    ) -> Iterator[bytes]:
        policy = inputs.policy
        yield framing.head({"now": now, "policy": _policy(policy)})
        room = self.rows_kept_most  # the rows this reply may still keep
        if kept is not None:
            page, acc = kept
            for i in range(0, len(page), chunk):
                out, room = self._written(page[i : i + chunk], now, room)
                yield framing.rows(out)
            end = {
                "matched": acc.matched,
                "totals": _totals(acc.added, inputs),
                "after_window": acc.ended,
                "next": _next(page[-1] if page else None, acc.matched, limit),
            }
            yield framing.end(end)
            return
        acc = _Acc(now, Escalation(policy.escalation))
        view = self
        machines = made.machines
        sent = 0
        last: _Row | None = None
        starts = chunk_starts(len(machines), chunk)
        for at, stop in itertools.pairwise([0, *starts] if machines else []):
            if view is self and not self._holds(made.statuses):
                view = PlanView()  # the schedule moved on: caches of the stream's own
                view.scheduled(made.statuses)
            part = machines[at:stop]
            # the rows it may write (late ones are written once sorted: kept or not then)
            writes = len(part) if limit is None else min(len(part), max(0, limit - sent))
            keep = late or writes <= room
            room -= writes if keep and not late else 0
            rows = view._rows_of(
                inputs,
                now,
                part,
                at=at,
                made=made,
                acc=acc,
                with_blockers=with_blockers,
                late=late,
                writes=None if late or limit is None else limit - sent,
                keep=keep,
            )
            if late:
                yield b""
                continue
            out = []
            for row in rows:
                if limit is not None and sent >= limit:
                    break
                out.append(view._text(row, now, keep=keep))
                sent += 1
                last = row
            yield framing.rows(out)
        rows = acc.rows
        if late:
            rows.sort(key=_order)
            if limit is not None:
                view._let_go([row[1] for row in rows[limit:]], now)
                del rows[limit:]
            for i in range(0, len(rows), chunk):
                page = rows[i : i + chunk]
                out, room = view._written(page, now, room)
                yield framing.rows(out)
                last = page[-1]
        matched = acc.matched
        end = {
            "matched": matched,
            "totals": _totals(acc.added, inputs),
            "after_window": acc.ended,
            "next": _next(last, matched, limit),
        }
        yield framing.end(end)

    def _text(self, row: _Row, now: float, *, keep: bool = True) -> bytes:
        """The row's JSON text: written from its templates, or by :mod:`json` for a row
        orjson refuses (``keep``: see :meth:`_write`)."""
        try:
            text: bytes = self._write(row, now, keep=keep)
        except orjson.JSONEncodeError:
            text = _json_body(self._write(row, now, encoded=False))
        return text

    def _written(self, rows: list[_Row], now: float, room: int) -> tuple[list[bytes], int]:
        """The texts of ``rows`` made (and not written yet) and the room left for the
        rows the reply may still keep: they are kept if all fit in ``room``, else made for
        themselves and their nodes' frames let go (:data:`ROWS_KEPT_MOST`)."""
        keep = len(rows) <= room
        out = [self._text(row, now, keep=keep) for row in rows]
        if not keep:
            self._let_go([row[1] for row in rows], now)
        return out, room - len(rows) if keep else room

    def _let_go(self, plans: Iterable[MachinePlan], now: float) -> None:
        """Let go of the blockers' frames of the nodes of ``plans``, whose rows a reply
        wrote without keeping them, or did not write (:data:`ROWS_KEPT_MOST`), but of the
        machines whose rows a reply read lately (:meth:`keeps_row`): the passes keep those
        current."""
        keeps_row = self.keeps_row
        for plan in plans:
            if not keeps_row(plan.key, now):
                for node in plan.nodes:
                    node.forecast.let_go_blockers()

    def _holds(self, statuses: tuple[MachineStatus, ...]) -> bool:
        """Whether the view's caches are still those of the schedule ``statuses``."""
        return self._scheduled[0] is statuses

    def _rows_of(
        self,
        inputs: PlanInputs,
        now: float,
        machines: Sequence[ScheduledMachine],
        *,
        at: int,
        made: _Selected,
        acc: _Acc,
        with_blockers: bool,
        late: bool,
        encoded: bool = True,
        writes: int | None = None,
        keep: bool = True,
    ) -> list[_Row]:
        """The rows of ``machines`` (from ``at`` in the selection): each machine is added
        to the totals (and to ``after_window``); the rows that match (``late``, after the
        cursor) are counted in ``matched``, returned, and kept in ``acc.rows`` with
        ``late``. ``encoded``: the first ``writes`` of those (all of them with ``None``)
        are written now from their templates, but ``late`` rows, which are written once
        sorted, and only if sent (see :meth:`_write`); a row is marked read
        (:meth:`keeps_row`) when it is written, and the blockers' frames of the rows not
        written are let go (:meth:`_let_go`). ``keep=False`` (rows past the first
        :data:`ROWS_KEPT_MOST` a reply writes): nothing made for the rows is kept, and the
        frames of the rows written are let go too."""
        out: list[_Row] = []
        texts = self._row_texts
        added, start, index = acc.added, made.start, made.index
        pairs = self.rows(
            inputs,
            now,
            with_blockers=with_blockers,
            escalation=acc.escalation,
            only=machines,
            remember=keep,
        )
        left = math.inf if writes is None else writes
        loose: list[MachinePlan] = []  # the machines whose frames this reply lets go
        for i, (each, state) in enumerate(pairs, at):
            out_of_service = _after_window(each, now)
            if out_of_service is not None:
                acc.ended.append(out_of_service)
            position = i if index is None else index[id(each.machine)]
            order = (each.window_start if late else 0.0, position)
            after_start = start is None or order > start
            figures = None
            fast = None
            if encoded:
                write = not late and after_start and left > 0
                text = texts.get(each.key)
                if text is None:
                    text = RowJson()
                    if keep and write:
                        texts[each.key] = text
                if keep and write:
                    text.read_at = now
                try:
                    fast = text.fast(each, state, now, unless_on_time=late, write=write)
                except orjson.JSONEncodeError:  # written _write's way
                    fast = None
                if not late and not (keep and write):
                    loose.append(each)
            written = None
            if fast is not None:  # no cut (see RowJson.fast)
                written, on_time, graceful_badput, quick_badput = fast
                added.add_node(
                    each,
                    on_time=on_time,
                    graceful_badput=graceful_badput,
                    quick_badput=quick_badput,
                )
                matches = not late or not on_time
            else:
                figures = row_figures(each, state, now)
                added.add(each, figures)
                matches = not late or figures.on_time is False or figures.will_escalate
            if not matches or not after_start:
                if late and encoded:
                    loose.append(each)
                continue
            left -= 1
            out.append((order, each, state, figures, written or None))
        acc.matched += len(out)
        if late:
            acc.rows += out
        self._let_go(loose, now)
        return out

    def _kept_page(
        self,
        inputs: PlanInputs,
        now: float,
        made: _Selected,
        *,
        with_blockers: bool,
        late: bool,
        limit: int | None,
    ) -> tuple[list[_Row], _Acc] | None:
        """:meth:`_ledger_page` of a reply that reads the ledger (:func:`_from_ledger`),
        the ledger brought to ``now`` as a reply brings it; ``None`` for the others, and
        where no ledger is kept."""
        if not _from_ledger(made, late, limit):
            return None
        ledger = self._answer_ledger(inputs, now)
        if ledger is None:
            return None
        return self._ledger_page(
            ledger,
            inputs,
            now,
            with_blockers=with_blockers,
            late=late,
            limit=limit,
            start=made.start,
        )

    def _ledger_page(
        self,
        ledger: PlanLedger,
        inputs: PlanInputs,
        now: float,
        *,
        with_blockers: bool,
        late: bool,
        limit: int | None,
        start: tuple[float, int] | None,
    ) -> tuple[list[_Row], _Acc]:
        """A reply of every scheduled machine from the ledger (brought to ``now``:
        :func:`_from_ledger`): the totals, ``after_window`` and ``matched`` of the shares
        and of the volatile machines' rows (made in full), and the rows after ``start``,
        the first ``limit`` of them made (not written yet): with ``late``, the late rows
        in window-start order; else the machines in schedule order, whose rows alone are
        made (a page of the plan costs its rows, not the pool's)."""
        escalation = Escalation(inputs.policy.escalation)
        acc = _Acc(now, escalation)
        acc.added = added = ledger.totals(now)
        added.behind = ledger.behind
        position, shares = ledger.position, ledger.shares
        ended = [(position[k], shares[k].after_window) for k in ledger.ended]
        found = (
            [((shares[k].plan.window_start, position[k]), k) for k in ledger.late] if late else []
        )
        volatile = _in_order(ledger, ledger.volatile)
        for plan, state in self.rows(
            inputs, now, with_blockers=False, escalation=escalation, only=volatile
        ):
            figures = row_figures(plan, state, now)
            added.add(plan, figures)
            at = position[plan.key]
            out_of_service = _after_window(plan, now)
            if out_of_service is not None:
                ended.append((at, out_of_service))
            if late and (figures.on_time is False or figures.will_escalate):
                found.append(((plan.window_start, at), plan.key))
        acc.ended = [entry for _, entry in sorted(ended, key=_order) if entry is not None]
        orders: list[tuple[float, int]]
        if late:
            if start is not None:
                found = [each for each in found if each[0] > start]
            acc.matched = len(found)
            page = sorted(found) if limit is None else heapq.nsmallest(limit, found)
            orders = [order for order, _ in page]
            machines = [ledger.machines[position[key]] for _, key in page]
        else:
            first, count = (0 if start is None else start[1] + 1), len(ledger.machines)
            acc.matched = max(0, count - first)
            stop = count if limit is None else min(count, first + limit)
            orders = [(0.0, i) for i in range(first, stop)]
            machines = list(ledger.machines[first:stop])
        pairs = self.rows(
            inputs, now, with_blockers=with_blockers, escalation=escalation, only=machines
        )
        rows: list[_Row] = [
            (order, plan, state, None, None)
            for order, (plan, state) in zip(orders, pairs, strict=True)
        ]
        return rows, acc

    def _write(self, row: _Row, now: float, *, encoded: bool = True, keep: bool = True) -> Any:
        """The row's text (``encoded``; raises :class:`orjson.JSONEncodeError` for a value
        orjson cannot write) or dict. ``keep``: its templates are kept, and the row marked
        read (:meth:`keeps_row`); else made for this row alone."""
        _, each, state, figures, written = row
        if encoded and written is not None:
            return written
        if not encoded:
            return row_dict(each, state, figures or row_figures(each, state, now))
        text = self._row_texts.get(each.key)
        if text is None:
            text = RowJson()
            if keep:
                self._row_texts[each.key] = text
        if keep:
            text.read_at = now
        if figures is None:
            fast = text.fast(each, state, now)
            if fast is not None:
                return fast[0]
            figures = row_figures(each, state, now)
        return text.text(each, state, figures)


class PlanQueryError(ValueError):
    """A plan's filter or cursor refused: ``code`` and the HTTP ``status`` (422 for a
    value that is not one, 409 for a cursor that no longer fits the schedule)."""

    def __init__(self, code: str, message: str, *, status: int = 422) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanSelect:
    """Which machines a plan is made of and where its rows start.

    ``windows``: the windows' starts given (epoch seconds): a whole number of seconds
    selects the windows starting within that second (``1795919377`` and
    ``1795919377.0``: a window at ``1795919377.2958415``, and any other starting before
    ``1795919378``), a number with a fraction the window starting exactly then (as the
    rows show it). ``names``: hostnames or IPs, a machine selected when its hostname or
    IP is one of them (both ``None``: every scheduled machine). ``cursor``: the machine
    (key, window start) of the last row of the previous page (:func:`cursor_of`);
    ``given``: whether the caller said anything of this (the reply then carries
    ``next``). ``exact`` and ``seconds`` are made of ``windows`` (its numbers with a
    fraction, its whole seconds), so that a row is selected in a set lookup or two.
    """

    windows: frozenset[float] | None = None
    names: frozenset[str] | None = None
    cursor: tuple[str, float] | None = None
    given: bool = False
    exact: frozenset[float] = field(init=False, repr=False, compare=False)
    seconds: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = self.windows or ()
        object.__setattr__(self, "exact", frozenset(s for s in given if not s.is_integer()))
        object.__setattr__(self, "seconds", frozenset(int(s) for s in given if s.is_integer()))

    @classmethod
    def parse(
        cls, *, windows: Sequence[str] = (), machines: Sequence[str] = (), after: str | None = None
    ) -> PlanSelect:
        """The selection of the query's ``window``, ``machine`` and ``after`` values
        (``after`` empty: from the first row). Raises :class:`PlanQueryError` (422:
        ``plan.bad_window``, ``plan.bad_machine``, ``plan.bad_cursor``)."""
        starts = set()
        for text in windows:
            try:
                start = float(text)
            except ValueError:
                start = math.nan
            if not math.isfinite(start):
                raise PlanQueryError(
                    "plan.bad_window", f"window={text!r}: not a window's start (epoch seconds)"
                )
            starts.add(start)
        for name in machines:
            if not name.strip():
                raise PlanQueryError("plan.bad_machine", "machine=: an empty hostname or IP")
        return cls(
            windows=frozenset(starts) if windows else None,
            names=frozenset(machines) if machines else None,
            cursor=_parse_cursor(after) if after else None,
            given=bool(windows or machines or after is not None),
        )

    def check_known(
        self, starts: AbstractSet[float], seconds: AbstractSet[int], known: AbstractSet[str]
    ) -> None:
        """Raise :class:`PlanQueryError` (422) for a ``window`` that selects no scheduled
        machine's window (``plan.unknown_window``: the starts there are, or the unit a
        number in milliseconds, microseconds or nanoseconds was meant in, with the start
        as the filter takes it) or a ``machine`` that is no scheduled machine's hostname
        or IP (``plan.unknown_machine``, with the hostnames a short name may have meant):
        a mistyped filter is said, not answered with an empty plan. The scheduled
        windows start at ``starts`` (within ``seconds``); ``known`` are the machines'
        hostnames and IPs."""
        if self.windows is not None:
            unknown = (self.exact - starts) | {float(s) for s in self.seconds - seconds}
            for start in sorted(unknown):
                hint = ""
                for unit, scale in (
                    ("milliseconds", 1e3),
                    ("microseconds", 1e6),
                    ("nanoseconds", 1e9),
                ):
                    named = _meant(start / scale, starts, seconds)
                    if named is not None:
                        hint = f": it reads as {unit}; the start in seconds is {named}"
                        break
                else:
                    shown = ", ".join(_start(s) for s in sorted(starts)[:5])
                    more = "…" if len(starts) > 5 else ""
                    hint = (
                        f" (the windows start at {shown}{more})"
                        if starts
                        else " (none is scheduled)"
                    )
                raise PlanQueryError(
                    "plan.unknown_window", f"window={_start(start)}: no window starts then{hint}"
                )
        if self.names is not None:
            for name in sorted(self.names - known):
                meant = suggestions(name, list(known))
                hint = f" (did you mean {' or '.join(meant)}?)" if meant else ""
                raise PlanQueryError(
                    "plan.unknown_machine", f"machine={name}: no scheduled machine{hint}"
                )

    def takes(self, machine: ScheduledMachine) -> bool:
        """Whether ``machine`` is selected."""
        if self.windows is not None:
            start = machine.window_start
            if start not in self.exact and math.floor(start) not in self.seconds:
                return False
        names = self.names
        return names is None or machine.id.hostname in names or machine.id.ip in names


def _meant(scaled: float, starts: Collection[float], seconds: Collection[int]) -> str | None:
    """The window a number ``scaled`` down from another unit was meant to name, as the
    filter takes it: the exact start when it is one with a fraction, else its whole
    second when a window starts within it (``None``: neither): a start typed in
    nanoseconds need not come back to the very float of the start, its second does."""
    if not scaled.is_integer() and scaled in starts:
        return repr(scaled)
    whole = math.floor(scaled)
    return str(whole) if whole in seconds else None


def _start(seconds: float) -> str:
    """A window's start as a filter names it: whole seconds without a fraction."""
    return str(int(seconds)) if seconds.is_integer() else repr(seconds)


def cursor_of(plan: MachinePlan) -> str:
    """The cursor of a row: opaque text naming its machine and window."""
    text = orjson.dumps([plan.machine.key, plan.window_start])
    return base64.urlsafe_b64encode(text).rstrip(b"=").decode("ascii")


def _parse_cursor(text: str) -> tuple[str, float]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        found = orjson.loads(raw)
    except ValueError:  # binascii.Error and orjson's are ValueErrors
        found = None
    match found:
        case [str(key), int() | float() as start] if not isinstance(start, bool):
            return key, float(start)
    raise PlanQueryError(
        "plan.bad_cursor", f"after={text!r}: not a cursor of this plan (a reply's next)"
    )


class _Catalog:
    """Where each scheduled machine is (its place in ``machines``), by the second its
    window starts in and by its key, and which have a hostname or IP: a reply of some
    windows or machines, or a page after a cursor, makes only the rows it selects.

    Each index is made when a reply first needs it (at 100,000 machines, indexes of the
    windows, names and keys made together took ≈ 0.35 s of the loop, which a reply of
    one window paid before its first row): the windows' by grouping the machines by their
    start (a hundred starts, say, each then taken to its second: ≈ 20 ms), the keys' in a
    pass; names are looked for in a pass (:meth:`named`).
    """

    def __init__(self, machines: tuple[ScheduledMachine, ...]) -> None:
        self.machines = machines

    @functools.cached_property
    def _by_start(self) -> dict[float, list[int]]:
        by_start: dict[float, list[int]] = {}
        for i, machine in enumerate(self.machines):
            held = by_start.get(machine.window_start)
            if held is None:
                by_start[machine.window_start] = [i]
            else:
                held.append(i)
        return by_start

    @functools.cached_property
    def starts(self) -> frozenset[float]:
        """The windows' starts."""
        return frozenset(self._by_start)

    @functools.cached_property
    def by_second(self) -> dict[int, list[int]]:
        """The machines by the whole second their window starts in."""
        by_second: dict[int, list[int]] = {}
        for start, places in self._by_start.items():
            by_second.setdefault(math.floor(start), []).extend(places)
        return by_second

    def named(self, names: AbstractSet[str]) -> tuple[set[int], set[str]]:
        """The places of the machines whose hostname or IP is one of ``names``, and the
        names found: a pass over the machines, comparing (≈ 15 ms at 100,000 machines; an
        index of every name took 0.3 s and ≈ 30 MB to make, for the few replies that ask
        for machines by name)."""
        places: set[int] = set()
        found: set[str] = set()
        for i, machine in enumerate(self.machines):
            hostname, ip = machine.id.hostname, machine.id.ip
            if hostname is not None and hostname in names:
                places.add(i)
                found.add(hostname)
            if ip is not None and ip in names:
                places.add(i)
                found.add(ip)
        return places, found

    def names(self) -> set[str]:
        """Every hostname and IP of the machines (what a name not found is compared with)."""
        ids = [machine.id for machine in self.machines]
        return {name for i in ids for name in (i.hostname, i.ip) if name is not None}

    @functools.cached_property
    def position(self) -> dict[str, int]:
        """Each machine's place by its key (the first, should a key be there twice)."""
        position: dict[str, int] = {}
        for i, machine in enumerate(self.machines):
            position.setdefault(machine.key, i)
        return position

    def select(self, select: PlanSelect) -> list[int]:
        """The places of the machines ``select`` takes, in schedule order. Raises
        :class:`PlanQueryError` as :meth:`PlanSelect.check_known` does."""
        windows = select.windows is not None
        named: set[int] | None = None
        known: AbstractSet[str] = frozenset()
        if select.names is not None:
            named, known = self.named(select.names)
            if known != select.names:  # one is not scheduled: say which, with suggestions
                known = self.names()
        select.check_known(
            self.starts if windows else frozenset(),
            self.by_second.keys() if windows else frozenset(),
            known,
        )
        found: set[int] | None = None
        if windows:
            seconds = select.seconds | {math.floor(start) for start in select.exact}
            found = {i for second in seconds for i in self.by_second.get(second, ())}
        if named is not None:
            found = named if found is None else found & named
        machines = self.machines
        return [i for i in sorted(found or ()) if select.takes(machines[i])]


@dataclass(frozen=True, kw_only=True, slots=True)
class _Selected:
    """The machines a reply is made of (:meth:`PlanView._made`): ``index``, each one's
    place in the schedule by ``id`` (``None``: every scheduled machine, in order);
    ``start``: the order of the cursor's row (rows after it are sent)."""

    statuses: tuple[MachineStatus, ...]
    machines: Sequence[ScheduledMachine]
    index: dict[int, int] | None
    start: tuple[float, int] | None
    paged: bool


#: A row made (a tuple: there is one a machine): where it goes (window start with
#: ``late``, then schedule order), its plan and state, its figures when the fast way did
#: not make it, and its text when written already (``None``: written when sent).
_Row = tuple[tuple[float, int], MachinePlan, RowState, RowFigures | None, bytes | None]

_order = operator.itemgetter(0)


class _Acc:
    """What a reply adds up as its rows are made."""

    __slots__ = ("added", "ended", "escalation", "matched", "rows")

    def __init__(self, now: float, escalation: Escalation) -> None:
        self.added = PlanTotals(now)
        self.escalation = escalation
        self.ended: list[dict[str, Any]] = []
        self.rows: list[_Row] = []
        self.matched = 0


def reads_totals_kept(select: PlanSelect | None, *, late: bool, limit: int | None) -> bool:
    """Whether a reply reads the plan's totals kept between replies (the ledger:
    :meth:`PlanView.ledger`) rather than every machine's row: a reply of every machine
    (no window nor machine selected) that sends some of the rows, the late ones or a page
    (``limit``)."""
    selects = select is not None and (select.windows is not None or select.names is not None)
    return (late or limit is not None) and not selects


def _from_ledger(made: _Selected, late: bool, limit: int | None) -> bool:
    """:func:`reads_totals_kept` of a reply's machines (:meth:`PlanView._made`)."""
    return made.index is None and (late or limit is not None)


def _in_order(ledger: PlanLedger, keys: Collection[str]) -> list[ScheduledMachine]:
    """The ledger's machines of ``keys``, in schedule order."""
    position = ledger.position
    return [ledger.machines[i] for i in sorted(position[k] for k in keys)]


def _next(last: _Row | None, matched: int, limit: int | None) -> str | None:
    """The cursor of the page after ``last`` (``None``: the rows ended)."""
    if last is None or limit is None or matched <= limit:
        return None
    return cursor_of(last[1])


def _policy(policy: PlanPolicy) -> dict[str, Any]:
    return {
        "drain_policy": policy.drain_policy,
        "drain_margin": policy.drain_margin,
        "escalation": policy.escalation,
        "up_after_window": policy.up_after_window,
        "on_all_accepted": policy.on_all_accepted,
    }


def _totals(added: PlanTotals, inputs: PlanInputs) -> dict[str, Any]:
    totals = added.to_json()
    totals.update(inputs.counters)
    totals["nodes"] = inputs.nodes
    totals["notices"] = _notice_totals(inputs.notices)
    return totals


def _dumps(value: Any) -> bytes:
    """orjson's text, or :mod:`json`'s for what orjson refuses (integers beyond 64 bits)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return _json_body(value)


class _Framing(Protocol):
    """How a plan's chunks are written (:meth:`PlanView._chunks`): its head (``now``,
    ``policy``), its rows' texts a chunk at a time, its end (``matched``, ``totals``,
    ``after_window``, ``next``)."""

    def head(self, head: dict[str, Any]) -> bytes: ...

    def rows(self, texts: list[bytes]) -> bytes: ...

    def end(self, end: dict[str, Any]) -> bytes: ...


class _JsonLines:
    """``format=jsonl``: a line ``{"plan": head}``, a line ``{"row": …}`` a row, a line
    ``{"end": end}``."""

    def head(self, head: dict[str, Any]) -> bytes:
        return _dumps({"plan": head}) + b"\n"

    def rows(self, texts: list[bytes]) -> bytes:
        return b"".join([b'{"row":' + text + b"}\n" for text in texts])

    def end(self, end: dict[str, Any]) -> bytes:
        return _dumps({"end": end}) + b"\n"


class _Document:
    """One JSON object: the head's keys, ``machines`` (the rows), the end's keys (``next``
    only for a ``paged`` reply), each row's text copied once."""

    def __init__(self, *, paged: bool) -> None:
        self._paged = paged
        self._separator = b""

    def head(self, head: dict[str, Any]) -> bytes:
        return _dumps(head)[:-1] + b',"machines":['

    def rows(self, texts: list[bytes]) -> bytes:
        if not texts:
            return b""
        text = self._separator + b",".join(texts)
        self._separator = b","
        return text

    def end(self, end: dict[str, Any]) -> bytes:
        if not self._paged:
            end = {key: value for key, value in end.items() if key != "next"}
        return b"]," + _dumps(end)[1:]


def _carried(
    before: Sequence[ScheduledMachine], statuses: Sequence[MachineStatus]
) -> tuple[ScheduledMachine, ...]:
    """The scheduled machines of ``statuses`` (those with a window): for each, the machine
    of ``before`` the status makes with the same id object, else the machine of
    ``before`` with its key when it is equal to the one the status makes and spelt the
    same (the ids of a state read again from the store are new objects), else the one it
    makes."""
    by_id = {id(machine.id): machine for machine in before}
    by_key: dict[str, ScheduledMachine] | None = None
    out: list[ScheduledMachine] = []
    for status in statuses:
        kept = by_id.get(id(status.id))
        if kept is not None and kept.made_of(status):
            out.append(kept)
            continue
        machine = ScheduledMachine.of(status)
        if machine is None:
            continue
        if by_key is None:
            by_key = {m.key: m for m in before}
        kept = by_key.get(machine.key)
        if kept is not None and kept == machine and kept.id.hostname == machine.id.hostname:
            machine = kept
        out.append(machine)
    return tuple(out)


def _after_window(plan: MachinePlan, now: float) -> dict[str, Any] | None:
    """A machine still out of service after its window (DRAINING or DOWN, its window
    ended at or before ``now``): its id, mode, window, node and the node's health check
    state (``None``: none, or no node); ``None`` for any other machine."""
    end = plan.window_end
    if end is None or now < end or plan.mode not in ("DRAINING", "DOWN"):
        return None
    return {
        "machine_id": plan.machine.machine_id,
        "mode": plan.mode,
        "window": plan.machine.window,
        "node": plan.node_name,
        "health": None if plan.node is None else plan.node.machine.get("HealthState"),
    }


def _json_body(plan: dict[str, Any]) -> bytes:
    """The plan as :mod:`json` writes it, exactly as :class:`~fastapi.responses.JSONResponse`
    renders it (integers of any size)."""
    return json.dumps(
        plan, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


def _notice_totals(notices: Mapping[str, tuple[Notice, ...]]) -> dict[str, int]:
    """The notices in force and their latest answers, counted over the pool."""
    counted = {"in_force": 0, "accepted": 0, "declined": 0, "unanswered": 0}
    for held in notices.values():
        for notice in held:
            counted["in_force"] += 1
            answer = notice.answer
            if answer is None:
                counted["unanswered"] += 1
            else:
                counted["accepted" if answer.verdict == "accept" else "declined"] += 1
    return counted
