"""Slot states and activities, and the one table of legal moves between them.

Everything that changes a slot's (state, activity) goes through :func:`check_move`.
"""

from __future__ import annotations

from enum import StrEnum

from slots._errors import IllegalTransition

__all__ = ["ACTIVE", "MOVES", "Activity", "State", "check_move"]


class State(StrEnum):
    OWNER = "Owner"
    UNCLAIMED = "Unclaimed"
    CLAIMED = "Claimed"
    PREEMPTING = "Preempting"
    DRAINED = "Drained"


class Activity(StrEnum):
    IDLE = "Idle"
    BUSY = "Busy"
    SUSPENDED = "Suspended"
    RETIRING = "Retiring"
    VACATING = "Vacating"
    KILLING = "Killing"


_S = State
_A = Activity

OWNER_IDLE = (_S.OWNER, _A.IDLE)
UNCLAIMED_IDLE = (_S.UNCLAIMED, _A.IDLE)
DRAINED_RETIRING = (_S.DRAINED, _A.RETIRING)
DRAINED_IDLE = (_S.DRAINED, _A.IDLE)
BUSY = (_S.CLAIMED, _A.BUSY)
SUSPENDED = (_S.CLAIMED, _A.SUSPENDED)
RETIRING = (_S.CLAIMED, _A.RETIRING)
VACATING = (_S.PREEMPTING, _A.VACATING)
KILLING = (_S.PREEMPTING, _A.KILLING)

#: Every legal (state, activity) → (state, activity) move. The partitionable slot moves
#: among Owner/Unclaimed/Drained; a dynamic slot is born Claimed/Busy and moves among
#: the claimed and preempting pairs until its job is gone and the slot disappears.
MOVES: frozenset[tuple[tuple[State, Activity], tuple[State, Activity]]] = frozenset(
    {
        # The partitionable slot.
        (OWNER_IDLE, UNCLAIMED_IDLE),
        (UNCLAIMED_IDLE, OWNER_IDLE),
        (OWNER_IDLE, DRAINED_RETIRING),
        (OWNER_IDLE, DRAINED_IDLE),
        (UNCLAIMED_IDLE, DRAINED_RETIRING),
        (UNCLAIMED_IDLE, DRAINED_IDLE),
        (DRAINED_RETIRING, DRAINED_IDLE),
        (DRAINED_IDLE, DRAINED_RETIRING),
        (DRAINED_RETIRING, UNCLAIMED_IDLE),
        (DRAINED_RETIRING, OWNER_IDLE),
        (DRAINED_IDLE, UNCLAIMED_IDLE),
        (DRAINED_IDLE, OWNER_IDLE),
        # A dynamic slot's job.
        (BUSY, SUSPENDED),
        (BUSY, RETIRING),
        (BUSY, VACATING),
        (BUSY, KILLING),
        (SUSPENDED, BUSY),
        (SUSPENDED, RETIRING),
        (SUSPENDED, VACATING),
        (SUSPENDED, KILLING),
        (RETIRING, BUSY),
        (RETIRING, SUSPENDED),
        (RETIRING, VACATING),
        (RETIRING, KILLING),
        (VACATING, KILLING),
    }
)

#: Pairs in which a dynamic slot's job counts as active for the drain estimates.
ACTIVE: frozenset[tuple[State, Activity]] = frozenset(
    {BUSY, SUSPENDED, RETIRING, VACATING, KILLING}
)


def check_move(current: tuple[State, Activity], new: tuple[State, Activity], *, slot: str) -> None:
    """Raise :class:`IllegalTransition` unless ``current → new`` is in :data:`MOVES`.

    Staying in the same pair is always legal (nothing moves).
    """
    if current == new or (current, new) in MOVES:
        return
    raise IllegalTransition(f"{slot}: {current[0]}/{current[1]} cannot move to {new[0]}/{new[1]}")
