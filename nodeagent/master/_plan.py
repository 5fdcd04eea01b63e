"""The cluster maintenance plan: the nodes' estimates turned into when to drain what.

Pure functions of the schedule, the ads and ``now`` (epoch seconds). A node's ad is
brought up to ``now`` by its forecast (:class:`slots.DrainForecast`, exactly
:func:`slots.drain_estimates`), so a plan made from ads a minute old is as exact as the
ads allow; the forecast is computed once per ad, and reading it costs a few
multiplications per job.

**Just in time.** A node keeps accepting work until its drain starts, and any job it
accepts is promised ``MaxJobRetirementTime``. A graceful drain started at ``T`` is
therefore certain to be done by ``T + max(MaxJobRetirementTime, MachineMaxVacateTime)``
(a job's own vacate time never exceeds that bound, and running jobs' promises end
sooner: :attr:`AdEntry.drain_bound <nodeagent.master._adstore.AdEntry.drain_bound>`). The latest
safe start for a window at ``W`` is ``W − margin − that bound``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.master._adstore import AdEntry
from nodeagent.master._maintenance import MachineId, MachineStatus

__all__ = [
    "MachinePlan",
    "PlanPolicy",
    "PlanTotals",
    "ScheduledMachine",
    "machine_key",
    "machine_plan",
    "plan_row",
]

_NS = 1_000_000_000


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanPolicy:
    """How the master drains scheduled machines (``[master]`` keys of the same names)."""

    drain_policy: str = "just_in_time"  # or "immediate"
    drain_margin: float = 60.0
    escalation: str = "quick"  # "fast", "none"


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduledMachine:
    """A machine of the schedule as the plan reads it; made once per schedule change.

    ``machine_id`` and ``window`` are the JSON the plan's rows show (shared by the rows
    of successive plans, so read-only).
    """

    key: str
    id: MachineId
    mode: str
    window_start: float
    machine_id: dict[str, str]
    window: dict[str, float | None]

    @classmethod
    def of(cls, status: MachineStatus) -> ScheduledMachine | None:
        """The scheduled machine of a status; ``None`` for a machine with no window."""
        if status.window is None:
            return None
        unavailability = status.window.unavailability
        start = unavailability.start_ns / _NS
        duration = unavailability.duration_ns
        seconds = None if duration is None else duration / _NS
        return cls(
            key=machine_key(status.id),
            id=status.id,
            mode=str(status.mode),
            window_start=start,
            machine_id=status.id.to_json(),
            window={
                "start": start,
                "duration": seconds,
                "end": None if seconds is None else start + seconds,
            },
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class MachinePlan:
    """One scheduled machine as the master acts on it (:func:`plan_row` gives its line).

    ``node`` is the first live node matching the machine id (or the first lost one);
    ``drain_start`` is when its graceful drain is due, ``None`` without a node.
    """

    machine: ScheduledMachine
    nodes: list[AdEntry]
    node: AdEntry | None
    lost: bool
    drain_start: float | None
    drain_record: Mapping[str, Any] | None

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
    def node_name(self) -> str | None:
        return None if self.node is None else self.node.name

    @property
    def empty(self) -> bool:
        return self.node is not None and self.node.empty


def machine_key(machine_id: MachineId) -> str:
    """A stable key for a Mesos machine id: ``hostname|ip`` (hostname lower-cased)."""
    host = "" if machine_id.hostname is None else machine_id.hostname.lower()
    return f"{host}|{machine_id.ip or ''}"


def machine_plan(
    machine: ScheduledMachine,
    nodes: list[AdEntry],
    *,
    is_lost: Callable[[AdEntry], bool],
    now: float,
    policy: PlanPolicy,
    drain_record: Mapping[str, Any] | None,
) -> MachinePlan:
    """The plan for one scheduled machine; ``nodes`` are the ads matching its id.

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
    drain_start = None
    if node is not None:
        if policy.drain_policy == "immediate":
            drain_start = now
        else:
            drain_start = machine.window_start - policy.drain_margin - node.drain_bound
    return MachinePlan(
        machine=machine,
        nodes=nodes,
        node=node,
        lost=lost,
        drain_start=drain_start,
        drain_record=drain_record,
    )


def plan_row(
    plan: MachinePlan,
    now: float,
    *,
    is_lost: Callable[[AdEntry], bool],
    with_blockers: bool = True,
) -> dict[str, Any]:
    """The machine's line of ``GET /v1/maintenance/plan``.

    The node's ad is brought up to ``now`` by its :class:`~slots.DrainForecast` (exactly
    :func:`slots.drain_estimates` and :func:`slots.ad_blockers`); without a node,
    ``expected``, ``on_time`` and ``late_by`` are ``None``.
    """
    record = plan.drain_record
    node = plan.node
    row: dict[str, Any] = {
        "machine_id": plan.machine.machine_id,
        "mode": plan.machine.mode,
        "window": plan.machine.window,
        "nodes": [
            {
                "name": n.name,
                "address": n.address,
                "ad_age": round(n.age(now), 3),
                "lost": is_lost(n),
            }
            for n in plan.nodes
        ],
        "node": None if node is None else node.name,
        "drain": None,
        "expected": None,
        "on_time": None,
        "late_by": None,
        "planned_drain_start": plan.drain_start,
        "empty": None,
        "blockers": [],
        "started_by_master": record is not None,
        "escalated": bool(record and record.get("escalated")),
    }
    if node is None:
        return row
    empty = node.empty
    forecast = node.forecast
    graceful_end, graceful_badput, quick_end, quick_badput, fast_end, fast_badput = forecast.values(
        now
    )
    late_by = 0 if empty else max(0.0, graceful_end - plan.machine.window_start)
    row["drain"] = node.drain
    row["expected"] = {
        "graceful": {"completion": graceful_end, "badput": graceful_badput},
        "quick": {"completion": quick_end, "badput": quick_badput},
        "fast": {"completion": fast_end, "badput": fast_badput},
    }
    row["on_time"] = late_by == 0
    row["late_by"] = late_by
    row["empty"] = empty
    if with_blockers and not empty:
        row["blockers"] = forecast.blockers(now)
    row["statistics"] = node.statistics
    return row


class PlanTotals:
    """Cluster totals of a plan, added up row by row (:meth:`add`, then :meth:`to_json`):
    machines per mode, timeliness, expected badput, draining statistics."""

    def __init__(self) -> None:
        self.modes: dict[str, int] = {"UP": 0, "DRAINING": 0, "DOWN": 0}
        self.machines = self.without_node = self.lost = self.on_time = self.empty = 0
        self.graceful_badput = self.quick_badput = self.badput = self.unclaimed = 0

    def add(self, plan: MachinePlan, row: Mapping[str, Any]) -> None:
        self.machines += 1
        self.modes[plan.mode] = self.modes.get(plan.mode, 0) + 1
        if plan.node is None:
            self.without_node += 1
            return
        self.lost += plan.lost
        self.empty += bool(row["empty"])
        self.on_time += bool(row["on_time"])
        expected = row["expected"]
        self.graceful_badput += expected["graceful"]["badput"]
        self.quick_badput += expected["quick"]["badput"]
        statistics = row["statistics"]
        self.badput += int(statistics["TotalMachineDrainingBadput"])
        self.unclaimed += int(statistics["TotalMachineDrainingUnclaimedTime"])

    def to_json(self) -> dict[str, Any]:
        return {
            "machines": self.machines,
            "without_node": self.without_node,
            "lost": self.lost,
            "on_time": self.on_time,
            "late": self.machines - self.without_node - self.on_time,
            "empty": self.empty,
            "expected_graceful_badput": self.graceful_badput,
            "expected_quick_badput": self.quick_badput,
            "TotalMachineDrainingBadput": self.badput,
            "TotalMachineDrainingUnclaimedTime": self.unclaimed,
            "modes": dict(self.modes),
        }
