"""A node's drain estimates and blockers as piecewise-linear functions of time.

:func:`~slots.drain_estimates` and :func:`~slots.ad_blockers` redo the retirement
arithmetic for every ``now``. Yet between a few instants — a job's retirement running
out, a job no longer borrowing vacate time, a deadline passing, one job's end overtaking
another's — every quantity they compute moves linearly with ``now`` (0, 1 or −1 second
per second; badput by whole cpus). A :class:`DrainForecast` does the arithmetic once on
such *lines*: a quantity is its value at a base second plus a slope, and every ``max``
and ``min`` notes for how long its winner stays ahead. The result, a *piece*, is exact
for every whole second from its base to the earliest of those notes; before the base or
past that horizon the forecast computes a new piece. Reading a piece costs a
multiplication per value, so a master can keep one forecast per node ad and bring
thousands of them up to ``now`` for each plan.

A piece's blockers (each claim's row, kept packed: :class:`BlockerFrames`) are made only
when they are first read: the estimates and verdicts, which a master's passes and totals
read, cost about half as much without them. The frames' order holds for a horizon of its
own, so the piece that gets them may end sooner (it is the piece the same second would
have made with them from the start).

The same lines give the promise figure (the graceful drain with no deadline) and, for
a window start and an escalation, the figure as planned and the cost of its cuts, so a
plan reads both verdicts of a node (:meth:`DrainForecast.verdicts`) and its blockers
with their cuts for the price of the estimates. A piece is made for one window start and
escalation (the plan passes the same ones until the schedule changes); another window
makes a new piece, and any piece serves the window-free reads.

For the same slot ads, ``previous`` and ``now``, :meth:`DrainForecast.estimates` equals
:func:`~slots.drain_estimates`, :meth:`DrainForecast.blockers` equals
:func:`~slots.ad_blockers` (graceful, with the same window and escalation),
:meth:`DrainForecast.promise` equals :func:`~slots.promise_completion` and
:meth:`DrainForecast.verdicts` equals :func:`~slots.drain_verdicts`; property tests hold
them to it on random ads at random instants. Ads whose drain deadline is not a whole
second are served by those functions directly.
"""

from __future__ import annotations

import itertools
import marshal
import math
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

from slots._ads import (
    EXPECTED_ATTRIBUTES,
    JobInputs,
    MachineInputs,
    active,
    ad_blockers,
    drain_estimates,
    job_inputs,
    jobs_flat,
    jobs_from_flat,
    machine_inputs,
    window_second,
)
from slots._estimates import MAX_PUBLISHED, Escalation, Phase, Schedule, SuspendPolicy, clamp
from slots._verdicts import Verdicts, drain_verdicts, judged, promise_completion

__all__ = [
    "BlockerFrame",
    "BlockerFrames",
    "DrainForecast",
    "PieceLines",
    "line_pairs",
    "packed_ints",
]

_NAMES = {Schedule.GRACEFUL: "Graceful", Schedule.QUICK: "Quick", Schedule.FAST: "Fast"}


class _Line:
    """``at + slope × d``: a quantity ``d`` whole seconds after its trace's base."""

    __slots__ = ("at", "slope")

    def __init__(self, at: int | float, slope: int) -> None:
        self.at = at
        self.slope = slope

    def __add__(self, other: _Line) -> _Line:
        return _Line(self.at + other.at, self.slope + other.slope)

    def __sub__(self, other: _Line) -> _Line:
        return _Line(self.at - other.at, self.slope - other.slope)

    def times(self, k: int) -> _Line:
        return _Line(self.at * k, self.slope * k)


_ZERO = _Line(0, 0)
_MAX = _Line(MAX_PUBLISHED, 0)


def _const(value: int | float) -> _Line:
    return _Line(value, 0)


# The two sums a piece makes for every job, each in one step (the same operations in the
# same order as with the operators, without the lines between them).


def _worked(run: _Line, until: _Line, now: _Line, cpus: int) -> _Line:
    """``(run + until − now) × cpus``: the core-seconds of a job that has run ``run`` at
    ``now`` once it ends at ``until``."""
    return _Line((run.at + until.at - now.at) * cpus, (run.slope + until.slope - now.slope) * cpus)


def _left(retirement: int, run: _Line, at: _Line, now: _Line) -> _Line:
    """``retirement − (run + (at − now))``: the retirement left at ``at`` of a job that
    has run ``run`` at ``now`` and runs on."""
    return _Line(retirement - (run.at + (at.at - now.at)), 0 - (run.slope + (at.slope - now.slope)))


class _Trace:
    """The arithmetic at second ``base``, noting how long each choice it makes holds.

    ``horizon`` is the largest ``d`` such that every ``max``/``min`` taken so far picks
    the same side at ``base + d`` as at ``base`` (ties go to the side that stays ahead).
    """

    def __init__(self, base: int) -> None:
        self.base = base
        self.now = _Line(base, 1)
        self.horizon: int | float = math.inf

    def _until(self, gap: int | float, closing: int) -> None:
        """A lead of ``gap`` (≥ 0) shrinking by ``closing`` per second lasts this long."""
        if closing > 0:
            self.horizon = min(self.horizon, gap // closing)

    # max and min are most of a piece's arithmetic: _until written out, no tuples made.

    def max(self, a: _Line, b: _Line) -> _Line:
        if a.at < b.at or (a.at == b.at and a.slope < b.slope):
            a, b = b, a
        closing = b.slope - a.slope
        if closing > 0:
            lasts = (a.at - b.at) // closing
            if lasts < self.horizon:  # noqa: PLR1730 (a call to min costs more here)
                self.horizon = lasts
        return a

    def min(self, a: _Line, b: _Line) -> _Line:
        if a.at > b.at or (a.at == b.at and a.slope < b.slope):
            a, b = b, a
        closing = a.slope - b.slope
        if closing > 0:
            lasts = (b.at - a.at) // closing
            if lasts < self.horizon:  # noqa: PLR1730 (a call to min costs more here)
                self.horizon = lasts
        return a

    def lt(self, a: _Line, b: _Line) -> bool:
        """``a < b`` at the base, noting for how long the answer stays the same."""
        gap = b.at - a.at
        drift = a.slope - b.slope  # how fast the gap shrinks
        if gap > 0:
            if drift > 0:  # still true while gap − drift × d > 0
                self.horizon = min(self.horizon, -(-gap // drift) - 1)
            return True
        if drift < 0:  # still false while gap − drift × d ≤ 0
            self.horizon = min(self.horizon, -gap // -drift)
        return False


@dataclass(slots=True)
class _Eviction:
    """:class:`~slots.Eviction` on lines (``firm`` left out: nothing here publishes it)."""

    retirement_remaining: _Line
    vacate: _Line
    soft_kill_at: _Line | None
    hard_kill_at: _Line
    badput: _Line


@dataclass(slots=True)
class _Job:
    """One active job: its inputs, run time and vacate countdown as lines of the trace."""

    inputs: JobInputs
    run: _Line
    vacate_remaining: _Line
    #: Its retirement left and the vacate time that leaves, at ``now``: the same for every
    #: schedule that retires it (graceful, quick, the promise), so made once per trace by
    #: the first (:func:`_evict`; the choices they take are noted once, which is enough).
    retiring: tuple[_Line, _Line] | None = None


def _vacate(trace: _Trace, machine: int, job: int | None, remaining: _Line) -> _Line:
    """:func:`~slots.vacate_time` on lines."""
    if job is None or job <= machine:
        return _const(machine if job is None else job)
    return trace.max(_const(machine), trace.min(_const(job), remaining))


def _evict(
    trace: _Trace,
    job: _Job,
    *,
    schedule: Schedule,
    machine_vacate: int,
    policy: SuspendPolicy,
    deadline: _Line | None,
    not_before: _Line | None = None,
) -> _Eviction:
    """:func:`~slots.plan_eviction` on lines, case for case."""
    now = trace.now
    spec = job.inputs
    run = job.run
    if spec.phase is Phase.KILLING:
        return _Eviction(_ZERO, _ZERO, None, now, run.times(spec.cpus))
    if spec.phase is Phase.VACATING:
        left = trace.max(_ZERO, job.vacate_remaining)
        return _Eviction(_ZERO, left, None, now + left, (run + left).times(spec.cpus))
    if schedule is Schedule.FAST:
        return _Eviction(_ZERO, _ZERO, now, now, run.times(spec.cpus))

    vj = spec.job_max_vacate_time
    suspended = spec.phase is Phase.SUSPENDED
    retired = suspended and policy is SuspendPolicy.EVICT
    retiring = job.retiring
    if retiring is None:
        remaining = (
            _ZERO if retired else trace.max(_ZERO, _const(spec.max_job_retirement_time) - run)
        )
        retiring = job.retiring = (remaining, _vacate(trace, machine_vacate, vj, remaining))
    remaining, vacate_now = retiring

    # Soft-killed now, the job has the retirement it has now (remaining_at(now) is
    # `remaining`, whether its run time accrues or not).
    if schedule is Schedule.QUICK or retired:
        hard = now + vacate_now
        return _Eviction(remaining, vacate_now, now, hard, _worked(run, hard, now, spec.cpus))
    soft = now + trace.max(_ZERO, remaining - vacate_now)
    if not_before is not None:
        soft = trace.max(soft, not_before)
    if deadline is not None:
        soft = trace.min(soft, trace.max(now, deadline))
    if not suspended or policy is SuspendPolicy.RESUME:  # its run time accrues
        remaining_then = trace.max(_ZERO, _left(spec.max_job_retirement_time, run, soft, now))
    else:
        remaining_then = remaining
    vacate = _vacate(trace, machine_vacate, vj, remaining_then)
    hard = soft + vacate
    return _Eviction(remaining, vacate, soft, hard, _worked(run, hard, now, spec.cpus))


def _evictions(
    trace: _Trace,
    jobs: list[_Job],
    *,
    schedule: Schedule,
    machine_vacate: int,
    policy: SuspendPolicy,
    deadline: _Line | None,
) -> list[_Eviction]:
    """:func:`~slots.plan_evictions` on lines: latecomers go once the originals are gone.
    Without latecomers (every schedule but the graceful one, and the graceful one of a
    node that accepted no job while draining) the originals' end is not taken: no choice
    it would make holds the piece's horizon."""
    late = schedule is Schedule.GRACEFUL and any(j.inputs.accepted_while_draining for j in jobs)
    first = {
        i: _evict(
            trace,
            job,
            schedule=schedule,
            machine_vacate=machine_vacate,
            policy=policy,
            deadline=deadline,
        )
        for i, job in enumerate(jobs)
        if not (late and job.inputs.accepted_while_draining)
    }
    if not late:
        return list(first.values())
    gone: _Line | None = None
    for plan in first.values():
        gone = plan.hard_kill_at if gone is None else trace.max(gone, plan.hard_kill_at)
    originals_gone = trace.now if gone is None else gone
    return [
        first[i]
        if i in first
        else _evict(
            trace,
            job,
            schedule=schedule,
            machine_vacate=machine_vacate,
            policy=policy,
            deadline=originals_gone,
            not_before=originals_gone,
        )
        for i, job in enumerate(jobs)
    ]


def _accrues(spec: JobInputs, policy: SuspendPolicy) -> bool:
    """:func:`~slots._estimates._accrues`: the job's run time advances with ``now``."""
    return spec.phase is Phase.RUNNING or (
        spec.phase is Phase.SUSPENDED and policy is SuspendPolicy.RESUME
    )


def _remaining_at(trace: _Trace, job: _Job, t: _Line, policy: SuspendPolicy) -> _Line:
    """:func:`~slots.remaining_at` on lines."""
    spec = job.inputs
    if spec.phase is Phase.SUSPENDED and policy is SuspendPolicy.EVICT:
        return _ZERO
    if _accrues(spec, policy):
        return trace.max(_ZERO, _left(spec.max_job_retirement_time, job.run, t, trace.now))
    return trace.max(_ZERO, _const(spec.max_job_retirement_time) - job.run)


def _run_at(trace: _Trace, job: _Job, t: _Line, policy: SuspendPolicy) -> _Line:
    """:func:`~slots.run_at` on lines."""
    return job.run + (t - trace.now) if _accrues(job.inputs, policy) else job.run


def _escalate(
    trace: _Trace,
    job: _Job,
    plan: _Eviction,
    *,
    escalation: Escalation,
    at: _Line,
    machine_vacate: int,
    policy: SuspendPolicy,
) -> _Eviction:
    """:func:`~slots.escalate_eviction` on lines (the same plan when it does not act)."""
    soft = plan.soft_kill_at
    if soft is None or not trace.lt(at, soft):
        return plan
    spec = job.inputs
    if escalation is Escalation.FAST:
        vacate = _ZERO
    else:
        left = _remaining_at(trace, job, at, policy)
        vacate = _vacate(trace, machine_vacate, spec.job_max_vacate_time, left)
    hard = at + vacate
    badput = _worked(job.run, hard, trace.now, spec.cpus)
    return _Eviction(plan.retirement_remaining, vacate, at, hard, badput)


def _cut(
    trace: _Trace, job: _Job, plan: _Eviction, promise: _Eviction, policy: SuspendPolicy
) -> tuple[_Line, _Line] | None:
    """:func:`~slots.promise_cut` on lines: ``(by, badput)``, or ``None`` when kept."""
    soft, promised_soft = plan.soft_kill_at, promise.soft_kill_at
    if plan is promise or soft is None or promised_soft is None:
        return None
    if not (trace.lt(soft, promised_soft) or trace.lt(plan.hard_kill_at, promise.hard_kill_at)):
        return None
    badput = _run_at(trace, job, soft, policy).times(job.inputs.cpus)
    return promise.hard_kill_at - soft, badput


def _latest(trace: _Trace, plans: list[_Eviction]) -> _Line:
    """The latest hard kill of ``plans`` (not empty)."""
    latest = plans[0].hard_kill_at
    for plan in plans[1:]:
        latest = trace.max(latest, plan.hard_kill_at)
    return latest


def _total(lines: Iterable[_Line]) -> _Line:
    """The sum of ``lines`` (added in their order, as ``+`` adds them)."""
    at: int | float = 0
    slope = 0
    for line in lines:
        at += line.at
        slope += line.slope
    return _Line(at, slope)


#: The keys of a blocker frame, in the order of :func:`~slots.ad_blockers`' rows.
_FRAME_KEYS = (
    "slot",
    "claim_id",
    "job_id",
    "owner",
    "cpus",
    "activity",
    "run",
    "retirement_remaining",
    "vacate",
    "evict_at",
    "gone_by",
    "promise_end",
    "cut_by",
    "cut_badput",
    "accepted_while_draining",
)
#: The keys of a frame whose values are lines of the trace (:meth:`DrainForecast._frames`).
_LINE_KEYS = _FRAME_KEYS[6:14]


class BlockerFrame(NamedTuple):
    """A blocker as it reads at a piece's base, and its moving entries: for each, its
    key, its value at the base (an integer) and its slope (integer units per second), one
    after the other in one flat tuple (``key, at, slope, key, at, slope, …``:
    :func:`moving_entries` reads them). The values at the base are in the order of
    :data:`_FRAME_KEYS`; :attr:`at_base` makes the dict anew on each read.
    """

    values: tuple[Any, ...]
    moving: tuple[Any, ...]

    @property
    def at_base(self) -> dict[str, Any]:
        """The blocker at the base: a new dict, the caller's to change."""
        return dict(zip(_FRAME_KEYS, self.values, strict=True))


class BlockerFrames(Sequence[BlockerFrame]):
    """A piece's blocker frames, kept packed (:mod:`marshal`: the frames' values and
    moving entries, one after the other) and read back whole on each iteration.

    A master keeps a piece per node, and its frames are most of a piece: as tuples, each
    frame held its two tuples and an integer object for each time and duration (≈ 3.5 kB
    for a node of 8 claims, its strings shared); packed they take ≈ 1.2 kB, and reading
    them back (≈ 3–4 µs for 8 claims) is paid by the plans that write blockers, not by the
    ledger nor the passes, which read none. Values :mod:`marshal` does not write (a
    library caller's own objects) are kept as they are.
    """

    __slots__ = ("_packed",)

    def __init__(self, flat: Sequence[tuple[Any, ...]]) -> None:
        """The frames whose values and moving entries ``flat`` holds, one after the other
        (as :meth:`flat` reads them back)."""
        self._packed: bytes | tuple[tuple[Any, ...], ...]
        try:
            self._packed = marshal.dumps(tuple(flat))
        except ValueError:  # an object marshal does not write
            self._packed = tuple(flat)

    def flat(self) -> tuple[tuple[Any, ...], ...]:
        """Each frame's :attr:`~BlockerFrame.values` then its :attr:`~BlockerFrame.moving`,
        one after the other: what iterating makes frames of, without making them."""
        packed = self._packed
        flat: tuple[tuple[Any, ...], ...] = (
            marshal.loads(packed) if type(packed) is bytes else packed  # type: ignore[assignment]
        )
        return flat

    def __iter__(self) -> Iterator[BlockerFrame]:
        flat = self.flat()
        return map(BlockerFrame, flat[::2], flat[1::2])

    def __len__(self) -> int:
        return len(self.flat()) // 2

    @overload
    def __getitem__(self, index: int) -> BlockerFrame: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[BlockerFrame]: ...
    def __getitem__(self, index: int | slice) -> BlockerFrame | Sequence[BlockerFrame]:
        return list(self)[index]


def moving_entries(moving: tuple[Any, ...]) -> Iterator[tuple[str, int, int]]:
    """The ``(key, at, slope)`` entries of a frame's flat :attr:`BlockerFrame.moving`."""
    return zip(moving[::3], moving[1::3], moving[2::3], strict=True)


def _clamped(trace: _Trace, line: _Line) -> _Line:
    """:func:`~slots.clamp` on a line: the published value, as a line of whole seconds.

    A line that moves holds whole seconds (only the idle rule's ``previous`` may be a
    fraction, and it does not move), so the clamp is the minimum with the bound.
    """
    if line.slope == 0:
        return _const(clamp(line.at))
    return trace.min(line, _MAX)


#: A piece's window: the escalation's whole second and the escalation (``None``: no
#: escalation, whatever the window).
_Window = tuple[int, Escalation] | None


class PieceLines(NamedTuple):
    """What a forecast's piece holds for a window (:meth:`DrainForecast.lines`): a value at
    ``now`` is ``at + slope × d``, each line's ``at`` and ``slope`` one after the other
    (flat, :func:`line_pairs` reads them as pairs). ``estimates`` are the six values of
    :data:`~slots.EXPECTED_ATTRIBUTES`; ``verdicts`` the promise completion, the planned
    completion and badput, the cut core-seconds and badput (as :meth:`DrainForecast.read`
    gives them, with :func:`~slots.late_by` of the first); ``blockers`` the frames of the
    blockers as planned (``None`` unless they were asked for). ``piece`` identifies them
    (by identity); they hold from the whole second ``now − d`` to ``last`` (``inf``: for
    ever)."""

    piece: object
    d: int
    last: int | float
    estimates: Sequence[int]
    verdicts: Sequence[int]
    active: bool
    cut_jobs: int
    blockers: BlockerFrames | None


class _Piece(NamedTuple):
    """The forecast for the whole seconds ``base`` … ``base + horizon``.

    ``verdicts`` are the values and slopes of the promise completion, then, for
    ``window``, the planned completion and badput and the cut core-seconds and badput.
    Both flat, each value and its slope one after the other (:func:`_published`).
    """

    base: int
    horizon: int | float
    estimates: Sequence[int]  # published value and slope, as EXPECTED_ATTRIBUTES
    # The drain in force, latest gone_by first; None: not made (DrainForecast._framed).
    blockers: BlockerFrames | None
    window: _Window
    active: bool
    verdicts: Sequence[int]
    cut_jobs: int
    # As planned for `window`, latest gone_by first; None with `blockers`.
    planned_blockers: BlockerFrames | None


def _sticky(trace: _Trace, previous: Any) -> _Line:
    """:func:`~slots.sticky_completion` on a line: ``now`` until ``previous``, then it."""
    if previous is not None and not previous > trace.base:
        return _const(previous)
    if previous is not None:
        # `previous > base + d` for every whole d up to this:
        trace.horizon = min(trace.horizon, math.ceil(previous - trace.base) - 1)
    return trace.now


def _keep_order(trace: _Trace, ahead: tuple[int, _Line], behind: tuple[int, _Line]) -> None:
    """Keep two neighbours of a stable sort by latest gone_by in the same order."""
    (i, first), (j, second) = ahead, behind
    gap = first.at - second.at
    closing = second.slope - first.slope
    if closing <= 0:
        return
    # A tie keeps the earlier ad first, so a later ad must stay strictly ahead.
    trace.horizon = min(trace.horizon, (gap if i < j else gap - 1) // closing)


class DrainForecast:
    """A node's six ``ExpectedMachine*`` values, graceful blockers and two verdicts at any
    ``now``.

    Built from the node's slot ads and its last published completions (``previous``, for
    the idle rule), which it keeps; the first piece reads the active jobs' inputs from the
    ads and keeps them packed, and a new piece reads the ads again only for its blockers'
    frames. Besides them it keeps only its current piece; every read returns fresh
    objects.

    The reads that take a window (``window_start`` and ``escalation``, as
    :func:`~slots.drain_verdicts` takes them) need a piece made for that window; the
    others are served by any piece. A plan that reads a node with its window should
    :meth:`prepare` it with that window too.
    """

    def __init__(
        self,
        slot_ads: Iterable[Mapping[str, Any]],
        previous: Mapping[str, Any] | None = None,
        *,
        machine: MachineInputs | None = None,
        jobs: Sequence[int] | None = None,
    ) -> None:
        """``machine``: what :func:`~slots._ads.machine_inputs` reads of these slot ads,
        when the caller has it (the ads are then first read when a piece is made);
        ``jobs``: their active jobs' inputs as :func:`~slots._ads.jobs_flat` writes them,
        when the caller has them (the ads are then read for blockers' frames alone)."""
        # A sequence is kept as it is (a caller may keep its ads packed and read them
        # back on each iteration); anything else is read once into a list.
        self._ads = slot_ads if isinstance(slot_ads, Sequence) else list(slot_ads)
        self._previous = previous
        if machine is None:
            machine = machine_inputs(self._ads)
        self._machine_vacate, self._policy, deadline = machine
        if isinstance(deadline, float) and deadline.is_integer():
            deadline = int(deadline)
        self._deadline = deadline
        #: Whole-second inputs only; otherwise the direct functions serve every call.
        self._exact = deadline is None or type(deadline) is int
        # The jobs' inputs, read from the ads by the first piece and kept packed (≈ 0.6 kB
        # for 8 jobs): a next piece reads the ads only for its blockers' frames.
        self._jobs = jobs if jobs is None or type(jobs) is array else packed_ints(jobs)
        self._piece: _Piece | None = None
        # The window last asked for, and its piece window: a plan asks for the same one.
        self._asked: tuple[float, Escalation] | None = None
        self._asked_window: _Window = None

    def ready(
        self,
        now: float,
        *,
        window_start: float | None = None,
        escalation: Escalation = Escalation.NONE,
        blockers: bool = False,
    ) -> bool:
        """Whether reading at ``now`` (with this window, if any) is cheap: its piece is made
        (with ``blockers``, its blockers too)."""
        if not self._exact:
            return True
        piece = self._piece
        return (
            piece is not None
            and (not blockers or piece.blockers is not None)
            and piece.base
            <= math.floor(now)
            <= self.made_until(window_start=window_start, escalation=escalation)
        )

    @property
    def exact(self) -> bool:
        """Whether reads come from pieces (the drain deadline, if any, a whole second);
        else every read is the direct function's."""
        return self._exact

    def made_until(
        self, *, window_start: float | None = None, escalation: Escalation = Escalation.NONE
    ) -> float:
        """The last whole second the piece made (for this window, if any) holds: reads up
        to it are cheap (:meth:`ready`), a read after it makes a new piece; ``-inf`` when
        no such piece is made, ``inf`` when this forecast is not exact (it makes none)."""
        if not self._exact:
            return math.inf
        piece = self._piece
        if piece is None or (
            window_start is not None and piece.window != self._window(window_start, escalation)
        ):
            return -math.inf
        return piece.base + piece.horizon

    def prepare(
        self,
        now: float,
        *,
        window_start: float | None = None,
        escalation: Escalation = Escalation.NONE,
        blockers: bool = False,
    ) -> None:
        """Make the piece holding ``now`` (the costly part), ahead of reads near ``now``;
        with a window, the piece for that window; with ``blockers``, their frames too (a
        reader that lists blockers would make them)."""
        if not self._exact:
            return
        whole = math.floor(now)
        if window_start is None:
            piece = self._piece_at(whole, frames=blockers)
        else:
            piece = self._piece_for(whole, self._window(window_start, escalation), frames=blockers)
        if blockers:
            self._framed(piece, whole)

    def estimates(self, now: float) -> dict[str, int]:
        """:func:`~slots.drain_estimates` of the ads at ``now``."""
        return dict(zip(EXPECTED_ATTRIBUTES, self.values(now), strict=True))

    def values(self, now: float) -> tuple[int, ...]:
        """:meth:`estimates` as a tuple, in the order of :data:`~slots.EXPECTED_ATTRIBUTES`."""
        if not self._exact:
            expected = drain_estimates(self._ads, now, self._previous)
            return tuple(expected[name] for name in EXPECTED_ATTRIBUTES)
        whole = math.floor(now)
        piece = self._piece_at(whole)
        d = whole - piece.base
        return tuple([at + slope * d for at, slope in line_pairs(piece.estimates)])

    def promise(self, now: float) -> int:
        """:func:`~slots.promise_completion` of the ads at ``now``."""
        if not self._exact:
            return promise_completion(self._ads, now, self._previous)
        whole = math.floor(now)
        piece = self._piece_at(whole)
        verdicts = piece.verdicts
        return verdicts[0] + verdicts[1] * (whole - piece.base)

    def verdicts(self, now: float, *, window_start: float, escalation: Escalation) -> Verdicts:
        """:func:`~slots.drain_verdicts` of the ads at ``now`` against this window."""
        if not self._exact:
            return drain_verdicts(
                self._ads,
                now,
                window_start=window_start,
                escalation=escalation,
                previous=self._previous,
            )
        return self.read(now, window_start=window_start, escalation=escalation)[1]

    def read(
        self, now: float, *, window_start: float, escalation: Escalation
    ) -> tuple[tuple[int, ...], Verdicts]:
        """:meth:`values` and :meth:`verdicts` at ``now`` together, from one piece (a plan
        reads both for every node)."""
        if not self._exact:
            return self.values(now), self.verdicts(
                now, window_start=window_start, escalation=escalation
            )
        whole = math.floor(now)
        piece = self._piece_for(whole, self._window(window_start, escalation))
        d = whole - piece.base
        promised, completion, badput, core_seconds, cut_badput = [
            at + slope * d for at, slope in line_pairs(piece.verdicts)
        ]
        values = tuple([at + slope * d for at, slope in line_pairs(piece.estimates)])
        return values, judged(
            window_start=window_start,
            escalation=escalation,
            active=piece.active,
            promise_completion=promised,
            planned_completion=completion,
            planned_badput=badput,
            cut_jobs=piece.cut_jobs,
            cut_core_seconds=core_seconds,
            cut_badput=cut_badput,
        )

    def let_go_blockers(self) -> None:
        """Let go of the blockers' frames of the piece held (most of what a piece weighs),
        for a reader that listed them once and will not soon again: the piece keeps its
        lines and its last second, and the next read that lists the blockers makes their
        frames again (:meth:`ready` with ``blockers`` is false until then)."""
        piece = self._piece
        if piece is not None and piece.blockers is not None:
            self._piece = piece._replace(blockers=None, planned_blockers=None)

    def piece_at(
        self, now: float, *, window_start: float, escalation: Escalation, blockers: bool = False
    ) -> tuple[object, int] | None:
        """The piece :meth:`lines` would read at ``now`` (compared by identity) and ``d``,
        without the lines: for a caller that keeps what it derived from them. A piece
        made for it has its blockers with ``blockers`` (for a caller that reads
        :meth:`lines` with them next: the piece is made once); one held is as it is."""
        if not self._exact:
            return None
        whole = math.floor(now)
        window = self._window(window_start, escalation)
        piece = self._piece_for(whole, window, frames=blockers)
        return piece, whole - piece.base

    def lines(
        self, now: float, *, window_start: float, escalation: Escalation, blockers: bool = True
    ) -> PieceLines | None:
        """The lines :meth:`read` and :meth:`blockers` (for this window) read at ``now``,
        for a caller that brings many values up to ``now`` at once; ``None`` when this
        forecast is not exact (read :meth:`read` and :meth:`blockers` then). The same
        ``piece`` object (compared by identity) serves every read until the forecast makes
        a new one (or gives the piece its blockers: a reader that needs none says
        ``blockers=False``, and its lines may then hold longer)."""
        if not self._exact:
            return None
        whole = math.floor(now)
        piece = self._piece_for(whole, self._window(window_start, escalation), frames=blockers)
        if blockers:
            piece = self._framed(piece, whole)
        return PieceLines(
            piece=piece,
            d=whole - piece.base,
            last=piece.base + piece.horizon,
            estimates=piece.estimates,
            verdicts=piece.verdicts,
            active=piece.active,
            cut_jobs=piece.cut_jobs,
            blockers=piece.planned_blockers,
        )

    def blockers(
        self,
        now: float,
        *,
        window_start: float | None = None,
        escalation: Escalation = Escalation.NONE,
    ) -> list[dict[str, Any]]:
        """:func:`~slots.ad_blockers` of the ads at ``now`` (graceful schedule; with a
        window, as planned for it)."""
        read = self._blocker_frames(now, window_start=window_start, escalation=escalation)
        if read is None:
            return ad_blockers(self._ads, now, window_start=window_start, escalation=escalation)
        frames, d = read
        # A copy of each frame's dict with its moving values brought to `d`: this loop is
        # what a plan of thousands of nodes repeats.
        result = []
        flat = frames.flat()
        keys = _FRAME_KEYS
        for k in range(0, len(flat), 2):
            values = dict(zip(keys, flat[k], strict=True))
            moving = flat[k + 1]
            for i in range(0, len(moving), 3):
                values[moving[i]] = moving[i + 1] + moving[i + 2] * d
            result.append(values)
        return result

    def _blocker_frames(
        self,
        now: float,
        *,
        window_start: float | None = None,
        escalation: Escalation = Escalation.NONE,
    ) -> tuple[BlockerFrames, int] | None:
        """What :meth:`blockers` reads at ``now``: the frames and ``d``, the whole seconds
        since their base (a blocker is its frame's ``at_base`` with each ``moving`` entry
        ``key, at, slope`` set to ``at + slope × d``); ``None`` when this forecast is not
        exact (a drain deadline that is not a whole second)."""
        if not self._exact:
            return None
        whole = math.floor(now)
        if window_start is None:
            piece = self._framed(self._piece_at(whole, frames=True), whole)
            assert piece.blockers is not None
            return piece.blockers, whole - piece.base
        window = self._window(window_start, escalation)
        piece = self._framed(self._piece_for(whole, window, frames=True), whole)
        assert piece.planned_blockers is not None
        return piece.planned_blockers, whole - piece.base

    # ------------------------------------------------------------------ pieces

    def _window(self, window_start: float, escalation: Escalation) -> _Window:
        """The piece window of a read's ``window_start`` and ``escalation``."""
        asked = self._asked
        if asked is not None and asked[0] == window_start and asked[1] is escalation:
            return self._asked_window
        window = _window_of(window_start, escalation)
        self._asked, self._asked_window = (window_start, escalation), window
        return window

    def _piece_at(self, whole: int, *, frames: bool = False) -> _Piece:
        """A piece holding ``whole``, for whatever window the current one has (one made
        now has its blockers' frames with ``frames``)."""
        piece = self._piece
        if piece is None or not piece.base <= whole <= piece.base + piece.horizon:
            window = None if piece is None else piece.window
            if piece is not None and whole < piece.base:
                return self._compute(whole, window, frames=frames)  # see _piece_for
            piece = self._piece = self._compute(whole, window, frames=frames)
        return piece

    def _piece_for(self, whole: int, window: _Window, *, frames: bool = False) -> _Piece:
        """The piece holding ``whole`` for ``window`` (one made now has its blockers'
        frames with ``frames``). A read before the base of the piece held for that window
        (a long read that keeps its ``now``, while others read on) gets a piece of its
        own: the one held serves the reads that move on with time."""
        piece = self._piece
        if (
            piece is None
            or piece.window != window
            or not piece.base <= whole <= piece.base + piece.horizon
        ):
            if piece is not None and piece.window == window and whole < piece.base:
                return self._compute(whole, window, frames=frames)
            piece = self._piece = self._compute(whole, window, frames=frames)
        return piece

    def _framed(self, piece: _Piece, whole: int) -> _Piece:
        """``piece`` (which holds ``whole``) with its blockers' frames: the piece its base
        makes with them, whose horizon may be shorter (the frames' order holds for a while
        of its own), or when it ends before ``whole``, the piece ``whole`` makes with them.
        It replaces ``piece`` where ``piece`` was the one held."""
        if piece.blockers is not None:
            return piece
        framed = self._compute(piece.base, piece.window, frames=True)
        if whole > framed.base + framed.horizon:
            framed = self._compute(whole, piece.window, frames=True)
        if self._piece is piece:
            self._piece = framed
        return framed

    def _compute(self, base: int, window: _Window, *, frames: bool = False) -> _Piece:
        """The piece from ``base`` for ``window``; its blockers' frames only with
        ``frames`` (their order limits the horizon too)."""
        trace = _Trace(base)
        active_ads: list[Mapping[str, Any]] | None = None
        if self._jobs is None:
            active_ads = [ad for ad in self._ads if active(ad)]
            inputs = [job_inputs(ad) for ad in active_ads]
            self._jobs = packed_ints(jobs_flat(inputs))
        else:
            inputs = jobs_from_flat(self._jobs)
        if frames and active_ads is None:  # the blockers name their slots and jobs
            active_ads = [ad for ad in self._ads if active(ad)]
        named = [] if active_ads is None else active_ads  # read only with frames
        jobs = []
        for spec in inputs:
            # now − as_of, then run + elapsed (running) and vacate_left − elapsed (vacating)
            elapsed = _ZERO if spec.as_of is None else trace.max(_ZERO, _Line(base - spec.as_of, 1))
            phase = spec.phase
            run = (
                _Line(spec.run + elapsed.at, elapsed.slope)
                if phase is Phase.RUNNING
                else _const(spec.run)
            )
            vacate_remaining = (
                trace.max(_ZERO, _const(spec.vacate_left) - elapsed)
                if phase is Phase.VACATING
                else _ZERO
            )
            jobs.append(_Job(spec, run, vacate_remaining))
        deadline = None if self._deadline is None else _const(self._deadline)
        estimates: list[tuple[str, _Line]] = []
        graceful: list[_Eviction] = []
        for schedule in Schedule:
            plans = _evictions(
                trace,
                jobs,
                schedule=schedule,
                machine_vacate=self._machine_vacate,
                policy=self._policy,
                deadline=deadline,
            )
            if schedule is Schedule.GRACEFUL:
                graceful = plans
            name = _NAMES[schedule]
            completion_attr = f"ExpectedMachine{name}DrainingCompletion"
            if plans:
                completion = _latest(trace, plans)
                badput = _total(plan.badput for plan in plans)
            else:
                before = None if self._previous is None else self._previous.get(completion_attr)
                completion, badput = _sticky(trace, before), _ZERO
            estimates.append((completion_attr, completion))
            estimates.append((f"ExpectedMachine{name}DrainingBadput", badput))
        graceful_end, graceful_badput = estimates[0][1], estimates[1][1]

        # The promises: the graceful drain with no deadline (the same plans without one).
        promised = graceful
        if deadline is not None:
            promised = _evictions(
                trace,
                jobs,
                schedule=Schedule.GRACEFUL,
                machine_vacate=self._machine_vacate,
                policy=self._policy,
                deadline=None,
            )
        promise_end = graceful_end if promised is graceful or not jobs else _latest(trace, promised)

        # As planned for the window: the drain in force, escalated (plan_drain).
        planned = graceful
        if window is not None and jobs:
            window_at, escalation = window
            carried = (
                escalation is Escalation.QUICK
                and self._deadline is not None
                and self._deadline <= window_at
            )
            if not carried:
                at = trace.max(trace.now, _const(window_at))
                escalated = [
                    _escalate(
                        trace,
                        job,
                        plan,
                        escalation=escalation,
                        at=at,
                        machine_vacate=self._machine_vacate,
                        policy=self._policy,
                    )
                    for job, plan in zip(jobs, graceful, strict=True)
                ]
                if any(new is not old for new, old in zip(escalated, graceful, strict=True)):
                    planned = escalated
        in_force_cuts = [
            _cut(trace, job, plan, promise, self._policy)
            for job, plan, promise in zip(jobs, graceful, promised, strict=True)
        ]
        blockers = (
            self._frames(
                trace,
                jobs=jobs,
                active_ads=named,
                plans=graceful,
                promised=promised,
                cuts=in_force_cuts,
            )
            if frames
            else None
        )
        if planned is graceful:
            planned_end, planned_badput = graceful_end, graceful_badput
            cuts, planned_blockers = in_force_cuts, blockers
        else:
            planned_end = _latest(trace, planned)
            planned_badput = _total(plan.badput for plan in planned)
            cuts = [
                _cut(trace, job, plan, promise, self._policy)
                for job, plan, promise in zip(jobs, planned, promised, strict=True)
            ]
            planned_blockers = (
                self._frames(
                    trace,
                    jobs=jobs,
                    active_ads=named,
                    plans=planned,
                    promised=promised,
                    cuts=cuts,
                )
                if frames
                else None
            )
        cut_jobs = 0
        core_seconds = cut_badput = _ZERO
        for job, cut in zip(jobs, cuts, strict=True):
            if cut is not None:
                cut_jobs += 1
                core_seconds = core_seconds + cut[0].times(job.inputs.cpus)
                cut_badput = cut_badput + cut[1]
        verdicts = (promise_end, planned_end, planned_badput, core_seconds, cut_badput)
        return _Piece(
            base=base,
            horizon=max(0, trace.horizon),
            estimates=_published(trace, (line for _, line in estimates)),
            blockers=blockers,
            window=window,
            active=bool(jobs),
            verdicts=_published(trace, verdicts),
            cut_jobs=cut_jobs,
            planned_blockers=planned_blockers,
        )

    def _frames(
        self,
        trace: _Trace,
        *,
        jobs: list[_Job],
        active_ads: list[Mapping[str, Any]],
        plans: list[_Eviction],
        promised: list[_Eviction],
        cuts: list[tuple[_Line, _Line] | None],
    ) -> BlockerFrames:
        """The blockers' rows of ``plans``, latest ``gone_by`` first (as ad_blockers)."""
        order = sorted(range(len(jobs)), key=lambda i: (-plans[i].hard_kill_at.at, i))
        for ahead, behind in itertools.pairwise(order):
            _keep_order(
                trace,
                (ahead, plans[ahead].hard_kill_at),
                (behind, plans[behind].hard_kill_at),
            )
        flat: list[tuple[Any, ...]] = []
        for i in order:
            plan, cut = plans[i], cuts[i]
            ad, spec = active_ads[i], jobs[i].inputs
            soft = plan.soft_kill_at
            # the values in the order of _FRAME_KEYS: the ad's, then the lines (at the
            # base; those that move noted), then whether it came while draining
            values: list[Any] = [
                ad.get("Name"),
                ad.get("ClaimId"),
                ad.get("JobId"),
                ad.get("RemoteOwner"),
                spec.cpus,
                ad.get("Activity"),
            ]
            moving: list[Any] = []
            lines = (
                jobs[i].run,
                plan.retirement_remaining,
                plan.vacate,
                None if soft is None else _clamped(trace, soft),
                _clamped(trace, plan.hard_kill_at),
                _clamped(trace, promised[i].hard_kill_at),
                0 if cut is None else _clamped(trace, cut[0]),
                0 if cut is None else _clamped(trace, cut[1]),
            )
            for key, line in zip(_LINE_KEYS, lines, strict=True):
                if type(line) is _Line:
                    if line.slope:
                        moving += (key, int(line.at), line.slope)
                    values.append(line.at)
                else:
                    values.append(line)
            values.append(spec.accepted_while_draining)
            flat += (tuple(values), tuple(moving))
        return BlockerFrames(flat)


def _window_of(window_start: float, escalation: Escalation) -> _Window:
    """A piece's window for a read's ``window_start`` and ``escalation``."""
    at = window_second(window_start)
    if at is None or escalation is Escalation.NONE:
        return None
    return (at, escalation)


def _published(trace: _Trace, lines: Iterable[_Line]) -> Sequence[int]:
    """Published values (clamped whole seconds) and their slopes, one after the other: an
    array of 64-bit integers (a master keeps a piece or two for each of 100,000 nodes),
    or a tuple when one does not fit."""
    return packed_ints([x for line in lines for x in _at_slope(_clamped(trace, line))])


def packed_ints(values: Iterable[int]) -> Sequence[int]:
    """``values`` as an array of 64-bit integers (8 bytes each, against an object each in
    a tuple), or as a tuple when one is beyond 64 bits or not an ``int``."""
    values = list(values)
    try:
        return array("q", values)
    except (OverflowError, TypeError):
        return tuple(values)


def _at_slope(line: _Line) -> tuple[int, int]:
    return int(line.at), line.slope


def line_pairs(flat: Sequence[int]) -> Iterator[tuple[int, int]]:
    """The ``(at, slope)`` pairs of lines kept flat (:class:`PieceLines`)."""
    values = iter(flat)
    return zip(values, values, strict=True)
