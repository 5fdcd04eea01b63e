"""The engine of rolling maintenance operations: the master's trio task that carries out
:mod:`nodeagent.master._operations` on the nodes.

Each operation is stepped on its own, in a task of its own (at most ``concurrency`` at
once, never two steps of one operation at once), when it is due: at once after it is
created, changed by a request, or one of its drains started or failed; every
``master.reconcile_interval`` while a node of it is in progress; when a held batch of it
may go (see :meth:`Operations._next_step`). A paused operation with nothing in progress,
and a finished one, cost nothing. A step first makes its calls: the nodes in progress are
asked for their ads (:meth:`Master.fetch_ad <nodeagent.master._master.Master.fetch_ad>`,
each call within the master's ``agent_timeout``; the ad held when the node does not
answer), and the waiting batches' SLA checked when a place is free. Then, with no
checkpoint until it is saved, it decides from the ads held by then and the operation as it
is by then: the operation moves (:func:`~nodeagent.master._operations.advance`), a running
one starts the batches it may (:func:`~nodeagent.master._operations.choose`, with the SLA
verdicts); the machines' Mesos modes follow their nodes' phases (DRAINING while draining,
DOWN while the hook runs and until the health check passes, out of the schedule — UP —
once back in service); then the drains asked for are started, each in a task of its own
whose result is saved the same way. A node that does not answer delays only its own
operation.

**Written before acted upon.** The operation, the modes and the drain records are saved
together (:meth:`Master.commit_state <nodeagent.master._master.Master.commit_state>`; only
that operation of all of them) before any call to a node. A node about to drain has a
drain record of the operation's (``operation`` set; the reconcile pass leaves such records
to this engine, but settles them when left ``pending``) written with its DRAINING mode, so
that no pass of the master starts a drain of its own there (records:
:class:`~nodeagent.master._drains.DrainRecord`). Its drain goes through the master's
two-phase transaction (:meth:`Master.drain_transaction
<nodeagent.master._master.Master.drain_transaction>`, the machine held from the passes
meanwhile: :meth:`Master.hold <nodeagent.master._master.Master.hold>`), recorded before
its commit, with ``on_completion: "hook:NAME"``: the agent then runs the hook itself, once.
After a restart (kill -9 included) a record left ``pending`` is settled by the master
(adopted, or cancelled and forgotten) and a committed one is adopted here by its request
id: no node is drained twice, and so no hook runs twice; a node whose record was forgotten
gets its drain started again (the first was never committed).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import trio

from nodeagent._agent_calls import AgentCalls, DrainBody
from nodeagent._peer import AgentCallFailed
from nodeagent._store import StoreError
from nodeagent.master._adstore import AdEntry
from nodeagent.master._drains import COMMITTED, PENDING, DrainPhase, DrainRecord, ad_knows, assigned
from nodeagent.master._maintenance import (
    MachineId,
    MaintenanceError,
    MaintenanceSchedule,
    Mode,
    Unavailability,
    Window,
)
from nodeagent.master._master import Master
from nodeagent.master._operation_preview import (
    node_times,
    observed_hook_seconds,
    preview_operation,
)
from nodeagent.master._operations import (
    ACTIVE_PHASES,
    Batch,
    Decline,
    NodeView,
    Operation,
    OperationError,
    OperationSpec,
    SlaVerdict,
    advance,
    cancel,
    choose,
    declines_on,
    mesos_mode,
    new_operation,
    pause,
    resume,
    with_request,
)
from nodeagent.master._plan import machine_key
from nodeagent.master._sla import NodeAds, Probe, SlaKind
from slots import InvalidRequest

__all__ = ["HELD_RECHECK", "Operations", "SlaCheck", "sla_verdict"]

log = logging.getLogger("nodeagent.master.operations")

#: Refusals of a drain that retrying cannot cure: the node fails (the operation pauses).
_FATAL = frozenset({"drain.no_such_hook", "request.invalid"})
_NS = 1_000_000_000
#: A held batch is looked at again at least every this many ``reconcile_interval``.
HELD_RECHECK = 10
#: The phases of a node that an unfinished operation no longer holds.
_LET_GO = frozenset({"done", "skipped", "cancelled"})
#: The ads' times are whole seconds (``MyCurrentTime``, ``TotalJobRunTime``): when an
#: instance started is known within a second, and a batch's SLA is checked as of this much
#: earlier, so that an instance counts as up long enough only when it surely is.
_AD_RESOLUTION = 1.0
#: The reconcile passes a batch spends beyond its nodes' own times, in a preview's
#: estimate: its drains started, then each node seen drained, its hook ended, its health
#: check passed.
_PREVIEW_PASSES = 4


class SlaCheck(Protocol):
    """Whether taking ``hosts`` down at ``now`` keeps every job group's SLA (the master's
    :class:`~nodeagent.master._sla_policies.SlaBook`: its coordinators asked, then the
    probe of :mod:`nodeagent.master._sla`)."""

    async def check(
        self,
        entries: list[NodeAds],
        hosts: Collection[str],
        now: float,
        *,
        lost: Collection[str] = (),
    ) -> Probe: ...


def sla_verdict(probe: Probe, now: float) -> SlaVerdict:
    """A probe as a batch's verdict: the groups it would break, and when the last of them
    will have its SLA again (``until``; ``None`` when waiting does not bring it; ``never``
    when a group would keep fewer instances running than its SLA needs, so that only new
    instances could)."""
    broken = probe.broken
    waits = [g.wait for g in broken]
    until = None if not waits or any(w is None for w in waits) else now + max(
        w for w in waits if w is not None
    )  # fmt: skip
    return SlaVerdict(
        safe=probe.safe,
        groups=tuple(g.group for g in broken),
        until=until,
        message="; ".join(f"{g.group}: {g.reason}" for g in broken),
        # fewer instances would be left running than the SLA needs: no wait brings it
        # (a coordinator's no may change its mind: not never)
        never=any(g.wait is None and g.kind is not SlaKind.COORDINATOR for g in broken),
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _health_message(machine: dict[str, Any]) -> str | None:
    """How the node's last health check ended, with the last line of its output."""
    message = _text(machine.get("HealthMessage"))
    output = str(machine.get("HealthOutput") or "").replace("\\n", "\n").strip()
    if output:
        last = output.splitlines()[-1][:160]
        return f"{message}: {last}" if message else last
    return message


@dataclass
class Operations:
    """The operations of one master (see the module docstring). ``run`` is the task."""

    master: Master
    sla: SlaCheck | None = None
    ops: dict[str, Operation] = field(default_factory=dict)
    #: Operations stepped at once at most (each in a task of its own).
    concurrency: int = 64
    #: Steps taken, one operation's each (what the engine did: for tests and benchmarks).
    steps: int = 0
    _wake: trio.Event = field(default_factory=trio.Event)
    #: Nodes whose drain the engine is starting now (phase 1 or the commit under way).
    _starting: set[str] = field(default_factory=set)
    #: Nodes whose failed drain is retried from then on (a failure's backoff).
    _retry_at: dict[str, float] = field(default_factory=dict)
    #: Unfinished operations to be stepped, by id: when (``trio.current_time()``). One
    #: that is not here waits for a request or one of its drains (see :meth:`_next_step`).
    _due: dict[str, float] = field(default_factory=dict)
    #: Operations whose step runs now: never two steps of one operation at once.
    _stepping: set[str] = field(default_factory=set)
    #: The hosts unfinished operations hold (not done, skipped or cancelled there): by
    #: name, the operation's id; a new operation may not take them.
    _held: dict[str, str] = field(default_factory=dict)
    #: The highest operation number given (the next is one more).
    _last: int = 0
    _nursery: trio.Nursery | None = None

    def load(self) -> None:
        """The operations the master loaded from its store (every unfinished one due)."""
        self.ops, self._held, self._last = {}, {}, 0
        for value in self.master.operations.values():
            self._install(Operation.from_json(value))
        self._due = {k: 0.0 for k, op in self.ops.items() if op.ended_at is None}

    def wake(self) -> None:
        self._wake.set()

    @property
    def call_timeout(self) -> float:
        """How long one call to a node may take (the master's ``agent_timeout``: the link's
        own timeout bounds each read and write, this the whole call)."""
        return self.master.fetch_timeout

    # ------------------------------------------------------------------ requests

    def get(self, op_id: str) -> Operation:
        """Raises :class:`OperationError` ``operation.no_such_operation``."""
        op = self.ops.get(op_id)
        if op is None:
            raise OperationError("operation.no_such_operation", f"no operation {op_id!r}")
        return op

    def _made(self, op_id: str, spec: OperationSpec, *, actor: str, now: float) -> Operation:
        """The operation ``spec`` asks for, batched by the ads held now (not saved).
        Raises :class:`OperationError`: the spec's own checks, a host another operation
        holds, and ``operation.unknown_hook`` for a hook a node's ad does not list
        (``DrainHookNames``; a node whose ad lists none, an older agent's, is taken on
        trust and refuses the drain itself if it lacks the hook)."""
        groups: dict[str, Any] = {}
        lacking: list[str] = []
        for host in spec.hosts:
            entry = self.master.ads.get(host)
            if entry is not None:
                groups[host] = entry.machine.get(spec.grouping) if spec.grouping != "host" else host
                names = entry.machine.get("DrainHookNames")
                if isinstance(names, str) and spec.hook not in names.split(","):
                    lacking.append(host)
        op = new_operation(op_id, spec, groups, actor=actor, now=now, busy=self._held.keys())
        if lacking:
            shown = ", ".join(lacking[:10]) + (
                f" and {len(lacking) - 10} more" if len(lacking) > 10 else ""
            )
            raise OperationError(
                "operation.unknown_hook",
                f"no hook {spec.hook!r} on {len(lacking)} of the {len(spec.hosts)} hosts "
                f"({shown}): each node runs only the hooks of its own configuration "
                "([hooks.NAME]); nothing was started",
            )
        return op

    async def preview(self, spec: OperationSpec, *, actor: str) -> dict[str, Any]:
        """What :meth:`create` with ``spec`` would start, and when it would be done
        (:func:`~nodeagent.master._operation_preview.preview_operation`), saving nothing.
        Raises :class:`OperationError` as :meth:`create` would. Asks the SLA check (and
        so the groups' coordinators) about every batch; lists the declines in force on
        each batch's machines."""
        master = self.master
        now = master.clock.now()
        op = self._made("preview", spec, actor=actor, now=now)
        views = self._waiting_views(op, op.batches, now)
        machines = [entry.machine for entry in master.ads.entries()]
        observed = observed_hook_seconds(machines, spec.hook)
        times = {}
        for batch in op.batches:
            for node in batch.nodes:
                entry = master.ads.get(node.name)
                machine = None if entry is None else entry.machine
                times[node.name] = node_times(
                    node.name,
                    machine=machine,
                    view=views.get(node.name),
                    hook=spec.hook,
                    observed=observed,
                    now=now,
                )
        verdicts = await self._sla_verdicts(op, now, batches=op.batches)
        # A batch's phases each end at the engine's next look: about a pass apiece.
        step = _PREVIEW_PASSES * master.reconcile_interval
        declines = {batch.hosts: self._declines(batch.hosts) for batch in op.batches}
        return preview_operation(op, views, times, verdicts, now, step=step, declines=declines)

    def create(self, spec: OperationSpec, *, actor: str) -> Operation:
        """Make and save a running operation over ``spec.hosts`` (node names), batched by
        their ads held now. Raises :class:`OperationError` (nothing changes) or
        :class:`StoreError` (nothing changes). Its cost does not grow with the number of
        operations: the hosts others hold are indexed, and only this one is written."""
        now = self.master.clock.now()
        op = self._made(str(self._last + 1), spec, actor=actor, now=now)
        self._save(op)
        log.info("operation %s started by %s: %d hosts in %d batches", op.id, actor,
                 len(spec.hosts), len(op.batches))  # fmt: skip
        self._step_soon(op.id)
        return op

    def pause(self, op_id: str, *, actor: str) -> Operation:
        return self._change(op_id, pause, actor, "paused")

    def resume(self, op_id: str, *, actor: str) -> Operation:
        return self._change(op_id, resume, actor, "resumed")

    def cancel(self, op_id: str, *, actor: str) -> Operation:
        return self._change(op_id, cancel, actor, "cancelled")

    def _change(
        self, op_id: str, how: Callable[[Operation, float], Operation], actor: str, what: str
    ) -> Operation:
        """Apply an operator's change, saved with the Mesos modes it implies (a cancel
        takes nodes still draining out of the schedule); raises :class:`OperationError`
        or :class:`StoreError`, changing nothing."""
        old = self.get(op_id)
        op = how(old, self.master.clock.now())
        self._commit(old, op)
        log.info("operation %s %s by %s", op_id, what, actor)
        self._step_soon(op_id)
        return op

    def _save(self, op: Operation) -> None:
        """Save ``op`` (alone) with the master's state; raises :class:`StoreError`,
        changing nothing."""
        master = self.master
        master.commit_state(master.state, master.actors, operations={op.id: op.to_json()})
        self._install(op)

    def _install(self, op: Operation) -> None:
        """``op`` as the operation held under its id, and the indexes kept with it."""
        old = self.ops.get(op.id)
        if old is not None:
            for name in _holding(old):
                if self._held.get(name) == op.id:
                    del self._held[name]
        self.ops[op.id] = op
        for name in _holding(op):
            self._held[name] = op.id
        if op.id.isdecimal():
            self._last = max(self._last, int(op.id))
        if op.ended_at is not None:
            self._due.pop(op.id, None)

    def _step_soon(self, op_id: str) -> None:
        """Step the operation at once (unless it has ended), after its step under way."""
        op = self.ops.get(op_id)
        if op is not None and op.ended_at is None:
            self._due[op_id] = 0.0
            self.wake()

    # ------------------------------------------------------------------ the task

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Step the operations, forever: each due one in a task of its own (at most
        ``concurrency`` at once), looking for due ones every ``reconcile_interval`` and
        when woken (a request, a drain's end)."""
        self._stepping = set()
        self._due = {k: 0.0 for k, op in self.ops.items() if op.ended_at is None}
        limit = trio.CapacityLimiter(self.concurrency)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    self._wake = trio.Event()
                    self._dispatch(nursery, limit)
                    with trio.move_on_after(self.master.reconcile_interval):
                        await self._wake.wait()
            finally:
                self._nursery = None

    def _dispatch(self, nursery: trio.Nursery, limit: trio.CapacityLimiter) -> None:
        """Start the step of every due operation that is not being stepped."""
        now = trio.current_time()
        for op_id, at in list(self._due.items()):
            if at <= now and op_id not in self._stepping:
                del self._due[op_id]
                self._stepping.add(op_id)
                nursery.start_soon(self._step_task, op_id, limit)

    async def _step_task(self, op_id: str, limit: trio.CapacityLimiter) -> None:
        try:
            async with limit:
                await self._step(op_id)
        except StoreError as exc:
            log.error("operation %s: the state could not be written: %s", op_id, exc)
            self._due[op_id] = trio.current_time() + self.master.reconcile_interval
        finally:
            self._stepping.discard(op_id)
            if self._due.get(op_id, math.inf) <= trio.current_time():
                self.wake()  # made due while it was being stepped: stepped at once

    async def _step(self, op_id: str) -> None:
        """One step of the operation (see the module docstring): its calls first (fresh
        ads of its nodes in progress, then the SLA of its waiting batches when a place is
        free once those nodes have moved: a batch ending now frees its place in this very
        step), then, with no checkpoint between, what they mean for the operation as it is
        by then (a request or a drain of its may have changed it meanwhile) is decided and
        saved, and its drains started. A held batch is saved with its reason by the step
        that holds it; a place that came free only with such a change (the SLA of its
        waiting batches not asked) is filled by another step at once."""
        master = self.master
        before = self.get(op_id)
        if before.ended_at is not None:
            return
        await self._fetch(before)
        verdicts: dict[tuple[str, ...], SlaVerdict] = {}
        if before.state == "running":
            now = master.clock.now()
            moved = advance(before, self._views(before, now), now)
            verdicts = await self._sla_verdicts(moved, now)
        # decide and save
        old = self.get(op_id)
        now = master.clock.now()
        views = self._views(old, now)
        op = self._adopt(advance(old, views, now))
        again = False
        waiting = _choosing(op)
        if waiting:
            views.update(self._waiting_views(op, waiting, now))
            declines = self._declines
            if self.sla is None:
                op = choose(op, views, now, declines=declines)
            elif all(batch.hosts in verdicts for batch in waiting):
                op = choose(op, views, now, verdicts.__getitem__, declines)
            else:
                again = True
        self.steps += 1
        unstarted = [
            n.name
            for b in op.batches
            for n in b.nodes
            if n.phase == "draining" and n.request_id is None
        ]
        # a record the master forgot (a transaction left pending, cancelled) is written again
        if op != old or any(self._record(name) is None for name in unstarted):
            self._commit(old, op)
        if op.state == "running":
            for name in unstarted:
                self._start_soon(op, name)
        due = trio.current_time() if again else self._next_step(op)
        if due is not None:
            self._due[op_id] = due

    def _declines(self, hosts: tuple[str, ...]) -> tuple[Decline, ...]:
        """The declines in force now on the machines of ``hosts`` (the master's notices,
        matched by each node's hostname and IP)."""
        names: dict[str, tuple[str, ...]] = {}
        for host in hosts:
            entry = self.master.ads.get(host)
            spelled = (host,) if entry is None else (entry.hostname, entry.ip)
            names[host] = tuple(n for n in spelled if n)
        return declines_on(hosts, self.master.notices.values(), names)

    def _next_step(self, op: Operation) -> float | None:
        """When to step ``op`` again (``trio.current_time()``), ``None``: not until a
        request or one of its drains changes it (paused or cancelled with no node in
        progress; ended: never). A node in progress is looked at every
        ``reconcile_interval``; a batch held (SLA, badput budget, a node not heard from) is
        looked at again when it would be skipped (``sla_wait``), when its SLA says it will
        be safe (``until``), and at least every :data:`HELD_RECHECK` intervals otherwise;
        one held by a decline every interval (an accept lets it go at the next pass)."""
        if op.ended_at is not None:
            return None
        now = trio.current_time()
        interval = self.master.reconcile_interval
        if op.active_nodes:
            return now + interval
        if op.state != "running":
            return None
        clock = self.master.clock.now()
        times = [clock + HELD_RECHECK * interval]
        for batch in op.batches:
            if batch.state != "waiting":
                continue
            if batch.held_since is not None:
                times.append(batch.held_since + op.spec.sla_wait)
            until = (batch.reason or {}).get("until")
            if isinstance(until, int | float):
                times.append(float(until))
            if (batch.reason or {}).get("code") == "declined":
                times.append(clock + interval)
        return now + max(interval, min(times) - clock)

    async def _sla_verdicts(
        self, op: Operation, now: float, *, batches: Iterable[Batch] | None = None
    ) -> dict[tuple[str, ...], SlaVerdict]:
        """Each waiting batch's SLA verdict now, when ``op`` runs and a place is free for
        one (its coordinators asked, all batches at once; ``batches``: those instead); a
        check that fails is a no."""
        check = self.sla
        waiting = [b.hosts for b in (_choosing(op) if batches is None else batches)]
        if check is None or not waiting:
            return {}
        held = self.master.ads.entries()
        # down already: a node lost, or one whose machine shuts down or reboots
        lost = {e.name for e in held if e.shutting_down or self.master.ads.lost(e, now)}
        entries: list[NodeAds] = list(held)
        verdicts: dict[tuple[str, ...], SlaVerdict] = {}

        async def one(hosts: tuple[str, ...]) -> None:
            try:
                probe = await check.check(entries, hosts, now - _AD_RESOLUTION, lost=lost)
            except Exception as exc:  # whatever fails, the batch is held, the engine goes on
                log.warning("operation %s: SLA check of %s failed: %s", op.id, hosts, exc)
                verdicts[hosts] = SlaVerdict(safe=False, message=f"SLA check failed: {exc}")
            else:
                verdicts[hosts] = sla_verdict(probe, now)

        async with trio.open_nursery() as nursery:
            for hosts in waiting:
                nursery.start_soon(one, hosts)
        return verdicts

    async def _fetch(self, op: Operation) -> None:
        """Ask the nodes in progress for their ads now (stored: the ad held when a node
        does not answer), ``fetch_concurrency`` at once, each call within
        :attr:`call_timeout`."""
        master = self.master
        limit = trio.CapacityLimiter(master.fetch_concurrency)
        bound = self.call_timeout

        async def fetch(entry: AdEntry) -> None:
            async with limit:
                with (
                    trio.move_on_after(bound),
                    contextlib.suppress(AgentCallFailed, InvalidRequest),
                ):
                    await master.fetch_ad(entry)

        async with trio.open_nursery() as nursery:
            for node in op.active_nodes:
                entry = master.ads.get(node.name)
                if entry is not None:
                    nursery.start_soon(fetch, entry)

    def _views(self, op: Operation, now: float) -> dict[str, NodeView]:
        """The views of the nodes in progress, from the ads held now (a node without an
        ad is not present)."""
        views: dict[str, NodeView] = {}
        for node in op.active_nodes:
            entry = self.master.ads.get(node.name)
            views[node.name] = (
                NodeView(present=False) if entry is None else self._view(entry, now, None)
            )
        return views

    def _waiting_views(
        self, op: Operation, batches: Collection[Batch], now: float
    ) -> dict[str, NodeView]:
        """The views of the nodes of ``op``'s waiting ``batches``, from the ads held now,
        their estimates for the operation's schedule computed for now (to rank them)."""
        schedule = op.spec.schedule.capitalize()
        views: dict[str, NodeView] = {}
        for batch in batches:
            for node in batch.nodes:
                entry = self.master.ads.get(node.name)
                views[node.name] = (
                    NodeView(present=False) if entry is None else self._view(entry, now, schedule)
                )
        return views

    def _view(self, entry: AdEntry, now: float, schedule: str | None) -> NodeView:
        """A node's view; with ``schedule`` (a waiting node), its estimates for it."""
        master = self.master
        machine = entry.machine
        key = machine_key(MachineId(hostname=entry.hostname, ip=entry.ip))
        record = master.drains.get(key)
        known = record is None or ad_knows(record, entry)
        completion: float | None = None
        badput = 0.0
        if schedule is not None:
            estimates = entry.forecast.estimates(now)
            completion = float(estimates[f"ExpectedMachine{schedule}DrainingCompletion"])
            badput = float(estimates[f"ExpectedMachine{schedule}DrainingBadput"])
        service = entry.service
        return NodeView(
            present=not master.ads.lost(entry, now),
            known=known,
            drain_state=str(machine.get("DrainState", "none")),
            request_id=_text(machine.get("DrainingRequestId")),
            hook_request_id=_text(machine.get("DrainHookRequestId")),
            hook_state=_text(machine.get("DrainHookState")),
            hook_message=_text(machine.get("DrainHookMessage")),
            in_service=bool(service["in_service"]),
            health_state=_text(machine.get("HealthState")),
            health_message=_health_message(machine),
            completion=completion,
            badput=badput,
        )

    def _adopt(self, op: Operation) -> Operation:
        """Nodes draining without a request id whose drain record is committed (the
        engine stopped between the commit and its save): the drain is theirs."""
        for batch in op.batches:
            for node in batch.nodes:
                if node.phase != "draining" or node.request_id is not None:
                    continue
                record = self._record(node.name)
                if (
                    record is not None
                    and record.operation == op.id
                    and record.phase is COMMITTED
                    and record.request_id is not None
                ):
                    op = with_request(op, node.name, record.request_id)
                    log.info("%s: drain %s adopted by operation %s", node.name,
                             record.request_id, op.id)  # fmt: skip
        return op

    def _machine(self, name: str) -> MachineId | None:
        entry = self.master.ads.get(name)
        return None if entry is None else MachineId(hostname=entry.hostname, ip=entry.ip)

    def _record(self, name: str) -> DrainRecord | None:
        machine = self._machine(name)
        return None if machine is None else self.master.drains.get(machine_key(machine))

    # ------------------------------------------------------------------ modes and records

    def _commit(self, old: Operation, op: Operation) -> None:
        """Save ``op`` with the Mesos modes its nodes' phases ask for and the drain
        records of nodes about to drain (all in one write); raises :class:`StoreError`,
        changing nothing."""
        master = self.master
        phases = {n.name: n.phase for b in old.batches for n in b.nodes}
        state = copy.copy(master.state)
        actors = dict(master.actors)
        records: dict[str, DrainRecord] = {}
        now = master.clock.now()
        add: list[MachineId] = []
        down: list[MachineId] = []
        up: list[MachineId] = []
        drop: list[MachineId] = []
        for batch in op.batches:
            for node in batch.nodes:
                if node.phase not in ACTIVE_PHASES and node.phase == phases.get(node.name):
                    continue  # untouched by this change: left as it is
                machine = self._machine(node.name)
                if machine is None:
                    continue
                status = master.state.match(machine.hostname, machine.ip)
                mode = Mode.UP if status is None else status.mode
                wanted = mesos_mode(node.phase)
                key = machine_key(machine)
                if wanted is not None and mode is Mode.UP:
                    add.append(machine)
                    actors[key] = op.actor
                if wanted == "DOWN" and mode is not Mode.DOWN:
                    down.append(machine)
                if wanted is None and mode is Mode.DOWN:
                    up.append(machine)
                if wanted is None and mode is Mode.DRAINING:
                    drop.append(machine)
                if node.phase == "draining" and node.request_id is None:
                    entry = master.ads.get(node.name)
                    if key not in master.drains and entry is not None:
                        records[key] = assigned(
                            key,
                            node=node.name,
                            address=entry.address,
                            actor=op.actor,
                            operation=op.id,
                        )
        try:
            if add or drop:
                windows = [
                    Window(
                        machine_ids=tuple(m for m in w.machine_ids if m not in drop),
                        unavailability=w.unavailability,
                    )
                    for w in state.schedule.windows
                ]
                windows = [w for w in windows if w.machine_ids]
                if add:
                    start = Unavailability(start_ns=int(now * _NS))
                    windows.append(Window(machine_ids=tuple(add), unavailability=start))
                state.update_schedule(MaintenanceSchedule(windows=tuple(windows)))
            if down:
                state.down(down)
            if up:
                state.up(up)
        except MaintenanceError as exc:
            log.warning("operation %s: modes not changed: %s", op.id, exc.message)
            state = master.state
        master.drains.update(records)
        try:
            master.commit_state(
                state,
                actors,
                operations={op.id: op.to_json()},
                actor=f"{op.actor} (operation {op.id})",
            )
        except StoreError:
            for key in records:
                master.drains.pop(key, None)
            raise
        self._install(op)

    # ------------------------------------------------------------------ drains

    def _start_soon(self, op: Operation, name: str) -> None:
        nursery = self._nursery
        if nursery is None:
            return
        if name in self._starting or self._retry_at.get(name, 0.0) > self.master.clock.now():
            return
        machine = self._machine(name)
        if machine is None:
            return
        key = machine_key(machine)
        record = self.master.drains.get(key)
        if record is None or record.operation != op.id:
            return  # forgotten (the next step writes it again)
        if record.phase in (PENDING, COMMITTED):
            return  # settled by the master, or adopted by the next step
        if not self.master.hold(key):
            return  # the master's to settle
        # held: the master's passes leave a record being made alone
        self._starting.add(name)
        nursery.start_soon(self._drain, op.id, name, key)

    async def _drain(self, op_id: str, name: str, key: str) -> None:
        """The node's drain, through the master's two-phase transaction (recorded before
        its commit), with the operation's hook as its completion; its two calls within
        twice :attr:`call_timeout` (cut short, it fails as ``agent.timeout``: a phase 1
        without a reply was never recorded, a commit without one leaves the record
        ``pending``, settled by the master). Its end makes the operation due at once."""
        master = self.master
        try:
            op = self.get(op_id)
            record = master.drains.get(key)
            if record is None or record.phase is not DrainPhase.OPERATION:
                return
            entry = master.ads.get(name)
            address = (entry.address if entry is not None else None) or record.address
            if not address:
                return
            record = master.drains[key] = record.noted(
                key, address=address, started_at=master.clock.now()
            )
            body = DrainBody(
                schedule=op.spec.schedule,
                reason=f"maintenance operation {op_id}",
                ttl=30,
                on_completion=f"hook:{op.spec.hook}",
            )
            request_id = await self._transaction(key, address, op.actor, body, record)
            master.counters.drains_started += 1
            op = self.get(op_id)
            self._commit(op, with_request(op, name, request_id))
            self._retry_at.pop(name, None)
            log.info("%s: %s drain %s committed for operation %s (hook %s)", name,
                     op.spec.schedule, request_id, op_id, op.spec.hook)  # fmt: skip
        except AgentCallFailed as exc:
            self._refused(op_id, name, exc)
        except (InvalidRequest, StoreError) as exc:
            self._retry_at[name] = master.clock.now() + 2 * master.reconcile_interval
            log.warning("%s: drain for operation %s not started: %s", name, op_id, exc)
        finally:
            self._starting.discard(name)
            self.master.release_hold(key)
            self._step_soon(op_id)

    async def _transaction(
        self, key: str, address: str, actor: str, body: DrainBody, record: DrainRecord
    ) -> str:
        """The master's two-phase transaction within twice :attr:`call_timeout`; the
        request id. Raises :class:`AgentCallFailed` (``agent.timeout`` when cut short)."""
        bound = 2 * self.call_timeout
        master = self.master
        calls = AgentCalls.over(master.link, address, node=record.node_name, actor=actor)
        with trio.move_on_after(bound):
            phase1, _ = await master.drain_transaction(key, calls, body, record)
            return phase1.request_id
        raise AgentCallFailed(
            "agent.timeout", f"the agent at {address} did not answer within {bound:g} s"
        )

    def _refused(self, op_id: str, name: str, exc: AgentCallFailed) -> None:
        """A drain call failed: a refusal no retry cures fails the node (the operation
        pauses); others are retried after two intervals, with the reason shown."""
        master = self.master
        op = self.get(op_id)
        record = self._record(name)
        if exc.code in _FATAL and record is not None and record.phase is DrainPhase.OPERATION:
            # never drained: out of the schedule (its record is let go), the operation paused
            refused = _with_node(op, name, phase="refused", reason=f"drain refused: {exc}")
            if refused.state == "running":
                refused = replace(refused, state="paused", reason=f"paused: {name}: {exc}")
            with contextlib.suppress(StoreError):
                self._commit(op, refused)
            log.warning("%s: drain for operation %s refused: %s", name, op_id, exc)
            return
        self._retry_at[name] = master.clock.now() + 2 * master.reconcile_interval
        with contextlib.suppress(StoreError):
            self._commit(op, _with_node(op, name, reason=f"drain not started: {exc}"))
        log.warning("%s: drain for operation %s failed: %s", name, op_id, exc)


def _choosing(op: Operation) -> list[Batch]:
    """The waiting batches of ``op`` when it runs and a place is free for one (those
    :func:`~nodeagent.master._operations.choose` looks at), else none."""
    if op.state != "running":
        return []
    in_progress = sum(1 for b in op.batches if b.state in ACTIVE_PHASES)
    if in_progress >= op.spec.batches:
        return []
    return [b for b in op.batches if b.state == "waiting"]


def _holding(op: Operation) -> list[str]:
    """The hosts an unfinished operation holds: those it has not finished with."""
    if op.ended_at is not None:
        return []
    return [n.name for b in op.batches for n in b.nodes if n.phase not in _LET_GO]


def _with_node(op: Operation, name: str, **changes: Any) -> Operation:
    batches = tuple(
        replace(b, nodes=tuple(replace(n, **changes) if n.name == name else n for n in b.nodes))
        for b in op.batches
    )
    return replace(op, batches=batches)
