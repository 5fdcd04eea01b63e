"""The health gate: a node emptied by a drain takes work again only once it is healthy.

When the agent has a health check (``[health]``; :class:`HealthPolicy`), every return to
service of a node that a drain emptied goes through it: the end of a drain that reached
``drained`` — cancelled (an operator's ``nodeagent cancel``, the master's
``/machine/up``) or completed (a hook that ended, ``resume``, ``exit``, ``restart``).
The gate then *closes*: ``Start`` is false until ``passes`` checks in a row have passed,
one every ``interval`` seconds; a failing check keeps it closed and is retried at the
interval. Slurm's ``nextstate=DOWN`` with a health check program is the model: a node
never comes back sick by accident. Without a health check the gate never closes.

Why the gate is the machine's and not a state of the drain request: it outlives the
request. A cancel ends the request at once (the API's reply is the request as ended, as
it always was) while the node stays closed; a completion hook ends its request when it
ends; a restart finds the gate as it was saved, with or without a request; and a new
drain may be requested meanwhile. So it has its own table of moves, :data:`HEALTH_MOVES`,
checked like the request's (:func:`check_health_move`): a refused move raises
:class:`~slots.IllegalHealthTransition` and changes nothing.

A row is ``(state, event, new state)``::

    passing ──close──▶ pending ──pass (not yet enough)──▶ pending
                         │ ▲                               │
                      fail │ pass                      healthy (the n-th pass in a row)
                         ▼ │                               ▼
                       failing ────────healthy────────▶ passing
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from slots._errors import IllegalHealthTransition, InvalidRequest

__all__ = [
    "HEALTH_MOVES",
    "HealthEvent",
    "HealthGate",
    "HealthPolicy",
    "HealthState",
    "check_health_move",
]


class HealthState(StrEnum):
    """The gate (``HealthState`` in the ad)."""

    PASSING = "passing"  # open: the node may take work (as far as health goes)
    PENDING = "pending"  # closed: checks due or running, the last one did not fail
    FAILING = "failing"  # closed: the last check failed; retried at the interval


class HealthEvent(StrEnum):
    """What moves the gate."""

    CLOSE = "close"  # a drained node returns to service: check it first
    PASS = "pass"  # a check passed, not yet enough of them in a row
    FAIL = "fail"  # a check failed (non-zero, killed, timed out, could not start)
    HEALTHY = "healthy"  # the pass that completes the run of passes: the gate opens
    DISABLE = "disable"  # the health check is no longer configured: the gate opens
    RESTORE = "restore"  # a restarted daemon reads the gate back from its snapshot


_H = HealthState
_E = HealthEvent

#: Every legal ``(state, event, new state)`` move of the health gate.
HEALTH_MOVES: frozenset[tuple[HealthState, HealthEvent, HealthState]] = frozenset(
    {
        (_H.PASSING, _E.CLOSE, _H.PENDING),
        # Closed again while closed (another drained node's return): the count starts over.
        (_H.PENDING, _E.CLOSE, _H.PENDING),
        (_H.FAILING, _E.CLOSE, _H.FAILING),
        (_H.PENDING, _E.PASS, _H.PENDING),
        (_H.FAILING, _E.PASS, _H.PENDING),
        (_H.PENDING, _E.FAIL, _H.FAILING),
        (_H.FAILING, _E.FAIL, _H.FAILING),
        (_H.PENDING, _E.HEALTHY, _H.PASSING),
        (_H.FAILING, _E.HEALTHY, _H.PASSING),
        (_H.PENDING, _E.DISABLE, _H.PASSING),
        (_H.FAILING, _E.DISABLE, _H.PASSING),
        (_H.PASSING, _E.RESTORE, _H.PASSING),
        (_H.PENDING, _E.RESTORE, _H.PENDING),
        (_H.FAILING, _E.RESTORE, _H.FAILING),
    }
)


def check_health_move(current: HealthState, event: HealthEvent, new: HealthState) -> None:
    """Raise :class:`IllegalHealthTransition` unless ``(current, event, new)`` is a row of
    :data:`HEALTH_MOVES`."""
    if (current, event, new) in HEALTH_MOVES:
        return
    raise IllegalHealthTransition(f"health gate: {event} cannot move it from {current} to {new}")


@dataclass(frozen=True, kw_only=True, slots=True)
class HealthPolicy:
    """The health check's schedule: ``passes`` in a row open the gate, one check every
    ``interval`` seconds (and a failing one retried after as long)."""

    passes: int = 1
    interval: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.passes, bool) or not isinstance(self.passes, int) or self.passes < 1:
            raise InvalidRequest(f"the health check needs at least one pass, not {self.passes!r}")
        if not (math.isfinite(self.interval) and self.interval > 0):
            raise InvalidRequest("the health check's interval must be a positive duration")


@dataclass(frozen=True, kw_only=True, slots=True)
class HealthGate:
    """The gate as the machine holds it.

    ``reason`` says why it closed and ``since`` when; ``passes`` and ``failures`` count
    the checks in a row since; ``last_check`` is when the last one ended, ``message`` how
    (``exit status 1``, ``passed``), ``output`` the tail of its output and
    ``output_dropped`` the count of the bytes before that tail not kept; ``due_at`` is
    when the next check is due (``None`` while one runs, and while the gate is open);
    ``running_since`` is when the machine asked for the check under way (``None``: none
    runs); a result for a check asked for before the gate last closed does not count.
    """

    state: HealthState = HealthState.PASSING
    reason: str | None = None
    since: float | None = None
    passes: int = 0
    failures: int = 0
    last_check: float | None = None
    message: str | None = None
    output: str = ""
    output_dropped: int = 0
    due_at: float | None = None
    running_since: float | None = None

    @property
    def closed(self) -> bool:
        return self.state is not HealthState.PASSING
