"""What a rolling operation would do, and when it would be done, before it exists (pure).

``POST /v1/maintenance/operations/preview`` answers with :func:`preview_operation`: the
operation's batches in the order the engine would take them (:func:`~nodeagent.master.
_operations.choose`'s: the waiting batch whose nodes empty soonest by their estimates for
the operation's schedule, then the cheapest, then by name), each batch's SLA verdict now
(safe; held until a time; held by a coordinator's no; or never, when its groups would keep
fewer instances than they need: held, and skipped after ``sla_wait`` unless new instances
start meanwhile), and for each node how long
its steps should take:

* its **drain**: from its estimate for the schedule now (``ExpectedMachine<Schedule>
  DrainingCompletion`` less now);
* its **hook**: the duration the node declares for it (``DrainHookDurations``, from
  ``[hooks.NAME] expected_duration``), else the median of what the master has seen the hook
  take on the pool's nodes, else unknown;
* its **health check**: the passes still needed after the first, one ``HealthInterval``
  apart (0 without a check).

A batch takes as long as its slowest node, plus ``step`` (the engine sees each phase end
at its next pass: a few reconcile intervals). A batch with a declined notice in force on
one of its machines lists the declines (``declines``): it would be held until they are
accepted, at the latest ``sla_wait`` after a place is free for it, which is when the
preview counts it to start. Batches run ``spec.batches`` at once, each
starting when a place is free and its SLA allows. **When the whole operation will be
done** (``eta``) is the end of the last batch; ``None`` when some duration is unknown or a
batch waits on a coordinator (``unknown`` says which). No I/O, no clock: ``now`` is given.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeagent.master._operations import Decline, NodeView, Operation, SlaVerdict, batch_estimate

__all__ = [
    "NodeTimes",
    "hook_durations",
    "node_times",
    "observed_hook_seconds",
    "preview_operation",
]


@dataclass(frozen=True, kw_only=True)
class NodeTimes:
    """How long one node's steps should take, in seconds (``None``: not known): its drain
    (from its estimate), its hook (``hook_source``: ``declared`` or ``observed``) and the
    wait for its health check."""

    name: str
    drain: float | None
    hook: float | None
    hook_source: str | None
    health: float


def hook_durations(machine: Mapping[str, Any]) -> dict[str, float]:
    """A node's declared hook durations (``DrainHookDurations``: ``name=seconds,…``)."""
    found: dict[str, float] = {}
    for item in str(machine.get("DrainHookDurations") or "").split(","):
        name, _, seconds = item.partition("=")
        try:
            found[name.strip()] = float(seconds)
        except ValueError:
            continue
    return found


def observed_hook_seconds(machines: Iterable[Mapping[str, Any]], hook: str) -> float | None:
    """The median time ``hook`` took in the last run each node's ad shows, among those
    that succeeded (``DrainHookStartTime`` to ``DrainHookEndTime``); ``None`` when none did."""
    seen = []
    for machine in machines:
        if machine.get("DrainHookName") != hook or machine.get("DrainHookState") != "succeeded":
            continue
        start, end = machine.get("DrainHookStartTime"), machine.get("DrainHookEndTime")
        if isinstance(start, int | float) and isinstance(end, int | float) and end >= start:
            seen.append(float(end - start))
    return statistics.median(seen) if seen else None


def node_times(
    name: str,
    *,
    machine: Mapping[str, Any] | None,
    view: NodeView | None,
    hook: str,
    observed: float | None,
    now: float,
) -> NodeTimes:
    """One node's :class:`NodeTimes` from its machine ad and view (``None``: no ad), for
    ``hook`` (``observed``: what the pool has seen it take)."""
    drain = None
    if view is not None and view.present and view.completion is not None:
        drain = max(0.0, view.completion - now)
    declared = None if machine is None else hook_durations(machine).get(hook)
    health = 0.0
    if machine is not None:
        passes = machine.get("HealthPassesNeeded")
        interval = machine.get("HealthInterval")
        if isinstance(passes, int) and isinstance(interval, int | float) and passes > 1:
            health = (passes - 1) * float(interval)
    if declared is not None:
        return NodeTimes(
            name=name, drain=drain, hook=declared, hook_source="declared", health=health
        )
    source = None if observed is None else "observed"
    return NodeTimes(name=name, drain=drain, hook=observed, hook_source=source, health=health)


def _sla_json(verdict: SlaVerdict | None) -> dict[str, Any]:
    if verdict is None or verdict.safe:
        return {"safe": True, "until": None, "never": False, "groups": [], "message": ""}
    return {
        "safe": False,
        "until": verdict.until,
        "never": verdict.never,
        "groups": list(verdict.groups),
        "message": verdict.message,
    }


def preview_operation(
    op: Operation,
    views: Mapping[str, NodeView],
    times: Mapping[str, NodeTimes],
    verdicts: Mapping[tuple[str, ...], SlaVerdict],
    now: float,
    *,
    step: float,
    declines: Mapping[tuple[str, ...], Sequence[Decline]] | None = None,
) -> dict[str, Any]:
    """The preview of ``op`` (not saved, every batch waiting) at ``now``: see the module
    docstring. ``views`` hold each node's estimates for the operation's schedule,
    ``times`` each node's step durations, ``verdicts`` each batch's SLA verdict now (by
    its hosts; none: safe); ``step`` is what the engine adds to each batch; ``declines``
    the declines in force on each batch's machines (by its hosts; none: none)."""
    order = sorted(op.batches, key=lambda b: (*batch_estimate(b, views), b.name))
    places = [now] * max(1, op.spec.batches)
    heapq.heapify(places)
    unknown: list[str] = []
    batches = []
    for number, batch in enumerate(order, 1):
        verdict = verdicts.get(batch.hosts)
        declined = tuple((declines or {}).get(batch.hosts, ()))
        nodes = [times[n.name] for n in batch.nodes]
        entry: dict[str, Any] = {
            "name": batch.name,
            "order": number,
            "hosts": list(batch.hosts),
            "sla": _sla_json(verdict),
            "declines": [d.to_json() for d in declined],
            "nodes": [
                {
                    "name": t.name,
                    "drain_seconds": t.drain,
                    "hook_seconds": t.hook,
                    "hook_source": t.hook_source,
                    "health_seconds": t.health,
                }
                for t in nodes
            ],
            "starts_at": None,
            "ends_at": None,
            "seconds": None,
        }
        batches.append(entry)
        if verdict is not None and not verdict.safe and verdict.never:
            # Held (taking no place) until new instances start elsewhere; else skipped
            # once held sla_wait: the operation cannot end before that.
            entry["skipped"] = True
            entry["ends_at"] = now + op.spec.sla_wait
            continue
        entry["skipped"] = False
        lacking = [t.name for t in nodes if t.drain is None]
        if lacking:
            unknown.append(f"batch {batch.name}: no estimate for {', '.join(lacking)}")
        no_hook = [t.name for t in nodes if t.hook is None]
        if no_hook:
            unknown.append(
                f"batch {batch.name}: how long hook {op.spec.hook} takes on "
                f"{', '.join(no_hook)} (declare its expected_duration)"
            )
        if verdict is not None and not verdict.safe and verdict.until is None:
            unknown.append(f"batch {batch.name}: held until {', '.join(verdict.groups)} allow it")
        if (
            lacking
            or no_hook
            or (verdict is not None and not verdict.safe and verdict.until is None)
        ):
            continue
        start = heapq.heappop(places)
        if verdict is not None and not verdict.safe and verdict.until is not None:
            start = max(start, verdict.until)
        elif declined:
            start += op.spec.sla_wait  # held until accepted, at the latest this long
        seconds = max((t.drain or 0.0) + (t.hook or 0.0) + t.health for t in nodes) + step
        entry.update(starts_at=start, ends_at=start + seconds, seconds=seconds)
        heapq.heappush(places, start + seconds)
    ends = [b["ends_at"] for b in batches if b["ends_at"] is not None]
    eta = None if unknown or not ends else max(ends)
    return {
        "now": now,
        "spec": op.to_json()["spec"],
        "batches": batches,
        "skipped": [b["name"] for b in batches if b.get("skipped")],
        "eta": eta,
        "seconds": None if eta is None else eta - now,
        "unknown": unknown,
    }
