"""The agent: the shell around one :class:`slots.Machine`.

It turns the world into model events — API calls, job exits, timer expiries — and
carries out the model's decisions: signal a job's process group, persist and
publish, run the completion action. Every state change is written to the store
before the call that caused it returns.

Concurrency (one trio task tree, no threads touch the model):

* the model is synchronous, so each model call is atomic;
* while a drain transaction is pending, state-changing calls wait
  (:meth:`Agent._wait_writable`) until it is committed, cancelled or expired; reads
  never wait; a second ``start_draining`` is refused at once by the model.

A failed write (:class:`~nodeagent._store.StoreError`: a full disk, an I/O error):

* A **request** (claim, release, suspend, continue, a drain's start, commit or cancel)
  is decided, written, and only then carried out (signals, publication,
  completion action). When the write fails, the model and the process records are put
  back as they were before the request, nothing is carried out, and the StoreError is
  raised: the state in memory is the state on disk, plus the facts below.
* A **fact** (a job's exit, a timer that is due, an expired transaction, the master's
  maintenance mode, a reloaded policy, which the configuration file holds) is carried out
  whatever the write does: it happened, is due, or is the configuration, and undoing it
  would only delay it. The write is retried by the persist service; should the
  daemon stop first, the next start finds the fact again (an exit by re-adoption, a due
  move by the clock). A drain's completion action waits until its state is written.

Claims and their processes, in this order, so that no crash and no failed write can leave
a job program running that the agent has not recorded (an orphan), nor a recorded claim
whose program ran without it: the request is checked; the job is launched *held* (its
process exists, its program does not run yet, :attr:`LaunchSpec.held`) or the pid to adopt
is pinned; the claim and the process's identity are written; then the held program is let
go and the claim acknowledged. A failed write, a refusal or a cancellation before that
kills and reaps the held process, whose program never ran. A crash before the write
leaves a holder that exits by itself when the daemon's end of its pipe closes; a crash
after it leaves a recorded pid whose holder exits the same way, which the next start sees
as the job's end.

Callers' expressions (a one-shot drain's ``check``, a graceful drain's ``start`` against
each new claim's job) are evaluated by the agent's
:class:`~nodeagent._expressions._evaluator.Evaluator` in worker processes, within its time
budget, never on the event loop; the model is then
given the answer. A ``check`` is evaluated against the machine ad at the request's
``now``; a ``start`` against exactly the scope and job ad the model would use, evaluated
again should the machine change during the evaluation. Past the budget the request
is refused (422 ``expression.too_costly``) and nothing changes. The workers start at the
first such expression and end when :meth:`Agent.run` ends. The operator's configured
START is the model's own, evaluated in-process.

Completion hooks and the health check (:mod:`nodeagent.agent._hooks`): the model asks for
them as actions, and each runs in a task of its own. A hook that is due (:class:`RunHook`)
is launched held, its start (pid, boot id) written, and only then its program let go, so
it runs at most once whatever happens: a start that cannot be written kills the held
process, whose program never ran, and the hook fails ("not started"); a drain cancelled
meanwhile starts nothing. It runs under the reaper (:mod:`nodeagent.agent._reaper`) in
its own session and process group, in ``<hook_dir>/<request>-<name>/`` (the runtime
directory, never the durable state: the newest :data:`KEPT_RUNS` are kept), with its
timeout (SIGTERM, then SIGKILL); the reaper keeps the end of its output (stdout and stderr
together) in ``output`` there, at most 128 KiB, and ends whatever the hook left running,
however detached, before it exits itself. So its end — reported to the model (a fact),
counted, and written to the audit log with its start — comes only once nothing it
started runs, and the node cannot open before. A restarted agent finds a hook recorded
as started: the model resolves it, or asks (:class:`AwaitHook`) to wait for its reaper if
it still runs on this boot, never to start it again. A health check
(:class:`RunHealthCheck`) runs the same way, as the agent's user, in
``<hook_dir>/health/``. A stopping agent leaves a running hook or check running (the next
start resolves it).
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import trio

from nodeagent._audit import AuditLog
from nodeagent._clock import Clock
from nodeagent._expressions._evaluator import EXIT_TIMEOUT, Evaluator, ExpressionTooCostly
from nodeagent._store import StoreError
from nodeagent._when import in_words, iso_time
from nodeagent.agent._hooks import (
    KEPT_RUNS,
    Ended,
    HealthSpec,
    HookCounts,
    HookSpec,
    Output,
    hook_environment,
    prune_runs,
    read_output,
    reaped,
    run_to_end,
)
from nodeagent.agent._processes import (
    AlreadyClaimed,
    JobProcess,
    LaunchSpec,
    NoSuchProcess,
    ProcessError,
    ProcessRunner,
    daemon_environment,
)
from nodeagent.agent._store import ProcessRecord, StateStore
from slots import (
    HEALTH_OUTPUT_LIMIT,
    OUTPUT_LIMIT,
    Action,
    AwaitHook,
    ClaimInfo,
    CompletionAction,
    DrainEstimate,
    DrainRequest,
    DrainState,
    HealthState,
    HookState,
    JobSpec,
    Machine,
    NoSuchClaim,
    OnCompletion,
    Publish,
    Resources,
    RunHealthCheck,
    RunHook,
    Schedule,
    SignalJob,
    SlotsError,
    effective_retirement,
    outcome_message,
)

__all__ = ["Agent", "ClaimRequest", "policy_seconds"]

log = logging.getLogger("nodeagent.agent")

T = TypeVar("T")

#: Evaluations of one claim's start expression, each begun again because the machine
#: changed while it ran, before the claim is refused as too costly.
_START_ROUNDS = 5

#: Seconds between retries of a deferred write that failed (doubling up to the maximum).
_RETRY_MIN, _RETRY_MAX = 1.0, 30.0


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
        store: StateStore,
        runner: ProcessRunner,
        clock: Clock,
        execute_dir: Path,
        processes: Mapping[str, ProcessRecord] | None = None,
        usage_interval: float = 10.0,
        evaluator: Evaluator | None = None,
        hooks: Mapping[str, HookSpec] | None = None,
        health: HealthSpec | None = None,
        hook_dir: Path | None = None,
        boot_id: Callable[[], str | None] = lambda: None,
        audit: AuditLog | None = None,
    ) -> None:
        """``hooks`` and ``health`` are the configured commands (the model's policy holds
        their names and the gate's schedule); hooks and checks run, and keep their output,
        under ``hook_dir`` (the daemon's: ``<runtime_dir>/hooks``; default: ``hooks``
        beside ``execute_dir``); ``boot_id`` reads the
        machine's boot id; ``audit`` records each hook's start and end and the health
        gate's changes."""
        self.machine = machine
        self.store = store
        self.runner = runner
        self.clock = clock
        self.execute_dir = execute_dir
        self.usage_interval = usage_interval
        #: Callers' expressions; its workers start at the first one, end with :meth:`run`.
        self.evaluator = evaluator if evaluator is not None else Evaluator()
        self._records: dict[str, ProcessRecord] = dict(processes or {})
        self._procs: dict[str, JobProcess] = {}
        self._nursery: trio.Nursery | None = None
        self._timer_scope: trio.CancelScope | None = None
        self._writable = trio.Event()
        self._writable.set()
        self._dirty = trio.Event()
        self._unsaved_completion: CompletionAction | None = None
        # The drain log (:meth:`_tell`): lines an entry point queued, the request as last
        # told, the drains whose deadline was told, the claims whose eviction was told.
        self._story: list[str] = []
        self._told: DrainRequest | None = self.machine.request
        self._deadline_told: set[str] = set()
        self._eviction_told: set[str] = set()
        self.completion: CompletionAction | None = None
        self.completed = trio.Event()
        #: Called after every published change (the master link pushes the ad then).
        self.listeners: list[Callable[[], None]] = []
        self.hooks: dict[str, HookSpec] = dict(hooks or {})
        self.health: HealthSpec | None = health
        self.hook_dir = hook_dir if hook_dir is not None else execute_dir.parent / "hooks"
        self.boot_id = boot_id
        self.audit = audit
        #: Hook runs and health checks since the start, for the metrics.
        self.counts = HookCounts()

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Re-adopt the jobs of a previous run, then serve timers, exits and samples.

        When it ends (cancelled, or failing), the expression workers end with it.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._readopt()
                nursery.start_soon(self._timer_loop)
                nursery.start_soon(self._persist_loop)
                if self.usage_interval > 0:
                    nursery.start_soon(self._usage_loop)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(2 * EXIT_TIMEOUT):
                await self.evaluator.aclose()

    async def _readopt(self) -> None:
        """Adopt every job of the claims the state holds, then tell the model of those
        that are gone, then do what fell due while the daemon was down.

        Every live job is adopted before the model hears of any exit: a job's end moves
        the model on (a drain evicts what is due), and a signal for a claim whose process
        is not adopted yet would be lost — its job would never get its SIGTERM, only the
        hard kill of a later start.
        """
        now = self.clock.now()
        gone: list[str] = []
        adopted: list[tuple[str, JobProcess]] = []
        for info in self.machine.claims(now):
            record = self._records.get(info.claim_id)
            proc: JobProcess | None = None
            if record is not None:
                try:
                    proc = await self.runner.adopt(
                        record.pid,
                        start_time=record.start_time,
                        boot_start=record.boot_start,
                        boot_id=record.boot_id,
                    )
                except (NoSuchProcess, ProcessError) as exc:
                    log.info("claim %s: job pid %s is gone (%s)", info.claim_id, record.pid, exc)
            if proc is None or record is None:
                self._records.pop(info.claim_id, None)
                gone.append(info.claim_id)
                continue
            log.info("claim %s: re-adopted job pid %s", info.claim_id, record.pid)
            self._records[info.claim_id] = self._record(info.claim_id, proc, argv=record.argv)
            adopted.append((info.claim_id, proc))
        for claim_id, proc in adopted:  # watched once all are adopted: an exit moves the model
            self._watch_job(claim_id, proc)
        for claim_id in gone:
            self._apply(self.machine.job_exited(self.clock.now(), claim_id))
        # Whatever was due while the daemon was down (expired transactions, evictions),
        # then a hook due or started, a health check due.
        self._apply(self.machine.tick(self.clock.now()))
        self._reopen_after_boot()
        self._apply(self.machine.restarted(self.clock.now(), boot_id=self.boot_id()))
        self._persist()

    def _reopen_after_boot(self) -> None:
        """A shutdown drain that completed before a reboot is cancelled: the node reopens
        by itself (through the health gate when one is configured), logged and audited as
        a drain cancel by the agent."""
        boot_id = self.boot_id()
        ended, actions = self.machine.reopen_after_boot(self.clock.now(), boot_id=boot_id)
        if ended is None:
            return
        self._told = None  # told here
        log.info(
            "drain %s (the shutdown drain of boot %s) cancelled: the machine rebooted (boot "
            "%s), the node reopens%s",
            ended.id,
            ended.boot_id,
            boot_id,
            " once its health check passes" if self.machine.health.closed else "",
        )
        self._apply(actions)
        self._audit_own(
            "drain.cancel",
            ended.id,
            "ok",
            {"reason": ended.reason, "why": "rebooted", "boot_id": boot_id},
        )

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

        The request is checked, the job launched held (or the pid pinned), the claim
        and the process written, then the program let go (see the module docstring).
        A refusal, a failed write (:class:`StoreError`) or a cancellation after the
        launch kills and reaps the held process, whose program never ran; an adopted
        process is left alone. Adopting a pid that already runs a claim's job, or is in
        its process group, raises :class:`AlreadyClaimed`.
        """
        verdicts = _Verdicts()
        await self._admissible(request, verdicts)
        if request.pid is not None:
            self._refuse_claimed(request.pid, None)
            proc = await self.runner.adopt(request.pid)
        else:
            assert request.argv is not None
            proc = await self.runner.launch(
                LaunchSpec(
                    argv=request.argv,
                    env=request.env,
                    cwd=request.cwd,
                    user=request.user,
                    execute_dir=self._execute_dir(str(self.machine.next_slot_number)),
                    held=True,
                )
            )
        try:
            await self._admissible(request, verdicts)
            # No await from the check to the claim: the model sees what was checked.
            if request.pid is not None:
                self._refuse_claimed(proc.identity.pid, proc.identity.pgid)
            info = self._transact(lambda: self._claim(request, proc, verdicts))
        except BaseException:
            if request.pid is None:
                proc.signal_group(signal.SIGKILL)
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await proc.wait()
            raise
        self._watch_job(info.claim_id, proc)
        proc.start()
        return self.machine.claim_info(info.claim_id, self.clock.now())

    async def _admissible(self, request: ClaimRequest, verdicts: _Verdicts) -> None:
        """Wait until the machine is writable and the model admits the claim, a drain's
        start expression evaluated by the evaluator (into ``verdicts``); raise the
        model's refusal. Returns with no await after the model's last check."""
        for _ in range(_START_ROUNDS):
            await self._wait_writable()
            try:
                self.machine.check_claim(
                    self.clock.now(),
                    resources=request.resources,
                    spec=request.spec,
                    drain_start=verdicts,
                )
            except _Unevaluated as missing:
                await verdicts.evaluate(self.evaluator, missing)
                continue
            return
        raise ExpressionTooCostly(
            f"the machine changed during each of {_START_ROUNDS} evaluations of the drain's "
            "start expression for this job"
        )

    def _claim(
        self, request: ClaimRequest, proc: JobProcess, verdicts: _Verdicts
    ) -> tuple[ClaimInfo, list[Action]]:
        now = self.clock.now()
        started_at = None if request.pid is None else min(proc.identity.start_time, now)
        info, actions = self.machine.claim(
            now,
            resources=request.resources,
            spec=request.spec,
            started_at=started_at,
            drain_start=verdicts,
        )
        self._records[info.claim_id] = self._record(info.claim_id, proc, argv=request.argv or ())
        return info, actions

    def _refuse_claimed(self, pid: int, pgid: int | None) -> None:
        for claim_id, record in self._records.items():
            if record.pid == pid:
                raise AlreadyClaimed(f"process {pid} already runs the job of claim {claim_id}")
            if pgid is not None and pgid == record.pgid:
                raise AlreadyClaimed(
                    f"process {pid} is in process group {pgid}, the job of claim {claim_id}"
                )

    async def release(self, claim_id: str) -> ClaimInfo:
        await self._wait_writable()
        self._transact(lambda: (None, self.machine.release(self.clock.now(), claim_id)))
        return self.claim(claim_id)

    async def suspend(self, claim_id: str) -> ClaimInfo:
        await self._wait_writable()
        self._transact(lambda: (None, self.machine.suspend(self.clock.now(), claim_id)))
        return self.claim(claim_id)

    async def continue_(self, claim_id: str) -> ClaimInfo:
        await self._wait_writable()
        self._transact(lambda: (None, self.machine.continue_(self.clock.now(), claim_id)))
        return self.claim(claim_id)

    async def evaluate_check(self, check: str | None, *, commit: bool) -> bool | None:
        """Whether a one-shot drain's ``check`` is true against the machine ad now (the
        request's ``now``), evaluated by the evaluator, for :meth:`start_draining`'s
        ``check_result``; ``None`` when the model will refuse the request before it asks
        (no check, not a one-shot, a request in force). Raises as
        :meth:`Evaluator.is_true`; nothing changes."""
        if check is None or not commit or self.machine.request is not None:
            return None
        return await self.evaluator.is_true(check, self.machine.ad(self.clock.now())["machine"])

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
        check_result: bool | None = None,
        hook: str | None = None,
    ) -> tuple[DrainRequest, DrainEstimate]:
        """Phase 1 (or a one-shot drain). Never waits: a second request is refused.

        ``check_result`` is :meth:`evaluate_check`'s answer for ``check``, called with no
        await in between; the model never evaluates a caller's check on the event loop.
        """
        if check_result is None and check is not None and commit and self.machine.request is None:
            raise ValueError("a one-shot's check is evaluated by evaluate_check() first")

        def decide() -> tuple[tuple[DrainRequest, DrainEstimate], list[Action]]:
            request, estimate, actions = self.machine.start_draining(
                self.clock.now(),
                schedule=schedule,
                reason=reason,
                on_completion=on_completion,
                hook=hook,
                deadline=deadline,
                start=start,
                check=check,
                check_result=check_result,
                commit=commit,
                ttl=ttl,
                requested_by=requested_by,
            )
            self._story.append(_started(request, estimate, commit=commit))
            return (request, estimate), actions

        return self._transact(decide)

    def commit_draining(
        self, request_id: str, *, by: str | None = None
    ) -> tuple[DrainRequest, DrainEstimate]:
        """Phase 2 (``by``: the caller's subject, for the log). A refusal changes nothing,
        except that a commit arriving after the transaction's expiry carries out that
        expiry (a fact: written, published)."""

        def decide() -> tuple[tuple[DrainRequest, DrainEstimate], list[Action]]:
            request, estimate, actions = self.machine.commit_draining(self.clock.now(), request_id)
            self._story.append(
                f"drain {request.id} committed by {by or request.requested_by}: "
                f"{request.schedule} drain, reason {request.reason!r}, "
                f"{_estimate_words(estimate)}{_deadline_words(request)}"
            )
            return (request, estimate), actions

        before = self.machine.request
        try:
            return self._transact(decide)
        except SlotsError:
            if self.machine.request is not before:
                self._apply([Publish()])  # the expired transaction was cancelled on the way
            raise

    def cancel_draining(
        self, request_id: str | None, *, by: str | None = None
    ) -> DrainRequest | None:
        """Cancel the request in force; ``None`` id and no request: a no-op. ``by`` is the
        caller's subject, for the log."""
        request = self.machine.request

        def decide() -> tuple[None, list[Action]]:
            actions = self.machine.cancel_draining(self.clock.now(), request_id)
            if request is not None:
                self._story.append(
                    f"drain {request.id} cancelled by {by or 'the agent'} in state "
                    f"{request.state} (requested by {request.requested_by}, "
                    f"reason {request.reason!r})"
                )
                self._told = None  # told here, not as an expiry
            return None, actions

        self._transact(decide)
        return self.machine.last_request if request is not None else None

    # ------------------------------------------------------------------ the machine's shutdown

    def shutdown(self, *, schedule: Schedule, requested_by: str = "logind") -> None:
        """The machine is shutting down (a fact): close the node and start the shutdown
        drain (:meth:`slots.Machine.shutdown`), recording this boot's id with it. A
        pending transaction is cancelled; its requester's commit is refused. Logged and
        audited; a second call changes nothing."""
        boot_id = self.boot_id() or "unknown"
        started, replaced, actions = self.machine.shutdown(
            self.clock.now(), schedule=schedule, boot_id=boot_id, requested_by=requested_by
        )
        if not actions:
            return
        if replaced is not None:
            self._story.append(
                f"drain {replaced.id} cancelled by the machine's shutdown in state "
                f"{self._told.state if self._told else replaced.state} (requested by "
                f"{replaced.requested_by}, reason {replaced.reason!r})"
            )
            self._told = None
        request = started or self.machine.request
        if started is not None:
            self._story.append(
                f"the machine is shutting down: drain {started.id} ({started.schedule}, "
                f"requested by {requested_by}, reason {started.reason!r}); the node is closed"
            )
        elif request is not None:
            self._story.append(
                f"the machine is shutting down: the node is closed; drain {request.id} "
                f"({request.schedule}, {request.state}, requested by {request.requested_by}) "
                "is kept"
            )
        self._apply(actions)
        if request is not None:
            self._audit_own(
                "drain.shutdown",
                request.id,
                "ok",
                {
                    "schedule": str(request.schedule),
                    "kept": started is None,
                    "replaced": None if replaced is None else replaced.id,
                    "boot_id": boot_id,
                },
            )

    def shutdown_cancelled(self) -> None:
        """The machine's shutdown was cancelled (a fact): ``ShuttingDown`` is cleared and
        the shutdown drain, if still in force, cancelled; logged and audited."""
        told = self._told
        ended, actions = self.machine.shutdown_cancelled(self.clock.now())
        if not actions:
            return
        if ended is not None:
            self._story.append(
                f"drain {ended.id} cancelled: the machine's shutdown was cancelled (state "
                f"{told.state if told else 'unknown'})"
            )
            self._told = None
        else:
            self._story.append("the machine's shutdown was cancelled")
        self._apply(actions)
        if ended is not None:
            self._audit_own(
                "drain.cancel",
                ended.id,
                "ok",
                {"reason": ended.reason, "why": "shutdown cancelled"},
            )

    def kill_all(self) -> int:
        """Hard-kill every job still running or vacating (the machine goes down before
        their vacate time ends); returns how many were killed."""
        actions = self.machine.kill_all(self.clock.now())
        killed = sum(1 for a in actions if isinstance(a, SignalJob) and a.signal == "SIGKILL")
        self._apply(actions)
        return killed

    def set_maintenance(self, mode: str | None, window: Mapping[str, int] | None) -> None:
        """The master's word on this machine: a fact (the master says it again)."""
        self._apply(self.machine.set_maintenance(mode, window))

    def reload_policy(self, policy: Any) -> None:
        """Apply a reloaded policy: a fact (the configuration file holds it, and a next start
        reads it again), carried out at once and written when the store takes it."""
        self._apply(self.machine.set_policy(self.clock.now(), policy))

    def reload_hooks(self, hooks: Mapping[str, HookSpec], health: HealthSpec | None) -> None:
        """The reloaded hooks and health check, for the next runs (one under way keeps what
        it started with); the model's policy follows with :meth:`reload_policy`."""
        self.hooks = dict(hooks)
        self.health = health

    # ------------------------------------------------------------------ hooks and health

    async def _run_hook(self, action: RunHook) -> None:
        """Start a due hook, durably recorded before its program runs; report its end."""
        request = self.machine.request
        if request is None or request.id != action.request_id:
            return  # cancelled before it could start
        spec = self.hooks.get(action.name)
        if spec is None:
            self._hook_not_started(action, f"no hook named {action.name!r} is configured")
            return
        directory = self.hook_dir / f"{action.request_id}-{action.name}"
        self._nursery_soon(
            functools.partial(
                trio.to_thread.run_sync,
                functools.partial(
                    prune_runs,
                    self.hook_dir,
                    keep=KEPT_RUNS - 1,
                    spare=frozenset({"health", directory.name}),
                ),
            )
        )
        try:
            proc = await self.runner.launch(
                LaunchSpec(
                    argv=spec.command,
                    env=hook_environment(spec, node=self.machine.host, request=request),
                    user=spec.user,
                    execute_dir=directory,
                    held=True,
                    reaped=reaped(directory),
                )
            )
        except ProcessError as exc:
            self._hook_not_started(action, str(exc))
            return
        ident = proc.identity
        try:
            self._transact(
                lambda: (
                    None,
                    self.machine.hook_started(
                        self.clock.now(),
                        action.request_id,
                        pid=ident.pid,
                        process_start=ident.start_time,
                        boot_id=self.boot_id(),
                        reboots=spec.reboots,
                        timeout=spec.timeout,
                    ),
                )
            )
        except BaseException as exc:
            # Its program never ran: the held process ends here, unrun.
            proc.signal_group(signal.SIGKILL)
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await proc.wait()
            if isinstance(exc, StoreError):
                self._hook_not_started(action, f"its start could not be written ({exc})")
                return
            if isinstance(exc, SlotsError):
                return  # the drain was cancelled meanwhile
            raise
        proc.start()
        log.info(
            "drain %s: hook %s started (pid %s): %s",
            action.request_id,
            action.name,
            ident.pid,
            " ".join(spec.command),
        )
        self.counts.hook_runs[action.name] += 1
        self._audit_own(
            "hook.start",
            action.request_id,
            "ok",
            {"hook": action.name, "command": list(spec.command), "pid": ident.pid},
        )
        ended = await run_to_end(proc, spec.timeout)
        output = read_output(directory / "output", limit=OUTPUT_LIMIT)
        self._hook_over(action.request_id, action.name, ended, output)

    async def _await_hook(self, action: AwaitHook) -> None:
        """A hook recorded as started on this boot: wait for its process, if it still
        runs, until its deadline; then report it lost (never start it again)."""
        proc: JobProcess | None = None
        if action.pid is not None:
            try:
                proc = await self.runner.adopt(action.pid, start_time=action.process_start)
            except ProcessError:
                proc = None
        if proc is not None:
            log.warning(
                "drain %s: hook %s (pid %s) still runs from before the restart: waiting for it",
                action.request_id,
                action.name,
                action.pid,
            )
            left = math.inf if action.deadline_at is None else action.deadline_at - self.clock.now()
            await run_to_end(proc, left)
        directory = self.hook_dir / f"{action.request_id}-{action.name}"
        output = read_output(directory / "output", limit=OUTPUT_LIMIT)
        try:
            actions = self.machine.hook_lost(
                self.clock.now(),
                action.request_id,
                boot_id=self.boot_id(),
                output=output.text,
                output_dropped=output.dropped,
            )
        except SlotsError:
            return
        self._apply(actions)
        self._hook_recorded(action.request_id, action.name)

    def _hook_not_started(self, action: RunHook, reason: str) -> None:
        log.error("drain %s: hook %s not started: %s", action.request_id, action.name, reason)
        try:
            actions = self.machine.hook_not_started(self.clock.now(), action.request_id, reason)
        except SlotsError:
            return  # the drain was cancelled meanwhile
        self._apply(actions)
        self._hook_recorded(action.request_id, action.name)

    def _hook_over(self, request_id: str, name: str, ended: Ended, output: Output) -> None:
        try:
            actions = self.machine.hook_ended(
                self.clock.now(),
                request_id,
                exit_status=ended.exit_status,
                timed_out=ended.timed_out,
                output=output.text,
                output_dropped=output.dropped,
            )
        except SlotsError:
            return
        self._apply(actions)
        self._hook_recorded(request_id, name)

    def _hook_recorded(self, request_id: str, name: str) -> None:
        """Log, count and audit how a hook ended (as the model now records it)."""
        found = self.machine.hook_run()
        if found is None or found[0] != request_id:
            return
        _, run = found
        failed = run.state is not HookState.SUCCEEDED
        if failed:
            self.counts.hook_failures[name] += 1
        status = "" if run.exit_status is None else f" (exit status {run.exit_status})"
        (log.warning if failed else log.info)(
            "drain %s: hook %s %s%s: %s", request_id, name, run.state, status, run.message
        )
        if run.output_dropped:
            log.info(
                "drain %s: hook %s: the %d bytes of its output before its last %d are not kept",
                request_id,
                name,
                run.output_dropped,
                len(run.output.encode()),
            )
        self._audit_own(
            "hook.end",
            request_id,
            "ok" if not failed else f"hook.{run.state}",
            {
                "hook": name,
                "state": str(run.state),
                "exit_status": run.exit_status,
                "message": run.message,
                "output": run.output,
                "output_dropped": run.output_dropped,
            },
        )

    async def _run_health(self) -> None:
        """Run the health check the model asked for and report its result."""
        spec = self.health
        if spec is None:
            return  # unconfigured meanwhile: the gate opened with it
        directory = self.hook_dir / "health"
        before = self.machine.health.state
        try:
            proc = await self.runner.launch(
                LaunchSpec(
                    argv=spec.command,
                    env={**daemon_environment(), "NODEAGENT_NODE": self.machine.host},
                    execute_dir=directory,
                    reaped=reaped(directory),  # each check's output is its own
                )
            )
        except ProcessError as exc:
            ended, output, message = None, Output(), f"could not start: {exc}"
        else:
            ended = await run_to_end(proc, spec.timeout)
            output = read_output(directory / "output", limit=HEALTH_OUTPUT_LIMIT)
            message = outcome_message(
                ended.exit_status, timed_out=spec.timeout if ended.timed_out else None
            )
        passed = ended is not None and ended.exit_status == 0 and not ended.timed_out
        self.counts.health_checks += 1
        if not passed:
            self.counts.health_failures += 1
        self._apply(
            self.machine.health_result(
                self.clock.now(),
                passed=passed,
                message="passed" if passed else message,
                output=output.text,
                output_dropped=output.dropped,
            )
        )
        after = self.machine.health
        if after.state is not before:
            (log.info if after.state is HealthState.PASSING else log.warning)(
                "health check: %s (%s)", after.state, after.message
            )
            self._audit_own(
                f"health.{after.state}",
                None,
                "ok" if after.state is not HealthState.FAILING else "health.failing",
                {
                    "reason": after.reason,
                    "message": after.message,
                    "output": after.output,
                    "output_dropped": after.output_dropped,
                },
            )

    def _audit_own(
        self, action: str, request_id: str | None, result: str, details: Mapping[str, Any]
    ) -> None:
        """An audit record of the agent's own doing, written (and fsync'd) at once, as
        the state is; a failure to write it is logged."""
        if self.audit is None:
            return
        try:
            self.audit.record(
                subject="nodeagent",
                peer=f"pid {os.getpid()}",
                action=action,
                result=result,
                request_id=request_id,
                details=details,
                now=self.clock.now(),
            )
        except (OSError, ValueError) as exc:
            log.error("audit record of %s (%s) not written: %s", action, result, exc)

    def _nursery_soon(self, task: Callable[..., Any], *args: Any) -> None:
        assert self._nursery is not None, "the agent is not running"
        self._nursery.start_soon(task, *args)

    # ------------------------------------------------------------------ internals

    async def _wait_writable(self) -> None:
        while self.machine.transaction_pending:
            await self._writable.wait()

    def _execute_dir(self, claim_id: str) -> Path:
        return self.execute_dir / f"slot1_{claim_id}"

    def _record(
        self, claim_id: str, proc: JobProcess, *, argv: tuple[str, ...] = ()
    ) -> ProcessRecord:
        ident = proc.identity
        return ProcessRecord(
            claim_id=claim_id,
            pid=ident.pid,
            start_time=ident.start_time,
            pgid=ident.pgid,
            argv=argv,
            execute_dir=str(self._execute_dir(claim_id)),
            boot_start=ident.boot_start,
            boot_id=ident.boot_id,
        )

    def _watch_job(self, claim_id: str, proc: JobProcess) -> None:
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

    def _transact(self, decide: Callable[[], tuple[T, list[Action]]]) -> T:
        """Carry out one request: decide, write, then signal, publish and complete.

        ``decide`` makes the model call (and may add process records). A refusal it
        raises propagates as it is. If the write fails, the model and the process
        records are put back as they were before ``decide``, nothing is carried out,
        and the :class:`StoreError` propagates.
        """
        machine = copy.deepcopy(self.machine)
        records, told = dict(self._records), self._told
        try:
            result, actions = decide()
        except BaseException:
            self._story.clear()
            self._told = told
            self._after_model_call()
            raise
        if _changes(actions):
            try:
                self._save()
            except StoreError as exc:
                log.error("state not written, request undone: %s", exc)
                self._story.clear()
                self.machine, self._records, self._told = machine, records, told
                self._after_model_call()
                raise
        self._carry_out(actions, saved=True)
        return result

    def _apply(self, actions: list[Action], *, durable: bool = True) -> None:
        """Carry out a fact's decisions: persist (or defer), then signal, then publish.

        ``durable`` false defers the write to the persist service (still before any
        later request is acknowledged, since every request writes the whole state). A
        failed write is retried by the persist service; the actions are carried out
        regardless, except a completion action, which waits for its state to be written.
        """
        saved = False
        if _changes(actions):
            # The end of a drain is written at once: the daemon may exit right after it.
            if durable or any(isinstance(a, CompletionAction) for a in actions):
                saved = self._persist()
            else:
                self._dirty.set()
        self._carry_out(actions, saved=saved)

    def _carry_out(self, actions: list[Action], *, saved: bool) -> None:
        self._tell(actions)
        for action in actions:
            if isinstance(action, SignalJob):
                self._signal(action.claim_id, action.signal)
            elif isinstance(action, CompletionAction):
                if saved:
                    self._complete(action)
                else:
                    self._unsaved_completion = action
            elif isinstance(action, RunHook):
                self._nursery_soon(self._run_hook, action)
            elif isinstance(action, AwaitHook):
                self._nursery_soon(self._await_hook, action)
            elif isinstance(action, RunHealthCheck):
                self._nursery_soon(self._run_health)
        if any(isinstance(a, Publish) for a in actions):
            self._changed_now()
        self._after_model_call()

    def _tell(self, actions: list[Action]) -> None:
        """Log the drain's events that ``actions`` (and the model call before them) carry,
        once each, at INFO: what an entry point queued, an expiry, a deadline reached (the
        escalation to a quick drain of the jobs it cuts), each eviction with its job, the
        node found empty, a request's end and what follows it."""
        now = self.clock.now()
        for line in self._story:
            log.info("%s", line)
        self._story.clear()
        told, current = self._told, self.machine.request
        if told is not None and (current is None or current.id != told.id):
            ended = self.machine.last_request
            if ended is not None and ended.id == told.id:
                self._tell_end(told, ended)
        if current is not None:
            changed = told is None or told.id != current.id or told.state is not current.state
            who = f"requested by {current.requested_by}, reason {current.reason!r}"
            if changed and current.state is DrainState.DRAINED:
                log.info(
                    "drain %s: the node is empty (%s); it stays closed until the request "
                    "is cancelled",
                    current.id,
                    who,
                )
            elif changed and current.state is DrainState.HOOK_PENDING:
                log.info(
                    "drain %s: the node is empty (%s); its completion: hook %s",
                    current.id,
                    who,
                    current.hook,
                )
            if (
                current.state is DrainState.DRAINING
                and current.schedule is Schedule.GRACEFUL
                and current.deadline_at is not None
                and current.deadline_at <= now
                and current.id not in self._deadline_told
                and any(isinstance(a, SignalJob) for a in actions)
            ):
                self._deadline_told.add(current.id)
                log.info(
                    "drain %s: its deadline %s is reached: escalated to a quick drain of the "
                    "jobs still running, cutting their promises (requested by %s, reason %r)",
                    current.id,
                    iso_time(current.deadline_at),
                    current.requested_by,
                    current.reason,
                )
        self._told = current
        for action in actions:
            if isinstance(action, SignalJob) and action.claim_id not in self._eviction_told:
                self._tell_eviction(action, current, now)

    def _tell_end(self, told: DrainRequest, ended: DrainRequest) -> None:
        who = f"requested by {ended.requested_by}, reason {ended.reason!r}"
        if ended.state is DrainState.CANCELLED and told.state is DrainState.PENDING:
            log.info(
                "drain %s expired uncommitted at %s (%s)", ended.id, iso_time(told.expires_at), who
            )
        elif ended.state is DrainState.CANCELLED:
            log.info("drain %s cancelled in state %s (%s)", ended.id, told.state, who)
        elif ended.on_completion is OnCompletion.RESUME:
            log.info(
                "drain %s complete: the node is empty and takes work again (%s)", ended.id, who
            )
        elif ended.on_completion in (OnCompletion.EXIT, OnCompletion.RESTART):
            log.info(
                "drain %s complete: the node is empty; the agent will %s (%s)",
                ended.id,
                ended.on_completion,
                who,
            )
        else:
            log.info("drain %s complete (%s, %s)", ended.id, ended.completion, who)
        self._deadline_told.discard(ended.id)

    def _tell_eviction(self, action: SignalJob, request: DrainRequest | None, now: float) -> None:
        try:
            info = self.machine.claim_info(action.claim_id, now)
        except NoSuchClaim:
            return
        if info.evicted_at is None:
            return  # a SIGCONT or SIGSTOP, not an eviction
        self._eviction_told.intersection_update(c.claim_id for c in self.machine.claims(now))
        self._eviction_told.add(action.claim_id)
        promise = effective_retirement(
            self.machine.policy.max_job_retirement_time, info.spec.max_job_retirement_time
        )
        # The job keeps its promise when its vacate time (from this signal to its hard
        # kill) ends by it: a graceful drain's SIGTERM comes one vacate time before.
        vacate = (
            0.0
            if info.hard_kill_at is None or info.evicted_at is None
            else max(0.0, info.hard_kill_at - info.evicted_at)
        )
        cut = max(0.0, promise - info.run - vacate)
        proc = self._procs.get(action.claim_id)
        pid = proc.identity.pid if proc is not None else None
        if request is None or request.state is not DrainState.DRAINING:
            why = "released"
            by = ""
        else:
            by = (
                f" (drain {request.id}, requested by {request.requested_by}, "
                f"reason {request.reason!r})"
            )
            if request.schedule is Schedule.FAST:
                why = "a fast drain kills it now"
            elif request.schedule is Schedule.QUICK:
                why = "a quick drain evicts it now"
            elif cut > 0 and request.deadline_at is not None:
                why = f"the drain's deadline {iso_time(request.deadline_at)} is reached"
            elif cut > 0:
                why = "the drain evicts it before its promise"
            else:
                why = "its retirement is over: its promise is kept"
        log.info(
            "claim %s: evicting job %s (pid %s): %s; promise cut by %s%s",
            action.claim_id,
            info.job_id,
            pid,
            why,
            in_words(cut),
            by,
        )

    def _complete(self, action: CompletionAction) -> None:
        log.info("drain %s complete: %s", action.request_id, action.action)
        self._unsaved_completion = None
        self.completion = action
        self.completed.set()

    def _signal(self, claim_id: str, name: str) -> None:
        proc = self._procs.get(claim_id)
        if proc is None:
            return
        log.info("claim %s: %s to process group %s", claim_id, name, proc.identity.pgid)
        try:
            proc.signal_group(signal.Signals[name])
        except ProcessError as exc:
            log.warning("claim %s: cannot send %s: %s", claim_id, name, exc)

    def _save(self) -> None:
        """Write the whole state now; raises :class:`StoreError`, changing nothing then."""
        self.store.save(self.machine.snapshot(), self._records)
        if self._dirty.is_set():
            self._dirty = trio.Event()
        if self._unsaved_completion is not None:
            self._complete(self._unsaved_completion)

    def _persist(self) -> bool:
        """Write the whole state now; on failure log it and leave it to the persist service."""
        try:
            self._save()
        except StoreError as exc:
            log.error("state not written, will retry: %s", exc)
            self._dirty.set()
            return False
        return True

    def flush(self) -> None:
        """Write any deferred change now (the daemon calls this when it stops).

        A failure is logged, not raised: what was not written is found again by the
        next start (exits by re-adoption, due moves by the clock).
        """
        if self._dirty.is_set():
            self._persist()

    async def _persist_loop(self) -> None:
        """Write deferred changes, coalescing whatever arrives in the same moment; retry a
        failed write after a pause that doubles up to :data:`_RETRY_MAX`."""
        retry = _RETRY_MIN
        while True:
            await self._dirty.wait()
            await trio.sleep(0.01)
            if not self._dirty.is_set():
                continue
            if self._persist():
                retry = _RETRY_MIN
            else:
                await trio.sleep(retry)
                retry = min(retry * 2, _RETRY_MAX)

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


class _Unevaluated(Exception):
    """The model asked for a start expression's value that is not known yet."""

    def __init__(self, text: str, my: Mapping[str, Any], target: Mapping[str, Any]) -> None:
        super().__init__(text)
        self.text = text
        self.my = dict(my)
        self.target = dict(target)


class _Verdicts:
    """The model's ``drain_start`` seam (:data:`slots._machine.StartVerdict`): answers
    from values the evaluator gave for exactly these (expression, MY, TARGET), raises
    :class:`_Unevaluated` for any other, before the model changes anything."""

    def __init__(self) -> None:
        self._known: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = []

    def __call__(self, text: str, my: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
        for known_text, known_my, known_target, value in self._known:
            if known_text == text and known_my == my and known_target == target:
                return value
        raise _Unevaluated(text, my, target)

    async def evaluate(self, evaluator: Evaluator, missing: _Unevaluated) -> None:
        value = await evaluator.is_true(missing.text, missing.my, missing.target)
        self._known.append((missing.text, missing.my, missing.target, value))


def _estimate_words(estimate: DrainEstimate) -> str:
    return (
        f"expected empty at {iso_time(estimate.completion)} "
        f"(in {in_words(estimate.completion - estimate.now)}), badput {estimate.badput} core-s"
    )


def _deadline_words(request: DrainRequest) -> str:
    if request.deadline_at is not None:
        return f", deadline {iso_time(request.deadline_at)}"
    if request.deadline is not None:
        return f", deadline {in_words(request.deadline)} after its commit"
    return ""


def _started(request: DrainRequest, estimate: DrainEstimate, *, commit: bool) -> str:
    """The log line of a new request: phase 1, or a one-shot drain."""
    what = "started (one-shot)" if commit else "phase 1"
    pending = (
        f"; pending until {iso_time(request.expires_at)}" if request.expires_at is not None else ""
    )
    return (
        f"drain {request.id} {what} by {request.requested_by}: {request.schedule} drain, "
        f"reason {request.reason!r}, on completion {request.completion}, "
        f"{_estimate_words(estimate)}{_deadline_words(request)}{pending}"
    )


def _changes(actions: list[Action]) -> bool:
    """Whether the model changed its state (it then asks to publish, or completes)."""
    return any(isinstance(a, Publish | CompletionAction) for a in actions)


def policy_seconds(value: float) -> int:
    """A configured duration as the model's whole seconds (rounded up: never shorten)."""
    return math.ceil(value)
