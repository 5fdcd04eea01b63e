"""The defrag daemon: drain fragmented machines so that whole machines become free.

``condor_defrag``'s policy, on the master's ads. Every ``interval`` a cycle

1. reads the slot ads from the master: one partitionable slot ad per node (it carries the
   machine-wide attributes and the machine's free resources), which every expression is
   evaluated on, and the dynamic slot ads of the node's jobs;
2. decides, with :func:`plan_cycle` — a pure function of (ads, policy, now, pacing) —
   which of its own drains to cancel, how many drains it may start, and which
   candidates, best ranked first;
3. cancels, then drains: each drain is a two-phase transaction (phase 1 with reason
   ``Defrag <name>`` and ``on_completion: resume``; the fresh badput is compared with the
   ad the candidate was ranked on, brought forward to phase 1's instant
   (:meth:`Candidate.badput_at`); commit, or cancel and try the next candidate);
4. pushes its statistics to the master as an ad with ``MyType = "Defrag"``.

Only drains whose ``DrainReason`` is ``Defrag <name>`` are counted or cancelled: an
administrator's drain, the master's maintenance drains and another defrag daemon's
drains are left alone (and their machines are neither candidates nor whole).

Pacing: the hourly rate holds for any interval. Each cycle earns
``rate × elapsed / 3600`` drains (``elapsed``: time since the previous cycle, at most one
interval; one interval for the first); the whole part is what the cycle may start, the
fraction is carried to the next cycle. Whole drains a cycle could not start (limits, no
candidate) are forfeited, as HTCondor forfeits them: the rate is a ceiling, never a debt.
The pacing is saved before the cycle acts, so a crash errs on the side of draining less.

Limits are headroom: a cycle starts at most ``max_concurrent_draining − draining`` drains
and at most ``max_whole_machines − |whole ∪ draining|`` (a machine this daemon drains is
counted as the whole machine it will become).

A cycle never acts on an ad older than the daemon's own record of a drain it started
(:mod:`._records`): until the machine's ad shows the drain, the machine counts as
draining and is neither a candidate nor whole, so a late ad cannot get it drained twice.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nodeagent.defrag._records import DrainRecord, ad_knows, outlived
from slots import (
    InvalidRequest,
    Schedule,
    check_estimate_inputs,
    clamp,
    drain_estimates,
    evaluate,
    is_true,
)

__all__ = [
    "RECENT_WINDOW",
    "TRANSACTION_TTL",
    "Cancel",
    "Candidate",
    "CostBaseline",
    "CyclePlan",
    "DefragPolicy",
    "DefragStats",
    "Pacing",
    "draining_cost",
    "estimate_acceptable",
    "machine_of",
    "pace",
    "plan_cycle",
    "with_machine_ads",
]

log = logging.getLogger("nodeagent.defrag")

#: "Recent" statistics count the events of the last hour.
RECENT_WINDOW = 3600.0
#: Seconds a phase-1 transaction may stay pending (the agent cancels it after that).
TRANSACTION_TTL = 30.0
#: How many entries ``RecentDrainsList`` and ``RecentCancelsList`` keep (HTCondor's 10).
_LOG_LENGTH = 10
#: Floating-point slack when taking the whole part of the earned drains.
_EPSILON = 1e-9

_BADPUT = {
    Schedule.GRACEFUL: "ExpectedMachineGracefulDrainingBadput",
    Schedule.QUICK: "ExpectedMachineQuickDrainingBadput",
    Schedule.FAST: "ExpectedMachineFastDrainingBadput",
}
_COMPLETION = {
    Schedule.GRACEFUL: "ExpectedMachineGracefulDrainingCompletion",
    Schedule.QUICK: "ExpectedMachineQuickDrainingCompletion",
    Schedule.FAST: "ExpectedMachineFastDrainingCompletion",
}


# --- the policy and its decisions (pure) --------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DefragPolicy:
    """The knobs a cycle decides with (``DEFRAG_*`` in HTCondor; see ``docs/defrag.md``)."""

    name: str = "main"
    interval: float = 600.0
    draining_machines_per_hour: float = 0.0
    max_concurrent_draining: int = -1
    max_whole_machines: int = -1
    whole_machine_expr: str = "Cpus == TotalCpus"
    requirements: str = "PartitionableSlot && Offline =!= True"
    rank: str = "-ExpectedMachineGracefulDrainingBadput"
    schedule: Schedule = Schedule.GRACEFUL
    cancel_requirements: str | None = None
    draining_start_expr: str | None = None
    max_badput_increase: float = 1.5

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a defrag daemon needs a name")
        if not self.interval > 0:
            raise ValueError("interval must be positive")
        if self.draining_machines_per_hour < 0:
            raise ValueError("draining_machines_per_hour cannot be negative")
        if self.max_badput_increase < 1:
            raise ValueError("max_badput_increase must be at least 1")

    @property
    def reason(self) -> str:
        """The ``DrainReason`` of this daemon's drains."""
        return f"Defrag {self.name}"

    @property
    def cancel_expr(self) -> str:
        """The cancel requirements in force (default: the whole machine expression)."""
        return self.cancel_requirements or self.whole_machine_expr


@dataclass(frozen=True, kw_only=True)
class Pacing:
    """What the rate remembers between cycles: when the last one ran, the earned fraction."""

    last_poll: float | None = None
    carry: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"last_poll": self.last_poll, "carry": self.carry}

    @classmethod
    def from_json(cls, doc: Any) -> Pacing:
        if not isinstance(doc, dict):
            return cls()
        last = doc.get("last_poll")
        carry = doc.get("carry", 0.0)
        return cls(
            last_poll=float(last) if isinstance(last, int | float) else None,
            carry=min(max(float(carry), 0.0), 1.0) if isinstance(carry, int | float) else 0.0,
        )


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A machine that may be drained, with what its ad said when it was ranked.

    ``machine`` (the slot ads' ``Machine``: the name the master took that node's ad under,
    from that node's own token) is the node the calls to ``address`` are bound to.
    """

    machine: str
    address: str
    rank: float
    badput: int | None
    completion: int | None
    schedule: Schedule = Schedule.GRACEFUL
    as_of: float | None = None
    ads: tuple[Mapping[str, Any], ...] = ()

    def badput_at(self, at: float) -> int | None:
        """The ranked ``badput`` brought forward to the end of the second ``at`` falls in
        (the node's clock).

        ``badput`` is the ranked ad's ``ExpectedMachine<schedule>DrainingBadput`` as of its
        ``MyCurrentTime`` (``as_of``); a running job's badput grows with its run time. So
        it is ``badput`` plus what :func:`slots.drain_estimates` of the machine's slot ads
        as ranked (``ads``: each job's run time brought forward from its ad) adds between
        ``as_of`` and ``⌊at⌋ + 1``: the value those ads give then, since the agent
        publishes what that function computes. The end of the second, because ads carry
        whole seconds: a job's ``TotalJobRunTime`` is up to a second short of its run at
        ``MyCurrentTime``, so an estimate made later in the same second (or the next ones)
        may count one second more of it. ``badput`` unchanged when either instant is
        unknown, ``at`` is before ``as_of``'s second, or the ads cannot be read; ``None``
        when it is.
        """
        end = math.floor(at) + 1
        if self.badput is None or self.as_of is None or not end > self.as_of:
            return self.badput
        try:
            check_estimate_inputs(self.ads)
        except InvalidRequest:
            return self.badput
        attribute = _BADPUT[self.schedule]
        before = drain_estimates(self.ads, self.as_of)[attribute]
        after = drain_estimates(self.ads, end)[attribute]
        return clamp(max(self.badput + after - before, 0))


def with_machine_ads(candidate: Candidate, ads: Sequence[Mapping[str, Any]]) -> Candidate:
    """``candidate`` with ``ads``, every slot ad of its machine as the master holds it now
    (its jobs too), read after the machine was ranked from its partitionable slot ad alone.

    The same ad as ranked (the same ``MyCurrentTime``): its promise stays, its jobs are
    added, so :meth:`Candidate.badput_at` can bring it forward. A newer one: its own
    promise, as of its own time (a job claimed since it is still an increase). No
    partitionable slot ad among ``ads``: ``candidate`` unchanged.
    """
    machine = next((ad for ad in ads if ad.get("PartitionableSlot") is True), None)
    if machine is None:
        return candidate
    as_of = _number(machine.get("MyCurrentTime"))
    if as_of == candidate.as_of:
        return replace(candidate, ads=tuple(ads))
    return replace(
        candidate,
        ads=tuple(ads),
        as_of=as_of,
        badput=_integer(machine.get(_BADPUT[candidate.schedule])),
    )


@dataclass(frozen=True, kw_only=True)
class Cancel:
    """One of this daemon's drains that the cancel requirements match."""

    machine: str
    address: str
    request_id: str


@dataclass(frozen=True, kw_only=True)
class CyclePlan:
    """What one cycle does: cancel ``cancels``, then start up to ``wanted`` drains from
    ``candidates`` (best first; a failed or skipped candidate makes room for the next).

    ``why`` names the control that held the cycle back (the rate, a limit, no candidate).
    ``unseen``: machines counted as draining on the daemon's record alone, their ads being
    older than it; ``records``: the records to keep.
    """

    now: float
    draining: tuple[str, ...]
    whole: tuple[str, ...]
    cancels: tuple[Cancel, ...]
    candidates: tuple[Candidate, ...]
    wanted: int
    credit: float
    pacing: Pacing
    why: str = ""
    unseen: tuple[str, ...] = ()
    records: tuple[DrainRecord, ...] = ()


def machine_of(ad: Mapping[str, Any]) -> str:
    """The machine a slot ad belongs to: ``Machine``, else the part of ``Name`` after ``@``."""
    machine = ad.get("Machine")
    if isinstance(machine, str) and machine:
        return machine
    name = str(ad.get("Name", ""))
    return name.partition("@")[2] or name


def pace(
    rate_per_hour: float, interval: float, now: float, pacing: Pacing
) -> tuple[float, int, Pacing]:
    """Drains earned by a cycle at ``now``: ``(credit, whole part, pacing to keep)``.

    ``credit = carry + rate × elapsed / 3600`` with ``elapsed`` the time since the last
    cycle, clamped to [0, interval] (one interval for the first cycle). The fraction is
    carried; the whole part is spent or forfeited by the caller's cycle.
    """
    if rate_per_hour <= 0:
        return 0.0, 0, Pacing(last_poll=now, carry=0.0)
    if pacing.last_poll is None:
        elapsed = interval
    else:
        elapsed = min(max(now - pacing.last_poll, 0.0), interval)
    credit = pacing.carry + rate_per_hour * elapsed / 3600.0
    units = math.floor(credit + _EPSILON)
    return credit, units, Pacing(last_poll=now, carry=max(0.0, credit - units))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _integer(value: Any) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def _usable(ad: Mapping[str, Any]) -> bool:
    """A live partitionable slot (HTCondor's ``PartitionableSlot && Offline =!= True``)."""
    return (
        ad.get("PartitionableSlot") is True
        and ad.get("Offline") is not True
        and ad.get("Lost") is not True
    )


def _committed(ad: Mapping[str, Any]) -> bool:
    return ad.get("Draining") is True or ad.get("DrainState") in ("draining", "drained")


def _no_request(ad: Mapping[str, Any]) -> bool:
    return ad.get("Draining") is not True and ad.get("DrainState") in (None, "none")


def _address(ad: Mapping[str, Any]) -> str | None:
    address = ad.get("MyAddress")
    return address if isinstance(address, str) and address else None


def plan_cycle(
    ads: Iterable[Mapping[str, Any]],
    policy: DefragPolicy,
    *,
    now: float,
    pacing: Pacing,
    records: Mapping[str, DrainRecord] | None = None,
) -> CyclePlan:
    """Decide one cycle from the slot ads the master serves.

    * Ads that are not partitionable slots, are ``Offline`` or ``Lost`` are ignored.
    * *Unseen*: machines with a record of this daemon's (``records``, by machine) that
      none of their ads knows (:func:`~._records.ad_knows`): counted as draining, and
      nothing else is read from their ads. A record is kept until an ad shows it
      outlived (:func:`~._records.outlived`) or the master lists no ad of its machine.
    * *Draining*: machines with a committed drain whose reason is this daemon's.
    * *Whole*: machines matching ``whole_machine_expr`` and not under someone else's drain.
    * *Cancels*: this daemon's drains matching the cancel requirements.
    * *Candidates*: machines with no drain request at all, not whole, not in maintenance
      (``MaintenanceMode`` DRAINING or DOWN: the master's), with an address, matching
      ``requirements``; ranked by ``rank`` (higher first; a non-numeric rank counts 0,
      as in HTCondor), ties by machine name. Computed only when ``wanted`` > 0. Each
      keeps its machine's slot ads (the dynamic slots' too) to bring its badput forward.

    Every expression is evaluated on partitionable slot ads; the other slot ads of a
    machine (its jobs' dynamic slots) are only kept with its candidate.
    """
    reason = policy.reason
    by_machine: dict[str, list[Mapping[str, Any]]] = {}
    every: dict[str, list[Mapping[str, Any]]] = {}
    for ad in ads:
        every.setdefault(machine_of(ad), []).append(ad)
        if _usable(ad):
            by_machine.setdefault(machine_of(ad), []).append(ad)

    kept: list[DrainRecord] = []
    unseen: set[str] = set()
    for machine, record in sorted((records or {}).items()):
        slot_ads = by_machine.get(machine, [])
        if machine not in every or any(outlived(record, ad) for ad in slot_ads):
            continue
        kept.append(record)
        if slot_ads and not any(ad_knows(record, ad) for ad in slot_ads):
            unseen.add(machine)

    draining: set[str] = set(unseen)
    whole: set[str] = set()
    cancels: list[Cancel] = []
    for machine, slot_ads in sorted(by_machine.items()):
        if machine in unseen:
            continue
        cancel: Cancel | None = None
        for ad in slot_ads:
            ours = ad.get("DrainReason") == reason
            if ours and _committed(ad):
                draining.add(machine)
                request_id = ad.get("DrainingRequestId")
                address = _address(ad)
                if (
                    cancel is None
                    and request_id is not None
                    and address is not None
                    and is_true(policy.cancel_expr, ad)
                ):
                    cancel = Cancel(machine=machine, address=address, request_id=str(request_id))
            if (ours or ad.get("DrainReason") is None) and is_true(policy.whole_machine_expr, ad):
                whole.add(machine)
        if cancel is not None:
            cancels.append(cancel)

    credit, units, after = pace(policy.draining_machines_per_hour, policy.interval, now, pacing)
    wanted, why = units, ""
    if units <= 0:
        why = "draining rate already achieved" if policy.draining_machines_per_hour else "rate 0"
    if policy.max_concurrent_draining >= 0:
        room = policy.max_concurrent_draining - len(draining)
        if room < wanted:
            wanted, why = max(room, 0), why or "max_concurrent_draining reached"
    if policy.max_whole_machines >= 0:
        room = policy.max_whole_machines - len(whole | draining)
        if room < wanted:
            wanted, why = max(room, 0), why or "max_whole_machines reached"

    candidates: list[Candidate] = []
    if wanted > 0:
        cancelled = {c.machine for c in cancels}
        badput_attr, completion_attr = _BADPUT[policy.schedule], _COMPLETION[policy.schedule]
        for machine, slot_ads in sorted(by_machine.items()):
            if machine in draining or machine in whole or machine in cancelled:
                continue
            best: Candidate | None = None
            for ad in slot_ads:
                address = _address(ad)
                if address is None or not _no_request(ad):
                    continue
                if ad.get("MaintenanceMode") in ("DRAINING", "DOWN"):
                    continue
                if not is_true(policy.requirements, ad):
                    continue
                rank = _number(evaluate(policy.rank, ad))
                candidate = Candidate(
                    machine=machine,
                    address=address,
                    rank=0.0 if rank is None else rank,
                    badput=_integer(ad.get(badput_attr)),
                    completion=_integer(ad.get(completion_attr)),
                    schedule=policy.schedule,
                    as_of=_number(ad.get("MyCurrentTime")),
                    ads=tuple(every[machine]),
                )
                if best is None or candidate.rank > best.rank:
                    best = candidate
            if best is not None:
                candidates.append(best)
        candidates.sort(key=lambda c: (-c.rank, c.machine))
        if not candidates:
            why = "no candidate"

    return CyclePlan(
        now=now,
        draining=tuple(sorted(draining)),
        whole=tuple(sorted(whole)),
        cancels=tuple(cancels),
        candidates=tuple(candidates),
        wanted=wanted,
        credit=credit,
        pacing=after,
        why=why,
        unseen=tuple(sorted(unseen)),
        records=tuple(kept),
    )


def estimate_acceptable(ranked: int | None, fresh: Any, factor: float) -> bool:
    """Whether a phase-1 badput ``fresh`` keeps the promise of the ranked ad's ``ranked``.

    ``ranked`` is the promise as of the same instant as ``fresh``
    (:meth:`Candidate.badput_at`): an ad some seconds old does not make a running job's
    growing badput look like an increase. True when ``fresh ≤ factor × ranked``; also
    true when either is unknown (nothing to compare: the drain goes ahead, as it would in
    HTCondor without a check expression).
    """
    fresh_value = _number(fresh)
    if ranked is None or fresh_value is None:
        return True
    return fresh_value <= factor * ranked


@dataclass(frozen=True, kw_only=True)
class CostBaseline:
    """One machine's draining counters when this daemon first saw them."""

    badput: float
    unclaimed: float
    at: float


def draining_cost(
    ads: Iterable[Mapping[str, Any]], baselines: Mapping[str, CostBaseline]
) -> tuple[float, float, dict[str, CostBaseline]]:
    """``AvgDrainingBadput`` and ``AvgDrainingUnclaimed``: the fraction of the pool's core
    time lost to drains (evicted work; idle cores while draining) since this daemon first
    saw each machine.

    HTCondor divides each startd's totals by its uptime because its counters restart
    with the daemon; ours survive restarts, so each machine's first observation
    (``TotalMachineDrainingBadput``, ``TotalMachineDrainingUnclaimedTime`` at
    ``MyCurrentTime``) is the baseline; a counter that went backwards resets it.
    Returns the two fractions and the baselines to keep.
    """
    kept: dict[str, CostBaseline] = {}
    badput_rate = unclaimed_rate = 0.0
    cpus = 0
    seen: set[str] = set()
    for ad in ads:
        if not _usable(ad):
            continue
        machine = machine_of(ad)
        if machine in seen:
            continue
        seen.add(machine)
        badput = _number(ad.get("TotalMachineDrainingBadput"))
        unclaimed = _number(ad.get("TotalMachineDrainingUnclaimedTime"))
        at = _number(ad.get("MyCurrentTime"))
        total = _integer(ad.get("TotalCpus")) or 0
        if badput is None or unclaimed is None or at is None:
            continue
        base = baselines.get(machine)
        if base is None or badput < base.badput or unclaimed < base.unclaimed or at < base.at:
            kept[machine] = CostBaseline(badput=badput, unclaimed=unclaimed, at=at)
            continue
        kept[machine] = base
        age = at - base.at
        if age <= 0 or total <= 0:
            continue
        badput_rate += (badput - base.badput) / age
        unclaimed_rate += (unclaimed - base.unclaimed) / age
        cpus += total
    if cpus == 0:
        return 0.0, 0.0, kept
    return badput_rate / cpus, unclaimed_rate / cpus, kept


# --- statistics ---------------------------------------------------------------------------


@dataclass
class DefragStats:
    """What the daemon publishes (HTCondor's Defrag ad attributes), for its lifetime.

    Counters count since the daemon started, as in HTCondor; ``Recent*`` count the last
    :data:`RECENT_WINDOW` seconds.
    """

    machines_draining: int = 0
    machines_draining_peak: int = 0
    whole_machines: int = 0
    whole_machines_peak: int = 0
    drain_successes: int = 0
    drain_failures: int = 0
    drain_skips: int = 0
    cancels: int = 0
    query_failures: int = 0
    avg_draining_badput: float = 0.0
    avg_draining_unclaimed: float = 0.0
    last_poll_time: float | None = None
    events: deque[tuple[float, str]] = field(default_factory=deque)
    recent_drains: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=_LOG_LENGTH))
    recent_cancels: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=_LOG_LENGTH))

    def observe(self, plan: CyclePlan) -> None:
        self.last_poll_time = plan.now
        self.machines_draining = len(plan.draining)
        self.machines_draining_peak = max(self.machines_draining_peak, self.machines_draining)
        self.whole_machines = len(plan.whole)
        self.whole_machines_peak = max(self.whole_machines_peak, self.whole_machines)

    def record(self, kind: str, machine: str, now: float, what: str = "") -> None:
        """``kind``: ``success``, ``failure``, ``skip`` (a drain attempt) or ``cancel``."""
        self.events.append((now, kind))
        if kind == "cancel":
            self.cancels += 1
            self.recent_cancels.append({"when": int(now), "who": machine})
            return
        if kind == "success":
            self.drain_successes += 1
        elif kind == "failure":
            self.drain_failures += 1
        else:
            self.drain_skips += 1
        self.recent_drains.append({"when": int(now), "who": machine, "what": what, "result": kind})

    def recent(self, kind: str, now: float) -> int:
        while self.events and self.events[0][0] <= now - RECENT_WINDOW:
            self.events.popleft()
        return sum(1 for _, k in self.events if k == kind)

    def ad(self, now: float) -> dict[str, Any]:
        """The statistics under HTCondor's names (newest first in the lists)."""
        return {
            "MachinesDraining": self.machines_draining,
            "MachinesDrainingPeak": self.machines_draining_peak,
            "WholeMachines": self.whole_machines,
            "WholeMachinesPeak": self.whole_machines_peak,
            "DrainSuccesses": self.drain_successes,
            "DrainFailures": self.drain_failures,
            "DrainSkips": self.drain_skips,
            "Cancels": self.cancels,
            "RecentDrainSuccesses": self.recent("success", now),
            "RecentDrainFailures": self.recent("failure", now),
            "RecentDrainSkips": self.recent("skip", now),
            "RecentCancels": self.recent("cancel", now),
            "QueryFailures": self.query_failures,
            "AvgDrainingBadput": round(self.avg_draining_badput, 6),
            "AvgDrainingUnclaimed": round(self.avg_draining_unclaimed, 6),
            "LastPollTime": None if self.last_poll_time is None else int(self.last_poll_time),
            "RecentDrainsList": list(reversed(self.recent_drains)),
            "RecentCancelsList": list(reversed(self.recent_cancels)),
        }


# --- the seam to the master and the agents ------------------------------------------------
