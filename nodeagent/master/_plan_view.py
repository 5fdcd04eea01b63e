"""The plan view: ``GET /v1/maintenance/plan``'s reply, made from what the master holds.

Pure (no trio, no I/O, ``now`` an argument). :class:`PlanInputs` is what a plan is made
of, read from the master at one instant: the schedule's machines, the ad store's lookups,
the drain records and the drains being started, when each machine entered its window, the
policy and the counters. :class:`PlanView` keeps the plan's caches from one reply to the
next — the scheduled machines of the schedule, each machine's plan and row state
(:mod:`._plan`) while what they are made of holds, each row's JSON text
(:mod:`._row_json`) — and assembles the reply: the totals over every machine, the ``late``
rows in window-start order, ``limit`` and ``matched``, as data (:meth:`PlanView.reply`) or
as the body the API sends (:meth:`PlanView.body`).

**The encoding.** The body's rows are written from their templates and joined with the
rest as orjson writes it (:class:`~fastapi.responses.JSONResponse`'s JSON, several times
faster: the plan of 10,000 machines is ≈ 34 MB). orjson refuses integers beyond 64 bits,
which an agent's ad could carry: such a plan is made again as data, at the same ``now``,
and written by :mod:`json` as the response class would.

**A drain record** is read here only by :func:`_record_of` and :func:`_escalated` (which
record a machine has, and whether it says the node was told of its escalation); the plan
(:mod:`._plan`) reads it further.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from nodeagent.master._adstore import AdEntry
from nodeagent.master._drains import STARTING, DrainRecord
from nodeagent.master._maintenance import MachineStatus
from nodeagent.master._notices import Notice
from nodeagent.master._plan import (
    MachinePlan,
    PlanPolicy,
    PlanTotals,
    RowState,
    ScheduledMachine,
    machine_plan,
    row_dict,
    row_figures,
    row_state,
)
from nodeagent.master._row_json import RowJson
from slots import Escalation

__all__ = ["PlanInputs", "PlanView", "Record"]

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


class PlanView:
    """The plan's caches, and the replies made with them (see the module docstring).

    Not safe for concurrent use: one reply at a time (the master's event loop).
    """

    def __init__(self) -> None:
        #: The schedule's statuses and the scheduled machines made of them.
        self._scheduled: tuple[tuple[MachineStatus, ...], tuple[ScheduledMachine, ...]]
        self._scheduled = ((), ())
        #: Each scheduled machine's row as JSON text, by key.
        self._row_texts: dict[str, RowJson] = {}
        #: Each scheduled machine's plan and row state, and what they were made of, by key.
        self._plan_cache: dict[str, tuple[Any, ...]] = {}

    @property
    def row_texts(self) -> Mapping[str, RowJson]:
        """Each scheduled machine's row as JSON text (its templates), by key."""
        return self._row_texts

    def scheduled(self, statuses: tuple[MachineStatus, ...]) -> tuple[ScheduledMachine, ...]:
        """The machines with a window, in schedule order; made again when ``statuses``
        change, which lets go of the cached rows of the machines no longer scheduled."""
        if statuses != self._scheduled[0]:
            machines = (ScheduledMachine.of(status) for status in statuses)
            self._scheduled = (statuses, tuple(m for m in machines if m is not None))
            keys = {machine.key for machine in self._scheduled[1]}
            self._row_texts = {k: v for k, v in self._row_texts.items() if k in keys}
            self._plan_cache = {k: v for k, v in self._plan_cache.items() if k in keys}
        return self._scheduled[1]

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
    ) -> list[tuple[MachinePlan, RowState]]:
        """Every scheduled machine's plan and row state at ``now`` (schedule order).

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
        cache = self._plan_cache
        keep = policy.drain_policy != "immediate"
        out = []
        for machine in scheduled:
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
                and cached[3] == (escalated, lost, since, with_blockers, notices)
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
            cache[key] = (
                machine,
                nodes,
                record,
                (escalated, lost, since, with_blockers, notices),
                policy,
                escalation,
                (plan, state),
                math.inf if plan.closing is None else plan.closing.until,
            )
            out.append((plan, state))
        return out

    def prepare_row(self, plan: MachinePlan, inputs: PlanInputs, now: float) -> None:
        """Make the template of the machine's row of the whole plan (with blockers), so
        that a reply finds it made (a reconcile pass calls this for the nodes whose
        forecast it made). A row orjson cannot write is left to the reply."""
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
    ) -> dict[str, Any]:
        """The plan at ``now`` as data (``GET /v1/maintenance/plan``'s JSON).

        ``totals`` always count every scheduled machine. ``machines`` holds every row
        (schedule order) or, with ``late``, only the rows of machines late by their
        promises or that the plan will escalate (window-start order); ``limit`` keeps the
        first ``limit`` of them. ``matched`` is how many rows there were before ``limit``.
        ``after_window`` lists every machine still out of service after its window
        (DRAINING or DOWN past its end; schedule order), whatever ``late`` and ``limit``.
        """
        return self._reply(
            inputs, now, with_blockers=with_blockers, late=late, limit=limit, encoded=False
        )

    def body(
        self,
        inputs: PlanInputs,
        now: float,
        *,
        with_blockers: bool = True,
        late: bool = False,
        limit: int | None = None,
    ) -> bytes:
        """:meth:`reply` as the JSON text the API sends (see the module docstring): the
        rows written from their templates, or, for a plan orjson refuses, the reply at the
        same ``now`` written by :mod:`json`."""
        try:
            plan = self._reply(
                inputs, now, with_blockers=with_blockers, late=late, limit=limit, encoded=True
            )
            return _encoded_body(plan)
        except orjson.JSONEncodeError:  # rows are encoded as the plan is made
            plan = self._reply(
                inputs, now, with_blockers=with_blockers, late=late, limit=limit, encoded=False
            )
            return _json_body(plan)

    def _reply(
        self,
        inputs: PlanInputs,
        now: float,
        *,
        with_blockers: bool,
        late: bool,
        limit: int | None,
        encoded: bool,
    ) -> dict[str, Any]:
        """:meth:`reply`; with ``encoded``, ``machines`` is the list of the rows' JSON
        texts (:class:`~nodeagent.master._row_json.RowJson`). Raises
        :class:`orjson.JSONEncodeError` (``encoded`` only) for a row orjson cannot write."""
        rows: list[Any] = []
        starts: list[float] = []
        added = PlanTotals(now)
        policy = inputs.policy
        escalation = Escalation(policy.escalation)
        rows_of = self.rows(inputs, now, with_blockers=with_blockers, escalation=escalation)
        texts = self._row_texts  # after: a new schedule prunes it
        ended: list[dict[str, Any]] = []
        for each, state in rows_of:
            out_of_service = _after_window(each, now)
            if out_of_service is not None:
                ended.append(out_of_service)
            text = None
            if encoded:
                text = texts.get(each.key)
                if text is None:
                    text = texts[each.key] = RowJson()
                fast = text.fast(each, state, now, unless_on_time=late)
                if fast is not None:  # no cut: one formatting (see RowJson.fast)
                    row_text, on_time, graceful_badput, quick_badput = fast
                    added.add_node(
                        each,
                        on_time=on_time,
                        graceful_badput=graceful_badput,
                        quick_badput=quick_badput,
                    )
                    if not late or not on_time:
                        rows.append(row_text)
                        starts.append(each.window_start)
                    continue
            figures = row_figures(each, state, now)
            added.add(each, figures)
            if late and not (figures.on_time is False or figures.will_escalate):
                continue
            if text is not None:
                rows.append(text.text(each, state, figures))
            else:
                rows.append(row_dict(each, state, figures))
            starts.append(each.window_start)
        if late:
            rows = [row for _, _, row in sorted(zip(starts, itertools.count(), rows))]
        matched = len(rows)
        if limit is not None:
            del rows[limit:]
        totals = added.to_json()
        totals.update(inputs.counters)
        totals["nodes"] = inputs.nodes
        totals["notices"] = _notice_totals(inputs.notices)
        return {
            "now": now,
            "policy": {
                "drain_policy": policy.drain_policy,
                "drain_margin": policy.drain_margin,
                "escalation": policy.escalation,
                "up_after_window": policy.up_after_window,
                "on_all_accepted": policy.on_all_accepted,
            },
            "matched": matched,
            "machines": rows,
            "totals": totals,
            "after_window": ended,
        }


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


def _encoded_body(plan: dict[str, Any]) -> bytes:
    """The plan whose rows are JSON texts as one JSON document, in the order the keys
    were given, copying each row's text once."""
    rows: Sequence[bytes] = plan["machines"]
    head = {name: value for name, value in plan.items() if name != "machines"}
    keys = list(plan)
    at = keys.index("machines")
    before = orjson.dumps({name: head[name] for name in keys[:at]})
    after = orjson.dumps({name: head[name] for name in keys[at + 1 :]})
    parts: list[bytes] = [before[:-1] + (b',"machines":[' if at else b'"machines":[')]
    for row in rows:
        parts.append(row)
        parts.append(b",")
    if rows:
        parts.pop()
    parts.append(b"]," + after[1:] if len(after) > 2 else b"]}")
    return b"".join(parts)


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
