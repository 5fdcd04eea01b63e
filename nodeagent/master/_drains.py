"""The master's drains, pure: its record of each drain, the record's phases and their one
table of moves, and what a reconcile pass does for one machine (:func:`decide`).

No I/O, no trio and no clock here: :class:`~nodeagent.master._master.Master` (the shell)
passes ``now``, carries out the :data:`Step` :func:`decide` returns (agent calls through
:mod:`nodeagent._agent_calls`, then the record written), and settles and releases
records as :func:`settle` and :func:`release` say. A record never changes in place: each
change makes a new :class:`DrainRecord` through :meth:`DrainRecord.moved`, which checks
the move against :data:`DRAIN_MOVES` first (:func:`check_drain_move`): a refused move
raises :class:`IllegalDrainMove` and changes nothing. A record about to be made (phase
``absent``, e.g. :meth:`Start.record`) is kept by the master only once its ``start`` or
``assign`` move has made it.

**The rule: its own record first.** A drain the master starts is recorded (saved) after
phase 1 returns its request id and before the commit, in phase ``pending``; the commit's
reply moves it to ``committed``. A record left ``pending`` is settled from the node's ad
(:func:`settle`): adopted (``committed``), or cancelled / gone and forgotten (a rolling
operation's goes back to ``operation``, its drain to be started again by the operation's
engine). A pass never acts on an ad older than the record (:func:`ad_knows`).

A row of :data:`DRAIN_MOVES` is ``(phase, event, new phase)``::

    absent ──start──▶ pending ──commit / adopt──▶ committed ──start (replaced)──▶ pending
      │                  │                            │
      │ assign           └─return──▶ operation        └─note (escalated, late, down …)
      ▼                                 │
    operation ──start──▶ pending        └─forget──▶ absent   (any stored phase forgets)

``absent`` is where a record stands before it is made and after it is forgotten (never
stored); ``none`` is a stored record without a phase (written by an older master: its
drain is in force, as a committed one); ``starting`` is the plan's stand-in while the
master's phase 1 is on its way (:data:`STARTING`, never stored).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from nodeagent._agent_calls import DrainBody
from slots import request_number

if TYPE_CHECKING:
    from nodeagent.master._adstore import AdEntry
    from nodeagent.master._plan import MachinePlan, PlanPolicy

__all__ = [
    "ABSENT",
    "COMMITTED",
    "DRAIN_MOVES",
    "PENDING",
    "REASON",
    "STARTING",
    "BringUp",
    "Down",
    "DrainEvent",
    "DrainPhase",
    "DrainRecord",
    "Escalate",
    "IllegalDrainMove",
    "MarkDown",
    "Postpone",
    "Refresh",
    "Release",
    "RememberLate",
    "Settlement",
    "Start",
    "Step",
    "Withdraw",
    "ad_knows",
    "assigned",
    "carries_the_window",
    "check_drain_move",
    "decide",
    "evicts_at_window",
    "healthy",
    "release",
    "settle",
]

#: The reason of the master's drains.
REASON = "maintenance"
#: The estimate the plan reads for a graceful drain's end.
_GRACEFUL_END = "ExpectedMachineGracefulDrainingCompletion"
#: The seconds a phase 1 of the master's waits for its commit on the agent.
_TTL = 30.0


class IllegalDrainMove(Exception):
    """A move of a drain record that :data:`DRAIN_MOVES` does not allow: the master asked
    for a wrong move (a defect, never a request's fault); nothing changed."""

    code = "master.illegal_drain_move"


class DrainPhase(StrEnum):
    """The phase of the master's record of a drain (``phase`` in the stored record)."""

    ABSENT = "absent"  # no record (before it is made, after it is forgotten): never stored
    NONE = "none"  # stored without a phase: an older master's drain in force
    OPERATION = "operation"  # a rolling operation's: its drain is to be started by its engine
    PENDING = "pending"  # phase 1 recorded, the commit not known to have happened
    COMMITTED = "committed"  # the commit's reply (or the node's ad) says the drain is in force
    STARTING = "starting"  # the plan's stand-in: the master's phase 1 is on its way


class DrainEvent(StrEnum):
    """What moves a drain record."""

    START = "start"  # phase 1 returned a request id: recorded before its commit
    COMMIT = "commit"  # the commit's reply
    ADOPT = "adopt"  # a pending record settled: the node shows the request committed
    RETURN = "return"  # a rolling operation's pending record settled: its drain is gone
    ASSIGN = "assign"  # a rolling operation writes the record of a node about to drain
    NOTE = "note"  # what the record knows changes (escalated, late, down, address …)
    FORGET = "forget"  # the record is let go


PENDING = DrainPhase.PENDING
COMMITTED = DrainPhase.COMMITTED
_P = DrainPhase
_E = DrainEvent

#: Every legal ``(phase, event, new phase)`` move of one drain record.
DRAIN_MOVES: frozenset[tuple[DrainPhase, DrainEvent, DrainPhase]] = frozenset(
    {
        # The two-phase drain, recorded before its commit; a drain replaced starts anew.
        (_P.ABSENT, _E.START, _P.PENDING),
        (_P.NONE, _E.START, _P.PENDING),
        (_P.OPERATION, _E.START, _P.PENDING),
        (_P.COMMITTED, _E.START, _P.PENDING),
        (_P.PENDING, _E.COMMIT, _P.COMMITTED),
        # A record left pending, settled with the node.
        (_P.PENDING, _E.ADOPT, _P.COMMITTED),
        (_P.PENDING, _E.RETURN, _P.OPERATION),
        # A rolling operation's record.
        (_P.ABSENT, _E.ASSIGN, _P.OPERATION),
        # What a record in force learns.
        (_P.NONE, _E.NOTE, _P.NONE),
        (_P.OPERATION, _E.NOTE, _P.OPERATION),
        (_P.COMMITTED, _E.NOTE, _P.COMMITTED),
        # Let go.
        (_P.NONE, _E.FORGET, _P.ABSENT),
        (_P.OPERATION, _E.FORGET, _P.ABSENT),
        (_P.PENDING, _E.FORGET, _P.ABSENT),
        (_P.COMMITTED, _E.FORGET, _P.ABSENT),
    }
)


def check_drain_move(current: DrainPhase, event: DrainEvent, new: DrainPhase, *, key: str) -> None:
    """Raise :class:`IllegalDrainMove` unless ``(current, event, new)`` is a row of
    :data:`DRAIN_MOVES`. Nothing is implied: staying put is legal only where a row says so."""
    if (current, event, new) in DRAIN_MOVES:
        return
    raise IllegalDrainMove(f"drain record {key}: {event} cannot move it from {current} to {new}")


#: The stored record's keys, in the order the master writes them.
_KEYS = (
    "node",
    "address",
    "schedule",
    "deadline",
    "started_at",
    "window_start",
    "actor",
    "escalated",
    "down",
    "operation",
    "request_id",
    "phase",
    "recorded_at",
    "committed_at",
    "late",
)
#: Kept in the stored record even when ``None`` (the master has always written them).
_ALWAYS = frozenset({"deadline", "started_at", "escalated", "down"})


@dataclass(frozen=True, kw_only=True)
class DrainRecord:
    """The master's record of a drain on one machine's node (the ``drains`` document's
    value under the machine's key; an etcd store keeps one key per machine).

    ``node``/``address``: the node and where it was asked; ``actor``: whose request the
    drain is (the agent records it); ``schedule``/``deadline``: the drain as sent (the
    deadline relative to the commit); ``started_at``: when the master started it (its
    clock); ``window_start``: the window the drain was started for (a later window makes
    it relax, see :func:`decide`); ``escalated``: the node has been told to evict at the
    window; ``down``: the fast drain of a DOWN machine; ``late``: the node's jobs, as its
    last ad before the window showed them, would outlast the window; ``operation``: the
    rolling operation whose drain this is (:mod:`nodeagent.master._rolling`);
    ``request_id``/``phase``/``recorded_at`` (the master's clock)/``committed_at`` (the
    node's): the two-phase drain (see the module docstring).
    """

    node: str | None = None
    address: str | None = None
    schedule: str | None = None
    deadline: float | None = None
    started_at: float | None = None
    window_start: float | None = None
    actor: str | None = None
    escalated: bool = False
    down: bool = False
    late: bool = False
    operation: str | None = None
    request_id: str | None = None
    phase: DrainPhase = DrainPhase.NONE
    recorded_at: float | None = None
    committed_at: float | None = None
    #: The stored form this record was read from or last written as (unchanged records
    #: are written as they were read: an etcd store then rewrites none of them).
    _stored: dict[str, Any] | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def node_name(self) -> str:
        return self.node or ""

    @property
    def requester(self) -> str:
        """Who the agent records as the drain's requester: ``actor``, else ``operator``."""
        return self.actor if self.actor is not None else "operator"

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> DrainRecord:
        """The record as a store holds it (written by this master or an older one: every
        key optional, a record without ``phase`` is :attr:`DrainPhase.NONE`)."""
        values: dict[str, Any] = {}
        for name in _KEYS:
            value = stored.get(name)
            if value is None:
                continue
            if name in ("escalated", "down", "late"):
                value = bool(value)
            elif name == "phase":
                value = DrainPhase(value)
            elif name == "request_id":
                value = str(value)
            values[name] = value
        record = cls(**values)
        object.__setattr__(record, "_stored", dict(stored))
        return record

    def to_json(self) -> dict[str, Any]:
        """The stored form (read-only: it is shared). A record read from a store and not
        changed since is written back as it was read, key for key."""
        if self._stored is not None:
            return self._stored
        stored: dict[str, Any] = {}
        for name in _KEYS:
            value = getattr(self, name)
            if name == "phase":
                if value is not DrainPhase.NONE:
                    stored[name] = str(value)
            elif name == "late":
                if value:
                    stored[name] = True
            elif value is not None or name in _ALWAYS:
                stored[name] = value
        object.__setattr__(self, "_stored", stored)
        return stored

    def moved(
        self, event: DrainEvent, phase: DrainPhase, *, key: str, **changes: Any
    ) -> DrainRecord:
        """The record after ``event`` (to ``phase``, with ``changes``); raises
        :class:`IllegalDrainMove`, this record unchanged, for a move the table refuses."""
        check_drain_move(self.phase, event, phase, key=key)
        return dataclasses.replace(self, phase=phase, **changes)

    # The moves, by name.

    def started(self, key: str, *, request_id: str, body: DrainBody, now: float) -> DrainRecord:
        """Phase 1 returned ``request_id`` for ``body``: recorded before the commit."""
        return self.moved(
            DrainEvent.START,
            DrainPhase.PENDING,
            key=key,
            request_id=request_id,
            schedule=body.schedule,
            deadline=body.deadline,
            recorded_at=now,
            committed_at=None,
        )

    def committed(self, key: str, *, committed_at: float | None) -> DrainRecord:
        """The commit's reply (the node's ``committed_at``)."""
        return self.moved(
            DrainEvent.COMMIT, DrainPhase.COMMITTED, key=key, committed_at=committed_at
        )

    def noted(self, key: str, **changes: Any) -> DrainRecord:
        """What the record knows changes; its phase stays."""
        return self.moved(DrainEvent.NOTE, self.phase, key=key, **changes)

    def forgotten(self, key: str) -> None:
        """Check that the record may be let go (the caller then drops it)."""
        check_drain_move(self.phase, DrainEvent.FORGET, DrainPhase.ABSENT, key=key)


#: A record not made yet (its phase :attr:`DrainPhase.ABSENT`).
ABSENT = DrainRecord(phase=DrainPhase.ABSENT)
#: The plan's stand-in for a record not made yet: the master's phase 1 is on its way.
STARTING = DrainRecord(phase=DrainPhase.STARTING)


def assigned(
    key: str, *, node: str, address: str | None, actor: str, operation: str
) -> DrainRecord:
    """The record a rolling operation writes for a node about to drain (its engine starts
    the drain; the master's passes leave it alone)."""
    return ABSENT.moved(
        DrainEvent.ASSIGN,
        DrainPhase.OPERATION,
        key=key,
        node=node,
        address=address,
        actor=actor,
        operation=operation,
    )


# ---------------------------------------------------------------------- ads and records


def ad_knows(record: DrainRecord, entry: AdEntry) -> bool:
    """Whether the node's ad is not older than the master's record of its drain.

    True when the ad shows a later request id than the record's, or the record's own
    past the state the record knows (a committed drain's ad still ``pending`` was made
    before the commit), or, failing that, when it was made after the drain was
    committed: its ``MyCurrentTime`` (whole seconds, the node's clock) is past the record's
    ``committed_at`` (the node's clock too); for a record without ``committed_at``, when
    the master received it after it wrote the record (``recorded_at``, the master's clock).
    A record without a request id (a ``down`` record being made) is known by every ad.
    """
    own = request_number(record.request_id)
    if own is None:
        return True
    machine = entry.machine
    shown = request_number(machine.get("DrainingRequestId"))
    if shown is not None and shown > own:
        return True
    if shown == own and (
        record.phase is not DrainPhase.COMMITTED or machine.get("DrainState") != "pending"
    ):
        return True
    committed_at = record.committed_at
    made = machine.get("MyCurrentTime")
    if isinstance(committed_at, int | float) and isinstance(made, int | float):
        return bool(made > committed_at)
    recorded_at = record.recorded_at
    return not isinstance(recorded_at, int | float) or entry.received_at > recorded_at


def evicts_at_window(machine: Mapping[str, Any], window_start: float, escalation: str) -> bool:
    """Whether the drain in force on the node, as its ad shows it, carries the escalation.

    ``fast``: a fast drain. ``quick``: a quick or fast drain (they evict at once), or a
    drain whose ``DrainingDeadline`` is at or before ``window_start`` (the agent evicts
    what still runs at its deadline by itself; the ad shows it in whole seconds).
    """
    schedule = machine.get("DrainSchedule")
    if schedule == "fast":
        return True
    if escalation != "quick":
        return False
    deadline = machine.get("DrainingDeadline")
    return schedule == "quick" or (deadline is not None and deadline <= window_start)


def carries_the_window(
    record: DrainRecord, machine: Mapping[str, Any], window_start: float
) -> bool:
    """Whether the drain in force is the master's, started with this window's start as
    its deadline. The agent counts the deadline from its commit, a round trip after the
    master computed it, so the ad may show it a second past the window (whole seconds)."""
    return (
        record.deadline is not None
        and record.window_start == window_start
        and machine.get("DrainingRequestId") == record.request_id
        and machine.get("DrainState") in ("draining", "drained")
        and machine.get("DrainingDeadline") is not None
    )


# ---------------------------------------------------------------------- steps


@dataclass(frozen=True, kw_only=True)
class Start:
    """Start the machine's drain (two-phase, recorded before its commit), as its window
    requires at this instant: ``schedule`` now, with its deadline at ``deadline_at``
    (absolute; the body's deadline is counted from when it is sent). ``accepted``: started
    before its just-in-time start because every job group on the node accepted its notice
    (``[master] on_all_accepted = "drain_now"``)."""

    schedule: str
    deadline_at: float | None
    window_start: float
    opened: bool
    accepted: bool = False

    def body(self, now: float) -> DrainBody:
        deadline = None if self.deadline_at is None else self.deadline_at - now
        return DrainBody(schedule=self.schedule, reason=REASON, ttl=_TTL, deadline=deadline)

    def record(self, *, node: str | None, address: str, actor: str, now: float) -> DrainRecord:
        """The record the transaction writes once phase 1 returns (phase ``absent``)."""
        return dataclasses.replace(
            ABSENT,
            node=node,
            address=address,
            started_at=now,
            window_start=self.window_start,
            actor=actor,
        )

    def escalated(self, committed_state: str | None) -> bool:
        """Whether the drain started escalated: not graceful, and the commit found work
        on the node (its drain is not already ``drained``)."""
        return self.schedule != "graceful" and committed_state != "drained"


@dataclass(frozen=True, kw_only=True)
class Escalate:
    """The window has opened and the node is not empty (or is, because its drain's
    deadline evicted what was forecast late): ``replace_with`` ``None`` when the drain in
    force already evicts (no call), else the drain is replaced by one of that schedule.
    ``escalated`` is recorded once that is done."""

    replace_with: str | None


@dataclass(frozen=True, kw_only=True)
class Withdraw:
    """The window moved later and the drain is not due yet under it: cancel the drain by
    its id and forget the record (a later pass starts the drain the window requires)."""

    request_id: str | None
    due_at: float


@dataclass(frozen=True, kw_only=True)
class Postpone:
    """The window moved later and the drain is due already: replace it by a graceful one
    whose deadline is the new window start."""

    window_start: float

    def body(self, now: float) -> DrainBody:
        return DrainBody(
            schedule="graceful", reason=REASON, ttl=_TTL, deadline=self.window_start - now
        )


@dataclass(frozen=True, kw_only=True)
class Down:
    """A DOWN machine: whatever drain the node has is cancelled and a ``fast`` one, the
    master's, recorded before its commit, keeps it closed."""

    @staticmethod
    def body() -> DrainBody:
        return DrainBody(schedule="fast", reason=REASON, ttl=_TTL)


@dataclass(frozen=True, kw_only=True)
class MarkDown:
    """A DOWN machine whose node already holds the master's fast drain: record ``down``."""


@dataclass(frozen=True, kw_only=True)
class Refresh:
    """Fetch the node's ad: the one held predates the master's record of its drain, and
    the window needs a decision."""


@dataclass(frozen=True, kw_only=True)
class RememberLate:
    """Record ``late`` (whether the node's jobs, as its ad shows them, would outlast the
    window; saved, so that a master restarted across the window knows it too)."""

    late: bool


@dataclass(frozen=True, kw_only=True)
class BringUp:
    """A DOWN machine whose window ended at ``window_end`` and whose node is healthy
    (:func:`healthy`), under ``[master] up_after_window``: the master brings it UP, as
    ``POST /machine/up`` would (out of the schedule; a later pass then cancels its drain
    by its id, as for any machine that leaves the schedule)."""

    window_end: float


#: What a pass does for one machine (``None``: nothing).
Step = Start | Escalate | Withdraw | Postpone | Down | MarkDown | Refresh | RememberLate | BringUp


def healthy(machine: Mapping[str, Any]) -> bool:
    """Whether the node's health check passes, as its ad shows it (``HealthState``
    ``passing``); a node that runs no health check (no ``HealthState``) is healthy."""
    state = machine.get("HealthState")
    return state is None or state == "passing"


def decide(
    plan: MachinePlan,
    record: DrainRecord | None,
    policy: PlanPolicy,
    now: float,
    *,
    all_accepted: bool = False,
) -> Step | None:
    """What a reconcile pass does now for a scheduled machine with a node (not lost).

    A record left ``pending`` is settled first (:func:`settle`), a rolling operation's is
    its engine's: nothing. An ad older than the record (:func:`ad_knows`) is never a
    reason for a second drain: before the window nothing is due (but ``late``), from it
    the node is asked (:class:`Refresh`). DOWN: the node gets the master's fast drain
    (:class:`Down`), or has it (:class:`MarkDown`). DRAINING with the master's drain in
    force: before the window, a window moved later relaxes the drain (:class:`Withdraw`
    or :class:`Postpone`), else ``late`` is remembered; from the window, the drain
    escalates (:class:`Escalate`) unless escalated already or the policy is ``none``.
    DRAINING with no drain: started when due (:class:`Start`), or at once when
    ``all_accepted`` (every job group on the node accepted its notice:
    :func:`~nodeagent.master._notices.all_accepted`) and ``policy.on_all_accepted`` is
    ``drain_now``. Someone else's drain is
    left alone. With ``policy.up_after_window``, a DOWN machine whose window has ended
    and whose node is :func:`healthy` goes UP (:class:`BringUp`); without it (Mesos's
    behaviour) it stays DOWN until an operator brings it up. A node whose machine is
    shutting down (its ad's ``ShuttingDown``: its agent drains it for the shutdown) gets
    nothing, in any mode, until it is back.
    """
    node = plan.node
    assert node is not None
    machine = node.machine
    if record is not None and record.phase is DrainPhase.PENDING:
        return None  # settled first
    if record is not None and record.operation is not None:
        return None  # a rolling operation's: it drives the node (nodeagent.master._rolling)
    if node.shutting_down:
        # Its machine is going down, drained by its agent (its own drain, reason
        # shutdown): the machine is gone anyway, whatever its window. No drain of the
        # master's starts, escalates, relaxes or replaces it; the node reopens by itself
        # after the reboot, and a later pass does what the window then requires.
        return None
    if (
        record is not None
        and plan.mode == "DRAINING"
        and not record.down
        and not ad_knows(record, node)
    ):
        # The ad predates the drain the master recorded: never a second drain from
        # it. Before the window nothing is due (but whether the jobs it shows would
        # outlast the window); from the window on, ask the node.
        if now < plan.window_start:
            return _remember_late(plan, record, now)
        return None if record.escalated else Refresh()
    state = machine.get("DrainState", "none")
    ours = record is not None and machine.get("DrainingRequestId") == record.request_id
    mode = plan.mode
    if mode == "DOWN":
        end = plan.window_end
        if policy.up_after_window and end is not None and now >= end and healthy(machine):
            return BringUp(window_end=end)
        if record is not None and record.down:
            return None
        if ours and machine.get("DrainSchedule") == "fast":
            return MarkDown()
        return Down()
    if mode != "DRAINING":
        return None
    if ours:
        assert record is not None
        if now < plan.window_start:
            moved = record.window_start
            if (
                record.deadline is not None
                and moved is not None
                and moved < plan.window_start
                and not record.escalated
            ):
                # the window moved later: the drain's deadline would cut early
                if plan.drain_start is not None and now < plan.drain_start:
                    return Withdraw(request_id=record.request_id, due_at=plan.drain_start)
                return Postpone(window_start=plan.window_start)
            return _remember_late(plan, record, now)
        if record.escalated or policy.escalation == "none":
            return None
        if not plan.empty:
            return _escalate(plan, record, policy.escalation)
        # Empty already: escalated only if the drain's deadline evicted what was late.
        deadline_did_it = evicts_at_window(
            machine, plan.window_start, "quick"
        ) or carries_the_window(record, machine, plan.window_start)
        return Escalate(replace_with=None) if record.late and deadline_did_it else None
    if state != "none":
        return None  # someone else's drain (an admin, defrag): left alone
    due = plan.drain_start is not None and now >= plan.drain_start
    early = not due and all_accepted and policy.on_all_accepted == "drain_now"
    if due or early:
        escalation = policy.escalation
        opened = now >= plan.window_start
        schedule = escalation if opened and escalation != "none" else "graceful"
        # Before the window with quick: the window start is the deadline (the agent
        # evicts what still runs then by itself, at that instant).
        deadline_at = (
            plan.window_start if schedule == "graceful" and escalation == "quick" else None
        )
        return Start(
            schedule=schedule,
            deadline_at=deadline_at,
            window_start=plan.window_start,
            opened=opened,
            accepted=early,
        )
    return None


def _escalate(plan: MachinePlan, record: DrainRecord, escalation: str) -> Escalate:
    """A drain of the master's that already carries the escalation (a ``fast`` drain;
    with ``quick`` also a ``quick`` one, or one whose ``DrainingDeadline`` is at or before
    the window start) needs no call. Otherwise (no deadline: started under another
    policy, by an older master, or lost; a deadline after the window: the window moved
    earlier; a drain that is not fast under ``fast``) it is replaced."""
    assert plan.node is not None
    machine = plan.node.machine
    if (
        plan.empty
        or evicts_at_window(machine, plan.window_start, escalation)
        or (escalation == "quick" and carries_the_window(record, machine, plan.window_start))
    ):
        return Escalate(replace_with=None)
    return Escalate(replace_with=escalation)


def _remember_late(plan: MachinePlan, record: DrainRecord, now: float) -> RememberLate | None:
    """``late`` as the node's ad shows it now, when the record says otherwise. Remembered
    for the window: with ``quick`` the agent evicts at that very instant (the drain's
    deadline), and may be empty before the next pass."""
    assert plan.node is not None
    completion = plan.node.forecast.estimates(now)[_GRACEFUL_END]
    late = not plan.empty and completion > plan.window_start
    return None if record.late == late else RememberLate(late=late)


# ---------------------------------------------------------------------- settle, release


@dataclass(frozen=True, kw_only=True)
class Settlement:
    """How a record left ``pending`` is settled from the node's ad (:func:`settle`):
    ``adopted`` (the record is committed), else the request is cancelled first when
    ``cancel`` (still pending on the node) and the record becomes ``record`` (a rolling
    operation's, back to its drain to be started) or is forgotten (``None``)."""

    adopted: bool
    cancel: bool
    record: DrainRecord | None


def settle(record: DrainRecord, machine: Mapping[str, Any], *, key: str) -> Settlement:
    """Settle a record left ``pending`` with the node's ``machine`` ad, fetched.

    Committed (``draining`` or ``drained`` under that id, or ended: its completion hook is
    that request's): adopted, ``committed_at`` the ad's ``MyCurrentTime``. Still pending:
    cancelled by its id. Gone (expired, cancelled, never made): forgotten. A rolling
    operation's record that is not adopted goes back to ``operation`` (kept, so that no
    pass starts a drain of its own meanwhile); any other is forgotten.
    """
    request_id = record.request_id
    state = machine.get("DrainState")
    shown = machine.get("DrainingRequestId") == request_id
    # A drain with a completion hook ends once its hook has run: the node then shows the
    # request only as its hook's. Committed all the same: never a second drain (and hook).
    hooked = request_id is not None and machine.get("DrainHookRequestId") == request_id
    if (shown and state in ("draining", "drained")) or hooked:
        made = machine.get("MyCurrentTime")
        adopted = record.moved(
            DrainEvent.ADOPT,
            DrainPhase.COMMITTED,
            key=key,
            committed_at=made if isinstance(made, int | float) else None,
        )
        return Settlement(adopted=True, cancel=False, record=adopted)
    cancel = shown and state == "pending"
    if record.operation is not None:
        back = record.moved(
            DrainEvent.RETURN,
            DrainPhase.OPERATION,
            key=key,
            request_id=None,
            committed_at=None,
            recorded_at=None,
            schedule=None,
        )
        return Settlement(adopted=False, cancel=cancel, record=back)
    record.forgotten(key)
    return Settlement(adopted=False, cancel=cancel, record=None)


@dataclass(frozen=True, kw_only=True)
class Release:
    """A machine left the schedule (up, or dropped): its record is forgotten, its drain
    cancelled by its id first when ``cancel``."""

    cancel: bool


def release(record: DrainRecord, entry: AdEntry | None, *, key: str) -> Release | None:
    """What letting go of the record of a machine out of the schedule takes: ``None`` for
    a record left ``pending`` (settled first); else the drain is cancelled by its id
    (never someone else's) unless it has no id or the node's ad, not older than the
    record (:func:`ad_knows`), shows it gone."""
    if record.phase is DrainPhase.PENDING:
        return None
    record.forgotten(key)
    request_id = record.request_id
    gone = (
        entry is not None
        and ad_knows(record, entry)
        and entry.machine.get("DrainingRequestId") != request_id
    )
    return Release(cancel=request_id is not None and not gone)
