"""The plan's totals and late rows kept between replies, remade for what changed.

The summary a watching operator asks for every two seconds (``late=true``: the totals,
the rows late by their promises or to be escalated, the machines out of service after
their window) and the master's metrics count every scheduled machine. Made from every
machine's row at each request, they cost what the pool is; :class:`PlanLedger` keeps each
machine's **share** instead — what its row adds to the totals, whether it is late and
where it goes — and remakes only the shares of the machines that changed or whose time
came, as the reconcile passes do (:mod:`._pass_index`):

* a machine one of whose nodes' ads arrived or went (the ad store's
  :meth:`~nodeagent.master._adstore.AdStore.watch`), whose drain record is or was held,
  that the master is starting to drain, or whose notices changed;
* a machine whose share's time came: the instants its plan reads
  (:func:`~nodeagent.master._pass_index.next_due`), the end of the forecast piece its
  figures are read from (:attr:`slots.PieceLines.last`), and the second its promise
  verdict flips;
* a machine the schedule adds, or whose window, mode or time of entering its window
  changed (the ledger carried over to the new schedule: :meth:`PlanLedger.carried`);
* every machine, when what every row is made of changed: the policy, the ads' lifetime,
  a clock that went back.

A caller that must not hold its event loop for a whole pool (a new ledger remakes every
share; ads that arrive faster than their shares are remade) brings the ledger in steps
(``limit``): the shares it did not remake wait, with those that change meanwhile, for the
next call (:attr:`PlanLedger.complete` false until then, :attr:`PlanLedger.behind` how
many). A reply's call reads the machines read at every call too, and says how many
machines its totals hold as of an older ad or instant (``behind``); a call without
``limit`` remakes every one that waits, so that its totals are whole.

Within a forecast piece a row's expected values are lines, ``at + slope × d`` in the whole
seconds ``d`` (:class:`slots.PieceLines`), so the ledger keeps their sums as one line and
brings them to ``now`` with one multiplication. A row the fast way cannot read (a forecast
that is not exact, a job cut at its window: its figures and escalation are read in full)
is **volatile**: made at every request, as before. The totals are the same, to the byte,
as those the rows give one by one (:class:`~nodeagent.master._plan.PlanTotals` sums
exactly); a test holds the two ways equal under a churn of ads, drains and time.

Pure (no trio, no I/O, ``now`` an argument); one caller at a time.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from nodeagent.master._adstore import AdEntry
from nodeagent.master._pass_index import HostIndex, next_due, same_ids
from nodeagent.master._plan import (
    MachinePlan,
    PlanTotals,
    RowState,
    ScheduledMachine,
    moved_on_plan,
    row_figures,
)
from slots import late_by, line_pairs, packed_ints

__all__ = ["AdChanges", "PlanLedger", "Share", "share_of"]

#: The values summed as lines: the six ``ExpectedMachine*`` values, then the cut
#: core-seconds and badput of an escalation to come.
_LINES = 8
_NO_CUT = ((0, 0), (0, 0))
_NO_LINES = (0,) * (2 * _LINES + 2)
#: The shares remade between two questions to a step's ``enough`` (:meth:`PlanLedger.bring_to`).
_ENOUGH_EVERY = 8
#: The ads moved on in time one :meth:`PlanLedger.bring_to` swaps into the shares at most
#: (≈ 25 µs each): the others wait in :attr:`AdChanges.moved` for the next call (a share
#: whose instant comes first is swapped then), so that the first call after a quiet minute
#: of a pool of 100,000, a reply's or a step's, costs what it may and not seconds.
SWAPS_A_CALL = 2_000


@dataclass(frozen=True, kw_only=True, slots=True)
class AdChanges:
    """What the ledger is told of the ads: ``touched``, the (hostname, ip) of every ad
    that arrived or went since the ledger last read it (the ledger empties it: the ad
    store's :meth:`~nodeagent.master._adstore.AdStore.watch`), and the instants an ad
    turns rebooting or lost (the store's ``lifetime`` and ``reboot_grace``). ``moved``
    (emptied too), those of the ads that only moved on in time (the store's ``quietly``):
    a share made of the ad before holds, its plan's ads swapped for the newer ones
    (``latest``, the store's :meth:`~nodeagent.master._adstore.AdStore.get`:
    :func:`~nodeagent.master._plan.moved_on_plan`), so that no ad replaced is kept."""

    touched: set[tuple[str, str | None]]
    lifetime: float
    reboot_grace: float
    moved: set[tuple[str, str | None]] = field(default_factory=set)
    latest: Callable[[str], AdEntry | None] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Share:
    """What one machine's row adds to the plan at any ``now`` before :attr:`until`.

    ``plan`` and ``state``: what it was made from (compared by identity). ``counts``
    (:meth:`PlanTotals.counts`, the values of ``lines`` left out; the place and value of
    each that is not 0, one after the other) and ``mode`` are added as they are; ``lines``
    are the six expected values and, for a row to be escalated, the cut core-seconds and
    badput, as lines ``at + slope × floor(now)`` on the whole second, then the line of its
    promise completion: ``at`` and ``slope`` of each, one after the other (flat, and in a
    machine-word array when they fit: a pool's shares are 100,000 of them). ``late``:
    whether the row is late by its promises; ``escalates``: whether the master will
    escalate it (``cut_jobs`` cut; a ``late=true`` reply lists a row that is either);
    ``after_window``: the machine's entry of ``after_window`` while it is one.
    ``until`` is the earlier of the next instant the plan reads
    (:func:`~nodeagent.master._pass_index.next_due`: the ads' ages among them) and
    ``bound``, the instants the share reads of itself (the end of its forecast piece, the
    second its promise verdict flips, the escalation hour), which ads moved on in time
    leave as they are (:meth:`PlanLedger._still_holds`).
    """

    plan: MachinePlan
    state: RowState
    until: float
    bound: float
    counts: tuple[int | Fraction, ...]
    mode: str
    lines: Sequence[int]
    late: bool
    escalates: bool
    cut_jobs: int
    after_window: dict[str, Any] | None

    @property
    def listed(self) -> bool:
        """Whether a ``late=true`` reply lists the row."""
        return self.late or self.escalates

    def line(self, i: int) -> tuple[int, int]:
        """Line ``i`` of :attr:`lines` (``_LINES``: the promise's) as ``(at, slope)``."""
        return self.lines[2 * i], self.lines[2 * i + 1]


def share_of(
    plan: MachinePlan,
    state: RowState,
    now: float,
    *,
    due: float,
    after_window: dict[str, Any] | None,
) -> Share | None:
    """The machine's share at ``now``, holding until ``due`` at the latest (the next
    instant its plan reads); ``None`` when its row is volatile (see the module docstring).
    """
    node = plan.node
    totals = PlanTotals(now)
    if node is None:
        totals.add(plan, row_figures(plan, state, now))
        return Share(
            plan=plan,
            state=state,
            until=due,
            bound=math.inf,
            counts=_nonzero(totals.counts()),
            mode=plan.mode,
            lines=_NO_LINES,
            late=False,
            escalates=False,
            cut_jobs=0,
            after_window=after_window,
        )
    window_start = plan.machine.window_start
    read = node.forecast.lines(
        now, window_start=window_start, escalation=state.applied, blockers=False
    )
    if read is None:
        return None
    base = math.floor(now) - read.d
    # As row_figures reads them: an empty node is on time and escalates nothing.
    verdicts = read.verdicts
    at, slope = verdicts[0], verdicts[1]
    active = read.active and not state.empty
    late = late_by(at + slope * read.d, window_start=window_start, active=active) > 0
    escalates = not state.empty and read.cut_jobs > 0
    cut_jobs = read.cut_jobs if escalates else 0
    totals.add_node(plan, on_time=not late, graceful_badput=0, quick_badput=0)
    totals.cut_jobs = cut_jobs
    bound = read.last + 1
    if active and slope:
        bound = min(bound, base + _flip(at, slope, window_start, late=late))
    record = plan.drain_record
    if escalates and not (record is not None and record.escalated):
        totals.escalations = 1
        totals.next_hour = int(window_start <= now + 3600)
        if not totals.next_hour:
            bound = min(bound, window_start - 3600)
    cut = tuple(line_pairs(verdicts[6:10])) if escalates else _NO_CUT
    return Share(
        plan=plan,
        state=state,
        until=min(due, bound),
        bound=bound,
        counts=_nonzero(totals.counts()),
        mode=plan.mode,
        lines=packed_ints(
            v
            for a, s in (*line_pairs(read.estimates), *cut, (at, slope))
            for v in (a - s * base, s)
        ),
        late=late,
        escalates=escalates,
        cut_jobs=cut_jobs,
        after_window=after_window,
    )


def _nonzero(counts: tuple[int | Fraction, ...]) -> tuple[int | Fraction, ...]:
    return tuple([x for i, value in enumerate(counts) if value for x in (i, value)])


def _flip(at: int, slope: int, window_start: float, *, late: bool) -> float:
    """The first ``d`` at which a promise completion ``at + slope × d`` (``slope`` not 0)
    turns from on time to late (``at + slope × d > window_start``) or back; ``inf``
    when it never does."""
    if late == (slope > 0):  # moving away from the window's start
        return math.inf
    d = math.floor((window_start - at) / slope)
    # the first d on the other side, by exact comparison (the division rounds)
    if late:
        while d > 0 and at + slope * (d - 1) <= window_start:
            d -= 1
        while at + slope * d > window_start:
            d += 1
    else:
        while d > 0 and at + slope * (d - 1) > window_start:
            d -= 1
        while at + slope * d <= window_start:
            d += 1
    return max(d, 1)


#: The totals' counts summed as lines: their place in :data:`PlanTotals.COUNTED`, and
#: the line each is.
_LINED = tuple(
    (PlanTotals.COUNTED.index(name), line)
    for name, line in (
        ("graceful_badput", 1),
        ("quick_badput", 3),
        ("cut_core_seconds", 6),
        ("escalation_badput", 7),
    )
)


class PlanLedger:
    """Every scheduled machine's :class:`Share`, and their sums (see the module
    docstring). Made for one schedule and one set of plan-wide inputs (``world``,
    compared by identity: :meth:`holds`)."""

    def __init__(
        self,
        world: tuple[Any, ...],
        machines: Sequence[ScheduledMachine],
        *,
        like: PlanLedger | None = None,
    ) -> None:
        """``like``: a ledger of the same machines by the same ids, whose indexes of
        their hosts and names are taken."""
        self.world = world
        self.machines = machines
        self.position = {m.key: i for i, m in enumerate(machines)}
        self.hosts: HostIndex
        self._by_name: dict[str, list[str]]
        if like is not None:
            self.hosts, self._by_name = like.hosts, like._by_name
        else:
            self.hosts, self._by_name = HostIndex(machines), {}
            for machine in machines:
                self._by_name.setdefault(machine.name, []).append(machine.key)
        self.shares: dict[str, Share] = {}
        #: The machines read at every request (their rows are volatile).
        self.volatile: set[str] = set()
        #: The machines a ``late=true`` reply lists (late, or to be escalated), and those
        #: out of service after their window, by key.
        self.late: set[str] = set()
        self.ended: set[str] = set()
        self._heap: list[tuple[float, str]] = []
        self._sum: list[int | Fraction] = [0] * len(PlanTotals.COUNTED)
        self._modes: dict[str, int] = {}
        self._lines = [[0, 0] for _ in range(_LINES)]
        self._held: set[str] = set()
        #: The machines whose share came due as it was made (an instant its plan reads
        #: has passed, the master yet to act on it): remade at every call that rereads.
        self._overdue: set[str] = set()
        self._notices: Mapping[str, Any] | None = None
        #: The last ``now`` brought to (a clock that goes back makes a new ledger).
        self.now = -math.inf
        #: Shares remade by the last :meth:`bring_to` (all of them in a new ledger).
        self.remade = 0
        #: The node forecasts (pieces) the shares remade so far had to make.
        self.forecasts_made = 0
        #: The machines whose share a :meth:`bring_to` with a ``limit`` left to remake.
        self._pending: set[str] = set()

    def carried(
        self,
        world: tuple[Any, ...],
        machines: Sequence[ScheduledMachine],
        changed: Collection[str],
    ) -> PlanLedger:
        """The ledger of ``world`` and ``machines``, made of this one, which is not to be
        used again: the shares of the machines still scheduled and not ``changed``
        (:func:`~nodeagent.master._pass_index.changed_machines`) are kept, with their
        sums; those changed and those new to the schedule wait to be remade
        (:attr:`behind` counts them), as the first call of a new ledger would remake
        every one. A change of the schedule then costs the machines it changes."""
        like = self if same_ids(self.machines, self.position, machines) else None
        ledger = PlanLedger(world, machines, like=like)
        ledger.now, ledger._notices = self.now, self._notices
        ledger.forecasts_made = self.forecasts_made
        ledger.shares, ledger._heap, ledger._sum = self.shares, self._heap, self._sum
        ledger._modes, ledger._lines = self._modes, self._lines
        position = ledger.position
        gone = [k for k in itertools.chain(changed, self.position) if k not in position]
        dropped = {k for k in changed if k in position}
        for key in itertools.chain(dropped, gone):
            share = ledger.shares.pop(key, None)
            if share is not None:
                ledger._add(share, -1)
        for kept, held in (
            (ledger.volatile, self.volatile),
            (ledger.late, self.late),
            (ledger.ended, self.ended),
            (ledger._overdue, self._overdue),
        ):
            kept.update(k for k in held if k in position and k not in dropped)
        ledger._held = {k for k in self._held if k in position}
        ledger._pending = {k for k in self._pending if k in position} | dropped
        ledger._pending.update(position.keys() - self.position.keys())
        return ledger

    @property
    def complete(self) -> bool:
        """Whether no share waits to be remade (a ``limit`` left none, or none was given)."""
        return not self._pending and self.now != -math.inf

    @property
    def behind(self) -> int:
        """The machines whose share a :meth:`bring_to` with a ``limit`` left to remake:
        the totals count them as of an older ad or instant, or (never made) not at all."""
        return len(self._pending)

    def holds(self, world: tuple[Any, ...], now: float) -> bool:
        """Whether it was made for ``world`` (the same objects, in order) and ``now`` is
        not before the last request's."""
        return (
            now >= self.now
            and len(world) == len(self.world)
            and all(a is b for a, b in zip(world, self.world, strict=True))
        )

    def bring_to(
        self,
        now: float,
        *,
        changes: AdChanges,
        held: Collection[str],
        notices: Mapping[str, Any],
        rows: Callable[[Sequence[ScheduledMachine]], list[tuple[MachinePlan, RowState]]],
        after_window: Callable[[MachinePlan], dict[str, Any] | None],
        limit: int | None = None,
        reread: bool = True,
        enough: Callable[[], bool] | None = None,
        forget: Callable[[str], None] | None = None,
    ) -> None:
        """Remake the shares of the machines that changed or came due (every one the
        first time), after swapping into them at most :data:`SWAPS_A_CALL` of the ads
        that moved on in time (``forget``: told of each machine whose ads arrived, went
        or moved on, as they are read; not the first time): ``held``, the machines with a
        drain record or being started; ``notices``, the notices in force by machine name;
        ``rows``, their plan and row state (:meth:`PlanView.rows
        <nodeagent.master._plan_view.PlanView.rows>` of those machines);
        ``after_window``, a row's entry of ``after_window``, if any. With
        ``limit``, at most that many of those that changed or came due: the others wait
        for the next call (:attr:`complete`, :attr:`behind`). ``reread`` (always without
        ``limit``): also the machines read at every call (held, volatile, overdue), whatever
        ``limit`` says, as a reply must; a caller bringing the ledger in steps between
        replies leaves them to the reply's call (``reread=False``), so that it reaches the
        end however many of them there are. ``enough``: asked after each few shares of
        those ``limit`` takes, whether to leave the rest to the next call (a reply that
        bounds its time rather than its count; those read at every call are remade
        first, whatever it says)."""
        reread = reread or limit is None
        first = self.now == -math.inf
        self.now = now
        keys = self._pending
        self._pending = set()
        if first:
            changes.touched.clear()
            changes.moved.clear()
            keys.update(self.position)
        else:
            for hostname, ip in changes.touched:
                for key in self.hosts.matching(hostname, ip):
                    keys.add(key)
                    if forget is not None:
                        forget(key)
            changes.touched.clear()
            moved = changes.moved
            for _ in range(min(SWAPS_A_CALL, len(moved))):
                hostname, ip = moved.pop()
                for key in self.hosts.matching(hostname, ip):
                    if forget is not None:
                        forget(key)
                    if not self._moved_on(key, changes.latest):
                        keys.add(key)
            heap = self._heap
            while heap and heap[0][0] <= now:
                at, key = heapq.heappop(heap)
                share = self.shares.get(key)
                if (
                    share is not None
                    and share.until == at
                    and not self._still_holds(key, share, at, changes)
                ):
                    keys.add(key)
            if notices is not self._notices and self._notices is not None:
                before = self._notices
                for name in before.keys() | notices.keys():
                    if before.get(name) != notices.get(name):
                        keys.update(self._by_name.get(name, ()))
        self._notices = notices
        order = self.position
        if limit is not None and len(keys) > limit:
            # the rest wait: taken out of the set in place (set.pop goes on where it left
            # off), so that a step costs its limit, not the tens of thousands a pool can
            # have waiting
            now_keys = {keys.pop() for _ in range(limit)}
            self._pending = keys
            keys = now_keys
        every: set[str] = set()
        if reread:
            now_held = {k for k in held if k in order}
            every = self.volatile | self._overdue | now_held | self._held
            self._held = now_held
            self._pending -= every
            keys -= every
        self.remade = 0
        for plan, state in rows([self.machines[i] for i in sorted(order[k] for k in every)]):
            self._remake(plan, state, now, changes, after_window)
        machines = [self.machines[i] for i in sorted(order[k] for k in keys)]
        for at in range(0, len(machines), _ENOUGH_EVERY):
            if enough is not None and at and enough():
                self._pending.update(m.key for m in machines[at:])
                break
            for plan, state in rows(machines[at : at + _ENOUGH_EVERY]):
                self._remake(plan, state, now, changes, after_window)

    def _moved_on(self, key: str, latest: Callable[[str], AdEntry | None] | None) -> bool:
        """Swap the ads of ``key``'s share for their nodes' latest, each the one before
        moved on in time (their ages are read again when the share's time comes:
        :meth:`_still_holds`); whether it could (else the share is to be remade; a machine
        without a share is read anew anyway)."""
        share = self.shares.get(key)
        if share is None:
            return True
        plan = None if latest is None else moved_on_plan(share.plan, latest)
        if plan is None:
            return False
        if plan is not share.plan:
            self.shares[key] = replace(share, plan=plan)
        return True

    def _still_holds(self, key: str, share: Share, at: float, changes: AdChanges) -> bool:
        """Whether ``key``'s share, come due at ``at``, holds past :attr:`now` still: its
        ads moved on in time since it was made (:meth:`_moved_on`), so that the instant
        that came was an older ad's age. Then it is due at the next of the newer ads'
        instants and its own (:attr:`Share.bound`) instead: a pool's shares made at one
        instant are not all remade one ``lifetime`` later, however recent their ads. Its
        ads are first swapped for their nodes' latest, if each moved on in time from it (a
        swap :meth:`bring_to` has yet to make; else it is remade)."""
        if changes.latest is not None:
            if not self._moved_on(key, changes.latest):
                return False
            share = self.shares[key]
        due = next_due(share.plan, at, lifetime=changes.lifetime, reboot_grace=changes.reboot_grace)
        until = min(due, share.bound)
        if until <= self.now:
            return False
        self.shares[key] = replace(share, until=until)
        self._due_at(until, key)
        return True

    def _remake(
        self,
        plan: MachinePlan,
        state: RowState,
        now: float,
        changes: AdChanges,
        after_window: Callable[[MachinePlan], dict[str, Any] | None],
    ) -> None:
        key = plan.key
        old = self.shares.get(key)
        if old is not None and old.plan is plan and old.state is state and now < old.until:
            return
        self.remade += 1
        if old is not None:
            self._add(old, -1)
        node = plan.node
        if node is not None and not node.forecast.ready(
            now, window_start=plan.machine.window_start, escalation=state.applied
        ):
            self.forecasts_made += 1
        due = next_due(plan, now, lifetime=changes.lifetime, reboot_grace=changes.reboot_grace)
        share = share_of(
            plan, state, now, due=due if due > now else now, after_window=after_window(plan)
        )
        if share is None:
            self.shares.pop(key, None)
            self._overdue.discard(key)
            self.volatile.add(key)
            self.late.discard(key)
            self.ended.discard(key)
            return
        self.volatile.discard(key)
        self.shares[key] = share
        self._add(share, 1)
        if share.listed:
            self.late.add(key)
        else:
            self.late.discard(key)
        if share.after_window is not None:
            self.ended.add(key)
        else:
            self.ended.discard(key)
        if share.until <= now:
            self._overdue.add(key)
        else:
            self._overdue.discard(key)
        if share.until > now:
            self._due_at(share.until, key)

    def _due_at(self, until: float, key: str) -> None:
        """Have the share of ``key`` remade at ``until`` (its :attr:`~Share.until`)."""
        if math.isinf(until):
            return
        heapq.heappush(self._heap, (until, key))
        if len(self._heap) > 2 * len(self.shares) + 1024:  # stale entries: rebuilt
            self._heap = [(s.until, k) for k, s in self.shares.items() if not math.isinf(s.until)]
            heapq.heapify(self._heap)

    def _add(self, share: Share, sign: int) -> None:
        total = self._sum
        counts = share.counts
        for k in range(0, len(counts), 2):
            total[int(counts[k])] += sign * counts[k + 1]
        self._modes[share.mode] = self._modes.get(share.mode, 0) + sign
        lines = share.lines
        for k, line in enumerate(self._lines):
            at, slope = lines[2 * k], lines[2 * k + 1]
            if at or slope:
                line[0] += sign * at
                line[1] += sign * slope

    def expected(self, now: float) -> tuple[int, ...]:
        """The six expected values summed over the shares, at ``now``."""
        return self._values(now)[:6]

    def _values(self, now: float) -> tuple[int, ...]:
        whole = math.floor(now)
        return tuple([at + slope * whole for at, slope in self._lines])

    def totals(self, now: float) -> PlanTotals:
        """The totals of the shares at ``now`` (the volatile rows are the caller's to
        add)."""
        totals = PlanTotals(now)
        values = self._values(now)
        counts = list(self._sum)
        for at, line in _LINED:
            counts[at] = values[line]
        totals.add_counts(counts, {m: n for m, n in self._modes.items() if n})
        return totals

    def late_by(self, key: str) -> float:
        """How late a machine of the ledger is by its promises at :attr:`now` (seconds;
        0.0 on time)."""
        share = self.shares[key]
        if not share.late:
            return 0.0
        at, slope = share.line(_LINES)
        return late_by(
            at + slope * math.floor(self.now),
            window_start=share.plan.window_start,
            active=True,
        )

    def cut_badput(self, key: str) -> int:
        """The badput of the cuts of a machine to be escalated, at :attr:`now`."""
        at, slope = self.shares[key].line(7)
        return at + slope * math.floor(self.now)

    def in_order(self, keys: Iterable[str]) -> list[str]:
        """``keys`` in schedule order."""
        return sorted(keys, key=self.position.__getitem__)
