"""What a proposed schedule would do, pure: the plan it would give on the ads held now.

``POST /v1/maintenance/schedule/preview`` answers with :class:`SchedulePreview`: the same
decisions a reconcile pass makes (:func:`~nodeagent.master._drains.decide` over
:func:`~nodeagent.master._plan.machine_plan`), and the same rows the plan shows
(:func:`~nodeagent.master._plan.row_dict`), computed for the proposed schedule without
carrying anything out. No I/O, no trio, ``now`` an argument; the master's state is
copied, never changed.

The reply, per machine of the proposed schedule, is its plan row with what the change
does to it: ``mode_now`` and ``mode_after``; ``change`` (``added``: enters the schedule,
``moved``: its window changes, ``kept``); ``window_open`` (its window has started);
``drain_now`` (the schedule its drain would start or be replaced with at once, or
``None``); ``evicted_now`` (the jobs the escalation would evict at once: the window is
open, so each job's promise is cut now). ``dropped`` lists the machines that leave the
schedule (back UP; the master's drain there is cancelled). ``totals`` add it up, and
``warnings`` say what looks wrong, each with a stable code. A preview of the rows that
change (``changed``: what ``nodeagent master schedule set`` asks) lists only the machines
the change adds or moves: a kept machine is counted (whether an ad matches it, whether its
window is open, the declines it would meet), but its row, and so its drain and its cuts,
which are the plan's as it stands, are not made. Its cost is then that of the change, not
of the schedule (a kept machine costs a look-up, a row a forecast):

* ``schedule.suspicious_time``: a window starts before 2000-01-01 or more than ten years
  ahead, or lasts less than a second, which is what times in seconds or milliseconds
  look like where Mesos wants nanoseconds;
* ``schedule.window_open``: a machine enters a window (or its window moves) that has
  already started: its drain starts at once and, under the ``quick`` or ``fast``
  escalation, its jobs are evicted at once;
* ``schedule.unknown_machine``: no ad the master holds matches a machine (a typo, or a
  node that has not joined): nothing will drain there until one does;
* ``schedule.declined``: machines the change keeps in, or moves within, a window have
  notices in force that their groups' owners declined (each row's ``declines``: the
  notice, machine, group, reason, who, when, ``expected_completion``, and
  ``reissued``: true where the window moves, so that the notice would be rescinded and a
  new one issued, the decline not carried over). A machine the change adds has no notice
  yet: its owners hear of it once the change is applied.

The reply's ``schedule_version`` (:func:`schedule_version`) names the state the preview was
made from: ``PUT /v1/maintenance/schedule?if_version=…`` applies the schedule only while
that state is the master's (else :class:`ScheduleChanged`, nothing changed), so what is
applied after a preview is judged against what the preview showed.

A schedule Mesos would refuse raises :class:`~nodeagent.master._maintenance.MaintenanceError`
with Mesos's message, exactly as ``POST /maintenance/schedule`` would.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from nodeagent._when import iso_time
from nodeagent.master._drains import STARTING, Down, Escalate, Postpone, Start, decide
from nodeagent.master._maintenance import (
    MachineId,
    MachineStatus,
    MaintenanceError,
    MaintenanceSchedule,
    MaintenanceState,
    Mode,
    suggestions,
)
from nodeagent.master._notices import Notice, Verdict
from nodeagent.master._plan import (
    ScheduledMachine,
    machine_key,
    machine_plan,
    row_dict,
    row_figures,
    row_state,
)
from nodeagent.master._plan_view import PlanInputs
from slots import Escalation, SlotsError

__all__ = [
    "EARLIEST_PLAUSIBLE",
    "PLAUSIBLE_YEARS",
    "ScheduleChanged",
    "SchedulePreview",
    "preview_down",
    "schedule_version",
    "schedule_warnings",
    "scheduled_meant",
    "suggestions",
]

_NS = 1_000_000_000
#: 2000-01-01T00:00:00Z: a window that starts before it was written in the wrong unit.
EARLIEST_PLAUSIBLE = 946_684_800
#: How far ahead a window may plausibly start.
PLAUSIBLE_YEARS = 10
_YEAR = 365.25 * 86400
#: What the preview says of each job evicted at once (a plan blocker's fields).
_JOB_FIELDS = ("slot", "job_id", "owner", "cpus", "evict_at", "promise_end", "cut_by", "cut_badput")
#: Unit names by the factor that turns a value in that unit into nanoseconds.
_UNITS = ((_NS, "seconds"), (1_000_000, "milliseconds"), (1_000, "microseconds"))


class ScheduleChanged(SlotsError):
    """The schedule or a machine's mode changed since the preview a change was made from
    (its ``schedule_version`` is not the master's): nothing was applied."""

    code = "schedule.changed"
    http_status = 412


def schedule_version(state: MaintenanceState) -> str:
    """A digest of ``state``'s schedule and machine modes (what ``GET
    /maintenance/schedule`` and ``GET /maintenance/status`` show): equal on every master
    that holds the same state, different once the schedule changes or a machine goes DOWN
    or UP. Drains, ads and the clock are not part of it."""
    document = {"schedule": state.schedule.to_json(), "status": state.status().to_json()}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _plausible(seconds: float, now: float) -> bool:
    return EARLIEST_PLAUSIBLE <= seconds <= now + PLAUSIBLE_YEARS * _YEAR


def _unit_guess(value_ns: int, now: float) -> str | None:
    """The unit ``value_ns`` was probably written in, when read in it the time is
    plausible (``seconds``, ``milliseconds``, ``microseconds``); ``None`` otherwise."""
    for factor, unit in _UNITS:
        if _plausible(value_ns * factor / _NS, now):
            return unit
    return None


def _warning(code: str, message: str, **facts: Any) -> dict[str, Any]:
    return {"code": code, "message": message, **facts}


def schedule_warnings(schedule: MaintenanceSchedule, now: float) -> list[dict[str, Any]]:
    """The ``schedule.suspicious_time`` warnings of ``schedule`` at ``now`` (seconds):
    one per window whose start is implausible (before 2000, or more than ten years ahead)
    or whose duration is under a second, naming the unit it was probably written in."""
    warnings = []
    for index, window in enumerate(schedule.windows):
        unavailability = window.unavailability
        start_ns = unavailability.start_ns
        start = start_ns / _NS
        if not _plausible(start, now):
            guess = _unit_guess(start_ns, now)
            if guess is not None:
                hint = f" — {guess}?"
            elif start < EARLIEST_PLAUSIBLE:
                hint = " — before 2000"
            else:
                hint = f" — more than {PLAUSIBLE_YEARS} years ahead"
            warnings.append(
                _warning(
                    "schedule.suspicious_time",
                    f"window {index + 1}: times are nanoseconds since the epoch; "
                    f"{start_ns} reads as {iso_time(start)}{hint}",
                    window=index,
                )
            )
        duration_ns = unavailability.duration_ns
        if duration_ns is not None and 0 < duration_ns < _NS:
            guess = next(
                (
                    unit
                    for factor, unit in _UNITS
                    if _NS <= duration_ns * factor <= 366 * 86400 * _NS
                ),
                None,
            )
            hint = f" — {guess}?" if guess is not None else ""
            warnings.append(
                _warning(
                    "schedule.suspicious_time",
                    f"window {index + 1}: durations are nanoseconds; {duration_ns} is "
                    f"{duration_ns} ns{hint}",
                    window=index,
                )
            )
    return warnings


@dataclasses.dataclass(frozen=True, slots=True)
class _Seen:
    """What the totals and the warnings read of a machine's row (the row itself is
    written and let go)."""

    machine_id: dict[str, Any]
    change: str
    known: bool  # an ad the master holds matches the machine
    start: float
    window_open: bool
    window_ended: bool
    drain_now: bool
    evicted: int
    #: jobs, core-seconds and badput the escalation would cut (not yet escalated)
    cut: tuple[int, int, int]
    declines: tuple[dict[str, Any], ...]

    @classmethod
    def kept(
        cls,
        status: MachineStatus,
        inputs: PlanInputs,
        now: float,
        declined: dict[str, list[Notice]],
    ) -> _Seen:
        """What a kept machine whose row is not made adds: no drain, no cut (the plan's)."""
        machine = ScheduledMachine.of(status)
        assert machine is not None
        end = machine.window_end
        machine_id = status.id
        return cls(
            machine_id=machine.machine_id,
            change="kept",
            known=bool(inputs.find(machine_id.hostname, machine_id.ip)),
            start=machine.window_start,
            window_open=now >= machine.window_start,
            window_ended=end is not None and now >= end,
            drain_now=False,
            evicted=0,
            cut=(0, 0, 0),
            declines=tuple(_declines(machine_id, "kept", declined)),
        )

    @classmethod
    def of(cls, row: dict[str, Any]) -> _Seen:
        planned = row.get("as_planned")
        cut = (0, 0, 0)
        if planned and planned["will_escalate"] and not planned["escalated"]:
            cut = (planned["cut_jobs"], planned["cut_core_seconds"], planned["cut_badput"])
        return cls(
            machine_id=row["machine_id"],
            change=row["change"],
            known=bool(row["nodes"]),
            start=row["window"]["start"],
            window_open=row["window_open"],
            window_ended=row["window_ended"],
            drain_now=row["drain_now"] is not None,
            evicted=len(row["evicted_now"]),
            cut=cut,
            declines=tuple(row["declines"]),
        )


class SchedulePreview:
    """What replacing ``state``'s schedule by ``schedule`` would do at ``now`` (see the
    module docstring), made a row at a time, so that a server can write each row as it
    is made and serve others between two (a preview of 100,000 machines takes
    minutes): :attr:`head` (``now``, ``schedule_version``, ``policy``), then
    :meth:`rows`, then :meth:`tail` (``dropped``, ``declines``: every decline the
    change would meet, a kept machine's too, ``totals``, ``warnings``), the document's
    keys in that order.

    The schedule is checked and the state copied when it is made (raising
    :class:`~nodeagent.master._maintenance.MaintenanceError` as the schedule endpoint
    would); every row is made at ``now`` (or as :meth:`rows` is told), from the ads
    ``inputs`` (the master's plan inputs at ``now``) finds when it is made.
    ``hostnames`` are those of the nodes the master holds ads of (read by :meth:`tail`,
    for a ``schedule.unknown_machine`` warning's "did you mean"), ``notices`` those in
    force (for the declines a change would meet). Of a row, only what the totals and
    warnings read is kept (:class:`_Seen`). ``changed_only``: the rows of the machines
    the change adds or moves only, the kept ones counted without their rows (see the
    module docstring); the head says which (``rows``: ``changed`` or ``all``)."""

    def __init__(
        self,
        state: MaintenanceState,
        schedule: MaintenanceSchedule,
        inputs: PlanInputs,
        now: float,
        *,
        hostnames: Iterable[str] = (),
        notices: Iterable[Notice] = (),
        changed_only: bool = False,
    ) -> None:
        after = copy.copy(state)  # its mutators install new containers: the copy is apart
        self._changed = after.update_schedule(schedule)
        self._schedule = schedule
        self._before = {status.id: status for status in state.machines()}
        self._statuses = after.machines()
        self._inputs = inputs
        self._proposed = dataclasses.replace(inputs, statuses=self._statuses)
        self._declined = _declined_by_machine(notices)
        self._hostnames = hostnames
        self._seen: list[_Seen] = []
        self._made = False
        self._changed_only = changed_only
        self.now = now
        self.head: dict[str, Any] = {
            "now": now,
            "rows": "changed" if changed_only else "all",
            "schedule_version": schedule_version(state),
            "policy": {
                "drain_policy": inputs.policy.drain_policy,
                "drain_margin": inputs.policy.drain_margin,
                "escalation": inputs.policy.escalation,
            },
        }

    def rows(self, clock: Callable[[], float] | None = None) -> Iterator[dict[str, Any]]:
        """Each machine of the proposed schedule's row, in the schedule's order (with
        ``changed_only``, those the change adds or moves): at ``now``, or with ``clock``,
        at the time it gives when the row is made (a server making rows for minutes reads
        each node's forecast at the time, as the reconcile passes do, rather than at an
        instant they have left behind)."""
        return (row for row in self.steps(clock) if row is not None)

    def steps(self, clock: Callable[[], float] | None = None) -> Iterator[dict[str, Any] | None]:
        """:meth:`rows`, with ``None`` for each kept machine counted without its row
        (``changed_only``): a caller that makes the rows in slices counts those too."""
        declined = self._declined
        for status in self._statuses:
            if status.window is None:
                continue
            at = self.now if clock is None else clock()
            old = self._before.get(status.id)
            change = _change(status, old)
            if self._changed_only and change == "kept":
                self._seen.append(_Seen.kept(status, self._proposed, at, declined))
                yield None
                continue
            row = _machine_row(status, old, self._proposed, at, declined, change=change)
            self._seen.append(_Seen.of(row))
            yield row
        self._made = True

    def document(self) -> dict[str, Any]:
        """The whole preview at once (its rows at ``now``)."""
        return {**self.head, "machines": list(self.rows()), **self.tail()}

    def tail(self) -> dict[str, Any]:
        """The machines dropped, the totals and the warnings, once :meth:`rows` is done
        (``RuntimeError`` before: they count its rows)."""
        if not self._made:
            raise RuntimeError("the preview's rows are not all made")
        seen, inputs, now = self._seen, self._inputs, self.now
        dropped = [
            _dropped_row(status.id, self._before[status.id], self._proposed)
            for status in self._changed
            if status.mode is Mode.UP
        ]
        warnings = schedule_warnings(self._schedule, now)
        warnings.extend(_open_warnings(seen, inputs))
        unknown = [row for row in seen if not row.known]
        names = list(self._hostnames) if unknown else []
        for row in unknown:
            host = row.machine_id.get("hostname")
            meant = suggestions(host, names) if host and len(unknown) <= 100 else []
            hint = f" (did you mean {' or '.join(meant)}?)" if meant else ""
            warnings.append(
                _warning(
                    "schedule.unknown_machine",
                    f"no node's ad matches {_name(row.machine_id)}{hint}: nothing drains "
                    "there until an agent with that hostname/ip reports to this master",
                    machine_id=row.machine_id,
                    suggestions=meant,
                )
            )
        warnings.extend(_declined_warnings(seen))
        return {
            "dropped": dropped,
            "declines": [decline for row in seen for decline in row.declines],
            "totals": _totals(seen, dropped),
            "warnings": warnings,
        }


def _declined_by_machine(notices: Iterable[Notice]) -> dict[str, list[Notice]]:
    """The notices in force whose latest answer is a decline, by the machine they name
    (lower case), each list sorted by group."""
    found: dict[str, list[Notice]] = {}
    for notice in sorted(notices, key=lambda n: (n.group, n.id)):
        answer = notice.answer
        if notice.rescinded is None and answer is not None and answer.verdict is Verdict.DECLINE:
            found.setdefault(notice.machine.lower(), []).append(notice)
    return found


def _declines(
    machine_id: MachineId, change: str, declined: dict[str, list[Notice]]
) -> list[dict[str, Any]]:
    """The declines in force on a machine the change keeps or moves (one it adds has no
    notice yet): named by its hostname, its IP or its key, as notices name machines."""
    if change == "added" or not declined:
        return []
    names = {n.lower() for n in (machine_id.hostname, machine_id.ip, machine_key(machine_id)) if n}
    found = [notice for name in sorted(names) for notice in declined.get(name, ())]
    rows = []
    for notice in sorted({n.id: n for n in found}.values(), key=lambda n: (n.group, n.id)):
        answer = notice.answer
        assert answer is not None
        rows.append(
            {
                "notice": notice.id,
                "machine": notice.machine,
                "group": notice.group,
                "reason": answer.reason,
                "who": answer.who,
                "at": answer.at,
                "expected_completion": answer.expected_completion,
                "reissued": change == "moved",
            }
        )
    return rows


def _declined_warnings(rows: Iterable[_Seen]) -> list[dict[str, Any]]:
    """One ``schedule.declined`` warning for the declines the change would meet."""
    met = [(row, d) for row in rows for d in row.declines]
    if not met:
        return []
    shown = "; ".join(
        f"{d['group']} on {d['machine']}: {d['reason']} ({d['who']})"
        + (" — the window moves: rescinded and reissued" if d["reissued"] else "")
        for _, d in met[:5]
    )
    if len(met) > 5:
        shown += f"; and {len(met) - 5} more"
    count = len(met)
    return [
        _warning(
            "schedule.declined",
            f"{count} notice{'' if count == 1 else 's'} declined by their owners on machines "
            f"this schedule keeps in or moves within a window: {shown}",
            declines=count,
        )
    ]


def _change(status: MachineStatus, old: MachineStatus | None) -> str:
    """What the change does to a machine of the proposed schedule: ``added``, ``moved``
    (its window changes) or ``kept``."""
    window = status.window
    assert window is not None
    if old is None or old.window is None:
        return "added"
    if old.window.unavailability != window.unavailability:
        return "moved"
    return "kept"


def _machine_row(
    status: MachineStatus,
    old: MachineStatus | None,
    inputs: PlanInputs,
    now: float,
    declined: dict[str, list[Notice]] | None = None,
    *,
    change: str,
) -> dict[str, Any]:
    """The machine's plan row under the proposed schedule, and what the change does
    (``change``: :func:`_change` of ``status`` and ``old``)."""
    machine = ScheduledMachine.of(status)
    assert machine is not None
    key = machine.key
    record = inputs.drains.get(key) or (STARTING if key in inputs.starting else None)
    nodes = inputs.find(status.id.hostname, status.id.ip)
    since = inputs.window_since.get(key) if change == "kept" else now
    plan = machine_plan(
        machine,
        nodes,
        is_lost=inputs.is_lost,
        now=now,
        policy=inputs.policy,
        drain_record=record,
        window_since=since,
    )
    state = row_state(
        plan,
        is_lost=inputs.is_lost,
        with_blockers=True,
        window_since=since,
        escalation=inputs.policy.escalation,
    )
    figures = row_figures(plan, state, now)
    row = row_dict(plan, state, figures)
    step = None
    if plan.node is not None and not plan.lost:
        step = decide(plan, None if record is STARTING else record, inputs.policy, now)
    drain_now = _drain_now(step)
    window_open = now >= machine.window_start
    end = machine.window["end"]
    evicted: list[dict[str, Any]] = []
    if drain_now in ("quick", "fast") and (window_open or drain_now == "fast"):
        # Every job still running gets its soft-kill signal now, its promise cut or not.
        evicted = [{name: b[name] for name in _JOB_FIELDS} for b in figures.blockers]
    row.update(
        {
            "mode_now": str(Mode.UP if old is None else old.mode),
            "mode_after": str(status.mode),
            "change": change,
            "window_open": window_open,
            "window_ended": end is not None and now >= end,
            "drain_now": drain_now,
            "evicted_now": evicted,
            "declines": _declines(status.id, change, declined or {}),
        }
    )
    return row


def _drain_now(step: object) -> str | None:
    """The drain schedule a pass would start (or replace the drain in force with) now."""
    if isinstance(step, Start):
        return step.schedule
    if isinstance(step, Escalate):
        return step.replace_with
    if isinstance(step, Postpone):
        return "graceful"
    if isinstance(step, Down):
        return "fast"
    return None


def _dropped_row(machine_id: MachineId, old: MachineStatus, inputs: PlanInputs) -> dict[str, Any]:
    """A machine leaving the schedule: back UP, and the master's drain there cancelled."""
    nodes = inputs.find(machine_id.hostname, machine_id.ip)
    record = inputs.drains.get(machine_key(machine_id))
    return {
        "machine_id": machine_id.to_json(),
        "mode_now": str(old.mode),
        "mode_after": str(Mode.UP),
        "nodes": [node.name for node in nodes],
        "drain_cancelled": record is not None,
    }


def _open_warnings(rows: Iterable[_Seen], inputs: PlanInputs) -> list[dict[str, Any]]:
    """One ``schedule.window_open`` warning per window start already past that machines
    enter (added, or their window moved): their drains start at once."""
    by_start: dict[float, list[_Seen]] = {}
    for row in rows:
        if row.window_open and row.change != "kept":
            by_start.setdefault(row.start, []).append(row)
    warnings = []
    escalation = inputs.policy.escalation
    for start, entering in sorted(by_start.items()):
        evicted = sum(row.evicted for row in entering)
        count = len(entering)
        machines = ", ".join(_name(row.machine_id) for row in entering[:5])
        if count > 5:
            machines += f" and {count - 5} more"
        ended = entering[0].window_ended
        opened = "ended" if ended else "is open"
        effect = (
            f"their drains start at once with the {escalation} escalation: "
            f"{evicted} job{'' if evicted == 1 else 's'} evicted at once"
            if escalation != "none"
            else "their drains start at once"
        )
        warnings.append(
            _warning(
                "schedule.window_open",
                f"the window starting {iso_time(start)} {opened} already "
                f"({count} machine{'' if count == 1 else 's'}: {machines}); {effect}",
                start=start,
                machines=[row.machine_id for row in entering],
                evicted_now=evicted,
            )
        )
    return warnings


def _name(machine_id: dict[str, str]) -> str:
    host, ip = machine_id.get("hostname"), machine_id.get("ip")
    if host and ip:
        return f"{host}/{ip}"
    return host or ip or "?"


def _totals(rows: list[_Seen], dropped: list[dict[str, Any]]) -> dict[str, Any]:
    """The change in numbers: machines per change, drains starting now, the jobs the
    escalations would cut (now or at their windows) and their cost."""
    return {
        "machines": len(rows),
        "added": sum(row.change == "added" for row in rows),
        "moved": sum(row.change == "moved" for row in rows),
        "kept": sum(row.change == "kept" for row in rows),
        "dropped": len(dropped),
        "unknown_machines": sum(not row.known for row in rows),
        "windows_open": sum(row.window_open for row in rows),
        "drains_now": sum(row.drain_now for row in rows),
        "evicted_now": sum(row.evicted for row in rows),
        "cut_jobs": sum(row.cut[0] for row in rows),
        "cut_core_seconds": sum(row.cut[1] for row in rows),
        "cut_badput": sum(row.cut[2] for row in rows),
        "declines": sum(len(row.declines) for row in rows),
    }


def scheduled_meant(state: MaintenanceState, machine_ids: Iterable[MachineId]) -> list[str]:
    """The scheduled machines (``host/ip``, sorted, at most three) that machine ids not in
    the schedule may have meant: one whose hostname is the given hostname, or starts with
    it and a dot (``node1`` → ``node1.test``), without regard to case; or whose ip is the
    given ip."""
    scheduled = [status.id for status in state.machines()]
    known = {machine.key for machine in scheduled}
    found: set[str] = set()
    for given in machine_ids:
        if given.key in known:
            continue
        host = None if given.hostname is None else given.hostname.lower()
        for machine in scheduled:
            name = (machine.hostname or "").lower()
            if (host is not None and (name == host or name.startswith(host + "."))) or (
                given.ip is not None and machine.ip == given.ip
            ):
                found.add("/".join(p for p in (machine.hostname, machine.ip) if p is not None))
    return sorted(found)[:3]


def preview_down(
    state: MaintenanceState, machine_ids: tuple[MachineId, ...], inputs: PlanInputs, now: float
) -> dict[str, Any]:
    """What ``POST /machine/down`` with ``machine_ids`` would do at ``now``: each node's
    drain is replaced by a ``fast`` one, so every job still running is evicted at once.
    Per machine: its nodes, the node that would be drained (the first not lost) and
    every job it runs with its promise cut (``cut_by``) and the work it loses
    (``cut_badput``); totals of jobs, cores and core-seconds. Raises
    :class:`~nodeagent.master._maintenance.MaintenanceError` as the endpoint would (Mesos's
    rules: all or none, only DRAINING machines), with a "did you mean" for a machine not
    scheduled that names one that is (:func:`scheduled_meant`); ``state`` is never
    changed."""
    after = copy.copy(state)
    try:
        after.down(machine_ids)
    except MaintenanceError as exc:
        meant = (
            scheduled_meant(state, machine_ids) if exc.code == "maintenance.not_scheduled" else []
        )
        if not meant:
            raise
        hint = f"; did you mean {' or '.join(meant)}?"
        raise MaintenanceError(exc.message + hint, code=exc.code) from None
    machines = []
    totals = {"machines": 0, "jobs": 0, "cores": 0, "cut_core_seconds": 0, "cut_badput": 0}
    for machine_id in machine_ids:
        nodes = inputs.find(machine_id.hostname, machine_id.ip)
        live = [node for node in nodes if not inputs.is_lost(node)]
        node = live[0] if live else None
        jobs: list[dict[str, Any]] = []
        if node is not None and not node.empty:
            listed = node.forecast.blockers(now, window_start=now, escalation=Escalation.FAST)
            jobs = [{name: b[name] for name in _JOB_FIELDS} for b in listed]
        cores = sum(int(job["cpus"]) for job in jobs)
        cut = sum(int(job["cpus"]) * int(job["cut_by"]) for job in jobs)
        lost = sum(int(job["cut_badput"]) for job in jobs)
        machines.append(
            {
                "machine_id": machine_id.to_json(),
                "nodes": [entry.name for entry in nodes],
                "node": None if node is None else node.name,
                "lost": bool(nodes) and node is None,
                "evicted_now": jobs,
                "cores": cores,
                "cut_core_seconds": cut,
                "cut_badput": lost,
            }
        )
        totals["machines"] += 1
        totals["jobs"] += len(jobs)
        totals["cores"] += cores
        totals["cut_core_seconds"] += cut
        totals["cut_badput"] += lost
    return {"now": now, "machines": machines, "totals": totals}
