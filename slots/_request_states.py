"""The drain request's states, and the one table of legal moves between them.

Everything that changes a drain request's :class:`~slots.DrainState` goes through
:func:`check_request_move` before the change is made: a refused move raises
:class:`~slots.IllegalDrainTransition` and changes nothing. The table is a second
line of defence behind the machine's own checks (a commit of a committed request is
still :class:`~slots.NotPending`, and so on): the machine never asks for a move the
table refuses.

A row is ``(state, event, new state)``. ``none`` is where a request stands before
it exists; ``cancelled`` and ``completed`` are final (no row leaves them): the
machine then holds the request as its last one and its own drain state is ``none``
again. A transaction that expires ends ``cancelled`` (``drain.transaction_expired``
tells the two apart by ``ended_at >= expires_at``), so the API's states are unchanged.
A restarted daemon reads the request in force back from its snapshot with a
``restore`` move; every state a request can be in force in survives a restart as it
was saved.

A request completing with a hook (``on_completion`` ``hook:NAME``) goes on from
``drained``: ``hook_pending`` (due, not started), ``hook_running`` (its start recorded
before its program runs), then ``completed`` when it ended well (or the machine rebooted
during a ``reboots`` hook, or its outcome is unknown and a health check will judge the
node), or ``hook_failed``, which keeps the node closed until the request is cancelled.
A running hook cannot be cancelled (:class:`~slots.HookRunning`): no row leaves
``hook_running`` by ``cancel``. The health check before service is not a request state
but the machine's health gate, with its own table (:mod:`slots._health` says why).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from slots._drain import DrainState
from slots._errors import IllegalDrainTransition

__all__ = ["FINISHED", "REQUEST_MOVES", "RequestEvent", "check_request_move", "request_number"]


class RequestEvent(StrEnum):
    """What moves a drain request from one state to another."""

    START = "start"  # phase 1: the request is created, its transaction pending
    COMMIT = "commit"  # phase 2, or a one-shot request: the drain starts
    EXPIRE = "expire"  # the transaction reached expires_at without a commit
    CANCEL = "cancel"  # cancelled by a caller, pending or committed
    LAST_JOB_GONE = "last_job_gone"  # no dynamic slot is left: the machine is drained
    COMPLETE = "complete"  # the completion action (resume, exit, restart, a hook) is done
    HOOK_DUE = "hook_due"  # drained, with a completion hook: it is to be started
    HOOK_START = "hook_start"  # the hook's start is recorded; its program runs next
    HOOK_FAIL = "hook_fail"  # the hook failed, could not start, or was interrupted
    RESTORE = "restore"  # a restarted daemon reads the request back from its snapshot


_D = DrainState
_E = RequestEvent

#: Every legal ``(state, event, new state)`` move of one drain request.
REQUEST_MOVES: frozenset[tuple[DrainState, RequestEvent, DrainState]] = frozenset(
    {
        (_D.NONE, _E.START, _D.PENDING),
        # The transaction.
        (_D.PENDING, _E.COMMIT, _D.DRAINING),
        (_D.PENDING, _E.EXPIRE, _D.CANCELLED),
        (_D.PENDING, _E.CANCEL, _D.CANCELLED),
        # The drain in force.
        (_D.DRAINING, _E.LAST_JOB_GONE, _D.DRAINED),
        (_D.DRAINING, _E.CANCEL, _D.CANCELLED),
        (_D.DRAINED, _E.CANCEL, _D.CANCELLED),
        (_D.DRAINED, _E.COMPLETE, _D.COMPLETED),
        # A completion hook.
        (_D.DRAINED, _E.HOOK_DUE, _D.HOOK_PENDING),
        (_D.HOOK_PENDING, _E.HOOK_START, _D.HOOK_RUNNING),
        (_D.HOOK_PENDING, _E.HOOK_FAIL, _D.HOOK_FAILED),
        (_D.HOOK_PENDING, _E.CANCEL, _D.CANCELLED),
        (_D.HOOK_RUNNING, _E.COMPLETE, _D.COMPLETED),
        (_D.HOOK_RUNNING, _E.HOOK_FAIL, _D.HOOK_FAILED),
        (_D.HOOK_FAILED, _E.CANCEL, _D.CANCELLED),
        # A restart: the request in force goes on where it stopped.
        (_D.PENDING, _E.RESTORE, _D.PENDING),
        (_D.DRAINING, _E.RESTORE, _D.DRAINING),
        (_D.DRAINED, _E.RESTORE, _D.DRAINED),
        (_D.HOOK_PENDING, _E.RESTORE, _D.HOOK_PENDING),
        (_D.HOOK_RUNNING, _E.RESTORE, _D.HOOK_RUNNING),
        (_D.HOOK_FAILED, _E.RESTORE, _D.HOOK_FAILED),
    }
)

#: The final states: no move leaves them; a request in one of them has ended.
FINISHED: frozenset[DrainState] = frozenset({_D.CANCELLED, _D.COMPLETED})


def check_request_move(
    current: DrainState, event: RequestEvent, new: DrainState, *, request: str
) -> None:
    """Raise :class:`IllegalDrainTransition` unless ``(current, event, new)`` is a row
    of :data:`REQUEST_MOVES`. Nothing is implied: staying put is legal only where a row
    says so.
    """
    if (current, event, new) in REQUEST_MOVES:
        return
    raise IllegalDrainTransition(
        f"drain request {request}: {event} cannot move it from {current} to {new}"
    )


def request_number(request_id: Any) -> int | None:
    """A drain request id as the number it is (ids are increasing strings of ASCII digits; an ad
    may carry one as an integer); ``None`` for anything else. Who compares two requests of
    one machine (a record kept by a master or a defrag daemon against the request an ad
    shows) compares these numbers."""
    if isinstance(request_id, int) and not isinstance(request_id, bool):
        return request_id
    if isinstance(request_id, str) and request_id.isascii() and request_id.isdecimal():
        return int(request_id)
    return None
