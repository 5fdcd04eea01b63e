"""Rolling maintenance operations, pure: batches, their steps and the choice of the next.

An operation drains hosts batch by batch (Aurora's ``host_drain --grouping``): its hosts
are split into batches by ``grouping`` (``host``: one batch per host; else the value of
that ad attribute, e.g. ``Rack``), at most ``batches`` of them in progress at once. No
I/O and no clock here: the engine (:mod:`nodeagent.master._rolling`) reads the nodes'
ads into :class:`NodeView` values, passes ``now``, saves what these functions return
before it acts on it, and carries out what the phases ask for.

Each node of a started batch goes through these phases (``NodePhase``)::

    waiting -> draining -> hook -> health -> done
                  |          |        (the hook ended: the health gate)
                  |          +-> failed (the hook failed: the node stays closed)
                  +-> failed (the drain is gone from the node without its hook)
                  +-> refused (the node refused the drain: e.g. it has no such hook;
                               the engine's, never drained: back out of the schedule)

``draining`` with no ``request_id`` asks the engine to start the drain (two-phase,
``on_completion: "hook:NAME"``); the engine then records its id (:func:`with_request`).
A cancelled operation sends nodes still draining to ``returning`` (their drain is
cancelled; they are done, as ``cancelled``, once back in service) and leaves nodes not
yet started ``cancelled``, untouched. A batch's state is its nodes' (:func:`batch_state`).

The next batch (:func:`choose`) is the waiting one whose nodes, by their fresh estimates
for the operation's schedule, empty soonest, then cost the least badput (then by name).
A batch is held (``waiting`` with a reason) while its badput exceeds the budget, its SLA
check says unsafe or one of its nodes is not heard from; held past ``sla_wait`` seconds
it is ``skipped``, with that reason, as Aurora does. A held batch's reason says at once
when no wait alone can bring its SLA (``never``: a group would keep fewer instances
running than it needs, until its scheduler starts new ones elsewhere). A batch is held
too (code ``declined``) while a notice in force on one of its machines has a decline as
its latest answer (:func:`declines_on`): an accept, or the notice rescinded, lets it go;
held past ``sla_wait`` by declines alone it **starts** all the same (a decline never
stops maintenance: the modes stay the operator's), its reason saying so. A failed node
pauses the operation (``resume`` goes on with the next batches; the failed
node stays as it is).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from nodeagent.master._notices import Notice, Verdict
from slots import ATTRIBUTE_NAME, InvalidRequest, check_hook_name

__all__ = [
    "ACTIVE_PHASES",
    "ENDED",
    "MAX_HOSTS",
    "MAX_HOST_LENGTH",
    "MAX_SLA_WAIT",
    "SCHEDULES",
    "Batch",
    "Decline",
    "NodeStep",
    "NodeView",
    "Operation",
    "OperationError",
    "OperationSpec",
    "SlaVerdict",
    "advance",
    "batch_estimate",
    "batch_state",
    "cancel",
    "choose",
    "declines_on",
    "end_state",
    "mesos_mode",
    "new_operation",
    "pause",
    "progress",
    "resume",
    "with_request",
]

SCHEDULES = ("graceful", "quick", "fast")
#: The most hosts one operation names (and so the most batches it may run at once).
MAX_HOSTS = 10_000
#: The longest host name an operation may name (a node's ``Name``).
MAX_HOST_LENGTH = 255
#: The longest a batch may be held before it is skipped (``sla_wait``): 30 days.
MAX_SLA_WAIT = 30 * 86400.0
OperationState = Literal[
    "running", "paused", "cancelled", "completed", "completed_with_skips", "failed"
]
#: The states an operation ends in: every batch ``done`` (``completed``), some skipped and
#: none failed (``completed_with_skips``), some failed (``failed``), or ``cancelled``.
ENDED = frozenset({"cancelled", "completed", "completed_with_skips", "failed"})
#: Phases of a node whose batch has started and that is not finished yet.
ACTIVE_PHASES = frozenset({"draining", "hook", "health", "returning"})
_TERMINAL = frozenset({"done", "failed", "refused", "skipped", "cancelled"})
_HOOK_ENDED = frozenset({"succeeded", "interrupted"})


class OperationError(Exception):
    """A request for an operation that cannot be made; ``code`` is stable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, kw_only=True)
class OperationSpec:
    """What the operator asks for (checked by :func:`new_operation`)."""

    hosts: tuple[str, ...]
    grouping: str = "host"
    batches: int = 1
    schedule: str = "graceful"
    hook: str
    budget: float | None = None
    sla_wait: float = 3600.0
    constraint: str | None = None


@dataclass(frozen=True, kw_only=True)
class NodeView:
    """What the engine read of one node: from a fresh ad when it could get one.

    ``known``: the ad is not older than the engine's record of the node's drain (the
    phases move only on such ads). ``completion`` and ``badput``: the node's estimates
    for the operation's schedule, now.
    """

    present: bool = True
    known: bool = True
    drain_state: str = "none"
    request_id: str | None = None
    hook_request_id: str | None = None
    hook_state: str | None = None
    hook_message: str | None = None
    in_service: bool = True
    health_state: str | None = None
    health_message: str | None = None
    completion: float | None = None
    badput: float = 0.0


@dataclass(frozen=True, kw_only=True)
class SlaVerdict:
    """Whether taking a batch's hosts down now keeps every affected group's SLA."""

    safe: bool
    groups: tuple[str, ...] = ()
    until: float | None = None
    message: str = ""
    #: No wait brings it: a group would keep fewer instances running than it needs.
    never: bool = False


@dataclass(frozen=True, kw_only=True)
class Decline:
    """A notice in force on one of a batch's hosts whose latest answer is a decline: the
    host (the node's name), the machine the notice names, the group, and the answer."""

    host: str
    notice: str
    machine: str
    group: str
    reason: str
    who: str
    at: float
    expected_completion: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "notice": self.notice,
            "machine": self.machine,
            "group": self.group,
            "reason": self.reason,
            "who": self.who,
            "at": self.at,
            "expected_completion": self.expected_completion,
        }

    @property
    def text(self) -> str:
        return f"{self.group} declined on {self.machine}: {self.reason} ({self.who})"


def declines_on(
    hosts: Iterable[str], notices: Iterable[Notice], names: Mapping[str, Collection[str]]
) -> tuple[Decline, ...]:
    """The declines in force on ``hosts`` (node names): each notice not rescinded whose
    latest answer is :attr:`Verdict.DECLINE` and whose machine is one of the names a host
    is known by (``names[host]``: its hostname, its IP; a host absent: its own name;
    compared without regard to case), sorted by host and group. A notice accepted (or
    declined, then accepted) is none."""
    wanted: dict[str, str] = {}
    for host in hosts:
        for name in names.get(host, (host,)):
            wanted.setdefault(name.lower(), host)
    found = [
        Decline(
            host=wanted[notice.machine.lower()],
            notice=notice.id,
            machine=notice.machine,
            group=notice.group,
            reason=notice.answer.reason,
            who=notice.answer.who,
            at=notice.answer.at,
            expected_completion=notice.answer.expected_completion,
        )
        for notice in notices
        if notice.rescinded is None
        and notice.answer is not None
        and notice.answer.verdict is Verdict.DECLINE
        and notice.machine.lower() in wanted
    ]
    return tuple(sorted(found, key=lambda d: (d.host, d.group, d.notice)))


@dataclass(frozen=True, kw_only=True)
class NodeStep:
    """One node of an operation: its phase, its drain's request id, why it waits."""

    name: str
    phase: str = "waiting"
    request_id: str | None = None
    reason: str | None = None
    since: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phase": self.phase,
            "request_id": self.request_id,
            "reason": self.reason,
            "since": self.since,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> NodeStep:
        return cls(
            name=value["name"],
            phase=value["phase"],
            request_id=value.get("request_id"),
            reason=value.get("reason"),
            since=value.get("since"),
        )


@dataclass(frozen=True, kw_only=True)
class Batch:
    """One batch: its nodes, when it was started and ended, why it waits or was skipped.

    ``held_since``: since when it has been held (badput budget, SLA, a node not heard
    from) while a place for it was free; ``reason`` is ``None`` or a dict with ``code``
    (``sla``, ``badput_budget``, ``node_unheard``, ``skipped``…) and details.
    """

    name: str
    nodes: tuple[NodeStep, ...]
    started_at: float | None = None
    ended_at: float | None = None
    skipped: bool = False
    held_since: float | None = None
    reason: Mapping[str, Any] | None = None

    @property
    def state(self) -> str:
        return batch_state(self)

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "skipped": self.skipped,
            "held_since": self.held_since,
            "reason": None if self.reason is None else dict(self.reason),
            "nodes": [node.to_json() for node in self.nodes],
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Batch:
        return cls(
            name=value["name"],
            nodes=tuple(NodeStep.from_json(n) for n in value["nodes"]),
            started_at=value.get("started_at"),
            ended_at=value.get("ended_at"),
            skipped=bool(value.get("skipped")),
            held_since=value.get("held_since"),
            reason=value.get("reason"),
        )


@dataclass(frozen=True, kw_only=True)
class Operation:
    """An operation and every batch of it (JSON-able: saved by the master)."""

    id: str
    spec: OperationSpec
    actor: str
    created_at: float
    state: OperationState = "running"
    batches: tuple[Batch, ...] = ()
    ended_at: float | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "id": self.id,
            "state": self.state,
            "actor": self.actor,
            "created_at": self.created_at,
            "ended_at": self.ended_at,
            "reason": self.reason,
            "spec": {
                "hosts": list(spec.hosts),
                "constraint": spec.constraint,
                "grouping": spec.grouping,
                "batches": spec.batches,
                "schedule": spec.schedule,
                "hook": spec.hook,
                "budget": spec.budget,
                "sla_wait": spec.sla_wait,
            },
            "batches": [batch.to_json() for batch in self.batches],
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Operation:
        """The operation as saved; one saved ``completed`` by an older master, which said
        so whatever its batches became, reads as its batches say (:func:`end_state`)."""
        spec = value["spec"]
        batches = tuple(Batch.from_json(b) for b in value["batches"])
        state = value["state"]
        if state == "completed":
            state = end_state(batches)
        return cls(
            id=value["id"],
            state=state,
            actor=value["actor"],
            created_at=value["created_at"],
            ended_at=value.get("ended_at"),
            reason=value.get("reason"),
            spec=OperationSpec(
                hosts=tuple(spec["hosts"]),
                constraint=spec.get("constraint"),
                grouping=spec["grouping"],
                batches=spec["batches"],
                schedule=spec["schedule"],
                hook=spec["hook"],
                budget=spec.get("budget"),
                sla_wait=spec["sla_wait"],
            ),
            batches=batches,
        )

    def node(self, name: str) -> NodeStep | None:
        for batch in self.batches:
            for node in batch.nodes:
                if node.name == name:
                    return node
        return None

    @property
    def active_nodes(self) -> tuple[NodeStep, ...]:
        return tuple(n for b in self.batches for n in b.nodes if n.phase in ACTIVE_PHASES)


def batch_state(batch: Batch) -> str:
    """``waiting`` (not started), the least advanced phase of its unfinished nodes
    (``draining``, ``hook``, ``health``, ``returning``), else ``skipped``, ``cancelled``
    (no node was started), ``failed`` (one of its nodes failed) or ``done``."""
    if batch.skipped:
        return "skipped"
    phases = [node.phase for node in batch.nodes]
    if batch.started_at is None:
        return "cancelled" if phases and all(p == "cancelled" for p in phases) else "waiting"
    for phase in ("draining", "hook", "health", "returning"):
        if phase in phases:
            return phase
    if "failed" in phases or "refused" in phases:
        return "failed"
    if all(p == "cancelled" for p in phases):
        return "cancelled"
    return "done"


def end_state(batches: tuple[Batch, ...]) -> OperationState:
    """How an operation that was not cancelled ended, from its batches: ``failed`` when a
    batch failed, else ``completed_with_skips`` when one was skipped, else ``completed``
    (every batch done). Never ``completed`` for a batch that was not done."""
    states = {batch.state for batch in batches}
    if "failed" in states:
        return "failed"
    if states - {"done"}:
        return "completed_with_skips"
    return "completed"


def mesos_mode(phase: str) -> str | None:
    """The Mesos mode a node's machine has in this phase: ``DRAINING`` while it drains,
    ``DOWN`` while its hook runs, it waits for its health check or its hook failed, and
    ``UP`` (``None``: out of the schedule) otherwise."""
    if phase == "draining":
        return "DRAINING"
    if phase in ("hook", "health", "failed"):
        return "DOWN"
    return None


def _check_spec(spec: OperationSpec) -> None:
    """Raise :class:`OperationError` unless every field of ``spec`` is within its bounds:
    1 to :data:`MAX_HOSTS` distinct host names of printable text without spaces (at most
    :data:`MAX_HOST_LENGTH` characters), ``batches`` a whole number from 1 to
    :data:`MAX_HOSTS`, a known schedule, ``hook`` a hook's name by the agents' own rule
    (:data:`slots.HOOK_NAME`), ``grouping`` ``host`` or an attribute name
    (:data:`slots.ATTRIBUTE_NAME`), ``budget`` finite and >= 0, ``sla_wait`` from 0 to
    :data:`MAX_SLA_WAIT` seconds."""
    if not spec.hosts:
        raise OperationError("operation.no_hosts", "the operation names no host")
    if len(spec.hosts) > MAX_HOSTS:
        raise OperationError("operation.invalid", f"at most {MAX_HOSTS} hosts")
    for host in spec.hosts:
        if not _host_name(host):
            raise OperationError(
                "operation.invalid",
                f"{host[:80]!r} is not a host name: 1 to {MAX_HOST_LENGTH} printable "
                "characters without spaces",
            )
    if len(set(spec.hosts)) != len(spec.hosts):
        raise OperationError("operation.duplicate_host", "a host is named twice")
    if type(spec.batches) is not int or not 1 <= spec.batches <= MAX_HOSTS:
        raise OperationError("operation.invalid", f"batches must be 1 to {MAX_HOSTS}")
    if spec.schedule not in SCHEDULES:
        raise OperationError("operation.invalid", f"schedule must be one of {', '.join(SCHEDULES)}")
    try:
        check_hook_name(spec.hook)
    except InvalidRequest as exc:
        raise OperationError("operation.invalid", f"hook: {exc.message}") from None
    if spec.budget is not None and not (math.isfinite(spec.budget) and spec.budget >= 0):
        raise OperationError("operation.invalid", "budget must be a number of core-seconds >= 0")
    if not (math.isfinite(spec.sla_wait) and 0 <= spec.sla_wait <= MAX_SLA_WAIT):
        raise OperationError("operation.invalid", f"sla_wait must be 0 to {MAX_SLA_WAIT:.0f} s")
    if spec.grouping != "host" and not ATTRIBUTE_NAME.fullmatch(spec.grouping):
        raise OperationError("operation.invalid", "grouping must be 'host' or an attribute name")


def _host_name(host: object) -> bool:
    return (
        isinstance(host, str)
        and 0 < len(host) <= MAX_HOST_LENGTH
        and host.isprintable()
        and not any(c.isspace() for c in host)
    )


def new_operation(
    id: str,
    spec: OperationSpec,
    groups: Mapping[str, Any],
    *,
    actor: str,
    now: float,
    busy: Container[str] = frozenset(),
) -> Operation:
    """A running operation over ``spec.hosts``, in batches of equal ``groups[host]``
    (the value of the grouping attribute in the host's ad; with ``host`` grouping, the
    host itself). Batches are named after their value and listed by name.

    Raises :class:`OperationError`: ``operation.no_hosts``, ``operation.duplicate_host``,
    ``operation.invalid`` (a field out of range), ``operation.unknown_host`` (a host
    without an ad: absent from ``groups``), ``operation.no_grouping_attribute`` (a
    host's ad lacks the attribute: its value is ``None``), ``operation.host_busy`` (a
    host in ``busy``: part of another unfinished operation; asked host by host).
    """
    _check_spec(spec)
    by_group: dict[str, list[str]] = {}
    for host in spec.hosts:
        if host not in groups:
            raise OperationError("operation.unknown_host", f"no node ad for {host!r}")
        if host in busy:
            raise OperationError(
                "operation.host_busy", f"{host!r} is part of another unfinished operation"
            )
        value = host if spec.grouping == "host" else groups[host]
        if value is None:
            raise OperationError(
                "operation.no_grouping_attribute", f"{host!r}'s ad has no {spec.grouping}"
            )
        by_group.setdefault(str(value), []).append(host)
    batches = tuple(
        Batch(name=name, nodes=tuple(NodeStep(name=h) for h in sorted(hosts)))
        for name, hosts in sorted(by_group.items())
    )
    return Operation(id=id, spec=spec, actor=actor, created_at=now, batches=batches)


def batch_estimate(batch: Batch, views: Mapping[str, NodeView]) -> tuple[float, float]:
    """When the batch's nodes would all be empty and the badput they would lose, under
    the operation's schedule started now (``inf`` for a node without estimates)."""
    completion = 0.0
    badput = 0.0
    for node in batch.nodes:
        view = views.get(node.name)
        if view is None or view.completion is None:
            completion = math.inf
        else:
            completion = max(completion, view.completion)
        if view is not None:
            badput += view.badput
    return completion, badput


def _set_node(op: Operation, name: str, **changes: Any) -> Operation:
    batches = []
    for batch in op.batches:
        nodes = tuple(replace(n, **changes) if n.name == name else n for n in batch.nodes)
        batches.append(replace(batch, nodes=nodes))
    return replace(op, batches=tuple(batches))


def with_request(op: Operation, name: str, request_id: str) -> Operation:
    """The node's drain was committed (or adopted) under ``request_id``."""
    return _set_node(op, name, request_id=request_id, reason=None)


def _advance_node(node: NodeStep, view: NodeView | None, now: float) -> NodeStep:
    """One node's next phase from its view (see the module docstring)."""
    if node.phase not in ACTIVE_PHASES:
        return node
    if view is None or not view.present:
        return replace(node, reason="node not heard from")
    if not view.known:
        return node
    if node.phase == "returning":
        if view.in_service:
            return replace(node, phase="cancelled", reason=None, since=now)
        return replace(node, reason=_out_of_service(view))
    if node.phase == "health":
        if view.in_service:
            return replace(node, phase="done", reason=None, since=now)
        return replace(node, reason=_out_of_service(view))
    rid = node.request_id
    if rid is None:
        return node  # the engine starts its drain
    ours = view.hook_request_id == rid
    if ours and view.hook_state in _HOOK_ENDED:
        why = None if view.in_service else _out_of_service(view)
        return replace(node, phase="health", reason=why, since=now)
    if ours and view.hook_state == "failed":
        return replace(node, phase="failed", reason=f"hook failed: {view.hook_message}", since=now)
    if node.phase == "hook" or (ours and view.hook_state in ("pending", "running")):
        state = view.hook_state if ours else "pending"
        if node.phase != "hook":
            return replace(node, phase="hook", reason=f"hook {state}", since=now)
        return replace(node, reason=f"hook {state}")
    if view.request_id == rid:
        if view.drain_state == "drained":
            return replace(node, phase="hook", reason="hook pending", since=now)
        return replace(node, reason=None)
    return replace(
        node,
        phase="failed",
        reason=f"drain {rid} is gone from the node before its hook ran",
        since=now,
    )


def _out_of_service(view: NodeView) -> str:
    if view.health_state == "failing":
        return f"health check failing: {view.health_message or ''}".rstrip(": ")
    if view.health_state == "pending":
        return "health check pending"
    return "not yet in service"


def advance(op: Operation, views: Mapping[str, NodeView], now: float) -> Operation:
    """Move every started node as its view says; end batches whose nodes are all
    finished; pause the operation at a failed node; complete it when every batch is
    finished (a cancelled one stays ``cancelled``)."""
    batches = []
    failed: list[str] = []
    for batch in op.batches:
        nodes = tuple(_advance_node(n, views.get(n.name), now) for n in batch.nodes)
        for old, new in zip(batch.nodes, nodes, strict=True):
            if new.phase == "failed" and old.phase != "failed":
                failed.append(f"{new.name}: {new.reason}")
        moved = replace(batch, nodes=nodes)
        if moved.ended_at is None and moved.started_at is not None and moved.state in _TERMINAL:
            moved = replace(moved, ended_at=now)
        batches.append(moved)
    out = replace(op, batches=tuple(batches))
    if failed and out.state == "running":
        out = replace(out, state="paused", reason="paused: " + "; ".join(failed))
    if out.ended_at is None and all(b.state in _TERMINAL for b in out.batches):
        if out.state in ("running", "paused"):
            out = replace(out, state=end_state(out.batches))
        out = replace(out, ended_at=now)
    return out


def choose(
    op: Operation,
    views: Mapping[str, NodeView],
    now: float,
    sla: Callable[[tuple[str, ...]], SlaVerdict] | None = None,
    declines: Callable[[tuple[str, ...]], Sequence[Decline]] | None = None,
) -> Operation:
    """Start as many waiting batches as there are places free (``spec.batches`` less
    those in progress), best first (:func:`batch_estimate`: soonest empty, then least
    badput, then name). A held batch keeps waiting with its reason (and is passed over
    for the next); held ``spec.sla_wait`` seconds, it is skipped — but one held then by
    declines alone (code ``declined``) starts, its reason kept with ``went_ahead``. A
    batch left waiting because the places are taken is not held: it loses its reason and
    ``held_since``. Only a running operation starts batches. ``sla`` answers for a
    batch's hosts (none: no check), ``declines`` gives the declines in force on them
    (:func:`declines_on`; none: no decline holds)."""
    if op.state != "running":
        return op
    in_progress = sum(1 for b in op.batches if b.state in ACTIVE_PHASES)
    free = op.spec.batches - in_progress
    waiting = [b for b in op.batches if b.state == "waiting"]
    if free <= 0:
        ranked = waiting
    else:
        ranked = sorted(waiting, key=lambda b: (*batch_estimate(b, views), b.name))
    changed: dict[str, Batch] = {}
    for batch in ranked:
        if free <= 0:
            if batch.reason is not None or batch.held_since is not None:
                changed[batch.name] = replace(batch, held_since=None, reason=None)
            continue
        reason = _held(op, batch, views, sla, declines)
        held_since = batch.held_since if batch.held_since is not None else now
        waited = now - held_since >= op.spec.sla_wait
        if reason is None or (waited and reason["code"] == "declined"):
            went = None
            if reason is not None:  # a decline delays maintenance, never stops it
                went = {**reason, "went_ahead": True, "held_for": now - held_since}
            nodes = tuple(replace(n, phase="draining", since=now, reason=None) for n in batch.nodes)
            changed[batch.name] = replace(
                batch, nodes=nodes, started_at=now, held_since=None, reason=went
            )
            free -= 1
            continue
        if waited:
            skipped = {**reason, "skipped": True, "held_for": now - held_since}
            nodes = tuple(replace(n, phase="skipped", since=now) for n in batch.nodes)
            changed[batch.name] = replace(
                batch, nodes=nodes, skipped=True, ended_at=now, reason=skipped
            )
        else:
            changed[batch.name] = replace(batch, held_since=held_since, reason=reason)
    batches = tuple(changed.get(b.name, b) for b in op.batches)
    return replace(op, batches=batches)


def _held(
    op: Operation,
    batch: Batch,
    views: Mapping[str, NodeView],
    sla: Callable[[tuple[str, ...]], SlaVerdict] | None,
    declines: Callable[[tuple[str, ...]], Sequence[Decline]] | None = None,
) -> dict[str, Any] | None:
    """Why ``batch`` may not start now (``None``: it may): a node not heard from, the
    badput budget, the SLA, then the declines in force on its machines."""
    unheard = [n.name for n in batch.nodes if not (views.get(n.name) or NodeView()).present]
    unheard += [n.name for n in batch.nodes if n.name not in views]
    if unheard:
        return {"code": "node_unheard", "nodes": sorted(set(unheard))}
    _, badput = batch_estimate(batch, views)
    budget = op.spec.budget
    if budget is not None and badput > budget:
        return {"code": "badput_budget", "badput": badput, "budget": budget}
    if sla is not None:
        verdict = sla(batch.hosts)
        if not verdict.safe:
            reason: dict[str, Any] = {
                "code": "sla",
                "groups": list(verdict.groups),
                "until": verdict.until,
                "message": verdict.message,
            }
            if verdict.never:
                reason["never"] = True
            return reason
    found = () if declines is None else declines(batch.hosts)
    if found:
        return {
            "code": "declined",
            "declines": [d.to_json() for d in found],
            "message": "; ".join(d.text for d in found),
        }
    return None


def pause(op: Operation, now: float) -> Operation:
    """Start no further batch or drain; what is under way goes on (a hook is never
    stopped half-way). Only a running operation can be paused."""
    if op.state != "running":
        raise OperationError("operation.not_running", f"operation {op.id} is {op.state}")
    return replace(op, state="paused", reason=None)


def resume(op: Operation, now: float) -> Operation:
    """Go on from where a paused operation stopped."""
    if op.state != "paused":
        raise OperationError("operation.not_paused", f"operation {op.id} is {op.state}")
    return replace(op, state="running", reason=None)


def cancel(op: Operation, now: float) -> Operation:
    """Stop the operation: batches not started are ``cancelled`` (their hosts are left
    as they were), nodes whose drain was not started yet too, nodes still draining are
    ``returning`` (their drain is cancelled: they go back to service); nodes whose hook
    has begun go on to the end of their health check (a hook is never stopped)."""
    if op.state in ENDED:
        raise OperationError("operation.finished", f"operation {op.id} is {op.state}")
    batches = []
    for batch in op.batches:
        nodes = []
        for node in batch.nodes:
            if node.phase == "waiting" or (node.phase == "draining" and node.request_id is None):
                nodes.append(replace(node, phase="cancelled", since=now, reason=None))
            elif node.phase == "draining":
                nodes.append(replace(node, phase="returning", since=now, reason="cancelled"))
            else:
                nodes.append(node)
        cancelled = replace(batch, nodes=tuple(nodes))
        if cancelled.state == "cancelled":
            cancelled = replace(cancelled, reason=None, held_since=None)
        batches.append(cancelled)
    out = replace(op, batches=tuple(batches), state="cancelled", reason="cancelled")
    if all(b.state in _TERMINAL for b in out.batches):
        out = replace(out, ended_at=now)
    return out


def progress(op: Operation) -> dict[str, Any]:
    """The operation's progress document: its JSON and the count of batches and nodes
    by state."""
    doc = op.to_json()
    counts: dict[str, int] = {}
    for batch in op.batches:
        counts[batch.state] = counts.get(batch.state, 0) + 1
    phases: dict[str, int] = {}
    for batch in op.batches:
        for node in batch.nodes:
            phases[node.phase] = phases.get(node.phase, 0) + 1
    doc["counts"] = {
        "batches": len(op.batches),
        "by_state": counts,
        "nodes": sum(len(b.nodes) for b in op.batches),
        "by_phase": phases,
        "finished": sum(1 for b in op.batches if b.state in _TERMINAL),
    }
    return doc
