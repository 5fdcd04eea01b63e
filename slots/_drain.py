"""The drain request, its states, and the decisions the model hands to the shell."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from slots._estimates import Schedule
from slots._hooks import HookRun

__all__ = [
    "AFTER_DRAINED",
    "Action",
    "AwaitHook",
    "Blocker",
    "CompletionAction",
    "DrainEstimate",
    "DrainRequest",
    "DrainState",
    "OnCompletion",
    "Publish",
    "RunHealthCheck",
    "RunHook",
    "SignalJob",
]


class DrainState(StrEnum):
    """Where the machine's drain request stands (``DrainState`` in the ad)."""

    NONE = "none"
    PENDING = "pending"  # phase 1 done; waiting for commit or cancel
    DRAINING = "draining"
    DRAINED = "drained"
    HOOK_PENDING = "hook_pending"  # drained; its completion hook is due, not started yet
    HOOK_RUNNING = "hook_running"  # drained; its completion hook's start is recorded
    HOOK_FAILED = "hook_failed"  # drained; its completion hook failed: closed until cancelled
    CANCELLED = "cancelled"  # only ever seen on a finished request
    COMPLETED = "completed"  # drained and its completion action ran; finished

    @property
    def published(self) -> str:
        """The ad's ``DrainState``: one of ``none``, ``pending``, ``draining``, ``drained``
        (a hook's stages are ``drained``: the node is empty and closed;
        ``DrainHookState`` tells them apart)."""
        return "drained" if self in AFTER_DRAINED else str(self)


class OnCompletion(StrEnum):
    """What happens once the machine is drained."""

    NONE = "none"  # stay Drained/Idle until cancelled
    RESUME = "resume"  # cancel the drain: Unclaimed with all resources
    EXIT = "exit"  # the daemon exits 0 and is not restarted
    RESTART = "restart"  # the daemon exits with the code its unit restarts
    HOOK = "hook"  # run the request's configured hook (``hook:NAME`` on the wire)


#: The states of a request in force whose machine is drained (empty and closed).
AFTER_DRAINED: frozenset[DrainState] = frozenset(
    {
        DrainState.DRAINED,
        DrainState.HOOK_PENDING,
        DrainState.HOOK_RUNNING,
        DrainState.HOOK_FAILED,
    }
)


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainRequest:
    """One drain request. Times are epoch seconds; ``deadline`` is relative to commit.

    ``hook`` names the completion hook when ``on_completion`` is :attr:`OnCompletion.HOOK`
    (``None`` otherwise); ``hook_run`` records its run once it is due. ``boot_id`` is set
    on a shutdown drain alone (:meth:`~slots.Machine.shutdown`): the boot it began on,
    which tells a reboot since from a restart of the agent alone. ``reopens`` is false for
    a shutdown drain that replaced an administrator's drain: the node then stays closed
    after the reboot, as that drain would have kept it.
    """

    id: str
    schedule: Schedule
    reason: str
    on_completion: OnCompletion
    state: DrainState
    created_at: float
    expires_at: float | None = None
    deadline: float | None = None
    start: str | None = None
    committed_at: float | None = None
    deadline_at: float | None = None
    drained_at: float | None = None
    ended_at: float | None = None
    requested_by: str | None = None
    hook: str | None = None
    hook_run: HookRun | None = None
    boot_id: str | None = None
    reopens: bool = True

    @property
    def shutdown(self) -> bool:
        """Whether this is the machine's own shutdown drain (not an administrator's)."""
        return self.boot_id is not None

    @property
    def completion(self) -> str:
        """``on_completion`` as on the wire: ``none``, ``resume``, ``exit``, ``restart`` or
        ``hook:NAME``."""
        if self.on_completion is OnCompletion.HOOK:
            return f"hook:{self.hook}"
        return str(self.on_completion)


@dataclass(frozen=True, kw_only=True, slots=True)
class Blocker:
    """A job the drain waits for; ``evict_at`` is its soft kill, ``gone_by`` its hard kill."""

    claim_id: str
    slot: str
    job_id: str
    owner: str
    cpus: int
    activity: str
    run: int
    retirement_remaining: int
    vacate: int
    evict_at: int | None
    gone_by: int
    accepted_while_draining: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainEstimate:
    """A schedule's expected completion and badput as of ``now``, with its blockers.

    Blockers come latest ``gone_by`` first: the first ones set the completion time.
    """

    schedule: Schedule
    now: int
    completion: int
    badput: int
    blockers: tuple[Blocker, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class SignalJob:
    """Send ``signal`` (a name such as ``"SIGTERM"``) to the claim's job process group."""

    claim_id: str
    signal: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CompletionAction:
    """The drain is complete and the daemon must ``exit`` or ``restart``."""

    action: OnCompletion
    request_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunHook:
    """The machine is drained and request ``request_id``'s completion hook ``name`` is
    due: start it, recording its start (:meth:`~slots.Machine.hook_started`) before its
    program runs, and report how it ended (:meth:`~slots.Machine.hook_ended`), or that it
    could not start (:meth:`~slots.Machine.hook_not_started`)."""

    request_id: str
    name: str


@dataclass(frozen=True, kw_only=True, slots=True)
class AwaitHook:
    """A restarted daemon finds request ``request_id``'s hook recorded as started on this
    boot: wait for process ``pid`` (started at ``process_start``) to end, ending it at
    ``deadline_at`` (SIGTERM, then SIGKILL), then report :meth:`~slots.Machine.hook_lost`.
    Never start it again."""

    request_id: str
    name: str
    pid: int | None
    process_start: float | None
    deadline_at: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunHealthCheck:
    """The health gate is closed and a check is due: run the configured health check and
    report its result (:meth:`~slots.Machine.health_result`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Publish:
    """The machine's state changed: persist it, then publish the ad."""


Action = SignalJob | CompletionAction | RunHook | AwaitHook | RunHealthCheck | Publish
