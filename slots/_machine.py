"""The machine: one partitionable slot, dynamic slots per claim, and the drain request.

A sans-IO state machine. The shell feeds it events (a claim request, a job's exit,
an HTTP drain request, a timer firing) with the current wall-clock time ``now``;
each mutating method returns the :data:`~slots.Action` list the shell must carry
out, in order. :meth:`Machine.next_wakeup` says when :meth:`Machine.tick` is due.
Every method that raises leaves the machine exactly as it was.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slots import _classad
from slots._ads import drain_estimates
from slots._drain import (
    AFTER_DRAINED,
    Action,
    AwaitHook,
    Blocker,
    CompletionAction,
    DrainEstimate,
    DrainRequest,
    DrainState,
    OnCompletion,
    Publish,
    RunHealthCheck,
    RunHook,
    SignalJob,
)
from slots._errors import (
    CheckFailed,
    ClaimNotActive,
    DrainInProgress,
    HookRunning,
    InvalidRequest,
    NoSuchClaim,
    NoSuchHook,
    NoSuchRequest,
    NotAccepting,
    NotPending,
    ResourcesInsufficient,
    TransactionExpired,
    TransactionPending,
)
from slots._estimates import (
    Eviction,
    JobTiming,
    Phase,
    Schedule,
    SuspendPolicy,
    clamp,
    effective_retirement,
    plan_evictions,
    retirement_remaining,
    vacate_time,
)
from slots._groups import check_group_name
from slots._health import HealthEvent, HealthGate, HealthPolicy, HealthState, check_health_move
from slots._hooks import (
    HEALTH_OUTPUT_LIMIT,
    HookRun,
    HookState,
    ad_text,
    check_hook_name,
    kept_output,
    outcome_message,
    printable_tail,
)
from slots._request_states import FINISHED, RequestEvent, check_request_move
from slots._resources import Resources
from slots._site import SiteAttributes, check_site_attributes
from slots._states import ACTIVE, Activity, State, check_move
from slots._window import BeforeWindow, admit_before_window, window_start

__all__ = [
    "SHUTDOWN_REASON",
    "ClaimInfo",
    "JobSpec",
    "Machine",
    "MachinePolicy",
    "StartVerdict",
]

#: Whether a caller's start expression is true: ``(expression, my, target) -> bool``.
StartVerdict = Callable[[str, Mapping[str, Any], Mapping[str, Any]], bool]

_SIGNALS = frozenset(
    {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGKILL", "SIGALRM"}
)
_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]*$")


def _require_duration(name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be a whole number of seconds, not {value!r}")
    if value < 0:
        raise InvalidRequest(f"{name} must not be negative, not {value}")


def _require_text(name: str, value: str, *, limit: int = 256) -> None:
    if len(value) > limit or not _PRINTABLE.match(value):
        raise InvalidRequest(f"{name} must be printable text of at most {limit} characters")


@dataclass(frozen=True, kw_only=True, slots=True)
class MachinePolicy:
    """The machine's draining policy (HTCondor knobs; whole seconds), the completion
    hooks a drain may name (``hooks``: their names; the shell holds their commands), the
    health check before service (``health``; ``None``: none, the node opens at once) and
    the site attributes the machine ad publishes (``attributes``: see
    :func:`check_site_attributes`; START sees them in MY), and what a claim whose
    retirement promise would outlive the maintenance window's start gets
    (``before_window``: :mod:`slots._window`).
    """

    max_job_retirement_time: int = 0
    machine_max_vacate_time: int = 600
    start: str = "true"
    suspend_policy: SuspendPolicy = SuspendPolicy.KEEP
    transaction_ttl: float = 30.0
    hooks: frozenset[str] = frozenset()
    #: How long some hooks are expected to take, as declared (sorted ``(name, seconds)``):
    #: published for the master's estimate of a rolling operation's end.
    hook_durations: tuple[tuple[str, float], ...] = ()
    health: HealthPolicy | None = None
    attributes: SiteAttributes = ()
    before_window: BeforeWindow = BeforeWindow.REFUSE

    def __post_init__(self) -> None:
        if check_site_attributes(dict(self.attributes)) != self.attributes:
            raise InvalidRequest("site attributes are given as sorted (name, value) pairs")
        _require_duration("MaxJobRetirementTime", self.max_job_retirement_time)
        _require_duration("MachineMaxVacateTime", self.machine_max_vacate_time)
        _classad.validate_expression(self.start)
        if not self.transaction_ttl > 0:
            raise InvalidRequest("the transaction time-to-live must be positive")
        for name in self.hooks:
            check_hook_name(name)
        if tuple(sorted(self.hook_durations)) != self.hook_durations:
            raise InvalidRequest("hook durations are given as sorted (name, seconds) pairs")
        for name, seconds in self.hook_durations:
            if name not in self.hooks:
                raise InvalidRequest(f"a duration is declared for hook {name!r}, which is not one")
            if not (math.isfinite(seconds) and seconds > 0):
                raise InvalidRequest(f"hook {name!r}: its expected duration must be positive")


@dataclass(frozen=True, kw_only=True, slots=True)
class JobSpec:
    """What a claim's job promises: its owner, retirement, vacate time and soft-kill
    signal, and the job group it is an instance of (``group``: see :data:`GROUP_NAME`;
    published as ``JobGroup``; ``None``: none)."""

    job_id: str | None = None
    owner: str = "nobody"
    max_job_retirement_time: int | None = None
    job_max_vacate_time: int | None = None
    kill_signal: str = "SIGTERM"
    group: str | None = None

    def __post_init__(self) -> None:
        if self.job_id is not None:
            _require_text("job_id", self.job_id)
        if self.group is not None:
            check_group_name(self.group)
        _require_text("owner", self.owner)
        _require_duration("MaxJobRetirementTime", self.max_job_retirement_time, optional=True)
        _require_duration("JobMaxVacateTime", self.job_max_vacate_time, optional=True)
        if self.kill_signal not in _SIGNALS:
            raise InvalidRequest(f"unknown kill signal {self.kill_signal!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimInfo:
    """A read-only view of one claim (dynamic slot and its job)."""

    claim_id: str
    slot: str
    resources: Resources
    spec: JobSpec
    job_id: str
    state: State
    activity: Activity
    started_at: float
    run: float
    suspended: float
    accepted_while_draining: bool
    evicted_at: float | None
    hard_kill_at: float | None
    #: By how many seconds its retirement promise was cut at admission to end at the
    #: maintenance window's start (``before_window = "shorten"``); ``None``: not cut.
    retirement_shortened_by: int | None = None


@dataclass(kw_only=True, slots=True)
class _Claim:
    """Mutable state of one dynamic slot; owned by :class:`Machine` only."""

    number: int
    resources: Resources
    spec: JobSpec
    state: State
    activity: Activity
    entered_state: float
    entered_activity: float
    started_at: float
    run_base: float
    running_since: float | None
    suspend_base: float = 0.0
    suspended_since: float | None = None
    accepted_in: str | None = None
    evicted_at: float | None = None
    hard_kill_at: float | None = None
    # When the run last stopped accruing (suspended, evicted); not kept across restarts:
    # only the second it happened in reads it (:meth:`run_as_of`).
    stopped_at: float | None = None
    drain_eviction: bool = False
    cpu_usage: float = 0.0
    memory_usage: int = 0
    retirement_shortened_by: int | None = None

    @property
    def claim_id(self) -> str:
        return str(self.number)

    @property
    def job_id(self) -> str:
        return self.spec.job_id if self.spec.job_id is not None else self.claim_id

    def pair(self) -> tuple[State, Activity]:
        return (self.state, self.activity)

    def run(self, now: float) -> float:
        if self.running_since is None:
            return self.run_base
        return self.run_base + max(0.0, now - self.running_since)

    def run_as_of(self, whole: int) -> float:
        """The run at the whole second ``whole`` (at most a second before the last
        change): what ran since then is taken off, also when the run stopped in between
        (a suspension or an eviction)."""
        if self.running_since is not None:
            return self.run(whole)
        if self.stopped_at is None:
            return self.run_base
        return max(0.0, self.run_base - max(0.0, self.stopped_at - whole))

    def suspended(self, now: float) -> float:
        if self.suspended_since is None:
            return self.suspend_base
        return self.suspend_base + max(0.0, now - self.suspended_since)

    def phase(self) -> Phase:
        if self.activity is Activity.KILLING:
            return Phase.KILLING
        if self.activity is Activity.VACATING:
            return Phase.VACATING
        if self.activity is Activity.SUSPENDED:
            return Phase.SUSPENDED
        return Phase.RUNNING


class Machine:
    """A node's slots and its drain request; see the module docstring for the protocol."""

    def __init__(
        self,
        *,
        host: str,
        total: Resources,
        policy: MachinePolicy,
        now: float,
        address: str = "",
        ip: str = "",
    ) -> None:
        _require_text("host", host)
        _require_text("ip", ip)
        self.host = host
        self.ip = ip
        self.address = address
        self.total = total
        self.policy = policy
        self.daemon_start_time = now
        self._claims: dict[int, _Claim] = {}
        self._next_slot = 1
        self._next_request = 1
        self._request: DrainRequest | None = None
        self._last_request: DrainRequest | None = None
        self._pslot: tuple[State, Activity] = (State.UNCLAIMED, Activity.IDLE)
        self._pslot_entered_state = now
        self._pslot_entered_activity = now
        self._total_badput = 0.0
        self._total_unclaimed = 0.0
        self._accounted_at = now
        self._idle_since: float | None = None
        self._last_drain_start: float | None = None
        self._last_drain_stop: float | None = None
        self.maintenance_mode: str | None = None
        self.unavailability: dict[str, int] | None = None
        self._health = HealthGate()
        self._shutting_down = False
        self._settle_pslot(now)
        self._refresh_idle(now)

    # ------------------------------------------------------------------ reading

    @property
    def request(self) -> DrainRequest | None:
        """The drain request in force (pending, draining or drained), if any."""
        return self._request

    @property
    def last_request(self) -> DrainRequest | None:
        """The most recent request that ended (cancelled or completed), if any."""
        return self._last_request

    @property
    def drain_state(self) -> DrainState:
        return DrainState.NONE if self._request is None else self._request.state

    @property
    def shutting_down(self) -> bool:
        """Whether the machine itself is shutting down (``ShuttingDown`` in the ad), from
        :meth:`shutdown` until :meth:`shutdown_cancelled`; never saved: a restarted
        daemon starts without it."""
        return self._shutting_down

    @property
    def health(self) -> HealthGate:
        """The health gate (:mod:`slots._health`): closed, the machine takes no work."""
        return self._health

    def hook_run(self) -> tuple[str, HookRun] | None:
        """The most recent completion hook's run and its request id: the request in
        force's, or when none is in force, the last request's (``None``: neither ran one).
        """
        request = self._request if self._request is not None else self._last_request
        if request is None or request.hook_run is None:
            return None
        return request.id, request.hook_run

    @property
    def transaction_pending(self) -> bool:
        """True while phase 1 is done and the requester has not committed or cancelled."""
        return self.drain_state is DrainState.PENDING

    @property
    def next_slot_number(self) -> int:
        return self._next_slot

    @property
    def next_request_id(self) -> int:
        return self._next_request

    @property
    def total_badput(self) -> float:
        return self._total_badput

    def total_unclaimed(self, now: float) -> float:
        """TotalMachineDrainingUnclaimedTime as of ``now`` (cpu-seconds)."""
        return self._total_unclaimed + self._unclaimed_since_accounting(now)

    def free(self) -> Resources:
        """What the partitionable slot still owns."""
        used = Resources()
        for claim in self._claims.values():
            used = used + claim.resources
        return self.total - used

    def accepting(self) -> bool:
        """Whether new claims can be admitted at all (``Start`` in the ad).

        A pending transaction does not change it: claims wait, they are not refused.
        A closed health gate makes it false. START is evaluated against no job (an empty
        TARGET, so that ``MY.`` names resolve): false only when no job could start.
        """
        if self._health.closed or self._shutting_down:
            return False
        if self._draining():
            return self._admits_latecomers()
        return _classad.evaluate(self.policy.start, self._start_scope(), {}) is not False

    def claims(self, now: float) -> list[ClaimInfo]:
        return [self._info(c, now) for c in sorted(self._claims.values(), key=lambda c: c.number)]

    def claim_info(self, claim_id: str, now: float) -> ClaimInfo:
        return self._info(self._claim(claim_id), now)

    def drain_estimate(
        self, now: float, schedule: Schedule, *, deadline: float | None = None
    ) -> DrainEstimate:
        """A drain's estimate at whole-second resolution, with its blockers.

        ``deadline`` (seconds from now) applies to a drain that is not yet running;
        for the drain in force, its own deadline applies.
        """
        if self._draining():
            assert self._request is not None
            deadline_at = self._request.deadline_at
        else:
            deadline_at = None if deadline is None else math.floor(now) + deadline
        whole = math.floor(now)
        claims = self._active_claims()
        timings = [self._timing(c, now, integer=True) for c in claims]
        plans = plan_evictions(
            timings,
            schedule=schedule,
            now=whole,
            machine_max_vacate_time=self.policy.machine_max_vacate_time,
            suspend_policy=self.policy.suspend_policy,
            deadline_at=deadline_at,
        )
        if plans:
            completion = clamp(max(p.hard_kill_at for p in plans))
        else:
            completion = clamp(self._idle_value(now))
        blockers = sorted(
            (self._blocker(c, t, p) for c, t, p in zip(claims, timings, plans, strict=True)),
            key=lambda b: (-b.gone_by, int(b.claim_id)),
        )
        return DrainEstimate(
            schedule=schedule,
            now=whole,
            completion=completion,
            badput=clamp(sum(p.badput for p in plans)),
            blockers=tuple(blockers),
        )

    def next_wakeup(self) -> float | None:
        """The earliest instant at which :meth:`tick` has something to do, if any.

        The shell sets its timer to this after every call into the model.
        """
        instants: list[float] = []
        if self._request is not None and self._request.state is DrainState.PENDING:
            assert self._request.expires_at is not None
            instants.append(self._request.expires_at)
        for claim in self._claims.values():
            if claim.activity is Activity.VACATING and claim.hard_kill_at is not None:
                instants.append(claim.hard_kill_at)
        if self._draining():
            for claim, plan in self._due_plans(self._accounted_at):
                if claim.state is State.CLAIMED and plan.soft_kill_at is not None and plan.firm:
                    instants.append(plan.soft_kill_at)
        if self._health.closed and self._health.due_at is not None:
            instants.append(self._health.due_at)
        return min(instants) if instants else None

    # ------------------------------------------------------------------ claims

    def check_claim(
        self,
        now: float,
        *,
        resources: Resources,
        spec: JobSpec,
        drain_start: StartVerdict | None = None,
    ) -> None:
        """Raise whatever :meth:`claim` would raise for this request now; change nothing.

        The shell checks before it starts a job's process, then claims once it runs.
        ``drain_start`` as in :meth:`claim`.
        """
        self._admission(now, resources, spec, started_at=None, drain_start=drain_start)

    def claim(
        self,
        now: float,
        *,
        resources: Resources,
        spec: JobSpec,
        started_at: float | None = None,
        drain_start: StartVerdict | None = None,
    ) -> tuple[ClaimInfo, list[Action]]:
        """Carve a dynamic slot for a job that starts (or started) at ``started_at``.

        Raises :class:`TransactionPending` while a transaction is pending,
        :class:`NotAccepting` when Start is false for this job,
        :class:`ResourcesInsufficient` when the partitionable slot cannot fit it, and
        :class:`WindowAhead` when its retirement promise would end after the maintenance
        window's start and the policy's ``before_window`` is ``refuse`` (with
        ``shorten`` the job's ``MaxJobRetirementTime`` is lowered so that it ends
        there, and the claim says by how much: ``retirement_shortened_by``).

        ``drain_start`` answers whether a graceful drain's caller-supplied ``start``
        expression is true, called as ``drain_start(expression, my, target)`` with the
        partitionable slot's scope as MY and the job's ad as TARGET, before anything
        changes (so a shell may raise from it to evaluate elsewhere and call again);
        ``None`` evaluates it here. The operator's configured START is evaluated here.
        """
        accepted_in, cut = self._admission(
            now, resources, spec, started_at=started_at, drain_start=drain_start
        )
        self._account(now)
        begun = now if started_at is None else started_at
        shortened_by: int | None = None
        if cut is not None:
            granted = self._granted(spec)
            kept = min(granted, cut + math.floor(now - begun))
            spec = dataclasses.replace(spec, max_job_retirement_time=kept)
            shortened_by = granted - kept
        claim = _Claim(
            number=self._next_slot,
            resources=resources,
            spec=spec,
            state=State.CLAIMED,
            activity=Activity.BUSY,
            entered_state=now,
            entered_activity=now,
            started_at=begun,
            run_base=now - begun,
            running_since=now,
            accepted_in=accepted_in,
            retirement_shortened_by=shortened_by,
        )
        self._next_slot += 1
        self._claims[claim.number] = claim
        self._settle_pslot(now)
        self._refresh_idle(now)
        return self._info(claim, now), [Publish()]

    def _admission(
        self,
        now: float,
        resources: Resources,
        spec: JobSpec,
        *,
        started_at: float | None,
        drain_start: StartVerdict | None,
    ) -> tuple[str | None, int | None]:
        """Check a claim request; returns the drain request id that admits a latecomer
        and the whole seconds its retirement promise is cut to before the maintenance
        window (``None``: not cut)."""
        self._no_pending()
        if self._shutting_down:
            raise NotAccepting(f"{self.host} is shutting down; Start is false")
        if resources.cpus < 1:
            raise InvalidRequest("a claim needs at least one cpu")
        if started_at is not None and started_at > now:
            raise InvalidRequest("a job cannot start in the future")
        job_ad = self._job_ad(resources, spec)
        accepted_in: str | None = None
        if self._request is not None:
            if not (
                self._admits_latecomers()
                and self._start_matches(self._request.start, job_ad, drain_start)
            ):
                raise NotAccepting(
                    f"{self.host} is draining (request {self._request.id}); Start is false"
                )
            accepted_in = self._request.id
        elif self._health.closed:
            raise NotAccepting(
                f"{self.host} is not yet healthy (health check {self._health.state}); "
                "Start is false"
            )
        elif not self._start_matches(self.policy.start, job_ad):
            raise NotAccepting(f"{self.host}: START is not true for this job")
        free = self.free()
        if not resources.fits_in(free):
            missing = ", ".join(f"{k} {v}" for k, v in resources.shortfall(free).items())
            raise ResourcesInsufficient(
                f"{self.host}: not enough free resources (short of {missing})"
            )
        run = 0.0 if started_at is None else now - started_at
        cut = admit_before_window(
            now,
            remaining=retirement_remaining(self._granted(spec), run),
            start=window_start(self.unavailability),
            policy=self.policy.before_window,
        )
        return accepted_in, cut

    def job_exited(self, now: float, claim_id: str) -> list[Action]:
        """The claim's job is gone: its dynamic slot disappears and returns its resources.

        Unknown ids raise :class:`NoSuchClaim`. Not blocked by a pending transaction:
        a process exit is a fact, not a request.
        """
        claim = self._claim(claim_id)
        self._account(now)
        del self._claims[claim.number]
        actions: list[Action] = [Publish()]
        actions.extend(self._advance(now))
        return actions

    def release(self, now: float, claim_id: str) -> list[Action]:
        """Vacate the claim: soft-kill its job now, hard-kill it after its vacate time."""
        self._no_pending()
        claim = self._claim(claim_id)
        if claim.state is not State.CLAIMED:
            raise ClaimNotActive(f"claim {claim_id} is already being vacated")
        self._account(now)
        actions = self._soft_kill(claim, now, drain=False)
        actions.append(Publish())
        self._refresh_idle(now)
        return actions

    def suspend(self, now: float, claim_id: str) -> list[Action]:
        """SIGSTOP the claim's job; its run time stops accruing."""
        self._no_pending()
        claim = self._claim(claim_id)
        if claim.activity not in (Activity.BUSY, Activity.RETIRING):
            raise ClaimNotActive(f"claim {claim_id} is {claim.activity}, not running")
        self._account(now)
        self._move(claim, (State.CLAIMED, Activity.SUSPENDED), now)
        claim.run_base = claim.run(now)
        claim.running_since = None
        claim.stopped_at = now
        claim.suspended_since = now
        actions: list[Action] = [SignalJob(claim_id=claim.claim_id, signal="SIGSTOP"), Publish()]
        actions.extend(self._advance(now))
        return actions

    def continue_(self, now: float, claim_id: str) -> list[Action]:
        """SIGCONT the claim's suspended job; it retires again if a graceful drain runs."""
        self._no_pending()
        claim = self._claim(claim_id)
        if claim.activity is not Activity.SUSPENDED:
            raise ClaimNotActive(f"claim {claim_id} is {claim.activity}, not suspended")
        self._account(now)
        self._resume(claim, now)
        actions: list[Action] = [SignalJob(claim_id=claim.claim_id, signal="SIGCONT"), Publish()]
        actions.extend(self._advance(now))
        return actions

    def record_usage(self, claim_id: str, *, cpu_usage: float, memory_mib: int) -> None:
        """Store the latest CpuUsage and MemoryUsage samples of a claim's job."""
        claim = self._claim(claim_id)
        claim.cpu_usage = max(0.0, cpu_usage)
        claim.memory_usage = max(0, memory_mib)

    # ------------------------------------------------------------------ draining

    def start_draining(
        self,
        now: float,
        *,
        schedule: Schedule,
        reason: str = "",
        on_completion: OnCompletion = OnCompletion.NONE,
        hook: str | None = None,
        deadline: float | None = None,
        start: str | None = None,
        check: str | None = None,
        check_result: bool | None = None,
        commit: bool = False,
        ttl: float | None = None,
        requested_by: str | None = None,
    ) -> tuple[DrainRequest, DrainEstimate, list[Action]]:
        """Phase 1 of the drain transaction (or the whole of it with ``commit=True``).

        Returns the new request (``pending``, or ``draining``/``drained`` when
        committed), the estimate for its schedule with blockers, and the actions.
        Raises :class:`DrainInProgress` when a request exists, :class:`InvalidRequest`
        for bad arguments, :class:`NoSuchHook` when ``on_completion`` is
        :attr:`OnCompletion.HOOK` and ``hook`` is not one of the policy's hooks, and
        :class:`CheckFailed` when ``check`` is not true against the machine ad (one-shot
        only); nothing changes then.

        ``check_result`` is whether ``check`` is true against ``self.ad(now)["machine"]``
        as the caller evaluated it (undefined is not true); ``None`` evaluates it here.
        """
        if self._request is not None:
            raise DrainInProgress(
                f"{self.host} already has drain request {self._request.id} ({self._request.state})"
            )
        if self._shutting_down:
            raise DrainInProgress(f"{self.host} is shutting down: it takes no drain request")
        _require_text("reason", reason)
        if requested_by is not None:
            _require_text("requested_by", requested_by)
        if on_completion is OnCompletion.HOOK:
            if hook is None:
                raise InvalidRequest("on_completion hook needs the hook's name (hook:NAME)")
            check_hook_name(hook)
            if hook not in self.policy.hooks:
                known = ", ".join(sorted(self.policy.hooks)) or "none"
                raise NoSuchHook(
                    f"{self.host} has no hook named {hook!r} in its configuration "
                    f"(configured: {known})"
                )
        elif hook is not None:
            raise InvalidRequest("a hook name goes with on_completion hook (hook:NAME)")
        if deadline is not None and (not math.isfinite(deadline) or deadline < 0):
            raise InvalidRequest("deadline must be a non-negative number of seconds")
        if start is not None:
            if schedule is not Schedule.GRACEFUL:
                raise InvalidRequest("a start expression applies only to graceful drains")
            _classad.validate_expression(start)
        ttl = self.policy.transaction_ttl if ttl is None else ttl
        if not (math.isfinite(ttl) and ttl > 0):
            raise InvalidRequest("the transaction time-to-live must be positive")
        if check is not None:
            if not commit:
                raise InvalidRequest("a check expression goes with a one-shot (commit) request")
            _classad.validate_expression(check)
            if check_result is None:
                check_result = _classad.is_true(check, self.ad(now)["machine"])
            if not check_result:
                raise CheckFailed(f"check expression is not true on {self.host}: {check}")
        request_id = str(self._next_request)
        check_request_move(
            self.drain_state, RequestEvent.START, DrainState.PENDING, request=request_id
        )
        self._account(now)
        request = DrainRequest(
            id=request_id,
            schedule=schedule,
            reason=reason,
            on_completion=on_completion,
            state=DrainState.PENDING,
            created_at=now,
            expires_at=now + ttl,
            deadline=deadline,
            start=start,
            requested_by=requested_by,
            hook=hook,
        )
        self._next_request += 1
        self._request = request
        if commit:
            actions = self._commit(now)
            return self._request_or_last(request.id), self.drain_estimate(now, schedule), actions
        estimate_ = self.drain_estimate(now, schedule, deadline=deadline)
        return request, estimate_, [Publish()]

    def commit_draining(
        self, now: float, request_id: str
    ) -> tuple[DrainRequest, DrainEstimate, list[Action]]:
        """Phase 2: commit the pending request; the drain starts now.

        Raises :class:`NoSuchRequest` for a wrong id, :class:`NotPending` when it is
        already committed and :class:`TransactionExpired` when it expired, whether the
        expiry was already carried out or is due now (then the request is cancelled:
        the one change an error makes here).
        """
        last = self._last_request
        if (
            self._request is None
            and last is not None
            and last.id == request_id
            and last.state is DrainState.CANCELLED
            and last.expires_at is not None
            and last.ended_at is not None
            and last.ended_at >= last.expires_at
        ):
            raise TransactionExpired(f"drain request {request_id} expired before its commit")
        request = self._request_by_id(request_id)
        if request.state is not DrainState.PENDING:
            raise NotPending(f"drain request {request_id} is {request.state}, not pending")
        assert request.expires_at is not None
        if now >= request.expires_at:
            self._end_request(now, RequestEvent.EXPIRE, DrainState.CANCELLED)
            raise TransactionExpired(f"drain request {request_id} expired before its commit")
        self._account(now)
        schedule = request.schedule
        actions = self._commit(now)
        return self._request_or_last(request_id), self.drain_estimate(now, schedule), actions

    def cancel_draining(self, now: float, request_id: str | None = None) -> list[Action]:
        """Cancel the request in force (``request_id`` must match when given).

        Start is restored, Drained slots return to Unclaimed, Retiring jobs un-retire
        and keep running; jobs already Vacating or Killing keep dying. A request that
        had drained the machine closes the health gate (when a health check is
        configured): Start stays false until the node is healthy, and the first check
        is asked for at once. Raises :class:`HookRunning` while the request's completion
        hook runs. With no ``request_id`` and no request this is a no-op returning ``[]``.
        """
        if request_id is not None:
            request = self._request_by_id(request_id)
        elif self._request is None:
            return []
        else:
            request = self._request
        if request.state is DrainState.HOOK_RUNNING:
            raise HookRunning(
                f"drain request {request.id}: its hook {request.hook!r} is running; it can be "
                "cancelled once the hook has ended (or its timeout has ended it)"
            )
        self._account(now)
        self._end_request(now, RequestEvent.CANCEL, DrainState.CANCELLED)
        actions: list[Action] = [Publish()]
        actions.extend(self._advance(now))
        return actions

    # ------------------------------------------------------------------ the machine's shutdown

    def shutdown(
        self, now: float, *, schedule: Schedule, boot_id: str, requested_by: str = "logind"
    ) -> tuple[DrainRequest | None, DrainRequest | None, list[Action]]:
        """The machine itself is going down: close it at once and drain it.

        ``ShuttingDown`` is set and ``Start`` is false from now on: no claim is admitted
        and no drain request either (:class:`DrainInProgress`). A pending transaction is
        cancelled (its requester's commit then finds it cancelled). A committed request in
        force that evicts at least as fast as ``schedule`` (``fast``, then ``quick``, then
        ``graceful``), or whose node is already empty (drained, its hook due, running or
        failed), is kept; a slower one is cancelled and replaced. Otherwise the shutdown
        drain starts, committed at once: reason :data:`SHUTDOWN_REASON`, completion
        ``none``, ``boot_id`` the boot it began on (see :meth:`reopen_after_boot`); one
        that replaced an administrator's drain (not the master's, not the defrag daemon's)
        does not reopen the node after the reboot.

        Returns the shutdown drain (``None``: a request in force was kept), the request it
        cancelled (``None``: none), and the actions. A second call while shutting down
        changes nothing and returns ``(None, None, [])``.
        """
        if self._shutting_down:
            return None, None, []
        _require_text("boot_id", boot_id)
        _require_text("requested_by", requested_by)
        self._account(now)
        replaced: DrainRequest | None = None
        actions: list[Action] = [Publish()]
        request = self._request
        if request is not None:
            kept = request.state in AFTER_DRAINED or (
                request.state is DrainState.DRAINING
                and _SPEED[request.schedule] >= _SPEED[schedule]
            )
            if kept:
                self._shutting_down = True
                self._settle_pslot(now)
                actions.extend(self._advance(now))
                return None, None, actions
            self._end_request(now, RequestEvent.CANCEL, DrainState.CANCELLED)
            replaced = self._last_request
        started, _, more = self.start_draining(
            now,
            schedule=schedule,
            reason=SHUTDOWN_REASON,
            commit=True,
            requested_by=requested_by,
        )
        self._shutting_down = True
        # An administrator's drain replaced keeps the node closed after the reboot; the
        # master's and the defrag daemon's are started again by them as they need.
        by = "" if replaced is None else replaced.requested_by or ""
        reopens = replaced is None or by.startswith(("master:", "defrag:"))
        if self._request is not None and self._request.id == started.id:
            self._request = dataclasses.replace(self._request, boot_id=boot_id, reopens=reopens)
        elif self._last_request is not None and self._last_request.id == started.id:
            self._last_request = dataclasses.replace(
                self._last_request, boot_id=boot_id, reopens=reopens
            )
        self._settle_pslot(now)
        actions.extend(more)
        return self._request_or_last(started.id), replaced, actions

    def shutdown_cancelled(self, now: float) -> tuple[DrainRequest | None, list[Action]]:
        """The machine's shutdown was cancelled: ``ShuttingDown`` is cleared and the
        shutdown drain, if it is still the request in force, is cancelled (as
        :meth:`cancel_draining`: a node it had drained stays closed until healthy when a
        health check is configured). A request that replaced it (an administrator's) or
        one it kept stays. Returns the request cancelled (``None``: none) and the actions;
        not shutting down: ``(None, [])``."""
        if not self._shutting_down:
            return None, []
        self._account(now)
        self._shutting_down = False
        request = self._request
        if request is None or not request.shutdown or request.state is DrainState.HOOK_RUNNING:
            self._settle_pslot(now)
            actions: list[Action] = [Publish()]
            actions.extend(self._advance(now))
            return None, actions
        return self._last_after(now, request)

    def kill_all(self, now: float) -> list[Action]:
        """Hard-kill every job that is still running or vacating (``SIGKILL``): the
        machine goes down before their vacate time ends. Counted as the drain's evictions
        when a drain is in force."""
        self._account(now)
        drain = self._draining()
        actions: list[Action] = []
        for claim in self._active_claims():
            if claim.activity is not Activity.KILLING:
                actions.extend(self._hard_kill(claim, now, drain=drain))
        if actions:
            actions.append(Publish())
        return actions

    def reopen_after_boot(
        self, now: float, *, boot_id: str | None
    ) -> tuple[DrainRequest | None, list[Action]]:
        """At a daemon's start: a shutdown drain that completed (``drained``) on another
        boot than ``boot_id`` (the machine rebooted since) is cancelled, so that the node
        reopens by itself, through the health gate when a health check is configured
        (as :meth:`cancel_draining`). An administrator's drain, a shutdown drain still
        draining, or one on this same boot (the daemon restarted alone) stays; so does
        any when ``boot_id`` is unknown, and one that replaced an administrator's drain.
        Returns the request cancelled (``None``: none)
        and the actions."""
        request = self._request
        if (
            boot_id is None
            or request is None
            or request.boot_id is None
            or request.state is not DrainState.DRAINED
            or request.boot_id == boot_id
            or not request.reopens
        ):
            return None, []
        self._account(now)
        return self._last_after(now, request)

    def _last_after(
        self, now: float, request: DrainRequest
    ) -> tuple[DrainRequest | None, list[Action]]:
        """Cancel ``request`` (in force); returns it as ended, and the actions."""
        self._end_request(now, RequestEvent.CANCEL, DrainState.CANCELLED)
        actions: list[Action] = [Publish()]
        actions.extend(self._advance(now))
        return self._last_request, actions

    def tick(self, now: float) -> list[Action]:
        """Do what is due at ``now``: expire a transaction, evict, hard-kill, escalate."""
        self._account(now)
        actions: list[Action] = []
        request = self._request
        if request is not None and request.state is DrainState.PENDING:
            assert request.expires_at is not None
            if now >= request.expires_at:
                self._end_request(now, RequestEvent.EXPIRE, DrainState.CANCELLED)
                actions.append(Publish())
        actions.extend(self._advance(now))
        return actions

    def set_policy(self, now: float, policy: MachinePolicy) -> list[Action]:
        """Apply a reloaded policy; running drains re-plan with the new values.

        Hooks a drain in force names keep their run (the shell holds the command it
        started with); a hook that is due and no longer configured cannot start. With no
        health check any more, a closed health gate opens at once.
        """
        self._account(now)
        self.policy = policy
        if policy.health is None and self._health.closed:
            check_health_move(self._health.state, HealthEvent.DISABLE, HealthState.PASSING)
            self._health = HealthGate(
                last_check=self._health.last_check,
                message=self._health.message,
                output=self._health.output,
                output_dropped=self._health.output_dropped,
            )
        self._settle_pslot(now)
        actions: list[Action] = [Publish()]
        actions.extend(self._advance(now))
        return actions

    # ------------------------------------------------------------------ hooks and health

    def hook_started(
        self,
        now: float,
        request_id: str,
        *,
        pid: int | None,
        process_start: float | None,
        boot_id: str | None,
        reboots: bool,
        timeout: float | None,
    ) -> list[Action]:
        """The shell is about to let request ``request_id``'s hook run (its process,
        ``pid``, started ``process_start``, is held): record the start.

        The shell writes this before the hook's program runs, so that the hook runs at
        most once whatever happens next. Raises :class:`NoSuchRequest` when the request is
        no longer in force (cancelled meanwhile: the shell must not start the hook) and
        :class:`InvalidRequest` unless its hook is pending.
        """
        request = self._hook_in(request_id, DrainState.HOOK_PENDING)
        check_request_move(
            request.state, RequestEvent.HOOK_START, DrainState.HOOK_RUNNING, request=request.id
        )
        assert request.hook_run is not None
        run = dataclasses.replace(
            request.hook_run,
            state=HookState.RUNNING,
            reboots=reboots,
            timeout=timeout,
            boot_id=boot_id,
            pid=pid,
            process_start=process_start,
            started_at=now,
        )
        self._request = dataclasses.replace(request, state=DrainState.HOOK_RUNNING, hook_run=run)
        return [Publish()]

    def hook_not_started(self, now: float, request_id: str, reason: str) -> list[Action]:
        """Request ``request_id``'s hook could not start (no such hook any more, its
        program cannot run, its start could not be written): it failed, and the node
        stays closed until the request is cancelled. Raises :class:`NoSuchRequest` and
        :class:`InvalidRequest` as :meth:`hook_started` does."""
        request = self._hook_in(request_id, DrainState.HOOK_PENDING)
        check_request_move(
            request.state, RequestEvent.HOOK_FAIL, DrainState.HOOK_FAILED, request=request.id
        )
        assert request.hook_run is not None
        run = dataclasses.replace(
            request.hook_run,
            state=HookState.FAILED,
            ended_at=now,
            message=f"not started: {printable_tail(reason, 512)}",
        )
        self._request = dataclasses.replace(request, state=DrainState.HOOK_FAILED, hook_run=run)
        self._settle_pslot(now)
        return [Publish()]

    def hook_ended(
        self,
        now: float,
        request_id: str,
        *,
        exit_status: int | None,
        timed_out: bool = False,
        output: str = "",
        output_dropped: int = 0,
    ) -> list[Action]:
        """Request ``request_id``'s running hook ended with ``exit_status`` (negative:
        killed by that signal; ``timed_out``: killed at its timeout), printing ``output``
        after ``output_dropped`` bytes the shell did not keep.

        Exit status 0 in time completes the request (and closes the health gate, when a
        health check is configured: the first check is asked for at once); anything
        else fails it and the node stays closed until the request is cancelled. Raises
        :class:`NoSuchRequest` unless that request is in force and :class:`InvalidRequest`
        unless its hook is running.
        """
        request = self._hook_in(request_id, DrainState.HOOK_RUNNING)
        assert request.hook_run is not None
        run = request.hook_run
        message = outcome_message(exit_status, timed_out=run.timeout if timed_out else None)
        succeeded = exit_status == 0 and not timed_out
        kept, dropped = kept_output(output, dropped=output_dropped)
        ended = dataclasses.replace(
            run,
            state=HookState.SUCCEEDED if succeeded else HookState.FAILED,
            ended_at=now,
            exit_status=exit_status,
            message=message,
            output=kept,
            output_dropped=dropped,
        )
        return self._hook_over(now, request, ended, succeeded=succeeded)

    def hook_lost(
        self,
        now: float,
        request_id: str,
        *,
        boot_id: str | None,
        output: str = "",
        output_dropped: int = 0,
    ) -> list[Action]:
        """A restarted daemon found request ``request_id``'s hook started and not
        reported; it is not running any more (the shell waited for it). ``boot_id`` is
        the machine's boot id now; ``output`` what the shell found of its output, after
        ``output_dropped`` bytes it did not keep.

        The machine booted since the hook started (the boot ids differ) and the hook
        ``reboots``: it succeeded. Otherwise it was interrupted, its outcome unknown:
        with a health check configured the request completes and the check judges the
        node; without one it fails (the node stays closed until cancelled). Never started
        again. Raises as :meth:`hook_ended` does.
        """
        request = self._hook_in(request_id, DrainState.HOOK_RUNNING)
        assert request.hook_run is not None
        run = request.hook_run
        booted = boot_id is not None and run.boot_id is not None and boot_id != run.boot_id
        if booted and run.reboots:
            state, message = HookState.SUCCEEDED, "the machine rebooted during the hook"
        elif booted:
            state = HookState.INTERRUPTED
            message = (
                "interrupted: the machine rebooted during the hook (not declared reboots = "
                "true); its outcome is unknown"
            )
        else:
            state = HookState.INTERRUPTED
            message = (
                "interrupted: the agent restarted while the hook ran; its exit status is unknown"
            )
        kept, dropped = (
            kept_output(output, dropped=output_dropped)
            if output
            else (run.output, run.output_dropped)
        )
        ended = dataclasses.replace(
            run, state=state, ended_at=now, message=message, output=kept, output_dropped=dropped
        )
        succeeded = state is HookState.SUCCEEDED or self.policy.health is not None
        return self._hook_over(now, request, ended, succeeded=succeeded)

    def restarted(self, now: float, *, boot_id: str | None) -> list[Action]:
        """What a restarted daemon must pick up, once its jobs are re-adopted: a hook that
        is due (:class:`RunHook`), a hook recorded as started (resolved at once when the
        machine booted since, else :class:`AwaitHook`), a health check that is due."""
        actions: list[Action] = []
        request = self._request
        if request is not None and request.hook_run is not None:
            run = request.hook_run
            if request.state is DrainState.HOOK_PENDING:
                actions.append(RunHook(request_id=request.id, name=run.name))
            elif request.state is DrainState.HOOK_RUNNING:
                if boot_id is not None and run.boot_id is not None and boot_id != run.boot_id:
                    actions.extend(self.hook_lost(now, request.id, boot_id=boot_id))
                else:
                    deadline = (
                        None
                        if run.started_at is None or run.timeout is None
                        else run.started_at + run.timeout
                    )
                    actions.append(
                        AwaitHook(
                            request_id=request.id,
                            name=run.name,
                            pid=run.pid,
                            process_start=run.process_start,
                            deadline_at=deadline,
                        )
                    )
        actions.extend(self._advance(now))
        return actions

    def health_result(
        self, now: float, *, passed: bool, message: str, output: str = "", output_dropped: int = 0
    ) -> list[Action]:
        """The health check the machine asked for ended: ``passed`` or not, ``message``
        saying how, printing ``output`` after ``output_dropped`` bytes the shell did not
        keep.

        A pass counts towards the policy's passes in a row: the last one opens the gate
        (Start comes back); a failure keeps it closed. Either way the next check is due
        one interval later while the gate stays closed. A result the gate no longer
        waits for (it opened meanwhile: the health check was unconfigured) changes
        nothing and returns ``[]``.
        """
        gate, policy = self._health, self.policy.health
        if not gate.closed or gate.running_since is None or policy is None:
            return []
        self._account(now)
        if gate.since is not None and gate.running_since < gate.since:
            # Asked for before the gate closed again: it says nothing of the node since.
            self._health = dataclasses.replace(gate, running_since=None, due_at=now)
            return self._advance(now)
        kept, dropped = kept_output(output, dropped=output_dropped, limit=HEALTH_OUTPUT_LIMIT)
        seen = dataclasses.replace(
            gate,
            last_check=now,
            message=message,
            output=kept,
            output_dropped=dropped,
            running_since=None,
            due_at=now + policy.interval,
        )
        if passed and gate.passes + 1 >= policy.passes:
            check_health_move(gate.state, HealthEvent.HEALTHY, HealthState.PASSING)
            self._health = dataclasses.replace(
                seen, state=HealthState.PASSING, passes=gate.passes + 1, failures=0, due_at=None
            )
        elif passed:
            check_health_move(gate.state, HealthEvent.PASS, HealthState.PENDING)
            self._health = dataclasses.replace(
                seen, state=HealthState.PENDING, passes=gate.passes + 1, failures=0
            )
        else:
            check_health_move(gate.state, HealthEvent.FAIL, HealthState.FAILING)
            self._health = dataclasses.replace(
                seen, state=HealthState.FAILING, passes=0, failures=gate.failures + 1
            )
        self._settle_pslot(now)
        actions: list[Action] = [Publish()]
        actions.extend(self._advance(now))
        return actions

    def _hook_in(self, request_id: str, state: DrainState) -> DrainRequest:
        """The request in force ``request_id`` whose hook is in ``state``."""
        request = self._request_by_id(request_id)
        if request.state is not state or request.hook_run is None:
            raise InvalidRequest(
                f"drain request {request.id} is {request.state}, not {state}: "
                "no such step of its hook now"
            )
        return request

    def _hook_over(
        self, now: float, request: DrainRequest, ended: HookRun, *, succeeded: bool
    ) -> list[Action]:
        """End a running hook: complete its request, or fail it (the node stays closed)."""
        self._account(now)
        if succeeded:
            check_request_move(
                request.state, RequestEvent.COMPLETE, DrainState.COMPLETED, request=request.id
            )
            self._request = dataclasses.replace(request, hook_run=ended)
            self._end_request(now, RequestEvent.COMPLETE, DrainState.COMPLETED)
        else:
            check_request_move(
                request.state, RequestEvent.HOOK_FAIL, DrainState.HOOK_FAILED, request=request.id
            )
            self._request = dataclasses.replace(
                request, state=DrainState.HOOK_FAILED, hook_run=ended
            )
            self._settle_pslot(now)
        actions: list[Action] = [Publish()]
        actions.extend(self._advance(now))
        return actions

    def _close_gate(self, now: float, reason: str) -> None:
        """A drained node returns to service: close the health gate (with a health check
        configured), the first check due at once."""
        if self.policy.health is None:
            return
        gate = self._health
        new = HealthState.FAILING if gate.state is HealthState.FAILING else HealthState.PENDING
        check_health_move(gate.state, HealthEvent.CLOSE, new)
        self._health = dataclasses.replace(
            gate,
            state=new,
            reason=reason,
            since=now,
            passes=0,
            failures=gate.failures if gate.closed else 0,
            due_at=None if gate.running_since is not None else now,
        )

    def _due_health(self, now: float) -> list[Action]:
        """Ask for a health check when one is due (and none runs)."""
        gate = self._health
        if (
            not gate.closed
            or gate.running_since is not None
            or gate.due_at is None
            or gate.due_at > now
        ):
            return []
        self._health = dataclasses.replace(gate, due_at=None, running_since=now)
        return [RunHealthCheck()]

    def set_maintenance(
        self, mode: str | None, unavailability: Mapping[str, int] | None
    ) -> list[Action]:
        """Record the maintenance mode and window the master reported for this machine."""
        window = dict(unavailability) if unavailability is not None else None
        if mode == self.maintenance_mode and window == self.unavailability:
            return []
        self.maintenance_mode = mode
        self.unavailability = window
        return [Publish()]

    # ------------------------------------------------------------------ ads

    def ad(self, now: float) -> dict[str, Any]:
        """``{"machine": {...}, "slots": [...]}`` with HTCondor attribute names.

        Machine-wide values appear in the machine ad and in every slot ad; the six
        ``ExpectedMachine*`` values are :func:`slots.drain_estimates` of the slot ads.
        """
        whole = math.floor(now)
        shown = self._request
        machine: dict[str, Any] = {
            **dict(self.policy.attributes),
            "MyType": "Machine",
            "Name": self.host,
            "Machine": self.host,
            "MyAddress": self.address,
            "MachineIp": self.ip or None,
            "DaemonStartTime": clamp(self.daemon_start_time),
            "MyCurrentTime": whole,
            "TotalCpus": self.total.cpus,
            "TotalMemory": self.total.memory,
            "TotalDisk": self.total.disk,
            "TotalGPUs": self.total.gpus,
            "Start": self.accepting(),
            "Draining": True if self._draining() else None,
            "DrainState": self.drain_state.published,
            "DrainingRequestId": shown.id if shown else None,
            "DrainReason": shown.reason if shown else None,
            "DrainSchedule": str(shown.schedule) if shown else None,
            "DrainOnCompletion": shown.completion if shown else None,
            "DrainingDeadline": _maybe_clamp(shown.deadline_at if shown else None),
            "DrainTransactionExpires": _maybe_clamp(shown.expires_at if shown else None),
            "LastDrainStartTime": _maybe_clamp(self._last_drain_start),
            "LastDrainStopTime": _maybe_clamp(self._last_drain_stop),
            "TotalMachineDrainingBadput": clamp(self._total_badput),
            "TotalMachineDrainingUnclaimedTime": clamp(self.total_unclaimed(now)),
            "TotalDrainingBadputTime": clamp(self._total_badput),
            "TotalDrainingUnclaimedTime": clamp(self.total_unclaimed(now)),
            "MaxJobRetirementTime": self.policy.max_job_retirement_time,
            "MachineMaxVacateTime": self.policy.machine_max_vacate_time,
            "DrainSuspendedJobs": str(self.policy.suspend_policy),
            "MaintenanceMode": self.maintenance_mode,
            "Unavailability": self.unavailability,
            "ShuttingDown": True if self._shutting_down else None,
            **self._window_attributes(),
            "BeforeWindow": str(self.policy.before_window),
            "DrainHookNames": ",".join(sorted(self.policy.hooks)),
            "DrainHookDurations": ",".join(
                f"{name}={seconds:g}" for name, seconds in self.policy.hook_durations
            )
            or None,
            **self._hook_attributes(),
            **self._health_attributes(),
        }
        free = self.free()
        slot_ads = [
            {
                **machine,
                "Name": f"slot1@{self.host}",
                "SlotID": 1,
                "SlotType": "Partitionable",
                "PartitionableSlot": True,
                "Cpus": free.cpus,
                "Memory": free.memory,
                "Disk": free.disk,
                "GPUs": free.gpus,
                "State": str(self._pslot[0]),
                "Activity": str(self._pslot[1]),
                "EnteredCurrentState": clamp(self._pslot_entered_state),
                "EnteredCurrentActivity": clamp(self._pslot_entered_activity),
            }
        ]
        for claim in sorted(self._claims.values(), key=lambda c: c.number):
            slot_ads.append({**machine, **self._slot_attributes(claim, now)})
        expected = drain_estimates(
            slot_ads,
            now,
            previous=None if self._idle_since is None else _idle_doc(self._idle_since),
        )
        machine.update(expected)
        for slot_ad in slot_ads:
            slot_ad.update(expected)
        return {"machine": _defined(machine), "slots": [_defined(a) for a in slot_ads]}

    def _window_attributes(self) -> dict[str, Any]:
        """The maintenance window flat, for expressions: ``UnavailabilityStart`` (epoch
        seconds) and ``UnavailabilityDuration`` (seconds); both absent when none."""
        window = self.unavailability or {}
        return {
            "UnavailabilityStart": window_start(window),
            "UnavailabilityDuration": window.get("Duration"),
        }

    def _hook_attributes(self) -> dict[str, Any]:
        """The most recent completion hook's run (:meth:`hook_run`), ``DrainHook*``."""
        found = self.hook_run()
        if found is None:
            return {}
        request_id, run = found
        return {
            "DrainHookRequestId": request_id,
            "DrainHookName": run.name,
            "DrainHookState": str(run.state),
            "DrainHookStartTime": _maybe_clamp(run.started_at),
            "DrainHookEndTime": _maybe_clamp(run.ended_at),
            "DrainHookExitStatus": run.exit_status,
            "DrainHookMessage": run.message,
            "DrainHookOutput": ad_text(run.output),
            "DrainHookOutputDropped": run.output_dropped or None,
        }

    def _health_attributes(self) -> dict[str, Any]:
        """The health gate, ``Health*`` (only with a health check configured)."""
        policy, gate = self.policy.health, self._health
        if policy is None:
            return {}
        return {
            "HealthState": str(gate.state),
            "HealthReason": gate.reason,
            "HealthSince": _maybe_clamp(gate.since),
            "HealthPasses": gate.passes,
            "HealthPassesNeeded": policy.passes,
            "HealthInterval": policy.interval,
            "HealthFailures": gate.failures,
            "HealthLastCheck": _maybe_clamp(gate.last_check),
            "HealthNextCheck": _maybe_clamp(gate.due_at),
            "HealthMessage": gate.message,
            "HealthOutput": ad_text(gate.output),
            "HealthOutputDropped": gate.output_dropped or None,
        }

    def _slot_attributes(self, claim: _Claim, now: float) -> dict[str, Any]:
        timing = self._timing(claim, now, integer=True)
        mjrt = timing.max_job_retirement_time
        return {
            "Name": self._slot_name(claim),
            "SlotID": 1,
            "DSlotID": claim.number,
            "ClaimId": claim.claim_id,
            "SlotType": "Dynamic",
            "PartitionableSlot": False,
            "ParentSlot": f"slot1@{self.host}",
            "Cpus": claim.resources.cpus,
            "Memory": claim.resources.memory,
            "Disk": claim.resources.disk,
            "GPUs": claim.resources.gpus,
            "State": str(claim.state),
            "Activity": str(claim.activity),
            "EnteredCurrentState": clamp(claim.entered_state),
            "EnteredCurrentActivity": clamp(claim.entered_activity),
            "JobId": claim.job_id,
            "RemoteOwner": claim.spec.owner,
            "JobStart": clamp(claim.started_at),
            "TotalJobRunTime": clamp(timing.run),
            "TotalJobSuspendTime": clamp(claim.suspended(now)),
            "MaxJobRetirementTime": int(mjrt),
            "RetirementTimeRemaining": clamp(retirement_remaining(mjrt, timing.run))
            if claim.state is State.CLAIMED
            else 0,
            "JobMaxVacateTime": claim.spec.job_max_vacate_time,
            "VacateTimeRemaining": clamp(timing.vacate_remaining)
            if claim.activity is Activity.VACATING
            else None,
            "AcceptedWhileDraining": self._accepted(claim),
            "CpuUsage": round(claim.cpu_usage, 4),
            "MemoryUsage": claim.memory_usage,
            "KillSig": claim.spec.kill_signal,
            "RetirementShortenedBy": claim.retirement_shortened_by,
        } | ({} if claim.spec.group is None else {"JobGroup": claim.spec.group})

    # ------------------------------------------------------------------ persistence

    def snapshot(self) -> dict[str, Any]:
        """The machine's durable state as a JSON-able document (see :meth:`restore`)."""
        return {
            "version": 2,
            "next_slot": self._next_slot,
            "next_request": self._next_request,
            "request": _request_doc(self._request),
            "last_request": _request_doc(self._last_request),
            "total_badput": self._total_badput,
            "total_unclaimed": self._total_unclaimed,
            "accounted_at": self._accounted_at,
            "idle_since": self._idle_since,
            "last_drain_start": self._last_drain_start,
            "last_drain_stop": self._last_drain_stop,
            "maintenance_mode": self.maintenance_mode,
            "unavailability": self.unavailability,
            "health": _health_doc(self._health),
            "claims": [_claim_doc(c) for c in self._claims.values()],
        }

    @classmethod
    def restore(
        cls,
        doc: Mapping[str, Any],
        *,
        host: str,
        total: Resources,
        policy: MachinePolicy,
        now: float,
        address: str = "",
        ip: str = "",
    ) -> Machine:
        """Rebuild a machine from :meth:`snapshot`; the daemon start time is ``now``.

        Unclaimed time while the daemon was down is accounted (the cores were idle
        or not, as the restored claims say). A closed health gate has its next check due
        at once (a check that ran when the daemon stopped says nothing); with no health
        check in ``policy`` it opens. What else a restart must pick up (a due or
        started hook) :meth:`restarted` says. Raises :class:`InvalidRequest` for a
        document of an unknown version (1 and 2 are read) or whose last request has not
        ended, and :class:`IllegalDrainTransition` when its request in force is in a
        state that does not survive a restart (see :data:`slots.REQUEST_MOVES`).
        """
        if doc.get("version") not in (1, 2):
            raise InvalidRequest(f"unknown machine snapshot version {doc.get('version')!r}")
        machine = cls(host=host, total=total, policy=policy, now=now, address=address, ip=ip)
        machine._next_slot = int(doc["next_slot"])
        machine._next_request = int(doc["next_request"])
        machine._request = _request_from(doc["request"])
        machine._last_request = _request_from(doc["last_request"])
        if (saved := machine._request) is not None:
            check_request_move(saved.state, RequestEvent.RESTORE, saved.state, request=saved.id)
        last = machine._last_request
        if last is not None and last.state not in FINISHED:
            raise InvalidRequest(f"the snapshot's last drain request {last.id} is {last.state}")
        machine._total_badput = float(doc["total_badput"])
        machine._total_unclaimed = float(doc["total_unclaimed"])
        machine._accounted_at = float(doc["accounted_at"])
        machine._idle_since = doc["idle_since"]
        machine._last_drain_start = doc["last_drain_start"]
        machine._last_drain_stop = doc["last_drain_stop"]
        machine.maintenance_mode = doc["maintenance_mode"]
        machine.unavailability = doc["unavailability"]
        gate = _health_from(doc.get("health"))
        check_health_move(gate.state, HealthEvent.RESTORE, gate.state)
        if gate.closed:
            if policy.health is None:
                check_health_move(gate.state, HealthEvent.DISABLE, HealthState.PASSING)
                gate = HealthGate(
                    last_check=gate.last_check,
                    message=gate.message,
                    output=gate.output,
                    output_dropped=gate.output_dropped,
                )
            else:
                gate = dataclasses.replace(gate, running_since=None, due_at=now)
        machine._health = gate
        for item in doc["claims"]:
            claim = _claim_from(item)
            machine._claims[claim.number] = claim
        machine._account(now)
        machine._settle_pslot(now)
        machine._refresh_idle(now)
        return machine

    # ------------------------------------------------------------------ internals

    def _claim(self, claim_id: str) -> _Claim:
        try:
            return self._claims[int(claim_id)]
        except (KeyError, ValueError):
            raise NoSuchClaim(f"no claim {claim_id!r} on {self.host}") from None

    def _request_by_id(self, request_id: str) -> DrainRequest:
        if self._request is None or self._request.id != request_id:
            raise NoSuchRequest(f"no drain request {request_id!r} on {self.host}")
        return self._request

    def _request_or_last(self, request_id: str) -> DrainRequest:
        for request in (self._request, self._last_request):
            if request is not None and request.id == request_id:
                return request
        raise NoSuchRequest(f"no drain request {request_id!r} on {self.host}")

    def _no_pending(self) -> None:
        if self.transaction_pending:
            assert self._request is not None
            raise TransactionPending(
                f"drain transaction {self._request.id} is pending; state changes wait for it"
            )

    def _draining(self) -> bool:
        return self._request is not None and (
            self._request.state is DrainState.DRAINING or self._request.state in AFTER_DRAINED
        )

    def _admits_latecomers(self) -> bool:
        """A graceful drain with a start expression admits jobs while originals remain."""
        request = self._request
        if request is None or request.state is not DrainState.DRAINING or request.start is None:
            return False
        return any(c.accepted_in != request.id for c in self._claims.values())

    def _start_scope(self) -> dict[str, Any]:
        free = self.free()
        return {
            **dict(self.policy.attributes),
            "Machine": self.host,
            "Name": f"slot1@{self.host}",
            "Cpus": free.cpus,
            "Memory": free.memory,
            "Disk": free.disk,
            "GPUs": free.gpus,
            "TotalCpus": self.total.cpus,
            "TotalMemory": self.total.memory,
            "TotalDisk": self.total.disk,
            "TotalGPUs": self.total.gpus,
            **_defined(self._window_attributes()),
        }

    def _job_ad(self, resources: Resources, spec: JobSpec) -> dict[str, Any]:
        return {
            "Owner": spec.owner,
            "JobId": spec.job_id,
            "RequestCpus": resources.cpus,
            "RequestMemory": resources.memory,
            "RequestDisk": resources.disk,
            "RequestGPUs": resources.gpus,
            "MaxJobRetirementTime": spec.max_job_retirement_time,
            "JobMaxVacateTime": spec.job_max_vacate_time,
        } | ({} if spec.group is None else {"JobGroup": spec.group})

    def _start_matches(
        self,
        expression: str | None,
        job_ad: Mapping[str, Any],
        verdict: StartVerdict | None = None,
    ) -> bool:
        if expression is None:
            return False
        evaluate = _classad.is_true if verdict is None else verdict
        return evaluate(expression, self._start_scope(), job_ad)

    def _info(self, claim: _Claim, now: float) -> ClaimInfo:
        return ClaimInfo(
            claim_id=claim.claim_id,
            slot=self._slot_name(claim),
            resources=claim.resources,
            spec=claim.spec,
            job_id=claim.job_id,
            state=claim.state,
            activity=claim.activity,
            started_at=claim.started_at,
            run=claim.run(now),
            suspended=claim.suspended(now),
            accepted_while_draining=self._accepted(claim),
            evicted_at=claim.evicted_at,
            hard_kill_at=claim.hard_kill_at,
            retirement_shortened_by=claim.retirement_shortened_by,
        )

    def _slot_name(self, claim: _Claim) -> str:
        return f"slot1_{claim.number}@{self.host}"

    def _accepted(self, claim: _Claim) -> bool:
        return (
            claim.accepted_in is not None
            and self._request is not None
            and claim.accepted_in == self._request.id
        )

    def _granted(self, spec: JobSpec) -> int:
        """``MJRT_i`` for a job asking ``spec``: the lower of the machine's and its own."""
        return int(
            effective_retirement(self.policy.max_job_retirement_time, spec.max_job_retirement_time)
        )

    def _effective_mjrt(self, claim: _Claim) -> int:
        return int(
            effective_retirement(
                self.policy.max_job_retirement_time, claim.spec.max_job_retirement_time
            )
        )

    def _active_claims(self) -> list[_Claim]:
        return [
            c for c in sorted(self._claims.values(), key=lambda c: c.number) if c.pair() in ACTIVE
        ]

    def _timing(self, claim: _Claim, now: float, *, integer: bool) -> JobTiming:
        """The arithmetic's view of a claim; ``integer`` gives it as the ads carry it.

        Ads carry whole seconds as of ``MyCurrentTime`` (``now``'s whole second): every
        time left is truncated there, the retirement left as the vacate left, so that a
        job's end reads the same second before and after its soft kill, whenever that
        comes. The run is what makes the retirement left truncated: its whole second
        counted up (``R = MJRT − run``).
        """
        run = claim.run(now)
        left = 0.0
        if claim.activity is Activity.VACATING and claim.hard_kill_at is not None:
            left = max(0.0, claim.hard_kill_at - now)
        if integer:
            whole = math.floor(now)
            run = math.ceil(claim.run_as_of(whole))
            if claim.activity is Activity.VACATING and claim.hard_kill_at is not None:
                left = max(0, math.floor(claim.hard_kill_at) - whole)
        return JobTiming(
            cpus=claim.resources.cpus,
            run=run,
            max_job_retirement_time=self._effective_mjrt(claim),
            job_max_vacate_time=claim.spec.job_max_vacate_time,
            phase=claim.phase(),
            vacate_remaining=left,
            accepted_while_draining=self._accepted(claim),
        )

    def _idle_value(self, now: float) -> float:
        if self._idle_since is None or self._idle_since > now:
            return now
        return self._idle_since

    def _blocker(self, claim: _Claim, timing: JobTiming, plan: Eviction) -> Blocker:
        return Blocker(
            claim_id=claim.claim_id,
            slot=self._slot_name(claim),
            job_id=claim.job_id,
            owner=claim.spec.owner,
            cpus=claim.resources.cpus,
            activity=str(claim.activity),
            run=int(timing.run),
            retirement_remaining=int(plan.retirement_remaining),
            vacate=int(plan.vacate),
            evict_at=None if plan.soft_kill_at is None else clamp(plan.soft_kill_at),
            gone_by=clamp(plan.hard_kill_at),
            accepted_while_draining=timing.accepted_while_draining,
        )

    def _due_plans(self, now: float) -> list[tuple[_Claim, Eviction]]:
        """The drain's eviction plan for every active claim, as of ``now``."""
        request = self._request
        assert request is not None
        claims = self._active_claims()
        plans = plan_evictions(
            [self._timing(c, now, integer=False) for c in claims],
            schedule=request.schedule,
            now=now,
            machine_max_vacate_time=self.policy.machine_max_vacate_time,
            suspend_policy=self.policy.suspend_policy,
            deadline_at=request.deadline_at,
        )
        return list(zip(claims, plans, strict=True))

    def _move(self, claim: _Claim, new: tuple[State, Activity], now: float) -> None:
        check_move(claim.pair(), new, slot=self._slot_name(claim))
        if new[0] is not claim.state:
            claim.entered_state = now
        if new[1] is not claim.activity:
            claim.entered_activity = now
        claim.state, claim.activity = new

    def _resume(self, claim: _Claim, now: float) -> None:
        """Suspended → running again: Retiring while a graceful drain holds it."""
        retiring = (
            self._draining()
            and self._request is not None
            and self._request.schedule is Schedule.GRACEFUL
            and not self._accepted(claim)
        )
        target = Activity.RETIRING if retiring else Activity.BUSY
        self._move(claim, (State.CLAIMED, target), now)
        claim.suspend_base = claim.suspended(now)
        claim.suspended_since = None
        claim.running_since = now

    def _freeze(self, claim: _Claim, now: float) -> None:
        if claim.running_since is not None:
            claim.stopped_at = now
        claim.run_base = claim.run(now)
        claim.running_since = None
        if claim.suspended_since is not None:
            claim.suspend_base = claim.suspended(now)
            claim.suspended_since = None

    def _soft_kill(self, claim: _Claim, now: float, *, drain: bool) -> list[Action]:
        was_suspended = claim.activity is Activity.SUSPENDED
        timing = self._timing(claim, now, integer=False)
        vacate = _vacate_now(
            timing, self.policy.machine_max_vacate_time, self.policy.suspend_policy
        )
        self._move(claim, (State.PREEMPTING, Activity.VACATING), now)
        self._freeze(claim, now)
        claim.evicted_at = now
        claim.hard_kill_at = now + vacate
        if drain:
            claim.drain_eviction = True
            self._total_badput += claim.resources.cpus * claim.run_base
        actions: list[Action] = [SignalJob(claim_id=claim.claim_id, signal=claim.spec.kill_signal)]
        if was_suspended:
            actions.append(SignalJob(claim_id=claim.claim_id, signal="SIGCONT"))
        if vacate <= 0:
            actions.extend(self._hard_kill(claim, now, drain=False))
        return actions

    def _hard_kill(self, claim: _Claim, now: float, *, drain: bool) -> list[Action]:
        was_suspended = claim.activity is Activity.SUSPENDED
        first_eviction = claim.state is State.CLAIMED
        self._move(claim, (State.PREEMPTING, Activity.KILLING), now)
        self._freeze(claim, now)
        if first_eviction:
            claim.evicted_at = now
            if drain:
                claim.drain_eviction = True
                self._total_badput += claim.resources.cpus * claim.run_base
        claim.hard_kill_at = now
        actions: list[Action] = [SignalJob(claim_id=claim.claim_id, signal="SIGKILL")]
        if was_suspended:
            actions.append(SignalJob(claim_id=claim.claim_id, signal="SIGCONT"))
        return actions

    def _commit(self, now: float) -> list[Action]:
        request = self._request
        assert request is not None
        check_request_move(
            request.state, RequestEvent.COMMIT, DrainState.DRAINING, request=request.id
        )
        self._request = dataclasses.replace(
            request,
            state=DrainState.DRAINING,
            expires_at=None,
            committed_at=now,
            deadline_at=None if request.deadline is None else now + request.deadline,
        )
        self._last_drain_start = now
        actions: list[Action] = [Publish()]
        for claim in self._active_claims():
            if claim.activity is Activity.BUSY and request.schedule is Schedule.GRACEFUL:
                self._move(claim, (State.CLAIMED, Activity.RETIRING), now)
            elif (
                claim.activity is Activity.SUSPENDED
                and self.policy.suspend_policy is SuspendPolicy.RESUME
            ):
                self._resume(claim, now)
                actions.append(SignalJob(claim_id=claim.claim_id, signal="SIGCONT"))
        self._settle_pslot(now)
        actions.extend(self._advance(now))
        return actions

    def _advance(self, now: float) -> list[Action]:
        """Carry out whatever is due at ``now``, then detect completion."""
        actions: list[Action] = []
        for claim in list(self._claims.values()):
            if (
                claim.activity is Activity.VACATING
                and claim.hard_kill_at is not None
                and claim.hard_kill_at <= now
            ):
                actions.extend(self._hard_kill(claim, now, drain=False))
        if self._request is not None and self._request.state is DrainState.DRAINING:
            for claim, plan in self._due_plans(now):
                if claim.state is not State.CLAIMED or plan.soft_kill_at is None:
                    continue
                if not plan.firm or plan.soft_kill_at > now:
                    continue
                if self._request.schedule is Schedule.FAST:
                    actions.extend(self._hard_kill(claim, now, drain=True))
                else:
                    actions.extend(self._soft_kill(claim, now, drain=True))
            if not self._claims:
                actions.extend(self._complete(now))
        actions.extend(self._due_health(now))
        if actions and not any(isinstance(a, Publish) for a in actions):
            actions.append(Publish())
        self._settle_pslot(now)
        self._refresh_idle(now)
        return actions

    def _complete(self, now: float) -> list[Action]:
        request = self._request
        assert request is not None
        check_request_move(
            request.state, RequestEvent.LAST_JOB_GONE, DrainState.DRAINED, request=request.id
        )
        self._request = dataclasses.replace(request, state=DrainState.DRAINED, drained_at=now)
        self._settle_pslot(now)
        if request.on_completion is OnCompletion.NONE:
            return [Publish()]
        if request.on_completion is OnCompletion.HOOK:
            assert request.hook is not None
            check_request_move(
                DrainState.DRAINED,
                RequestEvent.HOOK_DUE,
                DrainState.HOOK_PENDING,
                request=request.id,
            )
            self._request = dataclasses.replace(
                self._request,
                state=DrainState.HOOK_PENDING,
                hook_run=HookRun(name=request.hook, state=HookState.PENDING),
            )
            return [Publish(), RunHook(request_id=request.id, name=request.hook)]
        self._end_request(now, RequestEvent.COMPLETE, DrainState.COMPLETED)
        actions: list[Action] = [Publish()]
        if request.on_completion in (OnCompletion.EXIT, OnCompletion.RESTART):
            actions.append(CompletionAction(action=request.on_completion, request_id=request.id))
        return actions

    def _end_request(self, now: float, event: RequestEvent, final: DrainState) -> None:
        """Forget the request in force (recorded as the last one) and reopen the machine.

        A request that had drained the machine closes the health gate (see
        :mod:`slots._health`). Raises :class:`IllegalDrainTransition` before any change
        when ``event`` cannot move the request to ``final``.
        """
        request = self._request
        assert request is not None
        check_request_move(request.state, event, final, request=request.id)
        was_draining = self._draining()
        if request.state in AFTER_DRAINED:
            how = (
                "cancelled"
                if final is DrainState.CANCELLED
                else f"completed ({request.completion})"
            )
            self._close_gate(now, f"drain request {request.id} {how}")
        self._request = None
        self._last_request = dataclasses.replace(request, state=final, ended_at=now)
        if was_draining:
            self._last_drain_stop = now
        for claim in self._claims.values():
            if claim.activity is Activity.RETIRING:
                self._move(claim, (State.CLAIMED, Activity.BUSY), now)
            if claim.accepted_in == request.id:
                claim.accepted_in = None
        self._settle_pslot(now)
        self._refresh_idle(now)

    def _settle_pslot(self, now: float) -> None:
        """Put the partitionable slot where the drain request and claims say it is."""
        if self._draining():
            target = (State.DRAINED, Activity.RETIRING if self._claims else Activity.IDLE)
        elif self.accepting():
            target = (State.UNCLAIMED, Activity.IDLE)
        else:
            target = (State.OWNER, Activity.IDLE)
        if target == self._pslot:
            return
        check_move(self._pslot, target, slot=f"slot1@{self.host}")
        if target[0] is not self._pslot[0]:
            self._pslot_entered_state = now
        if target[1] is not self._pslot[1]:
            self._pslot_entered_activity = now
        self._pslot = target

    def _refresh_idle(self, now: float) -> None:
        """Remember when the machine last became drainable (the sticky idle rule)."""
        if self._active_claims():
            self._idle_since = None
        elif self._idle_since is None or self._idle_since > now:
            self._idle_since = now

    def _unclaimed_since_accounting(self, now: float) -> float:
        if not self._draining() or now <= self._accounted_at:
            return 0.0
        idle_cpus = self.total.cpus - sum(c.resources.cpus for c in self._claims.values())
        return max(0, idle_cpus) * (now - self._accounted_at)

    def _account(self, now: float) -> None:
        """Bring TotalMachineDrainingUnclaimedTime up to ``now``."""
        self._total_unclaimed += self._unclaimed_since_accounting(now)
        self._accounted_at = max(self._accounted_at, now)


#: The reason of the machine's own shutdown drain (``DrainReason`` in the ad).
SHUTDOWN_REASON = "shutdown"

#: How fast each schedule evicts: a kept drain evicts at least as fast as the shutdown's.
_SPEED = {Schedule.GRACEFUL: 0, Schedule.QUICK: 1, Schedule.FAST: 2}


def _maybe_clamp(value: float | None) -> int | None:
    return None if value is None else clamp(value)


def _idle_doc(idle_since: float) -> dict[str, int]:
    value = clamp(idle_since)
    return {
        "ExpectedMachineGracefulDrainingCompletion": value,
        "ExpectedMachineQuickDrainingCompletion": value,
        "ExpectedMachineFastDrainingCompletion": value,
    }


def _defined(ad: dict[str, Any]) -> dict[str, Any]:
    """Drop undefined (``None``) attributes, as HTCondor leaves them out of ads."""
    return {k: v for k, v in ad.items() if v is not None}


def _vacate_now(timing: JobTiming, machine_vacate: int, policy: SuspendPolicy) -> float:
    """The vacate time a job gets when it is soft-killed at this instant."""
    retired = timing.phase is Phase.SUSPENDED and policy is SuspendPolicy.EVICT
    remaining = 0.0 if retired else retirement_remaining(timing.max_job_retirement_time, timing.run)
    return vacate_time(machine_vacate, timing.job_max_vacate_time, remaining)


def _request_doc(request: DrainRequest | None) -> dict[str, Any] | None:
    if request is None:
        return None
    doc = {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}
    # as before these existed, unless set: an older agent still reads the state
    if request.boot_id is None:
        del doc["boot_id"]
    if request.reopens:
        del doc["reopens"]
    doc["schedule"] = str(request.schedule)
    doc["on_completion"] = str(request.on_completion)
    doc["state"] = str(request.state)
    run = request.hook_run
    if run is not None:
        doc["hook_run"] = {f.name: getattr(run, f.name) for f in dataclasses.fields(run)}
        doc["hook_run"]["state"] = str(run.state)
    return doc


def _request_from(doc: Mapping[str, Any] | None) -> DrainRequest | None:
    if doc is None:
        return None
    fields = dict(doc)
    fields["schedule"] = Schedule(fields["schedule"])
    fields["on_completion"] = OnCompletion(fields["on_completion"])
    fields["state"] = DrainState(fields["state"])
    run = fields.get("hook_run")
    if run is not None:
        fields["hook_run"] = HookRun(**{**run, "state": HookState(run["state"])})
    return DrainRequest(**fields)


def _health_doc(gate: HealthGate) -> dict[str, Any]:
    doc = {f.name: getattr(gate, f.name) for f in dataclasses.fields(gate)}
    doc["state"] = str(gate.state)
    return doc


def _health_from(doc: Mapping[str, Any] | None) -> HealthGate:
    """The gate of a snapshot (version 1 has none: open)."""
    if doc is None:
        return HealthGate()
    return HealthGate(**{**doc, "state": HealthState(doc["state"])})


def _claim_doc(claim: _Claim) -> dict[str, Any]:
    """A claim as JSON-able data (built by hand: this runs on every state change)."""
    doc = {name: getattr(claim, name) for name in _CLAIM_FIELDS}
    if claim.retirement_shortened_by is None:
        del doc["retirement_shortened_by"]  # as before it existed: an older agent reads it
    r, spec = claim.resources, claim.spec
    doc["resources"] = {"cpus": r.cpus, "memory": r.memory, "disk": r.disk, "gpus": r.gpus}
    doc["spec"] = {
        "job_id": spec.job_id,
        "owner": spec.owner,
        "max_job_retirement_time": spec.max_job_retirement_time,
        "job_max_vacate_time": spec.job_max_vacate_time,
        "kill_signal": spec.kill_signal,
    }
    if spec.group is not None:
        doc["spec"]["group"] = spec.group
    doc["state"] = str(claim.state)
    doc["activity"] = str(claim.activity)
    return doc


_CLAIM_FIELDS = tuple(f.name for f in dataclasses.fields(_Claim))


def _claim_from(doc: Mapping[str, Any]) -> _Claim:
    fields = dict(doc)
    fields["resources"] = Resources(**fields["resources"])
    fields["spec"] = JobSpec(**fields["spec"])
    fields["state"] = State(fields["state"])
    fields["activity"] = Activity(fields["activity"])
    return _Claim(**fields)
