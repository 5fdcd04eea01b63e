"""The master's events, derived from its changes: pure functions from what was and what
is to :class:`~nodeagent.master._events.Draft`\\ s.

Most events are not emitted by hand where a change is made but found by comparing the
state before and after it, so that no change escapes its event: the modes of two
:class:`~nodeagent.master._maintenance.MaintenanceState`\\ s (:func:`mode_changes`), two
forms of a rolling operation (:func:`operation_changes`), two ads of a node
(:func:`node_changes`: its drain, its completion hook, its health gate as the node
says). The master's own drain actions have their builders (:func:`drain_event`,
:func:`escalated`). Each event's ``text`` says what happened in one line, times in ISO
8601 (UTC) and durations in words (:mod:`nodeagent._when`).

No I/O, no trio, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodeagent._when import in_words, iso_time
from nodeagent.master._events import Draft
from nodeagent.master._maintenance import MachineStatus, MaintenanceState
from nodeagent.master._notices import Notice

__all__ = [
    "drain_event",
    "escalation",
    "evicted_cuts",
    "leader_elected",
    "mode_changes",
    "node_back",
    "node_changes",
    "node_lost",
    "node_shutdown_changes",
    "notice_answered",
    "notice_issued",
    "notice_rescinded",
    "operation_changes",
    "schedule_changed",
]

#: Machines a ``schedule.changed`` event lists by name, in each of its lists, at most
#: (their numbers are always given).
LISTED = 1000


def _host(status: MachineStatus) -> str:
    return status.id.hostname or status.id.ip or "?"


def _modes(state: MaintenanceState) -> dict[str, tuple[str, MachineStatus]]:
    return {_host(s): (str(s.mode), s) for s in state.machines()}


def _window_of(status: MachineStatus) -> tuple[int, int | None] | None:
    window = status.window
    if window is None:
        return None
    return window.unavailability.start_ns, window.unavailability.duration_ns


def schedule_changed(
    before: MaintenanceState, after: MaintenanceState, *, actor: str, version: str
) -> Draft:
    """``schedule.changed``: the machines added, dropped and whose window moved."""
    old = {_host(s): _window_of(s) for s in before.machines()}
    new = {_host(s): _window_of(s) for s in after.machines()}
    added = sorted(new.keys() - old.keys())
    dropped = sorted(old.keys() - new.keys())
    moved = sorted(h for h in new.keys() & old.keys() if new[h] != old[h])
    windows = len(after.schedule.windows)
    text = (
        f"schedule replaced by {actor}: {_count(len(new), 'machine')} in "
        f"{_count(windows, 'window')} ({len(added)} added, {len(dropped)} dropped, "
        f"{len(moved)} moved)"
    )
    return Draft(
        type="schedule.changed",
        text=text,
        machines=tuple(sorted({*added, *dropped, *moved})[:LISTED]),
        facts={
            "version": version,
            "actor": actor,
            "machines": len(new),
            "windows": windows,
            "added": added[:LISTED],
            "dropped": dropped[:LISTED],
            "moved": moved[:LISTED],
            "counts": {"added": len(added), "dropped": len(dropped), "moved": len(moved)},
        },
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def mode_changes(before: MaintenanceState, after: MaintenanceState, *, actor: str) -> list[Draft]:
    """``mode.changed``: one event per move (``UP`` → ``DRAINING`` …), listing every
    machine that made it. A machine absent from a state is ``UP`` there."""
    old, new = _modes(before), _modes(after)
    moves: dict[tuple[str, str], list[str]] = {}
    for host in sorted(old.keys() | new.keys()):
        was = old.get(host, ("UP", None))[0]
        now = new.get(host, ("UP", None))[0]
        if was != now:
            moves.setdefault((was, now), []).append(host)
    drafts = []
    for (was, now), hosts in sorted(moves.items()):
        shown = ", ".join(hosts[:5]) + (f" and {len(hosts) - 5} more" if len(hosts) > 5 else "")
        drafts.append(
            Draft(
                type="mode.changed",
                text=f"{shown}: {was} → {now} ({actor})",
                machines=tuple(hosts),
                facts={"from": was, "to": now, "actor": actor, "count": len(hosts)},
            )
        )
    return drafts


def drain_event(
    kind: str,
    *,
    node: str,
    machine: str,
    request_id: str | None,
    what: str,
    groups: Iterable[str] = (),
    **facts: Any,
) -> Draft:
    """A drain event of the master's own (``drain.recorded``, ``committed``,
    ``cancelled``, ``down``): ``what`` ends the sentence."""
    return Draft(
        type=f"drain.{kind}",
        text=f"{node}: drain {request_id} {what}",
        machines=(machine,),
        groups=tuple(sorted(set(groups))),
        facts={"node": node, "request_id": request_id, **facts},
    )


def escalation(
    *,
    node: str,
    machine: str,
    request_id: str | None,
    how: str,
    cuts: Sequence[Mapping[str, Any]],
    groups: Iterable[str] = (),
) -> Draft:
    """``drain.escalated``: its window opened on a node not empty; ``cuts`` are the
    promises it cuts (the plan's ``cuts``: slot, job, owner, cpus, cut_by, cut_badput)."""
    lost = sum(float(c.get("cut_by") or 0) for c in cuts)
    badput = sum(float(c.get("cut_badput") or 0) for c in cuts)
    text = f"{node}: at its window, escalated ({how})"
    if cuts:
        text += (
            f": {_count(len(cuts), 'job')} cut, {in_words(lost)} of promised retirement lost, "
            f"{round(badput)} core-s of badput"
        )
    return Draft(
        type="drain.escalated",
        text=text,
        machines=(machine,),
        groups=tuple(sorted(set(groups))),
        facts={
            "node": node,
            "request_id": request_id,
            "how": how,
            "cut": [dict(c) for c in cuts],
            "cut_jobs": len(cuts),
            "cut_badput": round(badput),
        },
    )


def evicted_cuts(slots: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The promises cut by evictions a node's ad shows under way (its dynamic slots
    Vacating or Killing), as the plan's ``cuts`` say them: what an escalation at the
    window cut when the node itself evicted at its drain's deadline, before the master
    looked. A job evicted within its promise (``cut_by`` 0) is not listed."""
    cuts = []
    for slot in slots:
        if slot.get("SlotType") != "Dynamic" or slot.get("Activity") not in ("Vacating", "Killing"):
            continue
        run = float(slot.get("TotalJobRunTime") or 0)
        promise = float(slot.get("MaxJobRetirementTime") or 0)
        cut_by = max(0.0, promise - run)
        if cut_by <= 0:
            continue
        cpus = int(slot.get("Cpus") or 0)
        evict_at = slot.get("EnteredCurrentActivity")
        cuts.append(
            {
                "slot": slot.get("Name"),
                "job_id": slot.get("JobId"),
                "owner": slot.get("RemoteOwner"),
                "cpus": cpus,
                "evict_at": evict_at,
                "promise_end": None if evict_at is None else round(float(evict_at) + cut_by),
                "cut_by": round(cut_by),
                "cut_badput": round(cpus * run),
            }
        )
    return cuts


def node_lost(*, node: str, machine: str, lifetime: float, grace: float | None = None) -> Draft:
    """``node.lost``; ``grace``: the node's last ad said it was shutting down, and it was
    rebooting for that long past ``lifetime`` (the reboot grace ran out)."""
    if grace is None:
        text = f"{node}: lost, no ad for {in_words(lifetime)}"
        facts: dict[str, Any] = {"node": node, "lifetime": lifetime}
    else:
        text = (
            f"{node}: lost, no ad for {in_words(lifetime + grace)} since it was shutting "
            "down (not back within its reboot grace)"
        )
        facts = {"node": node, "lifetime": lifetime, "reboot_grace": grace}
    return Draft(type="node.lost", text=text, machines=(machine,), facts=facts)


def node_back(*, node: str, machine: str, away: float) -> Draft:
    return Draft(
        type="node.back",
        text=f"{node}: back after {in_words(away)} without an ad",
        machines=(machine,),
        facts={"node": node, "away": round(away, 3)},
    )


def node_shutdown_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], *, node: str, machine: str, away: float
) -> list[Draft]:
    """What two successive machine ads of a node say of its machine's shutdown:
    ``node.shutting_down`` when the new one first says ``ShuttingDown``; once it no longer
    does, ``node.rebooted`` when its agent started again since (``DaemonStartTime``
    moved: the machine went down and came back), else ``node.shutdown_cancelled``.
    ``away``: how long after the earlier ad the new one came."""
    was, now = before.get("ShuttingDown") is True, after.get("ShuttingDown") is True
    if was == now:
        return []
    shared = {"machines": (machine,)}
    if now:
        drain = after.get("DrainingRequestId")
        state = after.get("DrainState", "none")
        return [
            Draft(
                type="node.shutting_down",
                text=f"{node}: its machine is shutting down; the node drains ({state}, "
                f"drain {drain}, reason {after.get('DrainReason')})",
                facts={
                    "node": node,
                    "request_id": drain,
                    "state": state,
                    "reason": after.get("DrainReason"),
                },
                **shared,
            )
        ]
    if before.get("DaemonStartTime") != after.get("DaemonStartTime"):
        return [
            Draft(
                type="node.rebooted",
                text=f"{node}: back after its reboot ({in_words(away)} after its last ad "
                f"while shutting down; drain state {after.get('DrainState', 'none')})",
                facts={"node": node, "away": round(away, 3), "state": after.get("DrainState")},
                **shared,
            )
        ]
    return [
        Draft(
            type="node.shutdown_cancelled",
            text=f"{node}: its machine's shutdown was cancelled",
            facts={"node": node},
            **shared,
        )
    ]


def notice_issued(notice: Notice) -> Draft:
    """``notice.issued``: its text counts the claims and says which promises the
    escalation at the window would cut (the longest cut), or that it keeps them all."""
    claims = notice.claims
    cuts = [c.cut_by or 0 for c in claims if c.kept is False]
    said = _count(len(claims), "claim")
    if cuts:
        said += f", {len(cuts)} cut at the window by up to {in_words(max(cuts))}"
    elif claims and all(c.kept for c in claims):
        said += ", every promise kept"
    return Draft(
        type="notice.issued",
        text=f"{notice.machine}: notice {notice.id} to {notice.group} ({said})",
        machines=(notice.machine,),
        groups=(notice.group,),
        facts={"notice": notice.to_json()},
    )


def notice_rescinded(notice: Notice) -> Draft:
    return Draft(
        type="notice.rescinded",
        text=f"{notice.machine}: notice {notice.id} to {notice.group} rescinded",
        machines=(notice.machine,),
        groups=(notice.group,),
        facts={"id": notice.id, "machine": notice.machine, "group": notice.group},
    )


def notice_answered(notice: Notice) -> Draft:
    answer = notice.answer
    assert answer is not None
    return Draft(
        type="notice.answered",
        text=f"{notice.machine}: {notice.group} answered {answer.verdict.value} "
        f"to notice {notice.id} ({answer.reason})",
        machines=(notice.machine,),
        groups=(notice.group,),
        facts={"id": notice.id, "answer": answer.to_json()},
    )


def leader_elected(*, url: str, term: int | None) -> Draft:
    shown = "" if term is None else f" (term {term})"
    return Draft(
        type="leader.elected",
        text=f"{url} leads the pool{shown}",
        facts={"url": url, "term": term},
    )


def _get(machine: Mapping[str, Any] | None, name: str) -> Any:
    return None if machine is None else machine.get(name)


def node_changes(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any],
    *,
    node: str,
    machine: str,
    groups: Iterable[str] = (),
) -> list[Draft]:
    """What a node's new machine ad says changed since its last one: its drain
    (``drain.started``, ``completed``, ``ended``), its completion hook
    (``hook.started``, ``succeeded``, ``failed``) and its health gate
    (``health.failing``, ``passing``). No earlier ad (``before`` is ``None``): nothing is
    known to have changed."""
    if before is None:
        return []
    drafts: list[Draft] = []
    shared = {"machines": (machine,), "groups": tuple(sorted(set(groups)))}
    state, was = _get(after, "DrainState") or "none", _get(before, "DrainState") or "none"
    request = _get(after, "DrainingRequestId")
    old_request = _get(before, "DrainingRequestId")
    reason = _get(after, "DrainReason")
    if state in ("draining", "drained") and (
        was not in ("draining", "drained") or request != old_request
    ):
        schedule = _get(after, "DrainSchedule")
        text = f"{node}: {schedule} drain {request} started ({reason})"
        deadline = _get(after, "DrainingDeadline")
        if isinstance(deadline, int | float):
            text += f", deadline {iso_time(deadline)}"
        drafts.append(
            Draft(
                type="drain.started",
                text=text,
                facts={
                    "node": node,
                    "request_id": request,
                    "reason": reason,
                    "schedule": schedule,
                    "deadline": deadline,
                },
                **shared,
            )
        )
        was = "draining"
    if state == "drained" and was != "drained":
        drafts.append(
            Draft(
                type="drain.completed",
                text=f"{node}: drain {request} completed, the node is empty ({reason})",
                facts={"node": node, "request_id": request, "reason": reason},
                **shared,
            )
        )
    if state not in ("draining", "drained") and was in ("draining", "drained"):
        drafts.append(
            Draft(
                type="drain.ended",
                text=f"{node}: drain {old_request} ended, the node takes work again",
                facts={"node": node, "request_id": old_request},
                **shared,
            )
        )
    drafts += _hook_changes(before, after, node=node, shared=shared)
    drafts += _health_changes(before, after, node=node, shared=shared)
    return drafts


def _hook_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], *, node: str, shared: dict[str, Any]
) -> list[Draft]:
    hook = _get(after, "DrainHookName")
    request = _get(after, "DrainHookRequestId")
    state = _get(after, "DrainHookState")
    same = request == _get(before, "DrainHookRequestId")
    was = _get(before, "DrainHookState") if same else None
    if state == was or state is None:
        return []
    message = _get(after, "DrainHookMessage")
    facts = {"node": node, "hook": hook, "request_id": request, "message": message}
    drafts = []
    if state in ("running", "succeeded", "failed", "interrupted") and was in (None, "pending"):
        drafts.append(
            Draft(
                type="hook.started",
                text=f"{node}: hook {hook} of drain {request} started",
                facts=facts,
                **shared,
            )
        )
    if state == "succeeded":
        drafts.append(
            Draft(
                type="hook.succeeded",
                text=f"{node}: hook {hook} of drain {request} succeeded",
                facts=facts,
                **shared,
            )
        )
    elif state in ("failed", "interrupted"):
        drafts.append(
            Draft(
                type="hook.failed",
                text=f"{node}: hook {hook} of drain {request} {state}: {message}; "
                "the node stays closed",
                facts={**facts, "state": state},
                **shared,
            )
        )
    return drafts


def _health_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], *, node: str, shared: dict[str, Any]
) -> list[Draft]:
    state, was = _get(after, "HealthState"), _get(before, "HealthState")
    failures = _get(after, "HealthFailures")
    message = _get(after, "HealthMessage")
    facts = {"node": node, "message": message, "failures": failures}
    if state == "failing" and (was != "failing" or failures == 1):
        return [
            Draft(
                type="health.failing",
                text=f"{node}: health check failed ({message}); the node stays closed",
                facts=facts,
                **shared,
            )
        ]
    if state == "passing" and was in ("failing", "pending"):
        return [
            Draft(
                type="health.passing",
                text=f"{node}: health check passed; the node takes work again",
                facts=facts,
                **shared,
            )
        ]
    return []


def _batch_hosts(batch: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(n.get("name")) for n in batch.get("nodes", ()))


def operation_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[Draft]:
    """What changed in a rolling operation (its JSON form, before and after a write):
    ``operation.started`` (new), each batch held, started, done or skipped, the
    operation paused, resumed, ended."""
    op_id = after.get("id")
    drafts: list[Draft] = []
    hosts = tuple(after.get("spec", {}).get("hosts", ()))
    if before is None:
        drafts.append(
            Draft(
                type="operation.started",
                text=(
                    f"operation {op_id} started by {after.get('actor')}: {len(hosts)} hosts "
                    f"in {len(after.get('batches', ()))} batches, hook "
                    f"{after.get('spec', {}).get('hook')}"
                ),
                machines=hosts,
                facts={"operation": op_id, "actor": after.get("actor"), "spec": after.get("spec")},
            )
        )
        before = {}
    old_batches = {b.get("name"): b for b in before.get("batches", ())}
    for batch in after.get("batches", ()):
        drafts += _batch_changes(op_id, old_batches.get(batch.get("name"), {}), batch)
    state, was = after.get("state"), before.get("state", "running")
    facts = {"operation": op_id, "state": state, "reason": after.get("reason")}
    if state != was and state == "paused":
        drafts.append(
            Draft(
                type="operation.paused",
                text=f"operation {op_id} paused" + _because(after.get("reason")),
                machines=hosts,
                facts=facts,
            )
        )
    elif state != was and state == "running" and was == "paused":
        drafts.append(
            Draft(
                type="operation.resumed",
                text=f"operation {op_id} resumed",
                machines=hosts,
                facts=facts,
            )
        )
    if after.get("ended_at") is not None and before.get("ended_at") is None:
        drafts.append(
            Draft(
                type="operation.ended",
                text=f"operation {op_id} ended: {state}" + _because(after.get("reason")),
                machines=hosts,
                facts=facts,
            )
        )
    return drafts


def _because(reason: object) -> str:
    return f" ({reason})" if reason else ""


def _batch_changes(op_id: Any, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Draft]:
    name = new.get("name")
    hosts = _batch_hosts(new)
    facts: dict[str, Any] = {"operation": op_id, "batch": name, "state": new.get("state")}
    drafts = []
    reason = new.get("reason")
    if (
        new.get("held_since") is not None
        and new.get("started_at") is None
        and (old.get("held_since") is None or _code(old.get("reason")) != _code(reason))
    ):
        why = reason.get("message") if isinstance(reason, Mapping) else None
        code = _code(reason)
        wait = reason.get("until") if isinstance(reason, Mapping) else None
        text = f"operation {op_id}: batch {name} held ({code}"
        text += f": {why})" if why else ")"
        if isinstance(wait, int | float):
            text += f", until {iso_time(wait)} at most"
        drafts.append(
            Draft(
                type="operation.batch_held",
                text=text,
                machines=hosts,
                facts={**facts, "reason": reason, "wait": wait},
            )
        )
    if new.get("started_at") is not None and old.get("started_at") is None:
        drafts.append(
            Draft(
                type="operation.batch_started",
                text=f"operation {op_id}: batch {name} started ({', '.join(hosts)})",
                machines=hosts,
                facts=facts,
            )
        )
    if new.get("skipped") and not old.get("skipped"):
        drafts.append(
            Draft(
                type="operation.batch_skipped",
                text=f"operation {op_id}: batch {name} skipped" + _because(_code(reason)),
                machines=hosts,
                facts={**facts, "reason": reason},
            )
        )
    elif new.get("ended_at") is not None and old.get("ended_at") is None:
        drafts.append(
            Draft(
                type="operation.batch_done",
                text=f"operation {op_id}: batch {name} {new.get('state')}",
                machines=hosts,
                facts=facts,
            )
        )
    return drafts


def _code(reason: object) -> object:
    return reason.get("code") if isinstance(reason, Mapping) else reason
