"""The fleet at a glance: what the master's metrics count, from its plan and its ads.

Pure (no trio, no I/O, ``now`` an argument), read at every scrape
(:mod:`nodeagent.master._metrics`):

- :func:`schedule_figures`: the scheduled machines by their plan rows, as
  ``GET /v1/maintenance/plan`` counts them in its totals: the machines late by their
  promises (each with how late), the escalations to come (each with the jobs it cuts),
  and the expected badput of each schedule summed over the machines with a node. The
  rows come from the plan view's caches (:meth:`PlanView.rows
  <nodeagent.master._plan_view.PlanView.rows>`, with blockers, as the plan's default
  reply asks, so that both keep the same rows); each row's figures at ``now`` are read
  without listing its blockers, as a plan with ``blockers=false`` would: a scrape reads
  a few numbers per machine.
- :func:`node_figures`: the nodes by their ads: live nodes by drain, hook and health
  state, the nodes whose completion hook failed and holds them closed, those whose health
  check fails, the lost ones, the oldest live ad.
- :func:`operation_figures`: the rolling operations by state, and the batches of those
  not ended by state.
- :func:`notice_figures`: the notices in force by their latest answer, and the declined
  ones by machine and group.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from nodeagent.master._adstore import AdEntry
from nodeagent.master._notices import Notice, Verdict
from nodeagent.master._operations import ENDED
from nodeagent.master._plan import MachinePlan, RowState, row_figures, whole
from nodeagent.master._plan_ledger import PlanLedger
from slots import Schedule

__all__ = [
    "DRAIN_STATES",
    "HEALTH_STATES",
    "HOOK_STATES",
    "OPERATION_STATES",
    "Escalating",
    "LateMachine",
    "NodeFigures",
    "NodeLedger",
    "NoticeFigures",
    "OperationFigures",
    "ScheduleFigures",
    "ledger_figures",
    "node_figures",
    "notice_figures",
    "operation_figures",
    "schedule_figures",
]

#: ``DrainState`` values an agent publishes (docs/attributes.md), always counted.
DRAIN_STATES = ("none", "pending", "draining", "drained")
#: ``DrainHookState`` values, always counted.
HOOK_STATES = ("pending", "running", "succeeded", "failed", "interrupted")
#: ``HealthState`` values, always counted.
HEALTH_STATES = ("passing", "pending", "failing")
#: A rolling operation's states (:data:`nodeagent.master._operations.OperationState`).
OPERATION_STATES = ("running", "paused", "cancelled", "completed", "completed_with_skips", "failed")
#: Where each schedule's badput is among a row's six ``ExpectedMachine*`` values.
_BADPUT_AT = {str(schedule): 2 * i + 1 for i, schedule in enumerate(Schedule)}


@dataclass(frozen=True, kw_only=True, slots=True)
class LateMachine:
    """A scheduled machine whose node would not be empty before its window if every job
    kept its retirement promise (the plan's ``on_time: false``)."""

    machine: str  # the machine id's hostname (its ip without one)
    node: str
    late_by: float  # seconds past the window's start


@dataclass(frozen=True, kw_only=True, slots=True)
class Escalating:
    """A scheduled machine whose drain the master will escalate at its window, not yet
    escalated (the plan's ``will_escalate``, its record not ``escalated``)."""

    machine: str
    node: str
    escalation: str  # quick or fast
    window_start: float
    cut_jobs: int
    cut_badput: int  # core-seconds


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleFigures:
    """See :func:`schedule_figures`. ``late`` and ``escalations`` in schedule order."""

    late: tuple[LateMachine, ...]
    escalations: tuple[Escalating, ...]
    expected_badput: Mapping[str, int]  # by schedule: graceful, quick, fast (core-seconds)
    #: Capacity the drains close before their windows (core-seconds, exactly: see
    #: :func:`~nodeagent.master._plan.whole`): ``planned``, and under each admission
    #: (``admit``, ``refuse``, ``shorten``), as the plan's totals.
    closed: Mapping[str, int | Fraction]
    #: Machines counted as of an older ad or instant, or not at all (the plan's totals'
    #: ``behind``: a scrape remakes at most so many shares); 0 when whole.
    behind: int = 0


def _label(plan: MachinePlan) -> str:
    machine_id = plan.machine.id
    return machine_id.hostname or machine_id.ip or plan.key


def schedule_figures(rows: Iterable[tuple[MachinePlan, RowState]], now: float) -> ScheduleFigures:
    """The scheduled machines' figures at ``now`` from their plans and row states (see
    the module docstring): as the plan's totals count them, ``late`` holds as many
    machines as its ``late``, ``escalations`` as its ``escalations``, and the expected
    badput of the graceful and quick schedules are its ``expected_graceful_badput`` and
    ``expected_quick_badput``, and ``closed`` its ``closed_core_hours`` (in core-seconds).
    A machine without a node counts in none of them."""
    late: list[LateMachine] = []
    escalations: list[Escalating] = []
    badput = dict.fromkeys(_BADPUT_AT, 0)
    closed: dict[str, int | Fraction] = dict.fromkeys(("planned", "admit", "refuse", "shorten"), 0)
    for plan, state in rows:
        node = plan.node
        if node is None:
            continue
        closing = plan.closing
        if closing is not None and closing.cores:
            admit = whole(closing.cores * closing.admit_seconds)
            promise = whole(closing.cores * closing.promise_seconds)
            closed["planned"] += promise if closing.by_promise else admit
            closed["admit"] += admit
            closed["refuse"] += promise
            closed["shorten"] += promise
        figures = row_figures(plan, state._replace(with_blockers=False), now)
        expected = figures.expected
        assert expected is not None  # a row with a node has its figures
        for schedule, at in _BADPUT_AT.items():
            badput[schedule] += expected[at]
        if not figures.on_time:
            late.append(
                LateMachine(machine=_label(plan), node=node.name, late_by=figures.late_by or 0.0)
            )
        record = plan.drain_record
        if figures.will_escalate and not (record is not None and record.escalated):
            escalations.append(
                Escalating(
                    machine=_label(plan),
                    node=node.name,
                    escalation=str(state.applied),
                    window_start=plan.window_start,
                    cut_jobs=figures.cut_jobs,
                    cut_badput=figures.cut_badput,
                )
            )
    return ScheduleFigures(
        late=tuple(late), escalations=tuple(escalations), expected_badput=badput, closed=closed
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeFigures:
    """See :func:`node_figures`. The counts hold every state of :data:`DRAIN_STATES`,
    :data:`HOOK_STATES` and :data:`HEALTH_STATES` (zero when no node is in it), and any
    other value a node published; the lists are sorted by node."""

    drain_states: Mapping[str, int]
    hook_states: Mapping[str, int]
    health_states: Mapping[str, int]
    hooks_failed: tuple[tuple[str, str], ...]  # (node, hook)
    health_failing: tuple[str, ...]
    lost: tuple[tuple[str, float], ...]  # (node, its ad's age)
    oldest_live_ad: float  # the age of the oldest live ad (0 without one)
    rebooting: int = 0  # nodes neither live nor lost


def _count(counts: dict[str, int], value: object, by: int = 1) -> None:
    if value is not None:
        counts[str(value)] = counts.get(str(value), 0) + by


def _states(known: tuple[str, ...], counts: Mapping[str, int]) -> dict[str, int]:
    """Every state of ``known`` (0 when no node is in it), then the others nodes
    published, by name."""
    out = dict.fromkeys(known, 0)
    out.update((state, counts[state]) for state in known if state in counts)
    out.update((state, n) for state, n in sorted(counts.items()) if state not in out and n)
    return out


def node_figures(
    entries: Iterable[AdEntry],
    is_lost: Callable[[AdEntry], bool],
    now: float,
    is_rebooting: Callable[[AdEntry], bool] | None = None,
) -> NodeFigures:
    """The nodes' figures at ``now`` from the ads held (``is_lost``: the ad store's
    :meth:`~nodeagent.master._adstore.AdStore.lost_at` of ``now``; ``is_rebooting``: its
    :meth:`~nodeagent.master._adstore.AdStore.rebooting_at`, a node neither live nor
    lost, counted in none of the figures). Only live nodes are
    counted by state (a lost node's ad says what it was, not what it is): by
    ``DrainState`` (a node without one counts as ``none``), by ``DrainHookState`` and by
    ``HealthState`` (nodes that publish one). ``hooks_failed``: live nodes whose drain in
    force has a failed completion hook that holds them closed; ``health_failing``: live
    nodes whose health check fails; ``lost``: every lost node with its ad's age."""
    drain: dict[str, int] = {}
    hook: dict[str, int] = {}
    health: dict[str, int] = {}
    failed: list[tuple[str, str]] = []
    failing: list[str] = []
    lost: list[tuple[str, float]] = []
    oldest = 0.0
    rebooting = 0
    for entry in entries:
        age = entry.age(now)
        if is_lost(entry):
            lost.append((entry.name, age))
            continue
        if is_rebooting is not None and is_rebooting(entry):
            rebooting += 1
            continue
        oldest = max(oldest, age)
        machine = entry.machine
        _count(drain, machine.get("DrainState", "none"))
        _count(hook, machine.get("DrainHookState"))
        _count(health, machine.get("HealthState"))
        service = entry.service
        if service["hook_holds"] and service["hook"]["state"] == "failed":
            failed.append((entry.name, str(service["hook"]["name"])))
        if service["health"] is not None and service["health"]["state"] == "failing":
            failing.append(entry.name)
    return NodeFigures(
        drain_states=_states(DRAIN_STATES, drain),
        hook_states=_states(HOOK_STATES, hook),
        health_states=_states(HEALTH_STATES, health),
        hooks_failed=tuple(sorted(failed)),
        health_failing=tuple(sorted(failing)),
        lost=tuple(sorted(lost)),
        oldest_live_ad=oldest,
        rebooting=rebooting,
    )


#: What a live node adds to :class:`NodeLedger`'s counts: its ``DrainState`` (``none``
#: without one), ``DrainHookState`` and ``HealthState`` (``None``: none published), the
#: name of its failed completion hook that holds it closed (``None``: none), whether its
#: health check fails.
_Tally = tuple[object, object, object, "str | None", bool]


def _tally_of(entry: AdEntry) -> _Tally:
    """What ``entry``'s node adds to the counts while live (read as :func:`node_figures`
    reads a node)."""
    machine = entry.machine
    service = entry.service
    hook, health = service["hook"], service["health"]
    failed = str(hook["name"]) if service["hook_holds"] and hook["state"] == "failed" else None
    return (
        machine.get("DrainState", "none"),
        machine.get("DrainHookState"),
        machine.get("HealthState"),
        failed,
        health is not None and health["state"] == "failing",
    )


class NodeLedger:
    """:func:`node_figures` kept between scrapes, for a store whose ads live
    ``lifetime``: each live node's part of the counts (an ad is live while its age is at
    most ``lifetime``; older, its node is lost or rebooting), taken again only for the
    nodes whose ad arrived or went (:meth:`bring_to`, or a part at a time:
    :meth:`bring_part`) and for those whose ad grew too old (a heap of the live ads by
    when they came), so that a scrape costs what changed and the nodes not live, not the
    pool. A node whose new ad counts as its last did (the same states: most ads) only
    has its ad replaced. One caller at a time."""

    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        #: The last ``now`` brought to (a clock that goes back needs a new ledger).
        self.now = -math.inf
        self._live: dict[str, AdEntry] = {}
        self._tallies: dict[str, _Tally] = {}  # the live nodes'
        self._gone: dict[str, AdEntry] = {}
        self._heap: list[tuple[float, str]] = []
        self._drain: dict[str, int] = {}
        self._hook: dict[str, int] = {}
        self._health: dict[str, int] = {}
        self._failed: dict[str, str] = {}
        self._failing: set[str] = set()

    def holds(self, lifetime: float, now: float) -> bool:
        """Whether it counts ads of this ``lifetime`` and ``now`` is not before the last."""
        return lifetime == self.lifetime and now >= self.now

    def bring_to(
        self, now: float, changed: Iterable[str], get: Callable[[str], AdEntry | None]
    ) -> None:
        """Take again the nodes ``changed`` (their ad as ``get`` gives it; ``None``:
        none any more), and let go of the live ads that grew too old by ``now``."""
        self.now = now
        for name in changed:
            self._take(name, get(name), now)
        self._let_go(now, math.inf)

    def bring_part(
        self,
        now: float,
        changed: set[str],
        get: Callable[[str], AdEntry | None],
        names: int,
        oldest: int,
    ) -> bool:
        """:meth:`bring_to` a part at a time: take again at most ``names`` of the nodes
        ``changed`` (each taken is removed from it), and look at most at ``oldest`` of the
        oldest ads (those replaced or gone let go of, those grown too old by ``now``
        counted gone). Whether the oldest ad left is live at ``now`` (or none is): the
        rest is ``changed``'s."""
        self.now = now
        for _ in range(min(names, len(changed))):
            name = changed.pop()
            self._take(name, get(name), now)
        return self._let_go(now, oldest)

    def figures(
        self,
        now: float,
        is_lost: Callable[[AdEntry], bool],
        is_rebooting: Callable[[AdEntry], bool],
    ) -> NodeFigures:
        """:func:`node_figures` of every ad held, at the ``now`` brought to."""
        lost = [(name, entry.age(now)) for name, entry in self._gone.items() if is_lost(entry)]
        rebooting = sum(1 for entry in self._gone.values() if is_rebooting(entry))
        self._let_go(-math.inf, math.inf)  # the ads replaced or gone (none grown too old)
        heap = self._heap
        oldest = max(0.0, now - heap[0][0]) if heap else 0.0
        return NodeFigures(
            drain_states=_states(DRAIN_STATES, self._drain),
            hook_states=_states(HOOK_STATES, self._hook),
            health_states=_states(HEALTH_STATES, self._health),
            hooks_failed=tuple(sorted(self._failed.items())),
            health_failing=tuple(sorted(self._failing)),
            lost=tuple(sorted(lost)),
            oldest_live_ad=oldest,
            rebooting=rebooting,
        )

    def _let_go(self, now: float, most: float) -> bool:
        """Pop at most ``most`` of the heap's oldest: those of ads replaced or gone, and
        the live ones that grew too old by ``now`` (then gone). Whether the oldest left is
        a live ad not too old (or none is)."""
        heap, live, lifetime = self._heap, self._live, self.lifetime
        while heap and most > 0:
            came, name = heap[0]
            entry = live.get(name)
            if entry is not None and entry.received_at == came:
                if now - came <= lifetime:
                    return True
                self._drop(name)
                self._gone[name] = entry
            heapq.heappop(heap)
            most -= 1
        return not heap

    def _take(self, name: str, entry: AdEntry | None, now: float) -> None:
        """Count ``entry`` as ``name``'s ad (``None``: it has none)."""
        self._gone.pop(name, None)
        self._live.pop(name, None)
        was = self._tallies.pop(name, None)
        tally = None
        if entry is not None:
            if now - entry.received_at > self.lifetime:
                self._gone[name] = entry
            else:
                tally = self._tallies[name] = _tally_of(entry)
                self._live[name] = entry
                heapq.heappush(self._heap, (entry.received_at, name))
                if len(self._heap) > 2 * len(self._live) + 1024:  # stale entries: rebuilt
                    self._heap = [(e.received_at, n) for n, e in self._live.items()]
                    heapq.heapify(self._heap)
        if tally != was:
            if was is not None:
                self._count(name, was, -1)
            if tally is not None:
                self._count(name, tally, 1)

    def _drop(self, name: str) -> None:
        self._live.pop(name, None)
        was = self._tallies.pop(name, None)
        if was is not None:
            self._count(name, was, -1)

    def _count(self, name: str, tally: _Tally, by: int) -> None:
        drain, hook, health, failed, failing = tally
        _count(self._drain, drain, by)
        _count(self._hook, hook, by)
        _count(self._health, health, by)
        if failed is not None:
            if by > 0:
                self._failed[name] = failed
            else:
                self._failed.pop(name, None)
        if failing:
            if by > 0:
                self._failing.add(name)
            else:
                self._failing.discard(name)


@dataclass(frozen=True, kw_only=True, slots=True)
class OperationFigures:
    """See :func:`operation_figures`."""

    operations: Mapping[str, int]  # by state, every one of OPERATION_STATES
    batches: Mapping[str, int]  # of the operations not ended, by state
    held: int  # waiting batches of running operations that are held (with a reason)


def operation_figures(operations: Iterable[Mapping[str, Any]]) -> OperationFigures:
    """The rolling operations (as the master saves them:
    :meth:`Operation.to_json <nodeagent.master._operations.Operation.to_json>`) by state,
    and the batches of those not ended (running or paused) by state (``waiting``,
    ``draining``, ``hook``, ``health``, ``returning``, ``done``, …); ``held``: the
    waiting batches of running operations that are held (their ``reason`` says why: the
    SLA, the badput budget, a node not heard from)."""
    states = dict.fromkeys(OPERATION_STATES, 0)
    batches: dict[str, int] = {}
    held = 0
    for operation in operations:
        _count(states, operation["state"])
        if operation["state"] in ENDED:
            continue
        for batch in operation["batches"]:
            _count(batches, batch["state"])
            held += (
                operation["state"] == "running"
                and batch["state"] == "waiting"
                and batch.get("reason") is not None
            )
    return OperationFigures(operations=states, batches=batches, held=held)


@dataclass(frozen=True, kw_only=True, slots=True)
class NoticeFigures:
    """See :func:`notice_figures`."""

    answers: Mapping[str, int]  # accepted, declined, unanswered
    declined: tuple[tuple[str, str], ...]  # (machine, group), sorted


def notice_figures(notices: Iterable[Notice]) -> NoticeFigures:
    """The notices in force (not rescinded) by their latest answer (``accepted``,
    ``declined``, ``unanswered``: every one counted), and the declined ones by machine
    and group."""
    answers = dict.fromkeys(("accepted", "declined", "unanswered"), 0)
    declined: list[tuple[str, str]] = []
    for notice in notices:
        if notice.rescinded is not None:
            continue
        answer = notice.answer
        if answer is None:
            answers["unanswered"] += 1
        elif answer.verdict is Verdict.ACCEPT:
            answers["accepted"] += 1
        else:
            answers["declined"] += 1
            declined.append((notice.machine, notice.group))
    return NoticeFigures(answers=answers, declined=tuple(sorted(declined)))


def ledger_figures(
    ledger: PlanLedger, volatile: Iterable[tuple[MachinePlan, RowState]], now: float
) -> ScheduleFigures:
    """:func:`schedule_figures` of every scheduled machine, from the ledger's shares
    (brought to ``now``: :meth:`PlanLedger.bring_to
    <nodeagent.master._plan_ledger.PlanLedger.bring_to>`) and the rows of its volatile
    machines (``volatile``), made as those of every machine would be."""
    late: list[tuple[int, LateMachine]] = []
    escalations: list[tuple[int, Escalating]] = []
    expected = ledger.expected(now)
    badput = {schedule: expected[at] for schedule, at in _BADPUT_AT.items()}
    totals = ledger.totals(now)
    promise = totals.closed_promise
    closed: dict[str, int | Fraction] = {
        "planned": totals.closed_planned,
        "admit": totals.closed_admit,
        "refuse": promise,
        "shorten": promise,
    }
    for key in ledger.late:
        share = ledger.shares[key]
        plan, state = share.plan, share.state
        assert plan.node is not None  # a listed row has a node
        position = ledger.position[key]
        if share.late:
            machine = LateMachine(
                machine=_label(plan), node=plan.node.name, late_by=ledger.late_by(key)
            )
            late.append((position, machine))
        record = plan.drain_record
        if share.escalates and not (record is not None and record.escalated):
            escalating = Escalating(
                machine=_label(plan),
                node=plan.node.name,
                escalation=str(state.applied),
                window_start=plan.window_start,
                cut_jobs=share.cut_jobs,
                cut_badput=ledger.cut_badput(key),
            )
            escalations.append((position, escalating))
    for plan, state in volatile:
        position = ledger.position[plan.key]
        one = schedule_figures([(plan, state)], now)
        late += [(position, each) for each in one.late]
        escalations += [(position, each) for each in one.escalations]
        for schedule, value in one.expected_badput.items():
            badput[schedule] += value
        for name, seconds in one.closed.items():
            closed[name] += seconds
    return ScheduleFigures(
        late=tuple(each for _, each in sorted(late, key=_first)),
        escalations=tuple(each for _, each in sorted(escalations, key=_first)),
        expected_badput=badput,
        closed=closed,
        behind=ledger.behind,
    )


def _first(item: tuple[int, Any]) -> int:
    return item[0]
