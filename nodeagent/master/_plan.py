"""The cluster maintenance plan: the nodes' estimates turned into when to drain what.

Pure functions of the schedule, the ads and ``now`` (epoch seconds). A node's ad is
brought up to ``now`` by its forecast (:class:`slots.DrainForecast`, exactly
:func:`slots.drain_estimates`), so a plan made from ads a minute old is as exact as the
ads allow; the forecast is computed once per ad, and reading it costs a few
multiplications per job.

**Just in time.** A node keeps accepting work until its drain starts. A node that admits
any promise (``before_window = "admit"``, or one that has not heard of the window yet)
promises each job it accepts ``MaxJobRetirementTime``: a graceful drain started at ``T`` is
certain to be done by ``T + max(MaxJobRetirementTime, MachineMaxVacateTime)`` (a job's own
vacate time never exceeds that bound, and running jobs' promises end sooner:
:attr:`AdEntry.drain_bound <nodeagent.master._adstore.AdEntry.drain_bound>`), so the latest
safe start for a window at ``W`` is ``W − margin − that bound``. A node that admits by
promise (``refuse`` or ``shorten``, and its ad holds the window:
:meth:`AdEntry.admits_by_promise <nodeagent.master._adstore.AdEntry.admits_by_promise>`)
admits no job that would outlive ``W``, so only its vacate time bounds the drain
(:attr:`AdEntry.vacate_bound <nodeagent.master._adstore.AdEntry.vacate_bound>`) and the node
keeps taking work that fits until ``W − margin − MachineMaxVacateTime``. Its jobs may keep
their promises until ``W`` itself: for such a node the margin moves the drain's start, and
the node is empty by the window rather than ``margin`` before it. :class:`Closing` says
which bound a machine's drain start comes from, and what each costs in closed capacity.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NamedTuple

from nodeagent.master._adstore import AdEntry
from nodeagent.master._maintenance import MachineId, MachineStatus
from slots import Escalation

if TYPE_CHECKING:
    from nodeagent.master._drains import DrainRecord
    from nodeagent.master._notices import Notice

__all__ = [
    "Closing",
    "MachinePlan",
    "PlanPolicy",
    "PlanTotals",
    "RowFigures",
    "RowState",
    "ScheduledMachine",
    "machine_key",
    "machine_plan",
    "plan_row",
    "planned_escalation",
    "row_dict",
    "row_figures",
    "row_state",
    "whole",
]

_NS = 1_000_000_000
_CUT_FIELDS = ("slot", "job_id", "owner", "cpus", "evict_at", "promise_end", "cut_by", "cut_badput")


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanPolicy:
    """How the master drains scheduled machines (``[master]`` keys of the same names)."""

    drain_policy: str = "just_in_time"  # or "immediate"
    drain_margin: float = 60.0
    escalation: str = "quick"  # "fast", "none"
    up_after_window: bool = False  # a DOWN machine goes UP by itself after its window
    on_all_accepted: str = "drain_now"  # or "wait": every group accepted its notice
    #: How long a node that admits by promise is given to hear of a new window before the
    #: master drains it as one that admits any promise (the master's ``ad_lifetime``).
    hears_within: float = 300.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduledMachine:
    """A machine of the schedule as the plan reads it; made once per schedule change."""

    key: str
    id: MachineId
    mode: str
    window_start: float
    #: The window's length in seconds; ``None``: it has no end.
    window_seconds: float | None = None

    @property
    def machine_id(self) -> dict[str, str]:
        """The machine's id as the plan's rows show it (a new dict each time: a master
        keeps 100,000 of these, and the rows are written from templates)."""
        return self.id.to_json()

    @property
    def window(self) -> dict[str, float | None]:
        """The window as the plan's rows show it (a new dict each time)."""
        seconds = self.window_seconds
        return {"start": self.window_start, "duration": seconds, "end": self.window_end}

    @property
    def window_end(self) -> float | None:
        seconds = self.window_seconds
        return None if seconds is None else self.window_start + seconds

    @property
    def name(self) -> str:
        """The machine's name as its notices give it: its hostname as scheduled, else its
        IP, else its key."""
        return self.id.hostname or self.id.ip or self.key

    def made_of(self, status: MachineStatus) -> bool:
        """Whether :meth:`of` makes this machine of ``status`` (its id the same object)."""
        window = status.window
        if window is None or status.id is not self.id or str(status.mode) != self.mode:
            return False
        unavailability = window.unavailability
        duration = unavailability.duration_ns
        return (
            unavailability.start_ns / _NS == self.window_start
            and (None if duration is None else duration / _NS) == self.window_seconds
        )

    @classmethod
    def of(cls, status: MachineStatus) -> ScheduledMachine | None:
        """The scheduled machine of a status; ``None`` for a machine with no window."""
        if status.window is None:
            return None
        unavailability = status.window.unavailability
        duration = unavailability.duration_ns
        return cls(
            key=machine_key(status.id),
            id=status.id,
            mode=str(status.mode),
            window_start=unavailability.start_ns / _NS,
            window_seconds=None if duration is None else duration / _NS,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Closing:
    """When a scheduled machine's node stops taking work before its window, and why.

    ``admission`` is the node's ``BeforeWindow`` (``None``: its ad does not say);
    ``holds_window`` whether its ad holds the window (:meth:`AdEntry.admits_by_promise
    <nodeagent.master._adstore.AdEntry.admits_by_promise>`); ``by_promise`` whether the
    drain start reads only the vacate times: the node admits by promise and holds the
    window, or is still to hear of it (within ``hears_within`` of the schedule change that
    set it: a node hears of its window in the reply to its next push, and the master's
    first passes see the ads it sent before); ``by`` what sets ``seconds``, the drain's bound:
    ``retirement`` (``MaxJobRetirementTime``: any job admitted until the drain is promised
    it) or ``vacate`` (``MachineMaxVacateTime``). ``admit_seconds`` and
    ``promise_seconds`` are how long before the window the node stops taking work under
    either admission (``drain_margin`` plus the bound), and ``cores`` its ``TotalCpus``:
    their product is the window's cost in closed capacity.
    """

    admission: str | None
    holds_window: bool
    by_promise: bool
    by: str
    seconds: float
    admit_seconds: float
    promise_seconds: float
    cores: int
    #: Until when this holds, with the same ad and window (its grace to hear of the
    #: window runs out, or the earlier window it holds starts).
    until: float = math.inf

    @classmethod
    def of(
        cls,
        node: AdEntry,
        window_start: float,
        *,
        policy: PlanPolicy,
        now: float,
        window_since: float | None,
    ) -> Closing:
        vacate = node.vacate_bound
        retirement = float(node.machine.get("MaxJobRetirementTime", 0))
        holds = node.admits_by_promise(window_start, now)
        until = math.inf
        held = node.held_window
        if holds and held is not None and held < window_start:
            until = held
        hearing = (
            not holds
            and node.before_window in ("refuse", "shorten")
            and window_since is not None
            and now < window_since + policy.hears_within
        )
        if hearing:
            assert window_since is not None
            until = window_since + policy.hears_within
        by_promise = holds or hearing
        if by_promise:
            by, seconds = "vacate", vacate
        else:
            by, seconds = ("retirement" if retirement >= vacate else "vacate"), node.drain_bound
        margin = policy.drain_margin
        return cls(
            admission=node.before_window,
            holds_window=holds,
            by_promise=by_promise,
            by=by,
            seconds=seconds,
            admit_seconds=margin + node.drain_bound,
            promise_seconds=margin + vacate,
            cores=node.cores,
            until=until,
        )

    def core_hours(self) -> dict[str, float]:
        """The window's cost in closed capacity (core-hours) under each admission."""
        admit = round(self.cores * self.admit_seconds / 3600, 3)
        promise = round(self.cores * self.promise_seconds / 3600, 3)
        return {"admit": admit, "refuse": promise, "shorten": promise}

    def to_json(self) -> dict[str, Any]:
        return {
            "admission": self.admission,
            "holds_window": self.holds_window,
            "by_promise": self.by_promise,
            "by": self.by,
            "seconds": self.seconds,
            "closed_core_hours": self.core_hours(),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class MachinePlan:
    """One scheduled machine as the master acts on it (:func:`plan_row` gives its line).

    ``node`` is the first live node matching the machine id (or the first lost one);
    ``drain_start`` is when its graceful drain is due, and ``closing`` what sets it
    (:class:`Closing`), both ``None`` without a node.
    """

    machine: ScheduledMachine
    nodes: list[AdEntry]
    node: AdEntry | None
    lost: bool
    drain_start: float | None
    drain_record: DrainRecord | None
    closing: Closing | None = None

    @property
    def key(self) -> str:
        return self.machine.key

    @property
    def mode(self) -> str:
        return self.machine.mode

    @property
    def window_start(self) -> float:
        return self.machine.window_start

    @property
    def window_end(self) -> float | None:
        """When the window ends (``None``: a window without a duration never does)."""
        return self.machine.window_end

    @property
    def node_name(self) -> str | None:
        return None if self.node is None else self.node.name

    @property
    def empty(self) -> bool:
        return self.node is not None and self.node.empty


def machine_key(machine_id: MachineId) -> str:
    """A stable key for a Mesos machine id: ``hostname|ip`` (hostname lower-cased); one
    object for equal keys (interned), however many of the master's tables hold it."""
    host = "" if machine_id.hostname is None else machine_id.hostname.lower()
    return sys.intern(f"{host}|{machine_id.ip or ''}")


def moved_on_plan(plan: MachinePlan, latest: Callable[[str], AdEntry | None]) -> MachinePlan | None:
    """``plan`` with each of its nodes' ads replaced by the node's ``latest`` (the ad
    store's :meth:`~nodeagent.master._adstore.AdStore.get`), when each latest is that ad
    moved on in time (the same :attr:`~nodeagent.master._adstore.AdEntry.basis`): a plan
    reads nothing else of them but their age, at instants its reader keeps
    (:func:`~nodeagent.master._pass_index.next_due`). ``plan`` itself when no ad is
    newer; ``None`` when one is not the one before moved on (the plan is to be made
    anew)."""
    nodes: list[AdEntry] = []
    chosen: AdEntry | None = None
    for held in plan.nodes:
        now_held = latest(held.name)
        if now_held is None or now_held.basis is not held.basis:
            return None
        nodes.append(now_held)
        if held is plan.node:
            chosen = now_held
    if all(a is b for a, b in zip(nodes, plan.nodes, strict=True)):
        return plan
    if plan.node is not None and chosen is None:
        return None
    return replace(plan, nodes=nodes, node=chosen)


def machine_plan(
    machine: ScheduledMachine,
    nodes: list[AdEntry],
    *,
    is_lost: Callable[[AdEntry], bool],
    now: float,
    policy: PlanPolicy,
    drain_record: DrainRecord | None,
    window_since: float | None = None,
) -> MachinePlan:
    """The plan for one scheduled machine; ``nodes`` are the ads matching its id, and
    ``window_since`` when the machine entered its window (``None``: not known).

    Cheap: it reads the node's ad but brings nothing up to ``now`` (that is
    :func:`plan_row`'s part), so a reconcile pass can afford it for every machine.
    """
    node = None
    for candidate in nodes:
        if not is_lost(candidate):
            node = candidate
            break
    lost = False
    if node is None and nodes:
        node, lost = nodes[0], True
    drain_start = closing = None
    if node is not None:
        closing = Closing.of(
            node, machine.window_start, policy=policy, now=now, window_since=window_since
        )
        if policy.drain_policy == "immediate":
            drain_start = now
        else:
            drain_start = machine.window_start - policy.drain_margin - closing.seconds
    return MachinePlan(
        machine=machine,
        nodes=nodes,
        node=node,
        lost=lost,
        drain_start=drain_start,
        drain_record=drain_record,
        closing=closing,
    )


def planned_escalation(plan: MachinePlan, escalation: str | Escalation) -> Escalation:
    """What the master will do at the machine's window start to what still runs there.

    ``escalation`` is the master's policy (``quick``, ``fast``, ``none``); a DOWN machine's
    node is drained ``fast``; a drain in force that the master did not start (no record:
    an administrator's, the defrag daemon's), or any on a node whose machine is shutting
    down (:attr:`AdEntry.shutting_down`), is left alone, so ``none``.
    """
    node = plan.node
    if node is None or plan.mode not in ("DRAINING", "DOWN"):
        return Escalation.NONE
    if node.shutting_down:  # its agent drains it for its machine's shutdown: left alone
        return Escalation.NONE
    if plan.mode == "DOWN":
        return Escalation.FAST
    if plan.drain_record is None and node.machine.get("DrainState", "none") != "none":
        return Escalation.NONE
    return escalation if type(escalation) is Escalation else Escalation(escalation)


class RowState(NamedTuple):
    """What a plan row says that holds from one plan to the next: the nodes' ``lost``
    and ``rebooting`` flags (``rebooting`` empty when none is), the escalation applied at
    the window, whether the node is empty, whether its figures are stale, the master's
    record (``started``, ``escalated``), whether the row lists its blockers, the
    machine's notices in force with their answers, and what sets its drain start
    (:class:`Closing`)."""

    lost: tuple[bool, ...]
    applied: Escalation
    empty: bool | None
    stale: bool | None
    started: bool
    escalated: bool
    with_blockers: bool
    notices: tuple[Notice, ...] = ()
    closing: Closing | None = None
    rebooting: tuple[bool, ...] = ()


class RowFigures(NamedTuple):
    """What a plan row says that moves with ``now`` (``None`` without a node), in the
    order the row shows it."""

    ages: tuple[float, ...]
    figures_age: float | None
    expected: tuple[int, ...] | None  # the six ExpectedMachine* values
    on_time: bool | None
    late_by: float | None
    promise_completion: int | None
    planned_completion: int | None
    planned_badput: int | None
    will_escalate: bool
    cut_jobs: int
    cut_core_seconds: int
    cut_badput: int
    cuts: list[dict[str, Any]]
    drain_start: float | None
    blockers: list[dict[str, Any]]


def row_state(
    plan: MachinePlan,
    *,
    is_lost: Callable[[AdEntry], bool],
    with_blockers: bool,
    window_since: float | None,
    escalation: str | Escalation,
    notices: tuple[Notice, ...] = (),
    is_rebooting: Callable[[AdEntry], bool] | None = None,
) -> RowState:
    """The row's :class:`RowState` (see :func:`plan_row`); ``notices`` are the machine's
    notices in force (by group); ``is_rebooting``: whether a node is rebooting (the ad
    store's :meth:`~nodeagent.master._adstore.AdStore.rebooting_at`; ``None``: none is)."""
    record = plan.drain_record
    node = plan.node
    rebooting: tuple[bool, ...] = ()
    if is_rebooting is not None:
        rebooting = tuple([is_rebooting(n) for n in plan.nodes])
        if not any(rebooting):
            rebooting = ()
    return RowState(
        lost=tuple([is_lost(n) for n in plan.nodes]),
        rebooting=rebooting,
        applied=planned_escalation(plan, escalation),
        empty=None if node is None else node.empty,
        stale=None
        if node is None
        else window_since is not None and node.received_at < window_since,
        started=record is not None,
        escalated=record is not None and record.escalated,
        with_blockers=with_blockers,
        notices=notices,
        closing=plan.closing,
    )


def row_figures(plan: MachinePlan, state: RowState, now: float) -> RowFigures:
    """The row's :class:`RowFigures` at ``now`` (see :func:`plan_row`)."""
    ages = tuple([round(n.age(now), 3) for n in plan.nodes])
    node = plan.node
    if node is None:
        return RowFigures(
            ages, None, None, None, None, None, None, None, False, 0, 0, 0, [], plan.drain_start, []
        )
    empty = state.empty
    with_blockers = state.with_blockers
    forecast = node.forecast
    window_start = plan.machine.window_start
    applied = state.applied
    expected, verdicts = forecast.read(now, window_start=window_start, escalation=applied)
    late_by = 0 if empty else verdicts.late_by
    will_escalate = not empty and verdicts.escalated
    blockers: list[dict[str, Any]] = []
    cuts: list[dict[str, Any]] = []
    if not empty and (with_blockers or will_escalate):
        listed = forecast.blockers(now, window_start=window_start, escalation=applied)
        cuts = [{name: b[name] for name in _CUT_FIELDS} for b in listed if b["cut_by"] > 0]
        if with_blockers:
            blockers = listed
    return RowFigures(
        ages,
        round(node.age(now), 3),
        expected,
        late_by == 0,
        late_by,
        verdicts.promise_completion,
        verdicts.planned_completion,
        verdicts.planned_badput,
        will_escalate,
        verdicts.cut_jobs if will_escalate else 0,
        verdicts.cut_core_seconds if will_escalate else 0,
        verdicts.cut_badput if will_escalate else 0,
        cuts,
        plan.drain_start,
        blockers,
    )


def row_dict(plan: MachinePlan, state: RowState, figures: Any) -> dict[str, Any]:
    """The row of ``state`` and ``figures`` (:class:`RowFigures`, or stand-ins for its
    values: the JSON template of :mod:`~nodeagent.master._row_json` is made so). Every
    value of ``figures`` is placed once, but ``on_time`` and ``late_by``, twice."""
    node = plan.node
    machine = plan.machine
    row: dict[str, Any] = {
        "machine_id": machine.machine_id,
        "mode": machine.mode,
        "window": machine.window,
        "nodes": [
            {"name": n.name, "address": n.address, "ad_age": age, "lost": lost, "rebooting": r}
            for n, age, lost, r in zip(
                plan.nodes,
                figures.ages,
                state.lost,
                state.rebooting or (False,) * len(plan.nodes),
                strict=True,
            )
        ],
        "node": None if node is None else node.name,
    }
    if node is None:
        row.update(_NO_NODE)
        row["planned_drain_start"] = figures.drain_start
        row["closing"] = None
        row["empty"] = None
        row["blockers"] = []
        row["started_by_master"] = state.started
        row["escalated"] = state.escalated
        row["service"] = None
        row["notices"] = [_notice_row(n) for n in state.notices]
        return row
    (graceful_end, graceful_badput, quick_end, quick_badput, fast_end, fast_badput) = (
        figures.expected
    )
    row["figures_at"] = node.received_at
    row["figures_age"] = figures.figures_age
    row["figures_stale"] = state.stale
    row["drain"] = node.drain
    row["expected"] = {
        "graceful": {"completion": graceful_end, "badput": graceful_badput},
        "quick": {"completion": quick_end, "badput": quick_badput},
        "fast": {"completion": fast_end, "badput": fast_badput},
    }
    row["on_time"] = figures.on_time
    row["late_by"] = figures.late_by
    row["promises"] = {
        "completion": figures.promise_completion,
        "on_time": figures.on_time,
        "late_by": figures.late_by,
    }
    row["as_planned"] = {
        "completion": figures.planned_completion,
        "badput": figures.planned_badput,
        "escalation": str(state.applied),
        "will_escalate": figures.will_escalate,
        "escalated": state.escalated,
        "cut_jobs": figures.cut_jobs,
        "cut_core_seconds": figures.cut_core_seconds,
        "cut_badput": figures.cut_badput,
        "cuts": figures.cuts,
    }
    row["planned_drain_start"] = figures.drain_start
    row["closing"] = None if state.closing is None else state.closing.to_json()
    row["empty"] = state.empty
    row["blockers"] = figures.blockers if state.with_blockers else []
    row["started_by_master"] = state.started
    row["escalated"] = state.escalated
    row["statistics"] = node.statistics
    row["service"] = node.service
    row["notices"] = [_notice_row(n) for n in state.notices]
    return row


def _notice_row(notice: Notice) -> dict[str, Any]:
    """A notice as its machine's plan row shows it: the group, how many of its claims are
    on the node and when the last of their promises ends, and the latest answer (who,
    why, when, and the owner's word on when its work will be gone)."""
    ends = [c.promise_end for c in notice.claims if c.promise_end is not None]
    return {
        "id": notice.id,
        "group": notice.group,
        "issued": notice.issued,
        "claims": len(notice.claims),
        "promise_end": max(ends) if ends else None,
        "answer": None if notice.answer is None else notice.answer.to_json(),
    }


_NO_NODE = {
    "figures_at": None,
    "figures_age": None,
    "figures_stale": None,
    "drain": None,
    "expected": None,
    "on_time": None,
    "late_by": None,
    "promises": None,
    "as_planned": None,
}


def plan_row(
    plan: MachinePlan,
    now: float,
    *,
    is_lost: Callable[[AdEntry], bool],
    with_blockers: bool = True,
    window_since: float | None = None,
    escalation: str = "none",
    is_rebooting: Callable[[AdEntry], bool] | None = None,
) -> dict[str, Any]:
    """The machine's line of ``GET /v1/maintenance/plan``: its two verdicts, never mixed.

    The node's ad is brought up to ``now`` by its :class:`~slots.DrainForecast` (exactly
    :func:`slots.drain_estimates`, :func:`slots.drain_verdicts` and
    :func:`slots.ad_blockers`), against the window start and the escalation the master will
    apply there (:func:`planned_escalation` of the policy's ``escalation``):

    * ``promises``: when the node would be empty had every job kept its retirement
      promise (no deadline, no escalation): ``completion``, ``on_time``, ``late_by``. A
      drain the master starts does not change it. The row's top-level ``on_time`` and
      ``late_by`` are these.
    * ``as_planned``: when the node will actually be empty under the drain in force (or
      about to start) with the escalation applied: ``completion``, ``badput``,
      ``escalation`` (what is applied), ``will_escalate`` (some promise is cut),
      ``escalated`` (the master has told the node, from its record), the cost
      (``cut_jobs``, ``cut_core_seconds`` = Σ cpus · cut, ``cut_badput`` = Σ cpus · run at
      the cut) and ``cuts``, one per cut job (slot, job, owner, cpus, ``evict_at``,
      ``promise_end``, ``cut_by``, ``cut_badput``; latest first).

    ``blockers`` (with ``with_blockers``, for a node not empty) are the jobs as planned,
    each saying which promise the escalation breaks (``promise_end``, ``cut_by``,
    ``cut_badput``). ``expected`` holds the node's six ``ExpectedMachine*`` values at
    ``now``. Without a node, the verdicts, ``expected``, ``on_time`` and ``late_by`` are
    ``None``.

    How old the figures are: ``figures_at`` is when the master received the ad they
    come from (its clock, as ``now``), ``figures_age`` is ``now`` minus that, and
    ``figures_stale`` says the ad predates ``window_since``, the schedule change that
    put the machine in its window (the master fetches a fresher one, and this stays true
    only if the node did not answer); all three are ``None`` without a node.

    ``notices`` are the machine's notices in force, one per job group on its node, each
    with the latest answer (``null`` until answered) beside the last promise end of its
    claims.

    ``closing`` says what sets ``planned_drain_start`` and what the window costs in
    closed capacity under each admission (:class:`Closing`); ``None`` without a node.

    ``nodes`` lists the ads matching the machine, each ``lost`` or ``rebooting`` (its
    last ad said its machine was shutting down, and it is within its reboot grace:
    ``is_rebooting``); ``drain.shutting_down`` says the node's machine is going down (its
    agent drains it; the master leaves it alone).

    ``service`` is whether the node takes work and what keeps it out: its completion
    hook and health gate (:attr:`AdEntry.service
    <nodeagent.master._adstore.AdEntry.service>`); ``None`` without a node.

    The row is :func:`row_dict` of :func:`row_state` (what holds from plan to plan) and
    :func:`row_figures` (what moves with ``now``); the reply writes the same row from a
    template (:class:`~nodeagent.master._row_json.RowJson`).
    """
    state = row_state(
        plan,
        is_lost=is_lost,
        with_blockers=with_blockers,
        window_since=window_since,
        escalation=escalation,
        is_rebooting=is_rebooting,
    )
    return row_dict(plan, state, row_figures(plan, state, now))


def whole(value: float) -> int | Fraction:
    """``value`` exactly: an integer when it is one (the usual core-seconds), else a
    fraction, so that sums of them are exact whatever their order."""
    return int(value) if value.is_integer() else Fraction(value)


class PlanTotals:
    """Cluster totals of a plan, added up row by row (:meth:`add`, then :meth:`to_json`):
    machines per mode, the promise verdict (``on_time``, ``late``), the escalations to come
    (``escalations``: rows that will escalate and are not yet escalated;
    ``escalations_next_hour``: those whose window starts within an hour of ``now``), their
    cost (``cut_jobs``, ``cut_core_seconds``, ``escalation_badput``), expected badput,
    draining statistics, the nodes kept out of service (``out_of_service``; of those,
    ``hooks_running``, ``hooks_failed``, ``health_failing``), and what the windows cost in
    closed capacity (``closed_core_hours``: as planned, and under each admission; see
    :class:`Closing`)."""

    #: What a row adds to, in the order of :meth:`counts` (all but the modes). The closed
    #: capacities are summed exactly (:func:`whole`), so that any order of adding the
    #: rows, or taking one away again, comes to the same totals.
    COUNTED = (
        "machines",
        "without_node",
        "lost",
        "on_time",
        "empty",
        "escalations",
        "next_hour",
        "cut_jobs",
        "cut_core_seconds",
        "escalation_badput",
        "graceful_badput",
        "quick_badput",
        "out_of_service",
        "hooks_running",
        "hooks_failed",
        "health_failing",
        "badput",
        "unclaimed",
        "closed_planned",
        "closed_admit",
        "closed_promise",
    )

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.modes: dict[str, int] = {"UP": 0, "DRAINING": 0, "DOWN": 0}
        self.machines = self.without_node = self.lost = self.on_time = self.empty = 0
        self.graceful_badput = self.quick_badput = self.badput = self.unclaimed = 0
        self.escalations = self.next_hour = self.cut_jobs = 0
        self.out_of_service = self.hooks_running = self.hooks_failed = self.health_failing = 0
        self.cut_core_seconds = self.escalation_badput = 0
        self.closed_planned: int | Fraction = 0
        self.closed_admit: int | Fraction = 0
        self.closed_promise: int | Fraction = 0
        #: Machines counted as of an older ad or instant, or not at all: the shares a
        #: reply of the totals kept between replies left to remake
        #: (:attr:`~nodeagent.master._plan_ledger.PlanLedger.behind`); 0 when whole.
        self.behind = 0

    def counts(self) -> tuple[int | Fraction, ...]:
        """What was added up, in the order of :data:`COUNTED`."""
        return tuple([getattr(self, name) for name in self.COUNTED])

    def add_counts(self, counts: Sequence[int | Fraction], modes: Mapping[str, int]) -> None:
        """Add :meth:`counts` and the modes of other totals."""
        for name, value in zip(self.COUNTED, counts, strict=True):
            setattr(self, name, getattr(self, name) + value)
        for mode, count in modes.items():
            self.modes[mode] = self.modes.get(mode, 0) + count

    def add(self, plan: MachinePlan, figures: RowFigures) -> None:
        if plan.node is None:
            self.machines += 1
            self.modes[plan.mode] = self.modes.get(plan.mode, 0) + 1
            self.without_node += 1
            return
        expected = figures.expected
        assert expected is not None
        self.add_node(
            plan,
            on_time=bool(figures.on_time),
            will_escalate=figures.will_escalate,
            cut_jobs=figures.cut_jobs,
            cut_core_seconds=figures.cut_core_seconds,
            cut_badput=figures.cut_badput,
            graceful_badput=expected[1],
            quick_badput=expected[3],
        )

    def add_node(
        self,
        plan: MachinePlan,
        *,
        on_time: bool,
        graceful_badput: int,
        quick_badput: int,
        will_escalate: bool = False,
        cut_jobs: int = 0,
        cut_core_seconds: int = 0,
        cut_badput: int = 0,
    ) -> None:
        """:meth:`add` of a row with a node, from its figures."""
        node = plan.node
        assert node is not None
        self.machines += 1
        self.modes[plan.mode] = self.modes.get(plan.mode, 0) + 1
        self.lost += plan.lost
        empty, out, running, failed, failing, badput, unclaimed = node.tally
        self.empty += empty
        self.on_time += on_time
        if will_escalate and not (plan.drain_record is not None and plan.drain_record.escalated):
            self.escalations += 1
            self.next_hour += plan.window_start <= self.now + 3600
        self.cut_jobs += cut_jobs
        self.cut_core_seconds += cut_core_seconds
        self.escalation_badput += cut_badput
        self.graceful_badput += graceful_badput
        self.quick_badput += quick_badput
        if out:
            self.out_of_service += 1
            self.hooks_running += running
            self.hooks_failed += failed
            self.health_failing += failing
        self.badput += badput
        self.unclaimed += unclaimed
        closing = plan.closing
        if closing is not None and closing.cores:
            admit = whole(closing.cores * closing.admit_seconds)
            promise = whole(closing.cores * closing.promise_seconds)
            self.closed_admit += admit
            self.closed_promise += promise
            self.closed_planned += promise if closing.by_promise else admit

    def to_json(self) -> dict[str, Any]:
        return {
            "machines": self.machines,
            "behind": self.behind,
            "without_node": self.without_node,
            "lost": self.lost,
            "on_time": self.on_time,
            "late": self.machines - self.without_node - self.on_time,
            "empty": self.empty,
            "escalations": self.escalations,
            "escalations_next_hour": self.next_hour,
            "cut_jobs": self.cut_jobs,
            "cut_core_seconds": self.cut_core_seconds,
            "escalation_badput": self.escalation_badput,
            "expected_graceful_badput": self.graceful_badput,
            "expected_quick_badput": self.quick_badput,
            "out_of_service": self.out_of_service,
            "hooks_running": self.hooks_running,
            "hooks_failed": self.hooks_failed,
            "health_failing": self.health_failing,
            "TotalMachineDrainingBadput": self.badput,
            "TotalMachineDrainingUnclaimedTime": self.unclaimed,
            "closed_core_hours": {
                "planned": round(float(self.closed_planned) / 3600, 3),
                "admit": round(float(self.closed_admit) / 3600, 3),
                "refuse": round(float(self.closed_promise) / 3600, 3),
                "shorten": round(float(self.closed_promise) / 3600, 3),
            },
            "modes": dict(self.modes),
        }
