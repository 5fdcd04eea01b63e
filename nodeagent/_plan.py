"""The cluster maintenance plan: the nodes' estimates turned into when to drain what.

Pure functions of the schedule, the ads and ``now`` (epoch seconds). A node's ad is
brought up to ``now`` with :func:`slots.drain_estimates`, so a plan made from ads a
minute old is as exact as the ads allow.

**Just in time.** A node keeps accepting work until its drain starts, and any job it
accepts is promised ``MaxJobRetirementTime``. A graceful drain started at ``T`` is
therefore certain to be done by ``T + max(MaxJobRetirementTime, MachineMaxVacateTime)``
(a job's own vacate time never exceeds that bound, and running jobs' promises end
sooner). The latest safe start for a window at ``W`` is ``W − margin − that bound``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent._adstore import AdEntry
from slots import ACTIVE, ad_blockers, drain_estimates

__all__ = ["MachinePlan", "PlanPolicy", "drain_bound", "machine_plan", "plan_totals"]

_SCHEDULES = ("Graceful", "Quick", "Fast")
_ACTIVE_PAIRS = {(str(s), str(a)) for s, a in ACTIVE}


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanPolicy:
    """How the master drains scheduled machines (``[master]`` keys of the same names)."""

    drain_policy: str = "just_in_time"  # or "immediate"
    drain_margin: float = 60.0
    escalation: str = "quick"  # "fast", "none"


@dataclass(frozen=True, kw_only=True, slots=True)
class MachinePlan:
    """One scheduled machine's line of the plan; ``row`` is its JSON."""

    key: str
    node: AdEntry | None
    lost: bool
    drain_start: float | None
    window_start: float
    empty: bool
    row: dict[str, Any]


def drain_bound(machine_ad: Mapping[str, Any]) -> float:
    """Seconds a graceful drain may take on this node, whatever it accepts before."""
    return float(
        max(
            int(machine_ad.get("MaxJobRetirementTime", 0)),
            int(machine_ad.get("MachineMaxVacateTime", 600)),
        )
    )


def _is_empty(slots: Iterable[Mapping[str, Any]]) -> bool:
    return not any(
        (s.get("State"), s.get("Activity")) in _ACTIVE_PAIRS
        for s in slots
        if s.get("SlotType") == "Dynamic"
    )


def machine_plan(
    *,
    key: str,
    machine_id: Mapping[str, Any],
    mode: str,
    window_start: float,
    window_duration: float | None,
    nodes: list[AdEntry],
    lost: Mapping[str, bool],
    now: float,
    policy: PlanPolicy,
    drain_record: Mapping[str, Any] | None,
    with_blockers: bool = True,
    with_estimates: bool = True,
) -> MachinePlan:
    """The plan for one scheduled machine; ``nodes`` are the ads matching its id.

    Without ``with_estimates`` the node's ad is not brought up to ``now`` (by far the
    costliest part): ``expected``, ``on_time`` and ``late_by`` stay ``None`` and there are
    no blockers. What the master acts on (the node, whether it is lost or empty, the
    planned drain start) is there all the same.
    """
    live = [n for n in nodes if not lost.get(n.name, False)]
    candidates = live or nodes
    node = candidates[0] if candidates else None
    row: dict[str, Any] = {
        "machine_id": dict(machine_id),
        "mode": mode,
        "window": {
            "start": window_start,
            "duration": window_duration,
            "end": None if window_duration is None else window_start + window_duration,
        },
        "nodes": [
            {
                "name": n.name,
                "address": n.address,
                "ad_age": round(n.age(now), 3),
                "lost": lost.get(n.name, False),
            }
            for n in nodes
        ],
        "node": None if node is None else node.name,
        "drain": None,
        "expected": None,
        "on_time": None,
        "late_by": None,
        "planned_drain_start": None,
        "empty": None,
        "blockers": [],
        "started_by_master": drain_record is not None,
        "escalated": bool(drain_record and drain_record.get("escalated")),
    }
    if node is None:
        return MachinePlan(
            key=key,
            node=None,
            lost=False,
            drain_start=None,
            window_start=window_start,
            empty=False,
            row=row,
        )
    machine = node.machine
    empty = _is_empty(node.slots)
    if policy.drain_policy == "immediate":
        drain_start = now
    else:
        drain_start = window_start - policy.drain_margin - drain_bound(machine)
    row.update(
        {
            "drain": {
                "state": machine.get("DrainState", "none"),
                "request_id": machine.get("DrainingRequestId"),
                "reason": machine.get("DrainReason"),
                "schedule": machine.get("DrainSchedule"),
            },
            "planned_drain_start": drain_start,
            "empty": empty,
            "statistics": {
                "TotalMachineDrainingBadput": machine.get("TotalMachineDrainingBadput", 0),
                "TotalMachineDrainingUnclaimedTime": machine.get(
                    "TotalMachineDrainingUnclaimedTime", 0
                ),
            },
        }
    )
    if with_estimates:
        previous = {
            f"ExpectedMachine{s}DrainingCompletion": machine.get(
                f"ExpectedMachine{s}DrainingCompletion"
            )
            for s in _SCHEDULES
        }
        expected = drain_estimates(node.slots, now, previous)
        graceful_end = expected["ExpectedMachineGracefulDrainingCompletion"]
        late_by = 0 if empty else max(0.0, graceful_end - window_start)
        row["expected"] = {
            s.lower(): {
                "completion": expected[f"ExpectedMachine{s}DrainingCompletion"],
                "badput": expected[f"ExpectedMachine{s}DrainingBadput"],
            }
            for s in _SCHEDULES
        }
        row["on_time"] = late_by == 0
        row["late_by"] = late_by
        if with_blockers and not empty:
            row["blockers"] = ad_blockers(node.slots, now)
    return MachinePlan(
        key=key,
        node=node,
        lost=lost.get(node.name, False),
        drain_start=drain_start,
        window_start=window_start,
        empty=empty,
        row=row,
    )


def plan_totals(plans: Iterable[MachinePlan]) -> dict[str, Any]:
    """Cluster totals: machines per mode, timeliness, expected badput, statistics."""
    modes: dict[str, int] = {"UP": 0, "DRAINING": 0, "DOWN": 0}
    totals: dict[str, Any] = {
        "machines": 0,
        "without_node": 0,
        "lost": 0,
        "on_time": 0,
        "late": 0,
        "empty": 0,
        "expected_graceful_badput": 0,
        "expected_quick_badput": 0,
        "TotalMachineDrainingBadput": 0,
        "TotalMachineDrainingUnclaimedTime": 0,
    }
    for plan in plans:
        row = plan.row
        totals["machines"] += 1
        modes[row["mode"]] = modes.get(row["mode"], 0) + 1
        if plan.node is None:
            totals["without_node"] += 1
            continue
        totals["lost"] += plan.lost
        totals["empty"] += bool(row["empty"])
        totals["on_time" if row["on_time"] else "late"] += 1
        totals["expected_graceful_badput"] += row["expected"]["graceful"]["badput"]
        totals["expected_quick_badput"] += row["expected"]["quick"]["badput"]
        for name in ("TotalMachineDrainingBadput", "TotalMachineDrainingUnclaimedTime"):
            totals[name] += int(row["statistics"][name])
    totals["modes"] = modes
    return totals
