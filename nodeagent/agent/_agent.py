"""The agent: the shell around one :class:`slots.Machine`.

It turns the world into model events — API calls, job exits, timer expiries — and
carries out the model's decisions: signal a job's process group, persist and
publish, run the completion action. Every state change is written to the store
before the call that caused it returns.

Concurrency (one trio task tree, no threads touch the model):

* the model is synchronous, so each model call is atomic;
* while a drain transaction is pending, state-changing calls wait
  (:meth:`Agent._wait_writable`) until it is committed, cancelled or expired; reads
  never wait; a second ``start_draining`` is refused at once by the model;
* a claim is checked, its process started, then claimed: the model never holds a
  claim without a process to signal.
"""

from __future__ import annotations

import logging
import math
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from nodeagent._clock import Clock
from nodeagent.agent._processes import (
    JobProcess,
    LaunchSpec,
    NoSuchProcess,
    ProcessError,
    ProcessRunner,
)
from nodeagent.agent._store import ProcessRecord, Store
from slots import (
    Action,
    ClaimInfo,
    CompletionAction,
    DrainEstimate,
    DrainRequest,
    JobSpec,
    Machine,
    NoSuchClaim,
    OnCompletion,
    Publish,
    Resources,
    Schedule,
    SignalJob,
)

__all__ = ["Agent", "ClaimRequest", "policy_seconds"]

log = logging.getLogger("nodeagent.agent")


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimRequest:
    """A new claim: resources, the job's promises, and a command to run or a pid to adopt."""

    resources: Resources
    spec: JobSpec
    argv: tuple[str, ...] | None = None
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    user: str | None = None
    pid: int | None = None


class Agent:
    """Owns the machine, its jobs and its store; see the module docstring."""

    def __init__(
        self,
        *,
        machine: Machine,
        store: Store,
        runner: ProcessRunner,
        clock: Clock,
        execute_dir: Path,
        processes: Mapping[str, ProcessRecord] | None = None,
        usage_interval: float = 10.0,
    ) -> None:
        self.machine = machine
        self.store = store
        self.runner = runner
        self.clock = clock
        self.execute_dir = execute_dir
        self.usage_interval = usage_interval
        self._records: dict[str, ProcessRecord] = dict(processes or {})
        self._procs: dict[str, JobProcess] = {}
        self._nursery: trio.Nursery | None = None
        self._timer_scope: trio.CancelScope | None = None
        self._writable = trio.Event()
        self._writable.set()
        self._dirty = trio.Event()
        self.completion: CompletionAction | None = None
        self.completed = trio.Event()
        #: Called after every published change (the master link pushes the ad then).
        self.listeners: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Re-adopt the jobs of a previous run, then serve timers, exits and samples."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._readopt()
            nursery.start_soon(self._timer_loop)
            nursery.start_soon(self._persist_loop)
            if self.usage_interval > 0:
                nursery.start_soon(self._usage_loop)
            task_status.started()

    async def _readopt(self) -> None:
        now = self.clock.now()
        for info in self.machine.claims(now):
            record = self._records.get(info.claim_id)
            proc: JobProcess | None = None
            if record is not None:
                try:
                    proc = await self.runner.adopt(record.pid, start_time=record.start_time)
                except (NoSuchProcess, ProcessError) as exc:
                    log.info("claim %s: job pid %s is gone (%s)", info.claim_id, record.pid, exc)
            if proc is None:
                self._records.pop(info.claim_id, None)
                self._apply(self.machine.job_exited(self.clock.now(), info.claim_id))
                continue
            log.info("claim %s: re-adopted job pid %s", info.claim_id, record and record.pid)
            self._register(info.claim_id, proc)
        # Whatever was due while the daemon was down (expired transactions, evictions).
        self._apply(self.machine.tick(self.clock.now()))
        self._persist()

    # ------------------------------------------------------------------ reads

    def now(self) -> float:
        return self.clock.now()

    def ad(self) -> dict[str, Any]:
        return self.machine.ad(self.clock.now())

    def claims(self) -> list[ClaimInfo]:
        return self.machine.claims(self.clock.now())

    def claim(self, claim_id: str) -> ClaimInfo:
        return self.machine.claim_info(claim_id, self.clock.now())

    def process(self, claim_id: str) -> ProcessRecord | None:
        return self._records.get(claim_id)

    def drain_view(self) -> tuple[DrainRequest | None, DrainEstimate | None]:
        """The request in force with its live estimate, or the last one that ended."""
        request = self.machine.request
        if request is None:
            return self.machine.last_request, None
        return request, self.machine.drain_estimate(self.clock.now(), request.schedule)

    # ------------------------------------------------------------------ writes

    async def create_claim(self, request: ClaimRequest) -> ClaimInfo:
        """A new dynamic slot running (or adopting) the job; errors change nothing.

        The request is checked, the process started (or adopted), then claimed. If the
        machine changed meanwhile so that the claim is refused, a process this call
        started is killed and the refusal raised.
        """
        await self._wait_writable()
        self.machine.check_claim(self.clock.now(), resources=request.resources, spec=request.spec)
        started_at = None
        if request.pid is not None:
            proc = await self.runner.adopt(request.pid)
        else:
            assert request.argv is not None
            proc = await self.runner.launch(
                LaunchSpec(
                    argv=request.argv,
                    env=request.env,
                    cwd=request.cwd,
                    user=request.user,
                    execute_dir=self.execute_dir / f"slot1_{self.machine.next_slot_number}",
                )
            )
        try:
            await self._wait_writable()
            now = self.clock.now()
            if request.pid is not None:
                started_at = min(proc.identity.start_time, now)
            info, actions = self.machine.claim(
                now, resources=request.resources, spec=request.spec, started_at=started_at
            )
        except BaseException:
            if request.pid is None:
                proc.signal_group(signal.SIGKILL)
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await proc.wait()
            raise
        self._register(info.claim_id, proc, argv=request.argv or ())
        self._apply(actions)
        return self.machine.claim_info(info.claim_id, self.clock.now())

    async def release(self, claim_id: str) -> ClaimInfo:
        await self._wait_writable()
        self._apply(self.machine.release(self.clock.now(), claim_id))
        return self.claim(claim_id)

    async def suspend(self, claim_id: str) -> ClaimInfo:
        await self._wait_writable()
        self._apply(self.machine.suspend(self.clock.now(), claim_id))
        return self.claim(claim_id)

    async def continue_(self, claim_id: str) -> ClaimInfo:
        await self._wait_writable()
        self._apply(self.machine.continue_(self.clock.now(), claim_id))
        return self.claim(claim_id)

    def start_draining(
        self,
        *,
        schedule: Schedule,
        reason: str,
        on_completion: OnCompletion,
        deadline: float | None,
        start: str | None,
        check: str | None,
        commit: bool,
        ttl: float | None,
        requested_by: str | None,
    ) -> tuple[DrainRequest, DrainEstimate]:
        """Phase 1 (or a one-shot drain). Never waits: a second request is refused."""
        request, estimate, actions = self.machine.start_draining(
            self.clock.now(),
            schedule=schedule,
            reason=reason,
            on_completion=on_completion,
            deadline=deadline,
            start=start,
            check=check,
            commit=commit,
            ttl=ttl,
            requested_by=requested_by,
        )
        self._apply(actions)
        return request, estimate

    def commit_draining(self, request_id: str) -> tuple[DrainRequest, DrainEstimate]:
        try:
            request, estimate, actions = self.machine.commit_draining(self.clock.now(), request_id)
        except BaseException:
            self._apply([Publish()])  # an expired transaction was cancelled on the way
            raise
        self._apply(actions)
        return request, estimate

    def cancel_draining(self, request_id: str | None) -> DrainRequest | None:
        """Cancel the request in force; ``None`` id and no request: a no-op."""
        request = self.machine.request
        self._apply(self.machine.cancel_draining(self.clock.now(), request_id))
        return self.machine.last_request if request is not None else None

    def set_maintenance(self, mode: str | None, window: Mapping[str, int] | None) -> None:
        self._apply(self.machine.set_maintenance(mode, window))

    def reload_policy(self, policy: Any) -> None:
        self._apply(self.machine.set_policy(self.clock.now(), policy))

    # ------------------------------------------------------------------ internals

    async def _wait_writable(self) -> None:
        while self.machine.transaction_pending:
            await self._writable.wait()

    def _register(self, claim_id: str, proc: JobProcess, *, argv: tuple[str, ...] = ()) -> None:
        ident = proc.identity
        previous = self._records.get(claim_id)
        self._records[claim_id] = ProcessRecord(
            claim_id=claim_id,
            pid=ident.pid,
            start_time=ident.start_time,
            pgid=ident.pgid,
            argv=argv or (previous.argv if previous else ()),
            execute_dir=str(self.execute_dir / f"slot1_{claim_id}"),
        )
        self._procs[claim_id] = proc
        assert self._nursery is not None, "the agent is not running"
        self._nursery.start_soon(self._watch, claim_id, proc)

    async def _watch(self, claim_id: str, proc: JobProcess) -> None:
        status = await proc.wait()
        log.info("claim %s: job pid %s exited (%s)", claim_id, proc.identity.pid, status)
        self._procs.pop(claim_id, None)
        self._records.pop(claim_id, None)
        try:
            actions = self.machine.job_exited(self.clock.now(), claim_id)
        except NoSuchClaim:
            return
        # Saved soon, not now: an exit lost in a crash is found again when the restarted
        # daemon re-adopts its jobs, and many exits at once then cost one write.
        self._apply(actions, durable=False)

    def _apply(self, actions: list[Action], *, durable: bool = True) -> None:
        """Carry out the model's decisions: persist first, then signal, then publish.

        ``durable`` false defers the write to the persist service (still before any
        later request is acknowledged, since every request path persists).
        """
        if not actions:
            self._after_model_call()
            return
        if any(isinstance(a, Publish) for a in actions):
            # The end of a drain is written at once: the daemon may exit right after it.
            if durable or any(isinstance(a, CompletionAction) for a in actions):
                self._persist()
            else:
                self._dirty.set()
        for action in actions:
            if isinstance(action, SignalJob):
                self._signal(action.claim_id, action.signal)
            elif isinstance(action, CompletionAction):
                log.info("drain %s complete: %s", action.request_id, action.action)
                self.completion = action
                self.completed.set()
        if any(isinstance(a, Publish) for a in actions):
            self._changed_now()
        self._after_model_call()

    def _signal(self, claim_id: str, name: str) -> None:
        proc = self._procs.get(claim_id)
        if proc is None:
            return
        log.info("claim %s: %s to process group %s", claim_id, name, proc.identity.pgid)
        try:
            proc.signal_group(signal.Signals[name])
        except ProcessError as exc:
            log.warning("claim %s: cannot send %s: %s", claim_id, name, exc)

    def _persist(self) -> None:
        self.store.save(self.machine.snapshot(), self._records)
        if self._dirty.is_set():
            self._dirty = trio.Event()

    def flush(self) -> None:
        """Write any deferred change now (the daemon calls this when it stops)."""
        if self._dirty.is_set():
            self._persist()

    async def _persist_loop(self) -> None:
        """Write deferred changes, coalescing whatever arrives in the same moment."""
        while True:
            await self._dirty.wait()
            await trio.sleep(0.01)
            if self._dirty.is_set():
                self._persist()

    def _changed_now(self) -> None:
        for listener in self.listeners:
            listener()

    def _after_model_call(self) -> None:
        if not self.machine.transaction_pending and not self._writable.is_set():
            self._writable.set()
        elif self.machine.transaction_pending and self._writable.is_set():
            self._writable = trio.Event()
        if self._timer_scope is not None:
            self._timer_scope.cancel()  # re-plan the next wake-up

    async def _timer_loop(self) -> None:
        while True:
            wake = self.machine.next_wakeup()
            with trio.CancelScope() as scope:
                self._timer_scope = scope
                if wake is None:
                    await trio.sleep_forever()
                else:
                    await trio.sleep(max(0.0, wake - self.clock.now()))
            self._timer_scope = None
            if scope.cancelled_caught:
                continue
            now = self.clock.now()
            if wake is not None and now < wake:
                # Never act before the promise: the clocks may disagree by a hair.
                await trio.sleep(wake - now)
                now = max(self.clock.now(), wake)
            self._apply(self.machine.tick(now))

    async def _usage_loop(self) -> None:
        while True:
            await trio.sleep(self.usage_interval)
            for claim_id, proc in list(self._procs.items()):
                usage = await trio.to_thread.run_sync(self.runner.usage, proc)
                try:
                    self.machine.record_usage(
                        claim_id,
                        cpu_usage=usage.cpu_usage,
                        memory_mib=usage.memory_usage,
                    )
                except NoSuchClaim:
                    continue


def policy_seconds(value: float) -> int:
    """A configured duration as the model's whole seconds (rounded up: never shorten)."""
    return math.ceil(value)
