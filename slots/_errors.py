"""Errors raised by the slot model.

Every error leaves the model exactly as it was before the call that raised it.
Each carries a stable ``code`` (part of the API contract), an ``http_status`` hint
for the shell, and, where HTCondor defines one, its numeric ``condor_code``::

    SlotsError
    ├── InvalidRequest              422 request.invalid
    ├── IllegalTransition           409 slot.illegal_transition
    ├── NoSuchClaim                 404 claim.no_such_claim
    ├── ClaimNotActive              409 claim.not_active
    ├── NotAccepting                409 machine.not_accepting
    ├── WindowAhead                 409 machine.window_ahead
    ├── ResourcesInsufficient       409 resources.insufficient
    ├── TransactionPending          409 drain.transaction_pending
    ├── IllegalHealthTransition     409 health.illegal_transition
    └── DrainError
        ├── DrainInProgress         409 drain.in_progress        (10001)
        ├── NoSuchRequest           404 drain.no_such_request    (10002)
        ├── CheckFailed             412 drain.check_failed       (10003)
        ├── TransactionExpired      410 drain.transaction_expired
        ├── NotPending              409 drain.not_pending
        ├── NoSuchHook              422 drain.no_such_hook
        ├── HookRunning             409 drain.hook_running
        └── IllegalDrainTransition  409 drain.illegal_transition
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "CheckFailed",
    "ClaimNotActive",
    "DrainError",
    "DrainInProgress",
    "HookRunning",
    "IllegalDrainTransition",
    "IllegalHealthTransition",
    "IllegalTransition",
    "InvalidRequest",
    "NoSuchClaim",
    "NoSuchHook",
    "NoSuchRequest",
    "NotAccepting",
    "NotPending",
    "ResourcesInsufficient",
    "SlotsError",
    "TransactionExpired",
    "TransactionPending",
    "WindowAhead",
]


class SlotsError(Exception):
    """Base of every error the model raises; the model is unchanged after one."""

    code: ClassVar[str] = "slots.error"
    http_status: ClassVar[int] = 400
    condor_code: ClassVar[int | None] = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(SlotsError):
    """The request is malformed (a bad expression, a negative duration, …)."""

    code = "request.invalid"
    http_status = 422


class IllegalTransition(SlotsError):
    """A (state, activity) move that the transition table does not allow."""

    code = "slot.illegal_transition"
    http_status = 409


class NoSuchClaim(SlotsError):
    """No dynamic slot has this claim id."""

    code = "claim.no_such_claim"
    http_status = 404


class ClaimNotActive(SlotsError):
    """The claim's job is not in a state that allows the operation."""

    code = "claim.not_active"
    http_status = 409


class NotAccepting(SlotsError):
    """``Start`` is false: the machine accepts no new claims (draining, or START)."""

    code = "machine.not_accepting"
    http_status = 409


class WindowAhead(SlotsError):
    """The claim's retirement promise would end after the machine's maintenance window
    starts (``[policy] before_window = "refuse"``). ``window_start`` is the window's start
    (epoch seconds); ``longest`` the longest promise the machine can still accept now
    (whole seconds, never negative)."""

    code = "machine.window_ahead"
    http_status = 409

    def __init__(self, message: str, *, window_start: int, longest: int) -> None:
        super().__init__(message)
        self.window_start = window_start
        self.longest = longest


class ResourcesInsufficient(SlotsError):
    """The partitionable slot has not enough free resources for the claim."""

    code = "resources.insufficient"
    http_status = 409


class TransactionPending(SlotsError):
    """A drain transaction is pending; state changes must wait until it ends.

    The shell waits for the transaction to end before calling a state-changing
    method, so seeing this error means the shell forgot to wait.
    """

    code = "drain.transaction_pending"
    http_status = 409


class IllegalHealthTransition(SlotsError):
    """A health gate move that its table of moves does not allow (a fault in the model)."""

    code = "health.illegal_transition"
    http_status = 409


class DrainError(SlotsError):
    """Base of the drain request errors."""

    code = "drain.error"


class DrainInProgress(DrainError):
    """A drain request already exists (pending, draining or drained)."""

    code = "drain.in_progress"
    http_status = 409
    condor_code = 10001


class NoSuchRequest(DrainError):
    """No drain request has this id (or none exists at all)."""

    code = "drain.no_such_request"
    http_status = 404
    condor_code = 10002


class CheckFailed(DrainError):
    """A one-shot drain's check expression was not true against the machine ad."""

    code = "drain.check_failed"
    http_status = 412
    condor_code = 10003


class TransactionExpired(DrainError):
    """The pending transaction passed its ``expires_at``; it has been cancelled."""

    code = "drain.transaction_expired"
    http_status = 410


class NotPending(DrainError):
    """Commit of a request that is not pending (already committed)."""

    code = "drain.not_pending"
    http_status = 409


class NoSuchHook(DrainError):
    """A drain names a completion hook that the agent's configuration does not hold."""

    code = "drain.no_such_hook"
    http_status = 422


class HookRunning(DrainError):
    """The drain's completion hook is running: the request cannot be cancelled until it
    ends (or its timeout ends it)."""

    code = "drain.hook_running"
    http_status = 409


class IllegalDrainTransition(DrainError):
    """A drain request move that its table of moves does not allow.

    The machine's own checks (:class:`NotPending`, :class:`NoSuchRequest`, …) come
    first, so seeing this error means the model itself asked for a wrong move.
    """

    code = "drain.illegal_transition"
    http_status = 409
