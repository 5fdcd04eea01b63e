"""The drain request, its states, and the decisions the model hands to the shell."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from slots._estimates import Schedule

__all__ = [
    "Action",
    "Blocker",
    "CompletionAction",
    "DrainEstimate",
    "DrainRequest",
    "DrainState",
    "OnCompletion",
    "Publish",
    "SignalJob",
]


class DrainState(StrEnum):
    """Where the machine's drain request stands (``DrainState`` in the ad)."""

    NONE = "none"
    PENDING = "pending"  # phase 1 done; waiting for commit or cancel
    DRAINING = "draining"
    DRAINED = "drained"
    CANCELLED = "cancelled"  # only ever seen on a finished request
    COMPLETED = "completed"  # drained and its completion action ran; finished


class OnCompletion(StrEnum):
    """What happens once the machine is drained."""

    NONE = "none"  # stay Drained/Idle until cancelled
    RESUME = "resume"  # cancel the drain: Unclaimed with all resources
    EXIT = "exit"  # the daemon exits 0 and is not restarted
    RESTART = "restart"  # the daemon exits with the code its unit restarts


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainRequest:
    """One drain request. Times are epoch seconds; ``deadline`` is relative to commit."""

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
class Publish:
    """The machine's state changed: persist it, then publish the ad."""


Action = SignalJob | CompletionAction | Publish
