"""What one maintenance window costs a busy pool: closed capacity and badput, by admission.

A simulated pool (pure model, virtual time: no process, no sleep) of ``--machines`` nodes,
each a real :class:`slots.Machine`, and the master's real just-in-time drain: every node's
ad (:meth:`slots.Machine.ad`) goes through :meth:`AdStore.update
<nodeagent.master._adstore.AdStore.update>`, and the master's
:func:`~nodeagent.master._plan.machine_plan` and :func:`~nodeagent.master._drains.decide`
say when each drain starts (graceful, its deadline the window's start under ``escalation =
quick``) and what happens at the window. The same pool, seed and job stream run under each
``[policy] before_window``: ``admit`` (every claim admitted as it asks), ``refuse`` and
``shorten``.

**The pool.** Machines of 8, 16, 32 or 64 cores; ``MaxJobRetirementTime`` 0, 1 h or 24 h;
``MachineMaxVacateTime`` 300, 600 or 1,200 s. At the start every machine is full of jobs
that started earlier (drawn as a busy pool holds them: by length, each part-way through);
then the window (one for all machines, ``--notice`` hours ahead) is posted, every node hears
of it at once, and the master plans from their ads.

**The jobs.** An endless backlog (the same stream for each policy): 1 to 8 cores; a true run
length log-uniform in bands, 2–30 min (40 %), 30 min–2 h (30 %), 2–8 h (20 %) and 8–24 h
(10 %); 70 % ask for a retirement promise of their own, their expected length (0.5 to 1.5
times the true one, most above it) rounded up to a round figure (5 min … 48 h), the rest none
(the machine's); a vacate time of the machine's (60 %), 30 s to 5 min (35 %), or 30 min to
1 h borrowed from retirement (5 %).

**The scheduler** fills a machine's free cores whenever a job leaves it and it takes work
(``Start``): the oldest job of the backlog that fits its free cores. Refused with
``WindowAhead``, it learns the longest promise the reply names and places the oldest job
whose promise fits it instead, or a job that asks for no promise of its own with that
longest one (its owner takes what the machine can keep); jobs passed over wait in the
backlog. Under ``shorten`` and ``admit`` nothing is refused and it places blindly.

**The events.** A job that ends runs its whole length; one the drain soft-kills uses its
whole vacate time (the worst case) and is gone at its hard kill. Ads are what the master
sees: pushed at the window's posting and, on a node that admits by promise, on every change
from ``W − drain_margin − the longest vacate time a job can have`` (before that no ad can
make its drain due), at its planned drain start and at the window (what the master's passes
each second would see: an agent pushes on every change).

**Figures** (per policy): ``closed_core_hours`` (the machines' own
``TotalMachineDrainingUnclaimedTime`` up to the window: idle cores of a draining machine;
``simple``: cores × (window − drain start)), ``closed_minutes`` per machine (window − drain
start: mean, p50, p99, max; by ``MaxJobRetirementTime``), ``plan_closed_core_hours`` (what
the plan's ``closing`` said at each drain start), ``idle_open_core_hours`` (idle cores of
machines still taking work), ``completed`` (jobs that ended before the window and their
core-hours), ``drain_evictions`` (evicted by the drain within their promises, before the
window; badput = cores × run), ``cut`` (promises cut by the escalation at the window:
jobs, Σ cores × cut, badput, the longest cut; for jobs admitted after the node knew the
window, and before), the admission counts (``refused``, ``retried_with_longest``,
``shortened`` and by how much), ``not_empty_at_window`` and ``goal``: the window closes
every machine at most ``drain_margin`` + its longest vacate time (+ 1 s, a pass) early and
cuts no promise admitted after the node knew the window.

Prints one JSON document. Usage: ``python tests/bench/window_capacity.py [--machines 1000]
[--seed 25] [--notice 25] [--policies admit,refuse,shorten]``.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import math
import random
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nodeagent.master._adstore import AdStore
from nodeagent.master._drains import (
    REASON,
    DrainRecord,
    Escalate,
    RememberLate,
    Start,
    decide,
)
from nodeagent.master._maintenance import MaintenanceSchedule, MaintenanceState
from nodeagent.master._plan import Closing, PlanPolicy, ScheduledMachine, machine_plan
from slots import (
    Action,
    BeforeWindow,
    JobSpec,
    Machine,
    MachinePolicy,
    Resources,
    Schedule,
    SignalJob,
    WindowAhead,
    effective_retirement,
    retirement_remaining,
    vacate_time,
)

__all__ = ["POLICIES", "main", "simulate"]

POLICIES = ("admit", "refuse", "shorten")
#: Epoch seconds of the window's posting (and of the simulation's start).
T0 = 1_900_000_000.0
_NS = 1_000_000_000
#: The agent's ``ad_debounce``: a change reaches the master's next pass after it.
_DEBOUNCE = 0.25

_CORES = ((8, 0.2), (16, 0.3), (32, 0.3), (64, 0.2))
_RETIREMENT = ((0, 0.2), (3600, 0.4), (86400, 0.4))
_MACHINE_VACATE = ((300, 0.2), (600, 0.6), (1200, 0.2))
#: Job run lengths: log-uniform between the bounds, with these weights.
_BANDS = (
    (120.0, 1800.0, 0.4),
    (1800.0, 7200.0, 0.3),
    (7200.0, 28800.0, 0.2),
    (28800.0, 86400.0, 0.1),
)
_JOB_CPUS = ((1, 0.5), (2, 0.2), (4, 0.2), (8, 0.1))
#: The promises a job asks for: its expected length rounded up to one of these.
_ROUND = (
    300,
    600,
    900,
    1800,
    2700,
    3600,
    5400,
    7200,
    10800,
    14400,
    21600,
    28800,
    43200,
    57600,
    86400,
    172800,
)
_SHORT_VACATES = (30, 60, 120, 300)
_BORROWED_VACATES = (1800, 3600)
#: The longest vacate time a job of the stream can have (it bounds any node's drain).
VACATE_MAX = max(_BORROWED_VACATES)


def _pick(rng: random.Random, table: tuple[tuple[int, float], ...]) -> int:
    values = [v for v, _ in table]
    return rng.choices(values, weights=[w for _, w in table])[0]


@dataclass(frozen=True, slots=True)
class Job:
    """One job of the backlog: ``mjrt`` the promise it asks for (``None``: the machine's)."""

    seq: int
    cpus: int
    length: float
    mjrt: int | None
    vacate: int | None


def _draw_length(rng: random.Random) -> float:
    low, high, _ = rng.choices(_BANDS, weights=[w for *_, w in _BANDS])[0]
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _draw_job(rng: random.Random, seq: int, length: float) -> Job:
    cpus = _pick(rng, _JOB_CPUS)
    mjrt: int | None = None
    if rng.random() < 0.7:
        factor = rng.uniform(1.0, 1.5) if rng.random() < 0.8 else rng.uniform(0.5, 1.0)
        expected = length * factor
        mjrt = _ROUND[min(bisect.bisect_left(_ROUND, expected), len(_ROUND) - 1)]
    roll = rng.random()
    vacate: int | None = None
    if roll >= 0.95:
        vacate = rng.choice(_BORROWED_VACATES)
    elif roll >= 0.6:
        vacate = rng.choice(_SHORT_VACATES)
    return Job(seq=seq, cpus=cpus, length=length, mjrt=mjrt, vacate=vacate)


class Backlog:
    """The jobs waiting: an endless stream (the same for every policy: its own seeded
    generator) and the jobs passed over, kept by (cores, promise) oldest first."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._seq = 0
        self._waiting: dict[tuple[int, int | None], deque[Job]] = {}

    def _next(self) -> Job:
        self._seq += 1
        return _draw_job(self._rng, self._seq, _draw_length(self._rng))

    def take(self, free: int, longest: float | None, retirement: int) -> Job | None:
        """The oldest job with at most ``free`` cores whose promise on a machine of
        ``retirement`` fits ``longest`` (``None``: any; a job asking for none always fits:
        it takes the longest), removed from the backlog; ``None`` if none is found soon."""

        def fits(cpus: int, mjrt: int | None) -> bool:
            if cpus > free:
                return False
            return longest is None or mjrt is None or min(mjrt, retirement) <= longest

        best: deque[Job] | None = None
        for (cpus, mjrt), queue in self._waiting.items():
            if queue and fits(cpus, mjrt) and (best is None or queue[0].seq < best[0].seq):
                best = queue
        if best is not None:
            return best.popleft()
        for _ in range(10_000):
            job = self._next()
            if fits(job.cpus, job.mjrt):
                return job
            self._waiting.setdefault((job.cpus, job.mjrt), deque()).append(job)
        return None

    def put_back(self, job: Job) -> None:
        """A job refused: first in line again."""
        self._waiting.setdefault((job.cpus, job.mjrt), deque()).appendleft(job)


@dataclass(slots=True)
class Running:
    job: Job
    started: float
    after_notice: bool
    #: Admitted with a shorter promise than it asked for (retried with the longest, or
    #: shortened), or on a machine that promises none (``MaxJobRetirementTime = 0``).
    why: str = "past_its_promise"
    evicted: bool = False


@dataclass(slots=True)
class Node:
    """One machine, its master-side state and what is measured of it."""

    machine: Machine
    scheduled: ScheduledMachine
    retirement: int
    vacate: int
    free: int
    running: dict[str, Running] = field(default_factory=dict)
    record: DrainRecord | None = None
    drain_start: float | None = None
    closing: Closing | None = None
    closing_at_posting: Closing | None = None
    horizon: float = math.inf
    pass_version: int = 0
    pass_at: float | None = None
    wake_version: int = 0
    wake_at: float | None = None
    empty_at: float | None = None
    longest_vacate: float = 0.0


@dataclass(slots=True)
class Tally:
    refused: int = 0
    retried: int = 0
    shortened: int = 0
    shortened_by: float = 0.0
    claims: int = 0
    completed: int = 0
    completed_core_seconds: float = 0.0
    busy_core_seconds: float = 0.0
    drain_evicted: int = 0
    early: int = 0
    drain_badput: float = 0.0
    badput_by: dict[str, float] = field(default_factory=dict)
    cuts: dict[str, list[float]] = field(
        default_factory=lambda: {
            "jobs": [0, 0],
            "core_seconds": [0, 0],
            "badput": [0, 0],
            "max": [0, 0],
        }
    )
    steps: dict[str, int] = field(default_factory=dict)
    ads: int = 0


_EXIT, _WAKE, _PASS = 0, 1, 2


class Pool:
    """One policy's run (see the module docstring)."""

    def __init__(self, *, machines: int, seed: int, notice: float, policy: BeforeWindow) -> None:
        self.policy = policy
        self.window = math.floor(T0 + notice * 3600)
        self.plan_policy = PlanPolicy()
        self.margin = self.plan_policy.drain_margin
        self.store = AdStore(lifetime=10 * 86400)
        self.backlog = Backlog(seed * 7919 + 1)
        self.tally = Tally()
        self.events: list[tuple[float, int, int, int, Any]] = []
        self._seq = 0
        rng = random.Random(seed)
        warm = random.Random(seed * 104729 + 3)
        state = MaintenanceState()
        names = [
            (f"node{i:05d}.sim", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
            for i in range(machines)
        ]
        state.update_schedule(
            MaintenanceSchedule.from_json(
                {
                    "windows": [
                        {
                            "machine_ids": [{"hostname": h, "ip": ip} for h, ip in names],
                            "unavailability": {
                                "start": {"nanoseconds": self.window * _NS},
                                "duration": {"nanoseconds": 3600 * _NS},
                            },
                        }
                    ]
                }
            )
        )
        scheduled = [ScheduledMachine.of(status) for status in state.machines()]
        self.nodes: list[Node] = []
        for i, ((host, ip), sm) in enumerate(zip(names, scheduled, strict=True)):
            assert sm is not None
            cores = _pick(rng, _CORES)
            retirement = _pick(rng, _RETIREMENT)
            vacate = _pick(rng, _MACHINE_VACATE)
            machine = Machine(
                host=host,
                ip=ip,
                address=f"http://{ip}:9618",
                total=Resources(cpus=cores, memory=cores * 4096, disk=cores * 10**6),
                policy=MachinePolicy(
                    max_job_retirement_time=retirement,
                    machine_max_vacate_time=vacate,
                    before_window=policy,
                ),
                now=T0,
            )
            node = Node(
                machine=machine, scheduled=sm, retirement=retirement, vacate=vacate, free=cores
            )
            self.nodes.append(node)
            self._warm(i, node, warm)

    # ------------------------------------------------------------------ events

    def _push_event(self, t: float, kind: int, index: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, kind, self._seq, index, payload))

    def _warm(self, index: int, node: Node, rng: random.Random) -> None:
        """Fill the machine with jobs already running (before the window is known):
        drawn by length (a busy pool holds long jobs longer), each part-way through."""
        while node.free > 0:
            weights = [w * (lo + hi) / 2 for lo, hi, w in _BANDS]
            low, high, _ = rng.choices(_BANDS, weights=weights)[0]
            length = math.exp(rng.uniform(math.log(low), math.log(high)))
            job = _draw_job(rng, -1, length)
            cpus = min(job.cpus, node.free)
            job = Job(seq=-1, cpus=cpus, length=length, mjrt=job.mjrt, vacate=job.vacate)
            age = rng.uniform(0, length)
            self._claim(index, node, T0, job, job.mjrt, started=T0 - age, after_notice=False)

    def _claim(
        self,
        index: int,
        node: Node,
        t: float,
        job: Job,
        promise: int | None,
        *,
        started: float | None = None,
        after_notice: bool = True,
    ) -> None:
        info, _ = node.machine.claim(
            t,
            resources=Resources(cpus=job.cpus, memory=job.cpus * 2048, disk=job.cpus * 1000),
            spec=JobSpec(
                job_id=str(job.seq), max_job_retirement_time=promise, job_max_vacate_time=job.vacate
            ),
            started_at=started,
        )
        begun = t if started is None else started
        why = "past_its_promise"
        if node.retirement == 0:
            why = "no_retirement"
        elif info.retirement_shortened_by or effective_retirement(
            node.retirement, promise
        ) < effective_retirement(node.retirement, job.mjrt):
            why = "given_a_shorter_promise"
        node.running[info.claim_id] = Running(
            job=job, started=begun, after_notice=after_notice, why=why
        )
        node.free -= job.cpus
        node.empty_at = None
        node.longest_vacate = max(
            node.longest_vacate,
            vacate_time(
                node.vacate,
                job.vacate,
                retirement_remaining(
                    effective_retirement(node.retirement, info.spec.max_job_retirement_time), 0.0
                ),
            ),
        )
        if info.retirement_shortened_by:
            self.tally.shortened += 1
            self.tally.shortened_by += info.retirement_shortened_by
        if after_notice:
            self.tally.claims += 1
        self._push_event(begun + job.length, _EXIT, index, info.claim_id)

    def _fill(self, index: int, node: Node, t: float) -> None:
        """The scheduler places work on the machine's free cores (see the module docstring)."""
        machine = node.machine
        if t >= self.window or machine.request is not None:
            return
        longest: float | None = None
        for _ in range(1000):
            if node.free < 1:
                break
            job = self.backlog.take(node.free, longest, node.retirement)
            if job is None:
                break
            promise = job.mjrt
            granted = effective_retirement(node.retirement, promise)
            if longest is not None and granted > longest:
                promise = int(longest)  # a job asking for no promise of its own
                self.tally.retried += 1
            try:
                self._claim(index, node, t, job, promise)
            except WindowAhead as refusal:
                self.tally.refused += 1
                longest = refusal.longest
                self.backlog.put_back(job)
        self._changed(index, node, t)

    def _changed(self, index: int, node: Node, t: float) -> None:
        """The node's ad changed: the master's next pass sees it (only when it could matter:
        from the node's horizon on, before its drain)."""
        if node.record is None and t >= node.horizon and t < self.window:
            self._schedule_pass(index, node, math.ceil(t + _DEBOUNCE))

    def _schedule_pass(self, index: int, node: Node, at: float) -> None:
        if node.pass_at is not None and node.pass_at <= at:
            return  # a pass already due by then reads the ad as it will be
        node.pass_version += 1
        node.pass_at = at
        self._push_event(at, _PASS, index, node.pass_version)

    def _schedule_wake(self, index: int, node: Node) -> None:
        wake = node.machine.next_wakeup()
        if wake is None or wake == node.wake_at:
            return
        node.wake_version += 1
        node.wake_at = wake
        self._push_event(wake, _WAKE, index, node.wake_version)

    def _carry_out(self, index: int, node: Node, t: float, actions: list[Action]) -> None:
        """The actions a call on the machine returned: a soft kill is counted (the job
        then uses its whole vacate time), a hard kill ends the job at once."""
        pending = list(actions)
        while pending:
            action = pending.pop(0)
            if not isinstance(action, SignalJob) or action.claim_id not in node.running:
                continue
            running = node.running[action.claim_id]
            if action.signal == "SIGKILL":
                if not running.evicted:
                    self._evicted(node, t, action.claim_id, running)
                pending.extend(self._gone(node, t, action.claim_id))
            elif action.signal != "SIGCONT" and not running.evicted:
                self._evicted(node, t, action.claim_id, running)
        self._schedule_wake(index, node)

    def _evicted(self, node: Node, t: float, claim_id: str, running: Running) -> None:
        running.evicted = True
        info = node.machine.claim_info(claim_id, t)
        cpus = info.resources.cpus
        mjrt = effective_retirement(node.retirement, info.spec.max_job_retirement_time)
        left = retirement_remaining(mjrt, info.run)
        vacate = vacate_time(node.vacate, info.spec.job_max_vacate_time, left)
        if t >= self.window:
            if left - vacate > 1.0:  # its promise had longer to run: cut
                k = 0 if running.after_notice else 1
                cuts = self.tally.cuts
                cuts["jobs"][k] += 1
                cuts["core_seconds"][k] += cpus * left
                cuts["badput"][k] += cpus * info.run
                cuts["max"][k] = max(cuts["max"][k], left)
            else:
                self._drain_badput(running, cpus * info.run)
        else:
            if left - vacate > 1.0:
                self.tally.early += 1  # the drain evicted it before its promise: a defect
            self._drain_badput(running, cpus * info.run)

    def _drain_badput(self, running: Running, badput: float) -> None:
        tally = self.tally
        tally.drain_evicted += 1
        tally.drain_badput += badput
        tally.badput_by[running.why] = tally.badput_by.get(running.why, 0.0) + badput

    def _gone(self, node: Node, t: float, claim_id: str) -> list[Action]:
        running = node.running.pop(claim_id)
        node.free += running.job.cpus
        begin = max(running.started, T0)
        end = min(t, self.window)
        if end > begin:
            self.tally.busy_core_seconds += running.job.cpus * (end - begin)
        if not node.running:
            node.empty_at = t
        return node.machine.job_exited(t, claim_id)

    # ------------------------------------------------------------------ the master

    def _push_ad(self, node: Node, t: float) -> None:
        self.store.update(node.machine.ad(t), t, plain_text=True)
        self.tally.ads += 1

    def _pass(self, index: int, node: Node, t: float) -> None:
        """A reconcile pass for this machine: its ad as the agent last pushed it, its plan,
        and what :func:`decide` says."""
        self._push_ad(node, t)
        sm = node.scheduled
        plan = machine_plan(
            sm,
            self.store.find(sm.id.hostname, sm.id.ip),
            is_lost=lambda _: False,
            now=t,
            policy=self.plan_policy,
            drain_record=node.record,
        )
        if node.closing_at_posting is None:
            node.closing_at_posting = plan.closing
        step = decide(plan, node.record, self.plan_policy, t)
        name = "none" if step is None else type(step).__name__
        self.tally.steps[name] = self.tally.steps.get(name, 0) + 1
        machine = node.machine
        if isinstance(step, Start):
            body = step.body(t)
            request, _, actions = machine.start_draining(
                t,
                schedule=Schedule(step.schedule),
                reason=REASON,
                deadline=body.deadline,
                commit=True,
                requested_by="operator",
            )
            key = sm.key
            record = step.record(
                node=machine.host, address=machine.address, actor="operator", now=t
            )
            record = record.started(key, request_id=request.id, body=body, now=t)
            node.record = record.committed(key, committed_at=t)
            node.drain_start = t
            node.closing = plan.closing
            self._carry_out(index, node, t, actions)
        elif isinstance(step, Escalate):
            assert node.record is not None
            if step.replace_with is not None:
                machine.cancel_draining(t)
                _, _, actions = machine.start_draining(
                    t, schedule=Schedule(step.replace_with), reason=REASON, commit=True
                )
                self._carry_out(index, node, t, actions)
            node.record = node.record.noted(sm.key, escalated=True)
        elif isinstance(step, RememberLate):
            assert node.record is not None
            node.record = node.record.noted(sm.key, late=step.late)
        elif step is not None:
            raise AssertionError(f"{machine.host}: unexpected step {step!r}")
        if node.record is None and plan.drain_start is not None:
            self._schedule_pass(index, node, max(math.ceil(plan.drain_start), math.ceil(t)))

    def _set_horizon(self, index: int, node: Node) -> None:
        """From when the node's changes can make its drain due: a node that admits by
        promise drains at ``W − margin − its vacate bound``, and no job can bring a bound
        above :data:`VACATE_MAX`; any other's bound is ``MaxJobRetirementTime``, its drain
        start fixed (the pass at it is scheduled)."""
        if node.closing_at_posting is not None and node.closing_at_posting.by_promise:
            node.horizon = self.window - self.margin - max(node.vacate, VACATE_MAX) - 1
            self._push_event(math.ceil(node.horizon), _PASS, index, -1)

    # ------------------------------------------------------------------ the run

    def run(self) -> dict[str, Any]:
        for node in self.nodes:
            node.machine.set_maintenance("DRAINING", {"Start": self.window, "Duration": 3600})
        for index, node in enumerate(self.nodes):
            self._pass(index, node, T0)
            self._set_horizon(index, node)
        window_done = False
        unclaimed = 0.0
        not_empty = [0, 0]
        while self.events:
            t = self.events[0][0]
            if not window_done and t >= self.window:
                window_done = True
                unclaimed, not_empty = self._at_window()
                continue
            _, kind, _, index, payload = heapq.heappop(self.events)
            node = self.nodes[index]
            if kind == _EXIT:
                running = node.running.get(payload)
                if running is None or running.evicted:
                    continue
                if t < self.window:
                    self.tally.completed += 1
                    self.tally.completed_core_seconds += running.job.cpus * (
                        t - max(running.started, T0)
                    )
                actions = self._gone(node, t, payload)
                self._carry_out(index, node, t, actions)
                self._fill(index, node, t)
            elif kind == _WAKE:
                if payload != node.wake_version:
                    continue
                node.wake_at = None
                self._carry_out(index, node, t, node.machine.tick(t))
                self._changed(index, node, t)
            elif kind == _PASS:
                if payload == -1:  # the horizon: from now on, every change is pushed
                    if node.record is None:
                        self._pass(index, node, t)
                    continue
                if payload != node.pass_version or t >= self.window:
                    continue
                node.pass_at = None
                if node.record is None:
                    self._pass(index, node, t)
        if not window_done:
            unclaimed, not_empty = self._at_window()
        return self._figures(unclaimed, not_empty)

    def _at_window(self) -> tuple[float, list[int]]:
        """At the window's start: each machine ticks (the drain's deadline evicts), is
        measured, and the master's pass escalates."""
        w = float(self.window)
        unclaimed = 0.0
        not_empty = [0, 0]  # with a job admitted after the node knew the window / only before
        for index, node in enumerate(self.nodes):
            machine = node.machine
            self._carry_out(index, node, w, machine.tick(w))
            unclaimed += machine.total_unclaimed(w)
            for running in node.running.values():
                self.tally.busy_core_seconds += running.job.cpus * (w - max(running.started, T0))
                running.started = w  # counted up to here
            if node.running:
                after = any(r.after_notice for r in node.running.values())
                not_empty[0 if after else 1] += 1
            self._pass(index, node, w)
        return unclaimed, not_empty

    def _figures(self, unclaimed: float, not_empty: list[int]) -> dict[str, Any]:
        w = float(self.window)
        tally = self.tally
        capacity = sum(n.machine.total.cpus for n in self.nodes) * (w - T0)
        closed = [(n, w - n.drain_start) for n in self.nodes if n.drain_start is not None]
        simple = sum(n.machine.total.cpus * s for n, s in closed)
        over: list[dict[str, Any]] = []
        for n, seconds in closed:
            assert n.closing is not None
            bound = self.margin + max(n.vacate, n.longest_vacate) + 1
            if n.closing.by_promise and seconds > bound:
                over.append({"machine": n.machine.host, "closed_s": seconds, "bound_s": bound})
        by_retirement: dict[str, Any] = {}
        for retirement in sorted({n.retirement for n in self.nodes}):
            minutes = [s / 60 for n, s in closed if n.retirement == retirement]
            cores = sum(n.machine.total.cpus * s for n, s in closed if n.retirement == retirement)
            by_retirement[str(retirement)] = {
                "machines": len(minutes),
                **_summary(minutes),
                "core_hours": round(cores / 3600, 1),
            }
        closing_by: dict[str, int] = {}
        job_bound = 0.0  # closed by a job's vacate time longer than the machine's
        for n, _ in closed:
            assert n.closing is not None
            closing_by[n.closing.by] = closing_by.get(n.closing.by, 0) + 1
            if n.closing.by_promise and n.closing.by == "job":
                job_bound += n.machine.total.cpus * (n.closing.seconds - n.vacate)
        plan_admit = sum(n.closing.core_hours()["admit"] for n, _ in closed if n.closing)
        plan_promise = sum(n.closing.core_hours()["refuse"] for n, _ in closed if n.closing)
        cuts = tally.cuts
        busy = tally.busy_core_seconds
        idle_open = capacity - busy - unclaimed
        empties = [n.empty_at for n in self.nodes if n.empty_at is not None]
        # empty by the window, but not drain_margin before it (a job's promise ended there)
        in_margin = sum(1 for e in empties if w - self.margin < e <= w)
        return {
            "machines": len(self.nodes),
            "cores": sum(n.machine.total.cpus for n in self.nodes),
            "capacity_core_hours": round(capacity / 3600, 1),
            "closed_core_hours": {
                "idle_while_draining": round(unclaimed / 3600, 1),
                "simple": round(simple / 3600, 1),
            },
            "plan_closed_core_hours": {
                "as_admit": round(plan_admit, 1),
                "by_promise": round(plan_promise, 1),
            },
            "closed_minutes": {
                **_summary([s / 60 for _, s in closed]),
                "by_retirement": by_retirement,
            },
            "drains_before_window": len(closed),
            "closing_by": dict(sorted(closing_by.items())),
            "closed_by_a_job_vacate_core_hours": round(job_bound / 3600, 1),
            "by_promise": sum(
                1 for n, _ in closed if n.closing is not None and n.closing.by_promise
            ),
            "idle_open_core_hours": round(idle_open / 3600, 1) + 0.0,  # never -0.0
            "completed": {
                "jobs": tally.completed,
                "core_hours": round(tally.completed_core_seconds / 3600, 1),
            },
            "busy_core_hours": round(busy / 3600, 1),
            "drain_evictions": {
                "jobs": tally.drain_evicted,
                "before_their_promise": tally.early,
                "badput_core_hours": round(tally.drain_badput / 3600, 1),
                "badput_core_hours_by": {
                    k: round(v / 3600, 1) for k, v in sorted(tally.badput_by.items())
                },
            },
            "cut": {
                label: {
                    "jobs": int(cuts["jobs"][k]),
                    "core_hours": round(cuts["core_seconds"][k] / 3600, 1),
                    "badput_core_hours": round(cuts["badput"][k] / 3600, 1),
                    "longest_minutes": round(cuts["max"][k] / 60, 1),
                }
                for k, label in ((0, "admitted_after_notice"), (1, "admitted_before_notice"))
            },
            "claims": tally.claims,
            "refused": tally.refused,
            "retried_with_longest": tally.retried,
            "shortened": {"jobs": tally.shortened, "hours": round(tally.shortened_by / 3600, 1)},
            "not_empty_at_window": {
                "with_jobs_admitted_after_notice": not_empty[0],
                "with_only_earlier_jobs": not_empty[1],
            },
            "emptied_within_margin_of_window": in_margin,
            "all_empty_after_window_s": round(max(empties) - w, 1) + 0.0 if empties else None,
            "master_steps": dict(sorted(tally.steps.items())),
            "ads_pushed": tally.ads,
            "goal": {
                "closed_within_margin_plus_vacate": not over,
                "machines_over": over[:10],
                "no_promise_cut_after_notice": cuts["jobs"][0] == 0,
            },
        }


def _summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p99": None, "max": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        rank = (len(ordered) - 1) * q / 100
        low, high = math.floor(rank), math.ceil(rank)
        return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)

    return {
        "mean": round(sum(values) / len(values), 1),
        "p50": round(at(50), 1),
        "p99": round(at(99), 1),
        "max": round(ordered[-1], 1),
    }


def simulate(
    *, machines: int, seed: int, notice: float, policies: tuple[str, ...] = POLICIES
) -> dict[str, Any]:
    """Every policy's run over the same pool and job stream, and what refusing saves."""
    results: dict[str, Any] = {
        "machines": machines,
        "seed": seed,
        "notice_hours": notice,
        "drain_margin_s": PlanPolicy().drain_margin,
        "policies": {},
    }
    for name in policies:
        began = time.perf_counter()
        pool = Pool(machines=machines, seed=seed, notice=notice, policy=BeforeWindow(name))
        figures = pool.run()
        figures["seconds"] = round(time.perf_counter() - began, 1)
        results["policies"][name] = figures
    done = results["policies"]
    if "admit" in done:
        for name in ("refuse", "shorten"):
            if name in done:
                saved = (
                    done["admit"]["closed_core_hours"]["simple"]
                    - done[name]["closed_core_hours"]["simple"]
                )
                results[f"{name}_saves_core_hours"] = round(saved, 1)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--machines", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--notice", type=float, default=25.0, help="hours from posting to window")
    parser.add_argument("--policies", default=",".join(POLICIES))
    args = parser.parse_args()
    policies = tuple(p for p in args.policies.split(",") if p)
    unknown = set(policies) - set(POLICIES)
    if unknown:
        parser.error(f"no such policy: {', '.join(sorted(unknown))}")
    print(
        json.dumps(
            simulate(machines=args.machines, seed=args.seed, notice=args.notice, policies=policies),
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
