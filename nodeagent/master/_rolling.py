"""The engine of rolling maintenance operations: the master's trio task that carries out
:mod:`nodeagent.master._operations` on the nodes.

Each step (every ``master.reconcile_interval``, and at once after a request), for every
unfinished operation: the nodes of its started batches are read from fresh ads
(:meth:`Master.fetch_ad <nodeagent.master._master.Master.fetch_ad>`; the ad held when the
node does not answer), the others from the ads held; the operation moves
(:func:`~nodeagent.master._operations.advance`), a running one starts the batches it may
(:func:`~nodeagent.master._operations.choose`, with the SLA check when one is given);
the machines' Mesos modes follow their nodes' phases (DRAINING while draining, DOWN while
the hook runs and until the health check passes, out of the schedule — UP — once back in
service); then the drains asked for are started.

**Written before acted upon.** The operation, the modes and the drain records are saved
together (:meth:`Master.commit_state <nodeagent.master._master.Master.commit_state>`) before
any call to a node. A node about to drain has a drain record of the operation's (``operation``
set; the reconcile pass leaves such records to this engine, but settles them when left
``pending``) written with its DRAINING mode, so that no pass of the master starts a drain of
its own there. Its drain goes through the master's two-phase transaction, recorded before
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
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import trio

from nodeagent._peer import AgentCallFailed
from nodeagent._store import StoreError
from nodeagent.master._adstore import AdEntry
from nodeagent.master._maintenance import (
    MachineId,
    MaintenanceError,
    MaintenanceSchedule,
    Mode,
    Unavailability,
    Window,
)
from nodeagent.master._master import COMMITTED, PENDING, Master, ad_knows
from nodeagent.master._operations import (
    ACTIVE_PHASES,
    NodeView,
    Operation,
    OperationError,
    OperationSpec,
    SlaVerdict,
    advance,
    cancel,
    choose,
    mesos_mode,
    new_operation,
    pause,
    resume,
    with_request,
)
from nodeagent.master._plan import machine_key
from nodeagent.master._sla import NodeAds, Probe
from slots import InvalidRequest

__all__ = ["Operations", "SlaCheck", "sla_verdict"]

log = logging.getLogger("nodeagent.master.operations")

#: Refusals of a drain that retrying cannot cure: the node fails (the operation pauses).
_FATAL = frozenset({"drain.no_such_hook", "request.invalid"})
_NS = 1_000_000_000
#: The ads' times are whole seconds (``MyCurrentTime``, ``TotalJobRunTime``): when an
#: instance started is known within a second, and a batch's SLA is checked as of this much
#: earlier, so that an instance counts as up long enough only when it surely is.
_AD_RESOLUTION = 1.0


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
    will have its SLA again (``until``; ``None`` when waiting does not bring it)."""
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
    _wake: trio.Event = field(default_factory=trio.Event)
    #: Nodes whose drain the engine is starting now (phase 1 or the commit under way).
    _starting: set[str] = field(default_factory=set)
    #: Nodes whose failed drain is retried from then on (a failure's backoff).
    _retry_at: dict[str, float] = field(default_factory=dict)

    def load(self) -> None:
        """The operations the master loaded from its store."""
        self.ops = {k: Operation.from_json(v) for k, v in self.master.operations.items()}

    def wake(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ requests

    def get(self, op_id: str) -> Operation:
        """Raises :class:`OperationError` ``operation.no_such_operation``."""
        op = self.ops.get(op_id)
        if op is None:
            raise OperationError("operation.no_such_operation", f"no operation {op_id!r}")
        return op

    def create(self, spec: OperationSpec, *, actor: str) -> Operation:
        """Make and save a running operation over ``spec.hosts`` (node names), batched by
        their ads held now. Raises :class:`OperationError` (nothing changes) or
        :class:`StoreError` (nothing changes)."""
        groups: dict[str, Any] = {}
        for host in spec.hosts:
            entry = self.master.ads.get(host)
            if entry is not None:
                groups[host] = entry.machine.get(spec.grouping) if spec.grouping != "host" else host
        busy = {n.name for op in self.ops.values() if op.ended_at is None for b in op.batches
                for n in b.nodes if n.phase not in ("done", "skipped", "cancelled")}  # fmt: skip
        number = 1 + max((int(k) for k in self.ops if k.isdecimal()), default=0)
        now = self.master.clock.now()
        op = new_operation(str(number), spec, groups, actor=actor, now=now, busy=busy)
        self._save(op)
        log.info("operation %s started by %s: %d hosts in %d batches", op.id, actor,
                 len(spec.hosts), len(op.batches))  # fmt: skip
        self.wake()
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
        self.wake()
        return op

    def _save(self, op: Operation) -> None:
        """Save ``op`` with the master's state; raises :class:`StoreError`, changing nothing."""
        before = self.master.operations.get(op.id)
        self.master.operations[op.id] = op.to_json()
        try:
            self.master.save()
        except StoreError:
            if before is None:
                del self.master.operations[op.id]
            else:
                self.master.operations[op.id] = before
            raise
        self.ops[op.id] = op

    # ------------------------------------------------------------------ the task

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Step the operations, forever (every ``reconcile_interval``, or when woken)."""
        task_status.started()
        async with trio.open_nursery() as nursery:
            while True:
                self._wake = trio.Event()
                await self.step(nursery)
                with trio.move_on_after(self.master.reconcile_interval):
                    await self._wake.wait()

    async def step(self, nursery: trio.Nursery) -> None:
        """One step of every unfinished operation (see the module docstring)."""
        for op in list(self.ops.values()):
            if op.ended_at is not None:
                continue
            try:
                await self._step(op, nursery)
            except StoreError as exc:
                log.error("operation %s: the state could not be written: %s", op.id, exc)

    async def _step(self, old: Operation, nursery: trio.Nursery) -> None:
        master = self.master
        views = await self._views(old)
        now = master.clock.now()
        op = self._adopt(advance(old, views, now))
        if op.state == "running":
            verdicts = await self._sla_verdicts(op, now)
            unchecked = SlaVerdict(safe=False, message="SLA not checked")
            op = choose(
                op,
                views,
                now,
                None if self.sla is None else lambda hosts: verdicts.get(hosts, unchecked),
            )
        unstarted = [
            n.name
            for b in op.batches
            for n in b.nodes
            if n.phase == "draining" and n.request_id is None
        ]
        # a record the master forgot (a transaction left pending, cancelled) is written again
        if op != old or any(self._record(name) is None for name in unstarted):
            self._commit(old, op)
        if op.state != "running":
            return
        for name in unstarted:
            self._start_soon(op, name, nursery)

    async def _sla_verdicts(self, op: Operation, now: float) -> dict[tuple[str, ...], SlaVerdict]:
        """Each waiting batch's SLA verdict now, when a place is free for one (its
        coordinators asked, all batches at once); a check that fails is a no."""
        check = self.sla
        in_progress = sum(1 for b in op.batches if b.state in ACTIVE_PHASES)
        if check is None or in_progress >= op.spec.batches:
            return {}
        waiting = [b.hosts for b in op.batches if b.state == "waiting"]
        held = self.master.ads.entries()
        lost = {e.name for e in held if self.master.ads.lost(e, now)}
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

    async def _views(self, op: Operation) -> dict[str, NodeView]:
        """Each node's view: fresh ads for the nodes of started batches, the held ones
        for the others (their estimates are computed for now)."""
        master = self.master
        active = {n.name for n in op.active_nodes}
        fresh: dict[str, AdEntry] = {}
        limit = trio.CapacityLimiter(master.fetch_concurrency)

        async def fetch(entry: AdEntry) -> None:
            async with limit:
                with contextlib.suppress(AgentCallFailed, InvalidRequest):
                    fresh[entry.name] = await master.fetch_ad(entry)

        with trio.move_on_after(master.fetch_timeout):
            async with trio.open_nursery() as nursery:
                for name in active:
                    entry = master.ads.get(name)
                    if entry is not None:
                        nursery.start_soon(fetch, entry)
        now = master.clock.now()
        schedule = op.spec.schedule.capitalize()
        views: dict[str, NodeView] = {}
        for batch in op.batches:
            for node in batch.nodes:
                entry = fresh.get(node.name) or master.ads.get(node.name)
                if entry is None:
                    views[node.name] = NodeView(present=False)
                    continue
                views[node.name] = self._view(entry, now, schedule, node.name in active)

        return views

    def _view(self, entry: AdEntry, now: float, schedule: str, active: bool) -> NodeView:
        master = self.master
        machine = entry.machine
        key = machine_key(MachineId(hostname=entry.hostname, ip=entry.ip))
        record = master.drains.get(key)
        known = record is None or ad_knows(record, entry)
        completion: float | None = None
        badput = 0.0
        if not active:
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
                    and record.get("operation") == op.id
                    and record.get("phase") == COMMITTED
                    and record.get("request_id") is not None
                ):
                    op = with_request(op, node.name, str(record["request_id"]))
                    log.info("%s: drain %s adopted by operation %s", node.name,
                             record["request_id"], op.id)  # fmt: skip
        return op

    def _machine(self, name: str) -> MachineId | None:
        entry = self.master.ads.get(name)
        return None if entry is None else MachineId(hostname=entry.hostname, ip=entry.ip)

    def _record(self, name: str) -> dict[str, Any] | None:
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
        records: dict[str, dict[str, Any]] = {}
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
                        records[key] = {
                            "node": node.name,
                            "address": entry.address,
                            "actor": op.actor,
                            "operation": op.id,
                            "phase": "operation",
                            "escalated": False,
                            "down": False,
                            "started_at": None,
                        }
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
        before = master.operations.get(op.id)
        master.operations[op.id] = op.to_json()
        master.drains.update(records)
        try:
            master.commit_state(state, actors)
        except StoreError:
            for key in records:
                master.drains.pop(key, None)
            if before is None:
                del master.operations[op.id]
            else:
                master.operations[op.id] = before
            raise
        self.ops[op.id] = op

    # ------------------------------------------------------------------ drains

    def _start_soon(self, op: Operation, name: str, nursery: trio.Nursery) -> None:
        if name in self._starting or self._retry_at.get(name, 0.0) > self.master.clock.now():
            return
        machine = self._machine(name)
        if machine is None:
            return
        key = machine_key(machine)
        record = self.master.drains.get(key)
        if record is None or record.get("operation") != op.id or key in self.master._busy:
            return  # forgotten (the next step writes it again) or the master's to settle
        if record.get("phase") in (PENDING, COMMITTED):
            return  # settled by the master, or adopted by the next step
        self._starting.add(name)
        self.master._busy.add(key)  # the master's passes leave a record being made alone
        nursery.start_soon(self._drain, op.id, name, key, record)

    async def _drain(self, op_id: str, name: str, key: str, record: dict[str, Any]) -> None:
        """The node's drain, through the master's two-phase transaction (recorded before
        its commit), with the operation's hook as its completion."""
        master = self.master
        try:
            op = self.get(op_id)
            entry = master.ads.get(name)
            address = (entry.address if entry is not None else None) or record.get("address")
            if not address:
                return
            record["address"] = address
            record["started_at"] = master.clock.now()
            body = {
                "schedule": op.spec.schedule,
                "reason": f"maintenance operation {op_id}",
                "ttl": 30,
                "on_completion": f"hook:{op.spec.hook}",
            }
            phase1, _ = await master._transaction(key, address, op.actor, body, record)
            master.counters.drains_started += 1
            op = self.get(op_id)
            self._commit(op, with_request(op, name, str(phase1["id"])))
            self._retry_at.pop(name, None)
            log.info("%s: %s drain %s committed for operation %s (hook %s)", name,
                     op.spec.schedule, phase1["id"], op_id, op.spec.hook)  # fmt: skip
        except AgentCallFailed as exc:
            self._refused(op_id, name, exc)
        except (InvalidRequest, StoreError) as exc:
            self._retry_at[name] = master.clock.now() + 2 * master.reconcile_interval
            log.warning("%s: drain for operation %s not started: %s", name, op_id, exc)
        finally:
            self._starting.discard(name)
            self.master._busy.discard(key)
            self.wake()

    def _refused(self, op_id: str, name: str, exc: AgentCallFailed) -> None:
        """A drain call failed: a refusal no retry cures fails the node (the operation
        pauses); others are retried after two intervals, with the reason shown."""
        master = self.master
        op = self.get(op_id)
        if exc.code in _FATAL and (self._record(name) or {}).get("phase") == "operation":
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


def _with_node(op: Operation, name: str, **changes: Any) -> Operation:
    batches = tuple(
        replace(b, nodes=tuple(replace(n, **changes) if n.name == name else n for n in b.nodes))
        for b in op.batches
    )
    return replace(op, batches=batches)
